"""Read the per-rank summaries across ranks: modules, layers, categories, the straggler.

Pure functions over ``RankSummary`` lists (no I/O), so the process-pool and Ray
executors give the same result by construction (docs/ARCHITECTURE.md, "Trace sets").
"""
from __future__ import annotations

import itertools
from collections import Counter
from typing import Iterable, Mapping

from mcp_server.tracesets.models import (
    CategoryAcrossRanks,
    LayerAcrossRanks,
    ModuleAcrossRanks,
    RankGpuTime,
    RankSummary,
    RankTotal,
    Straggler,
)

#: the same rank must be slowest in at least this share of the imbalanced layers to be a fixed straggler
FIXED_SHARE = 0.75


def rank_ranges(ranks: Iterable[int], sep: str = ", ") -> str:
    """``[0, 1, 2, 3, 7]`` -> ``"0-3, 7"``: runs of consecutive ranks (each counted once) as first-last."""
    runs = []
    for _, run in itertools.groupby(enumerate(sorted(set(ranks))), key=lambda ir: ir[1] - ir[0]):
        first, *rest = [r for _, r in run]
        runs.append(f"{first}-{rest[-1]}" if rest else str(first))
    return sep.join(runs)


def _spread(per_rank: dict[int, float]) -> tuple[float, int, float, float]:
    """(mean, slowest rank, slowest/mean, slowest - mean); ties go to the lowest rank."""
    mean = sum(per_rank.values()) / len(per_rank) if per_rank else 0.0
    slow = min(per_rank, key=lambda r: (-per_rank[r], r)) if per_rank else -1
    top = per_rank.get(slow, 0.0)
    return mean, slow, (top / mean if mean > 0 else 1.0), top - mean


def rank_totals(summaries: list[RankSummary], sources: Mapping[int, str]) -> list[RankTotal]:
    mean = sum(s.total_kernel_us for s in summaries) / len(summaries)
    rows = [RankTotal(rank=s.rank, path=s.path, device=s.device, total_kernel_us=s.total_kernel_us,
                      kernel_count=s.kernel_count, vs_mean=(s.total_kernel_us / mean if mean > 0 else 1.0),
                      rank_source=sources.get(s.rank, "distributedInfo"), output_xlsx=s.output_xlsx)
            for s in summaries]
    rows.sort(key=lambda r: (-r.total_kernel_us, r.rank))
    return rows


def gpu_time(summaries: list[RankSummary], totals: list[RankTotal]) -> list[RankGpuTime]:
    """Each rank's GPU time breakdown, in the order of ``totals`` (slowest first); ranks without GPU events
    have none."""
    by_rank = {s.rank: s.breakdown for s in summaries}
    return [RankGpuTime(rank=t.rank, window=b.window, total=b.total, streams=b.streams)
            for t in totals if (b := by_rank.get(t.rank)) is not None]


def modules(summaries: list[RankSummary]) -> list[ModuleAcrossRanks]:
    """Every module instance path on any rank, with its time on each (0 where a rank lacks it)."""
    meta: dict[str, tuple[str, str, int]] = {}
    for s in summaries:
        for path, (name, typ, depth, _us) in s.modules.items():
            meta.setdefault(path, (name, typ, depth))
    rows = []
    for path, (name, typ, depth) in meta.items():
        per = {s.rank: s.modules[path][3] if path in s.modules else 0.0 for s in summaries}
        mean, slow, imb, excess = _spread(per)
        rows.append(ModuleAcrossRanks(name=name, type=typ, path=path, depth=depth, per_rank_us=per, mean_us=mean,
                                      slowest_rank=slow, imbalance=imb, excess_us=excess))
    rows.sort(key=lambda m: (-m.excess_us, m.depth, m.path))
    return rows


def layers(summaries: list[RankSummary]) -> tuple[list[LayerAcrossRanks], str]:
    """Layers aligned by index across ranks (the layer source of the first rank that has layers)."""
    source = next((s.layer_source for s in summaries if s.layers), "")
    count = max((len(s.layers) for s in summaries), default=0)
    out = []
    for i in range(count):
        per = {s.rank: s.layers[i].us if i < len(s.layers) else 0.0 for s in summaries}
        # the first name a rank gives the layer other than the placeholder
        name = next((s.layers[i].name for s in summaries if i < len(s.layers) and s.layers[i].name != f"layer {i}"),
                    f"layer {i}")
        mean, slow, imb, excess = _spread(per)
        out.append(LayerAcrossRanks(index=i, name=name, per_rank_us=per, mean_us=mean, slowest_rank=slow,
                                    imbalance=imb, excess_us=excess))
    return out, source


def categories(summaries: list[RankSummary]) -> list[CategoryAcrossRanks]:
    names = sorted({c for s in summaries for c in s.categories})
    rows = []
    for c in names:
        per = {s.rank: s.categories.get(c, 0.0) for s in summaries}
        mean, slow, imb, _excess = _spread(per)
        rows.append(CategoryAcrossRanks(category=c, per_rank_us=per, mean_us=mean, slowest_rank=slow, imbalance=imb))
    rows.sort(key=lambda r: (-r.mean_us, r.category))
    return rows


def _ranks_text(ranks: Iterable[int]) -> str:
    return ", ".join(str(r) for r in ranks)


def straggler(layer_rows: list[LayerAcrossRanks], totals: list[RankTotal], threshold: float) -> Straggler:
    """A fixed straggler (one rank slowest in most layers), a moving slow rank, or neither.

    Layers whose slowest/mean is below ``threshold`` are balanced and say nothing. A rank is the
    straggler when it is slowest in at least FIXED_SHARE of the imbalanced layers and those are at
    least half of all layers; the slowness moves when the imbalanced layers' slowest ranks differ."""
    if not layer_rows:
        return _by_totals(totals, threshold)
    slow = {row.index: row.slowest_rank for row in layer_rows if row.imbalance >= threshold}
    worst = max(layer_rows, key=lambda row: row.imbalance)
    if not slow:
        return Straggler(evidence=(f"no layer over the {threshold:.2f}x threshold: the largest layer imbalance is "
                                   f"{worst.imbalance:.3f}x ({worst.name}, rank {worst.slowest_rank})"))
    counts = Counter(slow.values())
    top_rank, top_n = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    n_layers, n_slow = len(layer_rows), len(slow)
    mean_imb = sum(row.imbalance for row in layer_rows if row.index in slow) / n_slow
    if top_n >= FIXED_SHARE * n_slow and n_slow * 2 >= n_layers:
        return Straggler(rank=top_rank, kind="fixed", slow_layers=slow, evidence=(
            f"rank {top_rank} is the slowest in {top_n} of {n_layers} layers over the {threshold:.2f}x threshold "
            f"(mean imbalance {mean_imb:.2f}x): a straggler rank; look at its GPU, clocks and placement"))
    if len(counts) >= 2:
        parts = "; ".join(f"rank {r}: layers {_ranks_text(i for i, rr in slow.items() if rr == r)}"
                          for r in sorted(counts))
        return Straggler(kind="moving", slow_layers=slow, evidence=(
            f"{len(counts)} different ranks are slowest in the {n_slow} imbalanced "
            f"layers (of {n_layers}; mean imbalance {mean_imb:.2f}x) ({parts}): load or routing imbalance "
            "(e.g. MoE experts, uneven batches), not one slow GPU"))
    layers_text = _ranks_text(slow)
    return Straggler(slow_layers=slow, evidence=(
        f"only layer(s) {layers_text} of {n_layers} are over the {threshold:.2f}x threshold, all slowest on rank "
        f"{top_rank}: a local slowdown, not a straggler rank"))


def _by_totals(totals: list[RankTotal], threshold: float) -> Straggler:
    if len(totals) < 2:
        return Straggler(evidence="one rank: nothing to compare")
    top = totals[0]
    if top.vs_mean >= threshold:
        return Straggler(rank=top.rank, kind="fixed", evidence=(
            f"no layer structure found; rank {top.rank}'s total kernel time is {top.vs_mean:.2f}x the mean"))
    return Straggler(evidence=(f"no layer structure found; the slowest rank ({top.rank}) is {top.vs_mean:.3f}x "
                               f"the mean, under the {threshold:.2f}x threshold"))

