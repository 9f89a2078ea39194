"""Result models of the trace-set engine (pydantic only; cheap to import)."""
from __future__ import annotations

from typing import Literal, Optional, TypeVar

from pydantic import Field

from mcp_server.core.models import Model, Warning_
from mcp_server.traces.models import GpuBreakdown, TimeBreakdown

_R = TypeVar("_R", bound=Model)


def _keep_ranks(rows: list[_R], field: str, ranks: set[int]) -> list[_R]:
    return [r.model_copy(update={field: {k: v for k, v in getattr(r, field).items() if k in ranks}}) for r in rows]


class RankRef(Model):
    """One trace of the set and where its rank came from."""

    rank: int
    path: str
    world_size: Optional[int] = None
    rank_source: Literal["distributedInfo", "file name"] = "distributedInfo"


class LayerTime(Model):
    index: int
    name: str = Field(description="module instance of the layer (e.g. LlamaDecoderLayer_2) or 'layer N'")
    us: float


class CollectiveMeta(Model):
    """What PyTorch recorded about one collective on its kernel (``record_param_comms`` fields), as read."""

    name: str = Field(description="'Collective name' (allreduce, _allgather_base, send, recv, ...)")
    group: str = Field(default="", description="'Process Group Name'")
    ranks: Optional[list[int]] = Field(default=None, description=(
        "'Process Group Ranks' (global ranks; null when the profiler cut the list short or it is unreadable)"))
    size: Optional[int] = Field(default=None, description="'Group size'")
    nelems: Optional[int] = Field(default=None, description="'In msg nelems'")
    seq: Optional[int] = Field(default=None, description="'Seq' (where PyTorch records it)")
    src: Optional[int] = Field(default=None, description="'Src Rank' (point-to-point)")
    dst: Optional[int] = Field(default=None, description="'Dst Rank' (point-to-point)")


class _Rank(Model):
    rank: int
    path: str
    device: Optional[str] = None
    total_kernel_us: float
    kernel_count: int


class RankSummary(_Rank):
    """What one rank's worker sends back: the single-trace analysis cut to what the set needs."""

    unattributed_us: float = 0.0
    modules: dict[str, tuple[str, str, int, float]] = Field(
        default_factory=dict, description="module path -> (instance name, type, depth, total us)")
    layers: list[LayerTime] = Field(default_factory=list)
    layer_source: str = ""
    categories: dict[str, float] = Field(default_factory=dict, description="category -> us")
    warnings: list[Warning_] = Field(default_factory=list)
    output_xlsx: Optional[str] = None
    collective_source: str = ""
    collectives: list[tuple[str, float, Optional[float], int]] = Field(default_factory=list, description=(
        "(kind, arrival us, end us or null, layer index or -1) in time order"))
    collective_meta: list[Optional[CollectiveMeta]] = Field(default_factory=list, description=(
        "what the trace records about each of ``collectives`` (same order; null where nothing is recorded)"))
    collective_overlap: Optional[float] = None
    breakdown: Optional[GpuBreakdown] = None


class RankTotal(_Rank):
    vs_mean: float = Field(description="this rank's total / the mean total over ranks")
    rank_source: str = "distributedInfo"
    output_xlsx: Optional[str] = None


class ModuleAcrossRanks(Model):
    """One module instance (as named in the single-trace tree) on every rank."""

    name: str
    type: str
    path: str
    depth: int
    per_rank_us: dict[int, float] = Field(description="rank -> kernel time of this instance (0 where absent)")
    mean_us: float
    slowest_rank: int
    imbalance: float = Field(description="slowest / mean over ranks (1.0 = balanced)")
    excess_us: float = Field(description="slowest - mean: what the other ranks wait for, at most")


class LayerAcrossRanks(Model):
    index: int
    name: str
    per_rank_us: dict[int, float]
    mean_us: float
    slowest_rank: int
    imbalance: float
    excess_us: float


class CategoryAcrossRanks(Model):
    category: str
    per_rank_us: dict[int, float]
    mean_us: float
    slowest_rank: int
    imbalance: float


class Straggler(Model):
    rank: Optional[int] = Field(default=None, description="the rank that is slowest throughout, or null")
    kind: Optional[Literal["fixed", "moving"]] = Field(default=None, description=(
        "fixed: the same rank is slowest in most layers (look at its GPU, clocks, placement); "
        "moving: the slow rank changes from layer to layer (load or routing imbalance, e.g. MoE experts)"))
    evidence: str = ""
    slow_layers: dict[int, int] = Field(default_factory=dict, description=(
        "layer index -> slowest rank, for the layers over the imbalance threshold"))


class CollectiveInstance(Model):
    """One collective matched across ranks (the ``index``-th of its ``kind`` on every rank)."""

    kind: str = Field(description="AllReduce, AllGather, ... (kernels) or allreduce, allgather, ... (c10d ops)")
    index: int
    layer: int = Field(description="layer index (as in ``layers``), -1 outside every layer")
    last_rank: int = Field(description="the rank that arrived last: it set the start")
    start_us: float = Field(description="the last arrival (trace clock)")
    lateness_us: float = Field(description="how long after the second-to-last rank the last one arrived")
    max_wait_us: float
    per_rank_wait_us: dict[int, float] = Field(description="start (last arrival) - this rank's arrival")


class CollectiveRank(Model):
    rank: int
    wait_us: float = Field(description="time spent waiting for the last rank, over every matched collective")
    transfer_us: Optional[float] = Field(default=None, description=(
        "time inside the collective after the last rank arrived (kernels only; null for host-side ops)"))
    last_count: int = Field(description="collectives at which this rank arrived last")
    overlap: Optional[float] = Field(default=None, description=(
        "share of this rank's collective-kernel time that runs while compute kernels run on other streams"))


class CollectiveLayer(Model):
    index: int
    name: str
    per_rank_wait_us: dict[int, float]
    late_rank: Optional[int] = Field(default=None, description=(
        "the rank that arrived last, by at least a quarter of the median interval between collectives, at this "
        "layer's latest collective (null: no late arrival here)"))
    lateness_us: float = Field(description="the largest gap between the last and the second-to-last arrival here")
    last_counts: dict[int, int] = Field(default_factory=dict, description="rank -> collectives it arrived last at")


class CollectiveAnalysis(Model):
    source: str = Field(description="communication kernels (NCCL/RCCL) or host c10d ops (gloo)")
    ranks: int
    matched: int = Field(description=(
        "collectives found on every rank of their process group and matched by group, kind and sequence (or order)"))
    unmatched: int = Field(description=(
        "collective events left out: no counterpart on every other rank of the group, the group not all in the set, "
        "kernels that do not overlap in time, or names / sizes that differ (the warnings say which)"))
    median_interval_us: float = Field(default=0.0, description="median time between consecutive collectives")
    straggler_rank: Optional[int] = Field(default=None, description=(
        "the rank that arrives late (by a quarter of the median interval) in at least half of the layers"))
    evidence: str = ""
    per_rank: list[CollectiveRank] = Field(default_factory=list, description="most often last first")
    layers: list[CollectiveLayer] = Field(default_factory=list, description="largest lateness first")
    instances: list[CollectiveInstance] = Field(default_factory=list, description="largest lateness first")


class RankGpuTime(Model):
    """One rank's GPU time breakdown (the single-trace ``breakdown``: busy, idle, computation, communication,
    memcpy/memset, exposed communication) over that rank's window."""

    rank: int
    window: str = Field(description="which GPU events were measured (see analyze_trace's breakdown.window)")
    total: TimeBreakdown
    streams: list[TimeBreakdown] = Field(default_factory=list, description="per (device, stream), busiest first")


class RankFailure(Model):
    rank: int
    path: str
    error: str


class TraceSetAnalysis(Model):
    world_size: Optional[int] = None
    rank_count: int
    executor: str
    workers: int
    imbalance_threshold: float
    total_kernel_us: float = Field(description="sum over ranks")
    ranks: list[RankTotal] = Field(default_factory=list, description="slowest first")
    straggler: Straggler = Field(default_factory=Straggler)
    layers: list[LayerAcrossRanks] = Field(default_factory=list, description="largest excess_us first")
    layer_source: str = ""
    modules: list[ModuleAcrossRanks] = Field(default_factory=list, description="largest excess_us first")
    categories: list[CategoryAcrossRanks] = Field(default_factory=list, description="largest mean first")
    failed: list[RankFailure] = Field(default_factory=list)
    collectives: Optional[CollectiveAnalysis] = Field(default=None, description=(
        "collectives matched across ranks: waits, transfers, the last-arriving rank per layer (null: none found)"))
    gpu_time: list[RankGpuTime] = Field(default_factory=list, description=(
        "per rank the GPU time breakdown (busy, idle, computation, communication, exposed communication), in the "
        "order of ``ranks``"))
    output_xlsx: Optional[str] = None
    output_html: Optional[str] = None
    warnings: list[Warning_] = Field(default_factory=list)

    def summary_view(self, top_n: int) -> tuple["TraceSetAnalysis", Optional[str]]:
        notes = []
        view = self
        if any(g.streams for g in self.gpu_time):
            view = view.model_copy(update={"gpu_time": [
                g.model_copy(update={"streams": []}) for g in self.gpu_time]})
            notes.append(f"gpu_time holds each rank's total; its streams (up to "
                         f"{max(len(g.streams) for g in self.gpu_time)} a rank) are in the detail and the workbook")
        if len(self.ranks) <= top_n:
            return view, "; ".join(notes) or None
        keep = {r.rank for r in self.ranks[:top_n]} | {self.ranks[-1].rank}  # the top_n slowest and the fastest
        update: dict = {"gpu_time": [g for g in view.gpu_time if g.rank in keep],
                        "layers": _keep_ranks(self.layers, "per_rank_us", keep),
                        "modules": _keep_ranks(self.modules, "per_rank_us", keep),
                        "categories": _keep_ranks(self.categories, "per_rank_us", keep)}
        if self.collectives is not None:
            c = self.collectives
            update["collectives"] = c.model_copy(update={
                "layers": _keep_ranks(c.layers, "per_rank_wait_us", keep),
                "instances": _keep_ranks(c.instances, "per_rank_wait_us", keep)})
        view = view.model_copy(update=update)
        notes.insert(0, f"per_rank_us maps keep {len(keep)} of {len(self.ranks)} ranks (the {top_n} slowest and "
                        f"the fastest: {', '.join(map(str, sorted(keep)))}), gpu_time the same ranks; mean_us, "
                        "slowest_rank and imbalance are over every rank")
        return view, "; ".join(notes)


class RankDelta(Model):
    rank: int
    a_us: Optional[float] = None
    b_us: Optional[float] = None
    delta_us: Optional[float] = None
    ratio: Optional[float] = Field(default=None, description="b / a")


class ModuleDelta(Model):
    name: str
    type: str
    path: str
    a_mean_us: float
    b_mean_us: float
    a_max_us: float
    b_max_us: float
    delta_mean_us: float
    delta_max_us: float = Field(description="change of the slowest rank's time (what the step waits for)")
    a_slowest_rank: Optional[int] = None
    b_slowest_rank: Optional[int] = None
    per_rank_delta_us: dict[int, float] = Field(default_factory=dict)


class TraceSetComparison(Model):
    labels: list[str]
    a: TraceSetAnalysis = Field(description="run A read across its ranks (its module and category lists are in "
                                            "``modules`` here, side by side with B's; its collectives without the "
                                            "single instances)")
    b: TraceSetAnalysis = Field(description="run B read across its ranks")
    ranks: list[RankDelta] = Field(default_factory=list, description="rank by rank, largest |delta| first")
    modules: list[ModuleDelta] = Field(default_factory=list, description="largest |delta_max_us| first")
    total_delta_us: float
    slowest_rank_delta_us: float = Field(description="change of the slowest rank's total (the step time)")
    warnings: list[Warning_] = Field(default_factory=list)

    def summary_view(self, top_n: int) -> tuple["TraceSetComparison", Optional[str]]:
        if len(self.ranks) <= top_n:
            return self, None
        keep = {r.rank for r in self.ranks[:top_n]}
        view = self.model_copy(update={"modules": _keep_ranks(self.modules, "per_rank_delta_us", keep)})
        return view, (f"per_rank_delta_us maps keep the {top_n} ranks of the largest change "
                      f"({', '.join(map(str, sorted(keep)))}) of {len(self.ranks)}")
