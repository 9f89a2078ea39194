"""The shared vocabulary every engine depends on (and nothing else).

One place for the names the code relies on, so engines need not import each
other for them (docs/ARCHITECTURE.md, "Layers"):

* ``WarningCode``: every ``Warning_.code`` the package emits, one spelling each.
  Skills and agents key on these strings; the README lists them.
* ``ProgressFn``: the progress callback ``(done, total | None, message | None)``.
* ``Phase``: the inference phase codes of the kernel table.
* Reserved category names (``communication``, ``other``, ...) the engines treat
  specially, and ``missing_reserved_categories`` to warn when a user's
  categories CSV no longer defines them.
* ``module_type`` / ``split_instance``: module-instance suffix handling.
* ``KERNEL_COLUMNS``: the per-kernel table schema shared by traces, reports
  and compare.

This module imports only the standard library.
"""
from __future__ import annotations

import re
import sys
from enum import Enum, IntEnum
from typing import Callable, Iterable, Optional

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover - Python 3.10
    class StrEnum(str, Enum):
        """``enum.StrEnum`` for Python 3.10: members are their string values."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)


# ---------------------------------------------------------------------------
# Warning codes
# ---------------------------------------------------------------------------

class WarningCode(StrEnum):
    """Every warning code the package emits (``Warning_.code``), snake_case.

    A member compares equal to its string (``WarningCode.timeout == "timeout"``),
    so ``Warning_(code=WarningCode.timeout, ...)`` serialises as the plain string.
    Add new codes in the block of the package that emits them.
    """

    # --- faces (result sizing) ---
    summary_truncated = "summary_truncated"  # the faces trimmed lists to top_n; pass detail=true for all rows

    # --- shared (categories CSV) ---
    reserved_category_missing = "reserved_category_missing"  # the categories CSV lacks a name the engines rely on

    # --- traces ---
    damaged_events = "damaged_events"  # some trace events were malformed and skipped
    metadata_ignored = "metadata_ignored"  # a trace metadata field had an unexpected type or size and was left out
    low_graph_confidence = "low_graph_confidence"  # graph-replay kernels attributed with a low majority share
    unattributed_kernels = "unattributed_kernels"  # kernels with no enclosing module
    replays_unattributed = "replays_unattributed"  # CUDA-graph replays with no eager kernels to learn modules from
    graph_capture = "graph_capture"  # a CUDA/HIP-graph capture trace (launches ran nothing): a reference for replays
    no_gpu_events = "no_gpu_events"  # the trace holds no GPU kernel/copy/memset (CPU-only, counters-only, all damaged)
    # why kernels are unattributed (issue 23: every trace under 95 % attributed says why)
    no_module_spans = "no_module_spans"  # the trace holds no nn.Module spans: profile with with_stack/with_modules
    kernels_before_first_step = "kernels_before_first_step"  # GPU events with no launch, before the first launched one
    thread_without_modules = "thread_without_modules"  # kernels launched from a thread with no module spans (backward)
    outside_modules = "outside_modules"  # kernels launched between module calls (inputs, sampling, copies)

    # --- compare (diff_modules, budget, recategorize) ---
    gpu_kernels_truncated = "gpu_kernels_truncated"  # a report's GPU Kernels sheet is capped at 1000 rows
    empty_side = "empty_side"  # one side holds no kernel time
    mixed_phases = "mixed_phases"  # a side holds prefill and decode kernels, summed together
    detail_truncated = "detail_truncated"  # an upstream detail sheet was cut at 1000 rows
    phase_ignored = "phase_ignored"  # phase was passed but the side's table has no phase
    phase_unknown = "phase_unknown"  # the side's kernels have no phase
    step_count_differs = "step_count_differs"  # the two runs hold different numbers of steps
    upstream_detail = "upstream_detail"  # an upstream report: kernels come from its detail sheets
    no_category_table = "no_category_table"  # recategorize: a sheet without a category table was left as is
    tree_breakdown_estimated = "tree_breakdown_estimated"  # recategorize: Module Tree breakdowns split in proportion
    # --- compare (issue 13) ---
    upstream_unreconciled = "upstream_unreconciled"  # an upstream report's sheets do not add up to its Summary total
    reference_mismatch = "reference_mismatch"  # a reference trace's phase differs or its alignment confidence is low
    per_step = "per_step"  # totals divided by the step count (runs with different step counts)
    sync_wait = "sync_wait"  # timeline: a probe interval holds a barrier / spin wait

    # --- kernels (bench_decode_gemm) ---
    below_baseline = "below_baseline"  # a quantized kernel ran slower than tinygemm or cuBLAS BF16, whichever is slower
    untuned_shape = "untuned_shape"  # a shape outside the measured table ran the shape heuristic's config

    # --- refs ---
    source_error = "source_error"  # a reference source failed
    timeout = "timeout"  # a reference source gave no answer in time
    incomplete = "incomplete"  # a source's results may be partial
    rate_limited = "rate_limited"  # a source's search limit was hit

    # --- timeline ---
    names_missing = "names_missing"  # the buffer holds event ids without a given name
    names_unused = "names_unused"  # names given for events with no records
    overflow = "overflow"  # the probe buffer's overflow bit is set
    truncation_possible = "truncation_possible"  # legacy-layout (unguarded) writers filled the last round
    unmatched_begin = "unmatched_begin"  # begin records without an end
    unmatched_end = "unmatched_end"  # end records without a begin
    non_monotonic = "non_monotonic"  # a writer's records step by more than 2.1 s (out of order, corrupted)
    timer_wrap = "timer_wrap"  # the 32-bit timer wrapped and was unwrapped
    tag_mismatch = "tag_mismatch"  # records whose tag names another block than their slot position
    zero_slots = "zero_slots"  # all-zero slots inside a writer's records
    partial_round = "partial_round"  # buffer length is not header + whole rounds (copy may be truncated)
    layout_ambiguous = "layout_ambiguous"  # tags carry no SM id (legacy and sm layouts agree); SM ids unknown
    sm_single = "sm_single"  # every writer's tag names one SM (tags probably in the legacy layout)
    no_intervals = "no_intervals"  # no begin/end pairs matched
    bad_type = "bad_type"  # records with event type 3 (not begin/end/instant)
    overhead_unreadable = "overhead_unreadable"  # the probe-overhead file could not be read
    perfetto_capped = "perfetto_capped"  # the Perfetto export kept only the earliest intervals
    unsynchronised = "unsynchronised"  # a phase's k-th occurrences overlap the (k+1)-th: no grid-wide sync between

    # --- other packages append their members below, one block each, commented with the package ---
    # --- ncu ---
    foreign_lines_skipped = "foreign_lines_skipped"  # lines of an ncu CSV that were not ncu output (the app's prints)
    cache_control_conflict = "cache_control_conflict"  # the cache_control given differs from the sidecar's
    metric_missing = "metric_missing"  # a metric the parser/classifier needs is absent or n/a
    residency_unknown = "residency_unknown"  # not a warm (--cache-control none) profile: L2 residency not judged
    gpu_unknown = "gpu_unknown"  # the device is not in gpu_specs.toml: no roofline ceilings
    no_candidate = "no_candidate"  # select_candidate: no kernel over the share threshold with a known class
    target_failed = "target_failed"  # run_ncu: the target exited non-zero after some kernels were profiled
    report_not_parsed = "report_not_parsed"  # run_ncu: the report was written but could not be parsed here
    # --- validate ---
    baseline_patched = "baseline_patched"  # the baseline replaced a timer/sync/check function (put back)
    reference_native_precision = "reference_native_precision"  # baseline failed in higher precision: own-dtype ref
    same_address_skipped = "same_address_skipped"  # inputs changed shape between seeds: same-address check skipped
    cold_cache_partial = "cold_cache_partial"  # rotated input copies do not exceed the cache: 'cold' is partly warm
    graphs_unavailable = "graphs_unavailable"  # CUDA-graph capture failed; timed with a launch loop
    slower_on_shape = "slower_on_shape"  # the candidate is slower on one of several shapes
    budget_exhausted = "budget_exhausted"  # sampling ended before the interval reached the asked half-width
    harness_strays_killed = "harness_strays_killed"  # the candidate left processes running; they were killed
    roofline_unchecked = "roofline_unchecked"  # no gpu_specs.toml entry for the device: speed-of-light check skipped
    faster_than_roofline = "faster_than_roofline"  # a time below the roofline floor from inferred bytes (flag only)
    # --- kernels ---
    # --- ledger ---
    # --- loop ---
    stale_profile = "stale_profile"  # a change was accepted after the given ncu report: selection reads the old one
    forced_proposal = "forced_proposal"  # a proposal was validated although the classification advises against its kind
    # --- repro ---
    not_rebuilt = "not_rebuilt"  # make_repro: ops that could not be rebuilt (custom op, tensor list, index values, ...)
    graph_kernels_skipped = "graph_kernels_skipped"  # make_repro: graph replays have no launching op in this trace
    replay_differs = "replay_differs"  # run_repro: an op's replay time is outside 0.8-1.25x its trace time
    replay_failed = "replay_failed"  # run_repro: an op's replay raised (the message says what)
    # --- tracesets ---
    rank_from_filename = "rank_from_filename"  # a trace has no distributedInfo: its rank was read from the file name
    ranks_missing = "ranks_missing"  # the set holds fewer traces than its world size
    rank_failed = "rank_failed"  # one rank's trace could not be analysed; the others were
    ranks_differ = "ranks_differ"  # compare: the two runs hold different ranks
    collective_group_incomplete = "collective_group_incomplete"  # a collective's process group is not all in the set
    collective_set_unverified = "collective_set_unverified"  # collectives name no group; the set may lack ranks
    collective_no_overlap = "collective_no_overlap"  # matched collective kernels do not overlap in time on every rank
    collective_mismatch = "collective_mismatch"  # ranks ran collectives of other names / sizes at one position


#: Warnings about which module a kernel belongs to: operations that read only categories (budget) leave them out.
MODULE_ATTRIBUTION_WARNINGS = frozenset({
    WarningCode.unattributed_kernels, WarningCode.replays_unattributed, WarningCode.low_graph_confidence,
    WarningCode.thread_without_modules, WarningCode.outside_modules,
})


# ---------------------------------------------------------------------------
# Progress callback
# ---------------------------------------------------------------------------

#: ``progress(done, total, message)``: ``total`` None when unknown; ``message`` optional.
ProgressFn = Callable[[float, Optional[float], Optional[str]], None]


# ---------------------------------------------------------------------------
# Exit statuses of the ``kernelscope`` command (README, "Exit status")
# ---------------------------------------------------------------------------

class ExitCode(IntEnum):
    """What the CLI's exit status means; a result whose verdict can be negative says which applies
    (its ``exit_code()`` method), so a script can branch on a rejected candidate."""

    ok = 0             # done; a verdict, if any, is positive (validate ACCEPTED, the loop accepted a change)
    internal = 1       # an internal error (a bug: the traceback is printed; please report it)
    bad_input = 2      # bad input or a run that could not complete: one line on stderr says why
    not_accepted = 3   # the run completed and its verdict is negative (validate REJECTED / NOT_FASTER, the loop
    #                    ended with nothing accepted)
    interrupted = 130  # Ctrl-C


# ---------------------------------------------------------------------------
# Phases
# ---------------------------------------------------------------------------

class Phase(StrEnum):
    """Inference phase of a kernel (the kernel table's ``phase`` column)."""

    prefill = "prefill"
    decode = "decode"
    unknown = ""
    #: a CUDA/HIP-graph replay with no evidence of its phase (no marker, no reference that knows it):
    #: training steps and diffusion pipelines replay graphs too, so a replay is not decode by itself
    graph = "graph"


#: The phases a user may select (``phase=`` parameters).
PHASES: tuple[str, ...] = (Phase.prefill.value, Phase.decode.value)
#: Category order of the kernel table's ``phase`` column (code 0, 1, 2, 3).
PHASE_CODES: tuple[str, ...] = (Phase.unknown.value, Phase.prefill.value, Phase.decode.value, Phase.graph.value)


# ---------------------------------------------------------------------------
# Reserved category names
# ---------------------------------------------------------------------------

#: Collective-communication kernels: layer cuts (traces) and the communication block (compare).
COMMUNICATION = "communication"
#: What a kernel no rule matches is classified as.
OTHER = "other"

#: Names the engines rely on; the categories CSV should define each (``other`` is implicit).
RESERVED_CATEGORIES: tuple[str, ...] = (COMMUNICATION,)


def missing_reserved_categories(categories: Iterable[str]) -> list[str]:
    """Reserved names (``RESERVED_CATEGORIES``) absent from ``categories``."""
    have = set(categories)
    return [c for c in RESERVED_CATEGORIES if c not in have]


def reserved_category_message(missing: Iterable[str], source: str) -> str:
    """The message of a ``reserved_category_missing`` warning."""
    names = ", ".join(repr(m) for m in missing)
    return (f"{source} defines no category {names}: collective kernels are not recognised, so "
            "trace layer cuts and the communication block are off (add a row with that category)")


# ---------------------------------------------------------------------------
# Module instances
# ---------------------------------------------------------------------------

_INSTANCE = re.compile(r"^(.*)_(\d+)$", re.DOTALL)


def module_type(instance: str) -> str:
    """The module type of an instance name: the numeric suffix stripped (``Linear_3`` -> ``Linear``)."""
    m = _INSTANCE.match(instance or "")
    return m.group(1) if m else (instance or "")


def split_instance(instance: str) -> tuple[str, int]:
    """``(type, index)`` of an instance name; index 0 when there is no numeric suffix."""
    m = _INSTANCE.match(instance or "")
    return (m.group(1), int(m.group(2))) if m else (instance or "", 0)


# ---------------------------------------------------------------------------
# Kernel table schema
# ---------------------------------------------------------------------------

#: Columns of the per-kernel DataFrame (one row per GPU kernel / memcpy / memset),
#: shared by traces (which builds it), reports (which write and read it) and compare.
KERNEL_COLUMNS: dict[str, str] = {
    "name": "kernel name as in the trace",
    "category": "category from the categories CSV",
    "kind": "kernel | memcpy | memset",
    "ts_us": "start timestamp (us, trace clock)",
    "dur_us": "duration (us)",
    "device": "GPU index",
    "stream": "stream id",
    "correlation": "correlation id linking to the launch",
    "module": "owning (deepest) module instance, e.g. Linear_3; '' when unattributed",
    "module_type": "module type (instance name without numeric suffix), e.g. Linear",
    "module_path": "slash-joined instance path from the root module, e.g. "
                   "LlamaForCausalLM_0/LlamaModel_0/LlamaDecoderLayer_0/LlamaAttention_0/Linear_0",
    "root_type": "type of the outermost module of the path ('' when unattributed)",
    "phase": "prefill | decode | graph (a graph replay of unknown phase) | '' (unknown)",
    "cpu_op": "innermost aten/cpu op enclosing the launch ('' when none)",
    "input_dims": "Input Dims of that cpu op, as text ('' when not recorded)",
    "source": "innermost non-torch Python frame enclosing the launch, e.g. modeling_llama.py(123): forward",
    "graph": "True when launched by a CUDA/HIP graph replay",
    "confidence": "attribution confidence 0..1 (1 for direct attribution; majority share for graph replays; 0 when "
                  "unattributed)",
    "layer": "index of the layer occurrence within its phase for graph replays (-1 when not cut)",
}
