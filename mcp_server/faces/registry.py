"""The operation registry: every operation the engine packages declare (``OPERATION_MODULES``), and the
shape of the answer both faces give (docs/ARCHITECTURE.md, "Three faces", "Result size")."""
from __future__ import annotations

import importlib
import inspect
from typing import Any

from pydantic import BaseModel

from mcp_server.core.operation import Operation, Request, SizedRequest

#: Packages whose ``ops.py`` declares operations, in the order tools and verbs are listed.
OPERATION_MODULES: tuple[str, ...] = (
    "mcp_server.traces.ops",
    "mcp_server.tracesets.ops",
    "mcp_server.compare.ops",
    "mcp_server.repro.ops",
    "mcp_server.refs.ops",
    "mcp_server.timeline.ops",
    "mcp_server.ncu.ops",
    "mcp_server.validate.ops",
    "mcp_server.kernels.ops",
    "mcp_server.ledger.ops",
    "mcp_server.loop.ops",
)


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
    """Every declared operation, in listing order (packages without ``ops.py`` yet are skipped)."""
    ops: list[Operation] = []
    for name in OPERATION_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and name.startswith(exc.name):
                continue  # the package (or its ops module) does not exist in this build
            raise
        ops.extend(mod.OPERATIONS)
    names = [o.tool for o in ops]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise RuntimeError(f"operations declared twice: {sorted(dup)}")
    return ops


def engine_parameters(op: Operation) -> dict[str, inspect.Parameter]:
    """The engine's parameters (for the signature test)."""
    return dict(inspect.signature(op.engine_fn()).parameters)
