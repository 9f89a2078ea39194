"""Result models of the timeline engine (pydantic only; cheap to import)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from mcp_server.core.models import Model, Warning_

#: slowest/mean at or above which a phase is called imbalanced (the analysis and the exports judge by it)
IMBALANCE_RATIO = 1.2


class ProbeOverhead(Model):
    """Kernel time with and without probes (CUDA events, medians over repeated launches)."""

    with_median_us: float
    without_median_us: float
    overhead_pct: float = Field(description="(with - without) / without, percent; negative = probes measured faster")
    samples: int = Field(description="timed launches per build")
    noise_pct: Optional[float] = Field(None, description="spread between two probe-free runs, percent, when measured")
    within_noise: bool = Field(description="the difference is no larger than the run-to-run spread")
    method: str = ""
    source: Optional[str] = Field(None, description="file the figures came from")


class DecodeSummary(Model):
    slots: int = Field(description="record slots in the buffer (header excluded)")
    rounds: int
    zero_slots: int = Field(description="zero slots before a writer's last record (holes)")
    unused_slots: int = Field(description="zero slots after a writer's last record (spare room)")
    unmatched_begins: int
    unmatched_ends: int
    bad_type: int
    tag_mismatches: int = Field(description="records whose tag names another block than their slot position")
    truncated_lanes: int = Field(description="writers with a record in the buffer's last round (may have run out of "
                                             "room)")
    timer_wraps: int = Field(description="writers whose 32-bit timer wrapped (unwrapped)")
    non_monotonic: int
    overflow: bool = Field(description="header overflow bit: the bounds guard dropped records")
    partial_round: bool


class Occurrence(Model):
    """One occurrence of a phase: the k-th time each block ran it."""

    index: int
    blocks: int = Field(description="blocks that ran this occurrence")
    begin_ns: int = Field(description="first begin, ns from the buffer's earliest record")
    end_ns: int = Field(description="last end")
    wall_ns: int = Field(description="first begin to last end over blocks")
    slowest_ns: int = Field(description="longest block duration")
    mean_ns: float
    cv: float = Field(description="coefficient of variation of block durations")
    imbalance: float = Field(description="slowest / mean")
    skew_ns: int = Field(description="start-skew spread: last begin minus first begin")
    last_block: int = Field(description="block whose end is last")
    slowest_block: int


class Phase(Model):
    """Statistics of one event (phase) over its occurrences. Durations are per block: a block's
    span is its groups' first begin to last end."""

    name: str
    event_id: int
    occurrences: list[Occurrence]
    imbalance: float = Field(description="the largest slowest/mean over occurrences")
    cv_max: float
    slowest_blocks: list[int] = Field(description="blocks ordered slowest first by mean duration in this phase (top "
                                                  "32)")
    slowest_block_mean_ns: list[float] = Field(description="their mean durations, same order")
    block_mean_ns: float = Field(description="mean block duration over all blocks and occurrences")
    last_blocks: list[int] = Field(description="the last-finishing block of each occurrence")
    last_block_always_same: bool
    stragglers_consistent: Optional[bool] = Field(None, description=(
        "every occurrence's last block is also slow (>= 1.2x the mean) in every other occurrence: a fixed "
        "share of work; False: the slow block changes (contention, synchronisation); None: one occurrence"))
    total_wall_ns: int
    total_slowest_ns: int
    total_mean_ns: float
    total_skew_ns: int
    wait_after_mean_ns: float = Field(description="mean gap on a lane from this phase's end to its next begin (barrier "
                                                  "wait)")
    wait_after_max_ns: int
    critical_ns: int = Field(description="time this phase holds on the critical path (sum over occurrences)")
    imbalance_at_stake_ns: float = Field(description="sum over occurrences of slowest - mean: what perfect balance "
                                                     "could save")
    skew_at_stake_ns: float = Field(description="sum over occurrences of wall - slowest: time lost to start skew / "
                                                "late release")
    nested: bool = Field(False, description="some intervals of this event are nested inside another of the same event")


class Instant(Model):
    name: str
    event_id: int
    count: int
    first_ns: int
    last_ns: int
    last_block: int


class CriticalSegment(Model):
    """One step of the phase chain, in time order: the chain advances from the previous step's
    last end to this step's last end (critical_ns) = release/wait before the last block began
    (release_ns) + that block's own duration (work_ns)."""

    phase: str
    occurrence: int
    last_block: int
    begin_ns: int
    end_ns: int
    critical_ns: int
    work_ns: int
    release_ns: int


class Verdict(Model):
    kind: Literal["imbalance", "fixed_straggler", "moving_straggler", "start_skew", "barrier_wait",
                  "critical_phase", "balanced", "data_quality"]
    phase: Optional[str] = None
    at_stake_ns: float = Field(description="time per kernel run at stake (upper bound); verdicts are ranked by it")
    message: str


class TimelineAnalysis(Model):
    """Decoded probe buffer: phases, critical path and verdicts."""

    source: str
    nblocks: int
    ngroups: int
    tag_layout: str
    tag_layout_auto: bool
    sm_known: bool
    records: int = Field(description="non-zero record slots decoded")
    intervals: int = Field(description="matched begin/end pairs")
    instants: list[Instant]
    event_names: list[str]
    decode: DecodeSummary
    span_ns: int = Field(description="first begin to last end over everything")
    phases: list[Phase]
    critical_path: list[CriticalSegment]
    verdicts: list[Verdict]
    warnings: list[Warning_]
    probe_overhead: Optional[ProbeOverhead] = None
    outputs: dict[str, str] = Field(default_factory=dict, description="files written (perfetto, png)")


class PhaseSide(Model):
    occurrences: int
    wall_ns: int
    slowest_ns: int
    mean_ns: float
    imbalance: float
    skew_ns: int
    wait_ns: float = Field(description="mean barrier wait after the phase, per lane, summed over occurrences")
    critical_ns: int
    last_blocks: list[int]


class PhaseDelta(Model):
    name: str
    before: Optional[PhaseSide] = None
    after: Optional[PhaseSide] = None
    d_wall_ns: Optional[int] = None
    d_slowest_ns: Optional[int] = None
    d_mean_ns: Optional[float] = None
    d_imbalance: Optional[float] = None
    d_skew_ns: Optional[int] = None
    d_wait_ns: Optional[float] = None
    d_critical_ns: Optional[int] = None


class TimelineComparison(Model):
    before: str
    after: str
    span_before_ns: int
    span_after_ns: int
    d_span_ns: int
    phases: list[PhaseDelta]
    findings: list[str] = Field(description="what moved, in words, largest first")
    warnings: list[Warning_]
    probe_overhead_before: Optional[ProbeOverhead] = None
    probe_overhead_after: Optional[ProbeOverhead] = None
    outputs: dict[str, str] = Field(default_factory=dict, description="files written (perfetto, png)")
