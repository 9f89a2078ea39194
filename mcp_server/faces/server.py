"""MCP server: one tool per declared operation, generated (docs/ARCHITECTURE.md, "Three faces").

Every ``Operation`` in ``mcp_server.faces.operations()`` becomes a tool whose
input schema is its request model's JSON schema and whose output schema is its
result model. A call is checked for unknown argument names before anything
else (the SDK alone would drop them silently), validated by the request model,
and run in a worker thread so the server keeps serving; engine progress is
forwarded to ``ctx.report_progress``; ``KernelscopeError`` becomes a tool error
with the same one-line text, anything else a tool error naming its type. Calls
run in supervised worker processes (``workers.py``): a native crash, an
out-of-memory or an overrun ends that call with a typed error, never the server.
Nothing here writes to stdout: on stdio that is the protocol channel.
"""
from __future__ import annotations

import inspect
import logging
import threading
from typing import Any, Optional

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ValidationError

from mcp_server import __version__
from mcp_server.core.envvars import enabled
from mcp_server.core.errors import KernelscopeError, one_line, redact
from mcp_server.core.operation import Operation, invalid_arguments
from mcp_server.faces.confine import check_outputs, roots_from_env, roots_from_uris
from mcp_server.faces.registry import operations, shape
from mcp_server.faces.sizing import text_content
from mcp_server.faces.workers import WorkerPool

log = logging.getLogger("kernelscope.server")

INSTRUCTIONS_HEAD = (
    "GPU kernel performance tools for LLM inference. Paths are local file paths on the server's machine. "
    "Answers are summaries by default (top_n rows per list, a summary_truncated warning saying what was cut; "
    "detail=true for everything); unknown argument names are refused. Tools:"
)


class KernelscopeServer(MCPServer):
    """``MCPServer`` that refuses unknown argument names instead of dropping them."""

    def __init__(self, ops: list[Operation], **kwargs: Any):
        super().__init__(**kwargs)
        self.ops = {op.tool: op for op in ops}

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        op = self.ops.get(name)
        if op is not None:
            unknown = sorted(set(arguments or {}) - set(op.field_names))
            if unknown:
                raise ToolError(
                    f"{name}: unknown argument(s) {', '.join(unknown)} (accepted: {', '.join(op.field_names)})")
        return await super().call_tool(name, arguments, context)


def _hints(op: Operation) -> ToolAnnotations:
    h = op.annotations
    return ToolAnnotations(title=op.title, readOnlyHint=h.read_only, destructiveHint=h.destructive,
                           idempotentHint=h.idempotent, openWorldHint=h.open_world)


def _progress_bridge(ctx: Optional[Context]):
    if ctx is None:
        return None

    def progress(done: float, total: float | None = None, message: str | None = None) -> None:
        try:
            anyio.from_thread.run(ctx.report_progress, done, total, message)
        except Exception:  # progress is best effort: never fail the work for it
            pass

    return progress


_POOL: Optional[WorkerPool] = None


def worker_pool() -> WorkerPool:
    global _POOL
    if _POOL is None:
        _POOL = WorkerPool()
    return _POOL


async def _client_roots(ctx: Optional[Context]) -> list:
    """The roots the client declares (MCP roots capability), or none."""
    try:
        if ctx is None:
            return []
        caps = ctx.session.client_capabilities
        if caps is None or getattr(caps, "roots", None) is None:
            return []
        import warnings

        with warnings.catch_warnings(), anyio.fail_after(5):
            warnings.simplefilter("ignore")
            listed = await ctx.session.list_roots()
        return roots_from_uris(str(r.uri) for r in listed.roots)
    except Exception as exc:  # a client that declares roots but cannot list them: the server's own roots apply
        log.info("client roots unavailable: %r", exc)
        return []


def tool_result(answer: BaseModel, req: Any) -> CallToolResult:
    """The answer as sent: the structured content, and beside it the text block for clients that read
    only text, sized so that a default answer stays within ``sizing.ANSWER_BUDGET`` on the wire (the
    SDK alone would add the same JSON again, indented)."""
    structured = answer.model_dump(mode="json", by_alias=True)
    text = text_content(answer, structured, getattr(req, "top_n", None), bool(getattr(req, "detail", False)))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def make_tool_function(op: Operation):
    """An async function whose signature mirrors the request model (the SDK reads it)."""

    async def tool(ctx: Context, **kwargs: Any) -> CallToolResult:
        given = {k: v for k, v in kwargs.items() if v is not None}  # null = not given: the model's default
        try:
            req = op.make_request(given)
        except ValidationError as exc:
            raise ToolError(invalid_arguments(op.tool, exc)) from None
        except KernelscopeError as exc:
            raise ToolError(str(exc)) from None
        progress = _progress_bridge(ctx) if op.progress else None
        try:
            # every call is confined to the roots: its declared outputs here, and what the engine writes or
            # reads beyond them (the loop's apply and restore, a ledger candidate's patch) there
            roots = [*await _client_roots(ctx), *roots_from_env()] if op.outputs else roots_from_env()
            if op.outputs:
                check_outputs(op, req, roots)
            if enabled("KERNELSCOPE_ISOLATION"):  # engine calls run in supervised worker processes
                stop = threading.Event()
                try:
                    data = await anyio.to_thread.run_sync(
                        lambda: worker_pool().call(op, given, progress, stop.is_set, roots=roots),
                        abandon_on_cancel=True)
                finally:
                    stop.set()  # a cancelled call stops its worker
                answer = op.result.model_validate(data)
            else:
                res = await anyio.to_thread.run_sync(lambda: op.call(req, progress, roots=roots))
                answer = shape(res, req)
            return tool_result(answer, req)
        except KernelscopeError as exc:
            raise ToolError(str(exc)) from None
        except ToolError:
            raise
        except Exception as exc:  # keep serving; report the failure without a traceback
            log.exception("internal error in %s", op.tool)
            text = redact(f"{op.tool}: internal error ({type(exc).__name__}): {exc}")
            raise ToolError(one_line(text[:500])) from None

    params = [inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)]
    for name, field in op.request.model_fields.items():
        default = inspect.Parameter.empty if field.is_required() else None
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Any))
    tool.__signature__ = inspect.Signature(params, return_annotation=op.result)  # type: ignore[attr-defined]
    tool.__annotations__ = {"ctx": Context, **{p.name: Any for p in params[1:]}, "return": op.result}
    tool.__name__ = op.tool
    return tool


def tool_input_schema(op: Operation) -> dict[str, Any]:
    """The published input schema: exactly the request model's."""
    return op.request.model_json_schema()


def build_server(ops: Optional[list[Operation]] = None) -> KernelscopeServer:
    ops = operations() if ops is None else ops
    lines = [INSTRUCTIONS_HEAD] + [f"- {op.tool}: {op.title}" for op in ops]
    server = KernelscopeServer(ops, name="kernelscope", version=__version__, instructions="\n".join(lines))
    for op in ops:
        server.add_tool(make_tool_function(op), name=op.tool, title=op.title, description=op.description,
                        annotations=_hints(op), structured_output=True)
        registered = server._tool_manager.get_tool(op.tool)
        assert registered is not None
        registered.parameters = tool_input_schema(op)
    return server


mcp = build_server()


def main() -> None:
    """Run on stdio (``python -m mcp_server`` / ``kernelscope serve``)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    mcp.run("stdio")
