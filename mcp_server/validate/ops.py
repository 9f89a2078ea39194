"""Declaration of the validate operation (the faces are generated from it)."""
from __future__ import annotations

from mcp_server.core.operation import EXECUTES_CODE, Operation
from mcp_server.validate.models import ValidationResult
from mcp_server.validate.requests import ValidateRequest

OPERATIONS = [
    Operation(
        tool="validate_candidate",
        verb="validate",
        title="Validate a candidate kernel (correct and faster, with confidence)",
        description=(
            "Run baseline and candidate in a fresh, time-limited subprocess: check the candidate on fresh "
            "random inputs for every shape and several seeds against a higher-precision reference "
            "(per-element tolerance, NaN/Inf, shape/dtype/device/layout, poisoned freed memory, inputs "
            "unchanged, no caching by pointer, no timer patching, side-stream work finished), then time both "
            "interleaved in randomised order until the bootstrap interval of the speedup is narrow or the "
            "budget ends. Accepted only when correct and the interval's lower bound clears 1 + min_gain. "
            "EXECUTES the given Python code."),
        help="Accept a candidate kernel only when it is correct and faster with confidence.",
        request=ValidateRequest,
        result=ValidationResult,
        engine="mcp_server.validate.engine:validate_candidate",
        render="mcp_server.validate.render:render",
        hints=EXECUTES_CODE,
        positional=("spec_path",),
        progress=True,
    ),
]
