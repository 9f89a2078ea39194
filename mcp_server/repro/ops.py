"""Operations of the repro engine, declared once (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from mcp_server.core.operation import EXECUTES_CODE, WRITES_FILES, Operation
from mcp_server.repro.models import MakeReproResult, RunReproResult
from mcp_server.repro.requests import MakeReproRequest, RunReproRequest

OPERATIONS = [
    Operation(
        tool="make_repro", verb="repro make", default_action=True, title="Rebuild a trace's slowest ops as a replay",
        help="extract the aten ops behind a trace's slowest kernels into a standalone replay + validate spec",
        description=(
            "From a Kineto trace recorded with record_shapes=True, take the ops that launched the selected kernels "
            "(all, one module's, a kernel regex's or one op's; the innermost aten op of each launch), group calls "
            "with identical arguments, rebuild the arguments from the recorded shapes, strides, dtypes and values, "
            "and write ops.json, repro.py (torch only: make_inputs and one function per op; `python repro.py` times "
            "them) and a validate_candidate spec per op (spec.toml: the slowest). Ops that cannot be rebuilt "
            "(custom ops, tensor lists, index tensors, values not recorded) are listed with the reason. "
            "No GPU needed."),
        request=MakeReproRequest, result=MakeReproResult,
        engine="mcp_server.repro.extract:make_repro", render="mcp_server.repro.render:render_make",
        hints=WRITES_FILES, positional=("trace_path",), aliases={"output_dir": ("-o", "--output")},
        progress=True, outputs={"output_dir": "dir"},
    ),
    Operation(
        tool="run_repro", verb="repro run", title="Time a replay against its trace",
        help="time each replayed op (warm and cold) beside the trace's kernel time (GPU)",
        description=(
            "Run a make_repro directory's repro.py: per op the replay's kernel time (profiler) and CUDA-event wall "
            "time, warm and cold (the L2 flushed before each call), beside the trace's kernel time per call, with "
            "the ratios and a replay_differs warning when neither is within 0.8-1.25x. Progress per op."),
        request=RunReproRequest, result=RunReproResult,
        engine="mcp_server.repro.run:run_repro", render="mcp_server.repro.render:render_run",
        hints=EXECUTES_CODE, positional=("output_dir",), progress=True,  # runs the directory's repro.py
    ),
]
