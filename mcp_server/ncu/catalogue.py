"""The one Nsight Compute metric catalogue: canonical names -> ncu metric names, units.

Every ncu metric kernelscope reads or collects is named here once. A canonical
name (``sm_throughput_pct``) maps to the ncu names that carry it, preferred
first; names differ across architectures (the tensor pipe is ``hmma`` on
Ampere/Ada and ``gmma`` on Hopper) and ncu versions (``dram__throughput`` became
``gpu__dram_throughput``). The parser normalises any of them to the canonical
name; the runner collects the names listed for the target's architecture.

``unit`` is the canonical (base) unit the parser converts to: ``ns``, ``pct``,
``bytes``, ``count`` (a plain number), ``ratio``, ``bytes_per_s``. Percentages stay
0..100 as ncu prints them.

This module imports only the standard library (the fixture script imports it on
the GPU machine).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Architecture keys: compute capability major*10+minor as "sm_90" etc.
AMPERE = ("sm_80", "sm_86", "sm_87")
ADA = ("sm_89",)
HOPPER = ("sm_90",)


@dataclass(frozen=True)
class MetricDef:
    canonical: str
    names: tuple[str, ...]            # ncu metric names, preferred first (any of them is accepted)
    unit: str                          # canonical unit after conversion
    description: str
    collect: bool = True               # part of the default collection (run_ncu's classifier set)
    by_arch: dict[str, str] = field(default_factory=dict)  # arch -> the name to collect there


def _pipe(kind: str) -> tuple[str, ...]:
    # the _elapsed spellings last: what SpeedOfLight's breakdown records on some versions (e.g. the A10G report
    # of the field corpus); normalised by elapsed rather than active cycles, so never above the _active value
    return (f"sm__pipe_{kind}_cycles_active.avg.pct_of_peak_sustained_active",
            f"sm__inst_executed_pipe_{kind}.avg.pct_of_peak_sustained_active",
            f"sm__pipe_{kind}_cycles_active.avg.pct_of_peak_sustained_elapsed",
            f"sm__inst_executed_pipe_{kind}.avg.pct_of_peak_sustained_elapsed")


def _sass(op: str) -> tuple[str, ...]:
    """Thread instructions of one SASS op: per SM sub-partition (smsp__) or per SM (sm__), the same sum."""
    return (f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum",
            f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum")


def _sass_rate(op: str) -> tuple[str, ...]:
    return tuple(f"{name}.per_cycle_elapsed" for name in _sass(op))


_GMMA = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
_HMMA = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
#: Every tensor op (hmma, hgmma, imma, ...) on Hopper; seen in the H200 fixtures.
_TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"

#: Warp-stall reasons as ncu names them (smsp__average_warps_issue_stalled_<r>_per_issue_active.ratio).
STALL_REASONS = (
    "long_scoreboard", "short_scoreboard", "math_pipe_throttle", "mio_throttle", "lg_throttle",
    "barrier", "membar", "wait", "not_selected", "selected", "no_instruction", "dispatch_stall",
    "drain", "sleeping", "tex_throttle", "imc_miss", "branch_resolving", "misc", "gmma",
)

_DEFS: list[MetricDef] = [
    MetricDef("duration_ns", ("gpu__time_duration.sum", "gpu__time_duration.avg", "Duration"),
              "ns", "kernel duration (GPU time between start and end of the launch)"),
    MetricDef("sm_throughput_pct", ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
              "pct", "speed of light, compute side: max over SM sub-unit throughputs"),
    MetricDef("memory_throughput_pct",
              ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
              "pct", "speed of light, memory side: max over DRAM, L2 and L1 throughputs (not DRAM)"),
    MetricDef("dram_throughput_pct",
              ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
               "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
              "pct", "DRAM (HBM) throughput as a share of its peak"),
    MetricDef("l2_throughput_pct", ("lts__throughput.avg.pct_of_peak_sustained_elapsed",),
              "pct", "L2 throughput as a share of its peak"),
    MetricDef("l1_throughput_pct",
              ("l1tex__throughput.avg.pct_of_peak_sustained_active",
               "l1tex__throughput.avg.pct_of_peak_sustained_elapsed"),
              "pct", "L1/TEX throughput as a share of its peak"),
    MetricDef("achieved_occupancy_pct", ("sm__warps_active.avg.pct_of_peak_sustained_active",),
              "pct", "achieved occupancy"),
    MetricDef("theoretical_occupancy_pct", ("sm__maximum_warps_per_active_cycle_pct",),
              "pct", "theoretical occupancy (brought by the Occupancy section)", collect=False),
    MetricDef("occupancy_limit_registers", ("launch__occupancy_limit_registers",),
              "count", "blocks per SM allowed by the register file"),
    MetricDef("occupancy_limit_shared_mem", ("launch__occupancy_limit_shared_mem",),
              "count", "blocks per SM allowed by shared memory"),
    MetricDef("occupancy_limit_blocks", ("launch__occupancy_limit_blocks",),
              "count", "blocks per SM allowed by the hardware block limit"),
    MetricDef("occupancy_limit_warps", ("launch__occupancy_limit_warps",),
              "count", "blocks per SM allowed by the warp limit (block size)"),
    MetricDef("registers_per_thread", ("launch__registers_per_thread",), "count",
              "registers per thread"),
    MetricDef("shared_mem_static_bytes", ("launch__shared_mem_per_block_static",), "bytes",
              "static shared memory per block"),
    MetricDef("shared_mem_dynamic_bytes", ("launch__shared_mem_per_block_dynamic",), "bytes",
              "dynamic shared memory per block"),
    MetricDef("grid_size", ("launch__grid_size",), "count", "blocks in the grid"),
    MetricDef("block_size", ("launch__block_size",), "count", "threads per block"),
    MetricDef("waves_per_sm", ("launch__waves_per_multiprocessor",), "count",
              "waves of blocks per SM (under 1: the grid does not fill the GPU)"),
    MetricDef("sm_count", ("device__attribute_multiprocessor_count",), "count", "SMs on the device"),
    MetricDef("l2_hit_rate_pct", ("lts__t_sector_hit_rate.pct",), "pct", "L2 sector hit rate"),
    MetricDef("l1_hit_rate_pct", ("l1tex__t_sector_hit_rate.pct",), "pct", "L1/TEX sector hit rate"),
    # not sm__inst_executed_pipe_tensor_*: one warpgroup MMA keeps the pipe busy for many cycles, so the
    # instruction rate (12 % on the H200 GEMM fixture) says nothing about the pipe's load (97 %)
    MetricDef("tensor_pipe_pct", (_TENSOR, _HMMA, _GMMA,
                                  "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"),
              "pct", "tensor-core pipe utilisation (gmma on Hopper, hmma on Ampere/Ada)",
              by_arch={**{a: _HMMA for a in AMPERE + ADA}, **{a: _TENSOR for a in HOPPER}}),
    MetricDef("fma_pipe_pct", _pipe("fma"), "pct", "FMA pipe utilisation (fp32 multiply-add)"),
    MetricDef("alu_pipe_pct", _pipe("alu"), "pct", "ALU pipe utilisation (integer, logic, compare)"),
    MetricDef("fp64_pipe_pct", ("sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active",
                                "sm__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_active"),
              "pct", "FP64 pipe utilisation", collect=False),
    MetricDef("lsu_pipe_pct", ("sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active",
                               "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed"),
              "pct", "load/store pipe utilisation"),
    MetricDef("issue_active_pct", ("sm__inst_issued.avg.pct_of_peak_sustained_active",
                                   "smsp__issue_active.avg.pct_of_peak_sustained_active",
                                   "sm__issue_active.avg.pct_of_peak_sustained_elapsed"),
              "pct", "issue slots busy"),
    MetricDef("ipc", ("sm__inst_executed.avg.per_cycle_active",), "ratio",
              "instructions executed per active cycle per SM"),
    MetricDef("ffma_thread_inst", _sass("ffma"), "count", "fp32 FMA thread instructions (2 FLOP each)"),
    MetricDef("fadd_thread_inst", _sass("fadd"), "count", "fp32 add thread instructions"),
    MetricDef("fmul_thread_inst", _sass("fmul"), "count", "fp32 multiply thread instructions"),
    MetricDef("hfma_thread_inst", _sass("hfma"), "count", "fp16 FMA thread instructions", collect=False),
    # the rates SpeedOfLight's roofline records instead of the counts (count = rate x SM-subpartition clock x
    # duration, derived per launch by the parser when the count itself is absent)
    MetricDef("ffma_per_cycle", _sass_rate("ffma"), "ratio", "fp32 FMA thread instructions per elapsed cycle",
              collect=False),
    MetricDef("fadd_per_cycle", _sass_rate("fadd"), "ratio", "fp32 add thread instructions per elapsed cycle",
              collect=False),
    MetricDef("fmul_per_cycle", _sass_rate("fmul"), "ratio", "fp32 multiply thread instructions per elapsed cycle",
              collect=False),
    MetricDef("smsp_frequency_hz", ("smsp__cycles_elapsed.avg.per_second",), "hz",
              "SM sub-partition clock during the launch (the base of the per-cycle rates)", collect=False),
    MetricDef("tensor_ops_bf16", ("sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum",), "count",
              "math ops in the tensor path, HGMMA bf16 -> fp32 (Hopper)",
              by_arch={a: "sm__ops_path_tensor_op_hgmma_src_bf16_dst_fp32.sum" for a in HOPPER}),
    MetricDef("dram_read_bytes", ("dram__bytes_read.sum",), "bytes", "bytes read from DRAM"),
    MetricDef("dram_write_bytes", ("dram__bytes_write.sum",), "bytes", "bytes written to DRAM"),
    MetricDef("dram_bytes", ("dram__bytes.sum",), "bytes",
              "bytes read and written in DRAM (one counter; where the read / write split is not recorded)",
              collect=False),
    MetricDef("dram_bytes_per_s", ("dram__bytes.sum.per_second",), "bytes_per_s",
              "DRAM bytes per second (SpeedOfLight's roofline; bytes = rate x duration)", collect=False),
    MetricDef("l2_bytes", ("lts__t_bytes.sum",), "bytes", "bytes through L2", collect=False),
    MetricDef("sm_frequency_hz", ("sm__cycles_elapsed.avg.per_second", "SM Frequency"),
              "hz", "SM clock during the launch"),
    MetricDef("dram_frequency_hz", ("dram__cycles_elapsed.avg.per_second", "DRAM Frequency"),
              "hz", "DRAM clock during the launch", collect=False),
    MetricDef("elapsed_cycles", ("gpc__cycles_elapsed.max", "sm__cycles_elapsed.avg"),
              "count", "elapsed cycles"),
] + [
    MetricDef(f"stall_{r}", (f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio",),
              "ratio", f"warp cycles stalled on {r.replace('_', ' ')} per issued instruction",
              by_arch={a: f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for a in HOPPER}
              if r == "gmma" else {})
    for r in STALL_REASONS
]

CATALOGUE: dict[str, MetricDef] = {d.canonical: d for d in _DEFS}

#: ncu metric name -> canonical name (every alternative spelling).
BY_NCU_NAME: dict[str, str] = {n: d.canonical for d in _DEFS for n in d.names}

#: ncu metric name -> its place among the spellings of its canonical name (0: the preferred one).
NAME_RANK: dict[str, int] = {n: k for d in _DEFS for k, n in enumerate(d.names)}

#: ncu sections the default collection adds (stable identifiers across architectures).
DEFAULT_SECTIONS = (
    "SpeedOfLight", "LaunchStats", "Occupancy", "ComputeWorkloadAnalysis",
    "MemoryWorkloadAnalysis", "WarpStateStats", "SchedulerStats",
)


def collect_names(arch: str | None = None) -> list[str]:
    """ncu metric names of the default (classifier) collection for ``arch`` (e.g. "sm_90").

    Unknown arch: metrics whose spelling is architecture-specific are left out
    (their sections still bring them when the section lists them).
    """
    out: list[str] = []
    for d in _DEFS:
        if not d.collect:
            continue
        if d.by_arch:
            name = d.by_arch.get(arch or "")
            if name:
                out.append(name)
            continue
        first = d.names[0]
        if first[0].isupper():  # a CSV column title, not a metric
            continue
        out.append(first)
    return out


def minimal_names() -> list[str]:
    """The smallest set the classifier's first stage needs (speed of light + time + launch)."""
    keep = ("duration_ns", "sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct",
            "l2_throughput_pct", "l1_throughput_pct", "grid_size", "block_size", "waves_per_sm",
            "sm_count", "l2_hit_rate_pct")
    return [CATALOGUE[k].names[0] for k in keep]


def arch_of(cc: str | float | None) -> str | None:
    """'9.0' / 9.0 / '90' / 'sm_90' -> 'sm_90'."""
    if cc is None:
        return None
    s = str(cc).strip().lower()
    if s.startswith("sm_"):
        return s
    if "." in s:
        major, _, minor = s.partition(".")
        if major.isdigit() and minor[:1].isdigit():
            return f"sm_{major}{minor[:1]}"
        return None
    return f"sm_{s}" if s.isdigit() else None


#: Details-page labels (section name, metric label) -> canonical name, for reports collected by
#: sections (the details page names section metrics by label, explicit metrics by ncu name).
DETAILS_LABELS: dict[tuple[str, str], str] = {
    ("GPU Speed Of Light Throughput", "Duration"): "duration_ns",
    ("GPU Speed Of Light Throughput", "Compute (SM) Throughput"): "sm_throughput_pct",
    ("GPU Speed Of Light Throughput", "Memory Throughput"): "memory_throughput_pct",
    ("GPU Speed Of Light Throughput", "DRAM Throughput"): "dram_throughput_pct",
    ("GPU Speed Of Light Throughput", "L1/TEX Cache Throughput"): "l1_throughput_pct",
    ("GPU Speed Of Light Throughput", "L2 Cache Throughput"): "l2_throughput_pct",
    ("GPU Speed Of Light Throughput", "SM Frequency"): "sm_frequency_hz",
    ("GPU Speed Of Light Throughput", "DRAM Frequency"): "dram_frequency_hz",
    ("GPU Speed Of Light Throughput", "Elapsed Cycles"): "elapsed_cycles",
    ("Launch Statistics", "Grid Size"): "grid_size",
    ("Launch Statistics", "Block Size"): "block_size",
    ("Launch Statistics", "Registers Per Thread"): "registers_per_thread",
    ("Launch Statistics", "Waves Per SM"): "waves_per_sm",
    ("Launch Statistics", "Static Shared Memory Per Block"): "shared_mem_static_bytes",
    ("Launch Statistics", "Dynamic Shared Memory Per Block"): "shared_mem_dynamic_bytes",
    ("Launch Statistics", "# SMs"): "sm_count",
    ("Occupancy", "Achieved Occupancy"): "achieved_occupancy_pct",
    ("Occupancy", "Theoretical Occupancy"): "theoretical_occupancy_pct",
    ("Occupancy", "Block Limit Registers"): "occupancy_limit_registers",
    ("Occupancy", "Block Limit Shared Mem"): "occupancy_limit_shared_mem",
    ("Occupancy", "Block Limit SM"): "occupancy_limit_blocks",
    ("Occupancy", "Block Limit Warps"): "occupancy_limit_warps",
    ("Memory Workload Analysis", "L1/TEX Hit Rate"): "l1_hit_rate_pct",
    ("Memory Workload Analysis", "L2 Hit Rate"): "l2_hit_rate_pct",
    ("Compute Workload Analysis", "Issue Slots Busy"): "issue_active_pct",
    ("Compute Workload Analysis", "Executed Ipc Active"): "ipc",
}

#: Canonical units whose launch values are averaged weighted by duration (rates, shares);
#: the others (counts, bytes, cycles) are per-launch amounts and averaged plainly.
INTENSIVE_UNITS = frozenset({"pct", "ratio", "hz", "bytes_per_s"})
