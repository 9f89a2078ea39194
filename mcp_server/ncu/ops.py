"""Operations of the ncu engine, declared once (the MCP tools and CLI verbs are generated from them)."""
from __future__ import annotations

from mcp_server.core.operation import EXECUTES_CODE, READ_ONLY, WRITES_FILES, Operation
from mcp_server.ncu.models import Classification, NcuProfile, NcuRun, Selection
from mcp_server.ncu.requests import ClassifyRequest, ParseNcuRequest, RunNcuRequest, SelectRequest

OPERATIONS = [
    Operation(
        tool="run_ncu", verb="ncu run", title="Profile a command with Nsight Compute",
        help="profile a command (argument list after --) with ncu into a report, log and sidecar",
        description=(
            "Run a target command (an argument list, never a shell string) under Nsight Compute with the metric "
            "set the classifier needs (or a named set, sections, metrics), kernel filters (name or regex:, id, "
            "launch skip/count, NVTX), cache control (all = cold, none = warm) and clock control none. Always "
            "writes REPORT.ncu-rep, REPORT.log (ncu's output) and a sidecar REPORT.ncu-rep.json (argv, versions, "
            "cache/clock control, GPU); the application's own output goes to REPORT.app.txt. A time limit kills "
            "the whole process group. Typed errors: ncu not found, counters not permitted (ERR_NVGPUCTRPERM), "
            "profiler cannot load, no kernels profiled, target failed, timeout. EXECUTES the given command."),
        request=RunNcuRequest, result=NcuRun,
        engine="mcp_server.ncu.runner:run_ncu", render="mcp_server.ncu.render:render_run",
        hints=EXECUTES_CODE, remainder="target", outputs={"report": "ncu-rep"},
        aliases={"set_name": ("--set",), "sections": ("--section",), "kernel_name": ("-k",), "launch_count": ("-c",),
                 "launch_skip": ("-s",)},
        progress=True,
    ),
    Operation(
        tool="parse_ncu", verb="ncu parse", title="Read an Nsight Compute report or CSV",
        help="read a .ncu-rep or ncu CSV into per-kernel profiles",
        description=(
            "Read a .ncu-rep (NVIDIA's ncu-report package; no ncu or GPU needed) or an ncu CSV (raw or details "
            "page, base or auto units, --csv stdout with application output mixed in) into per-kernel profiles: "
            "launches, duration stats, speed-of-light throughputs, occupancy and its limiter, hit rates, pipe "
            "utilisation, top stalls, FLOPs and bytes. Metric names are normalised through one catalogue; n/a is "
            "missing, never 0."),
        request=ParseNcuRequest, result=NcuProfile,
        engine="mcp_server.ncu.parse:parse_ncu", render="mcp_server.ncu.render:render_profile",
        hints=READ_ONLY, positional=("path",),
    ),
    Operation(
        tool="classify_bottleneck", verb="classify", title="Classify each kernel's bottleneck from ncu counters",
        help="per kernel: compute/memory/latency-bound, limiter, L2 residency, evidence, advice",
        description=(
            "Per kernel of an ncu report or CSV: the bottleneck class (compute_bound, memory_bound, latency_bound, "
            "balanced, unknown) from Nsight Compute's speed-of-light logic refined by its rule thresholds, the "
            "limiter (tensor/fma/alu/issue, dram/l2/l1, small_grid/occupancy/latency), whether the data stays "
            "L2-resident (only judged for warm --cache-control none profiles; null otherwise), a confidence that "
            "drops with every missing metric, the evidence (metric, value, threshold) and advice. Never estimates "
            "a counter."),
        request=ClassifyRequest, result=Classification,
        engine="mcp_server.ncu.classify:classify_bottleneck", render="mcp_server.ncu.render:render_classification",
        hints=READ_ONLY, positional=("path",),
    ),
    Operation(
        tool="select_candidate", verb="select", title="Pick the kernel worth optimising",
        help="rank kernels by time share x headroom; the candidate, what fits, what does not",
        description=(
            "Classify the kernels of an ncu report or CSV and rank them by time share x headroom to their roof, "
            "skipping those under min_share of kernel time: the candidate with its diagnosis, the kinds of change "
            "that fit its class and those that do not (no weight quantization for an L2-resident or compute-bound "
            "kernel), and why each other kernel lost. Optionally writes a Markdown report and a roofline PNG."),
        request=SelectRequest, result=Selection,
        engine="mcp_server.ncu.select:select_candidate", render="mcp_server.ncu.render:render_selection",
        hints=WRITES_FILES, positional=("path",), aliases={"md_path": ("--md",), "png_path": ("--png",)},
        outputs={"md_path": "md", "png_path": "png"},
    ),
]
