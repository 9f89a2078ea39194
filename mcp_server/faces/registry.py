"""The operation registry: every operation the engine packages declare (``OPERATION_MODULES``), and the
shape of the answer both faces give (docs/ARCHITECTURE.md, "Three faces", "Result size")."""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from mcp_server.compare import ops as compare_ops
from mcp_server.core.operation import Operation, Request, SizedRequest
from mcp_server.kernels import ops as kernels_ops
from mcp_server.ledger import ops as ledger_ops
from mcp_server.loop import ops as loop_ops
from mcp_server.ncu import ops as ncu_ops
from mcp_server.refs import ops as refs_ops
from mcp_server.repro import ops as repro_ops
from mcp_server.timeline import ops as timeline_ops
from mcp_server.traces import ops as traces_ops
from mcp_server.tracesets import ops as tracesets_ops
from mcp_server.validate import ops as validate_ops

#: The engine packages' ``ops`` modules, in the order tools and verbs are listed. An ``ops`` module declares
#: operations and imports only their request and result models: engines load when an operation runs.
OPERATION_MODULES = (traces_ops, tracesets_ops, compare_ops, repro_ops, refs_ops, timeline_ops, ncu_ops,
                     validate_ops, kernels_ops, ledger_ops, loop_ops)


def shape(result: BaseModel, req: Request) -> BaseModel:
    """The answer both faces give: redacted (no token reaches an answer), and a summary
    unless ``detail`` was asked for."""
    from mcp_server.core.errors import redact_model

    result = finite(redact_model(result))
    if isinstance(req, SizedRequest) and not req.detail:
        from mcp_server.faces.sizing import trim

        return trim(result, req.top_n)
    return result


def finite(result: BaseModel) -> BaseModel:
    """Non-finite numbers (inf, nan) become null: JSON has no Infinity, and a client rejects it."""
    import math

    def has_bad(v: Any) -> bool:
        if isinstance(v, float):
            return not math.isfinite(v)
        if isinstance(v, dict):
            return any(has_bad(x) for x in v.values())
        if isinstance(v, list):
            return any(has_bad(x) for x in v)
        return False

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    data = result.model_dump(mode="python", by_alias=True)
    if not has_bad(data):
        return result
    try:
        return type(result).model_validate(clean(data))
    except Exception:  # a required float that is not finite: JSON faces print it as null
        return result


def operations() -> list[Operation]:
    """Every declared operation, in listing order."""
    ops = [op for mod in OPERATION_MODULES for op in mod.OPERATIONS]
    names = [o.tool for o in ops]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise RuntimeError(f"operations declared twice: {sorted(dup)}")
    return ops
