"""One declaration per operation; the MCP tool and the CLI verb are generated from it.

An operation is declared once, in its engine package's ``ops.py``, as an
``Operation``: a request model (pydantic, ``Request`` subclass, declared next to
the engine), the result model, the engine function, annotations, and how the
CLI spells it. ``server.py`` turns every declared operation into an MCP tool
whose input schema *is* the request model's JSON schema; ``cli.py`` builds the
verb's argparse options from the same model. Unknown arguments are refused by
name on both faces. See docs/ARCHITECTURE.md, "Three faces".

The engine is called as ``engine(**fields)`` where ``fields`` are the request's
fields minus the face-level ones (``top_n``, ``detail``), plus ``progress=`` when
the operation reports progress. tests/test_faces.py proves for every operation
that the engine's signature takes exactly those names with the same defaults.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_server.errors import InputError
from mcp_server.vocab import ProgressFn

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

#: Request fields handled by the faces (result sizing, overwrite permission); passed to the
#: engine only when its signature takes them.
FACE_FIELDS = frozenset({"top_n", "detail", "overwrite"})


class Request(BaseModel):
    """Base of every operation's request model: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


def top_n_field(default: int = 10, rows: str = "Rows kept in each list of the answer (largest first)") -> Any:
    """The ``top_n`` field of a sized request; an operation with heavy rows lowers the default."""
    return Field(default=default, ge=1, le=10000, description=(
        f"{rows}; the rest are counted in a 'summary_truncated' warning"))


class SizedRequest(Request):
    """A request whose result is trimmed to a summary unless ``detail`` is asked for."""

    top_n: int = top_n_field()
    detail: bool = Field(default=False, description="Return every row (can be large); default a summary")


class WritesOutputs(Request):
    """A request naming output files (``Operation.outputs``): over MCP they are confined (confine.py)."""

    overwrite: bool = Field(default=False, description=(
        "Replace an existing file at an output path: over MCP any existing file needs it; on the CLI a "
        "read-only file or one that is not of the kind this tool writes"))


@dataclass(frozen=True)
class Hints:
    """MCP tool annotations (what the tool does to the world)."""

    read_only: bool = True
    destructive: bool = False
    idempotent: bool = True
    open_world: bool = False
    runs_code: bool = False  # runs user or GPU code (not published): no address-space limit (workers.py)


READ_ONLY = Hints()
#: Writes the output files a call names; over MCP an existing file is replaced only with ``overwrite=true``
#: (confine.py), so a call that does not say so only adds files: not destructive.
WRITES_FILES = Hints(read_only=False)
OPEN_WORLD_READ = Hints(open_world=True)
#: Runs a command the caller names (a profiling target, an A/B candidate), which may change anything.
EXECUTES_CODE = Hints(read_only=False, destructive=True, idempotent=False, open_world=True, runs_code=True)


@dataclass(frozen=True)
class Operation:
    """One operation, declared once; both faces are generated from it.

    ``engine`` and ``render`` are ``"module:function"`` strings, imported only when
    the operation runs, so listing tools never imports pandas, torch or triton.
    ``render(result, console, request)`` prints the CLI's human view.
    """

    tool: str                               # MCP tool name, e.g. "run_ncu"
    verb: str                               # CLI verb path, e.g. "ncu run" or "analyze"
    title: str
    description: str                        # the tool description and the verb's --help text
    request: type[Request]
    result: type[BaseModel]
    engine: str
    render: str | None = None
    hints: Hints = READ_ONLY
    help: str = ""                          # one line for the verb list (default: first sentence)
    positional: tuple[str, ...] = ()        # request fields given positionally on the CLI
    remainder: str | None = None            # a list field taking everything after "--" (target argv)
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # extra CLI flags per field
    progress: bool = False                  # the engine takes progress=(done, total, message)
    outputs: Mapping[str, str] = field(default_factory=dict)  # output path fields -> kind (xlsx, png, dir, ...)
    # CLI only: ``kernelscope <takes_over> ARGS`` runs this operation instead when ARGS name several traces
    # (a directory or glob where that verb takes a file, or more paths than it takes); see cli.route()
    takes_over: str | None = None
    # files an output field also writes beside itself: field -> glob of names in its directory, ``{stem}`` and
    # ``{suffix}`` taken from the field's path (a trace set's per-rank reports); confined like the field itself
    side_outputs: Mapping[str, str] = field(default_factory=dict)
    # CLI only: the action run when ``kernelscope GROUP ARGS`` names none of GROUP's actions
    # (``kernelscope repro TRACE`` is ``kernelscope repro make TRACE``); see cli.route()
    default_action: bool = False

    @property
    def annotations(self) -> Hints:
        """The hints published. A tool that writes files is not read-only; it is destructive only where
        its declaration says so (it runs the caller's code, or edits files in place): over MCP an existing
        output is replaced only when the call says ``overwrite=true`` (confine.py), so a call that does not
        say so destroys nothing (tests/test_confine.py holds every declared output to that)."""
        if self.outputs and self.hints.read_only:
            from dataclasses import replace

            return replace(self.hints, read_only=False)
        return self.hints

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(self.request.model_fields)

    def engine_fn(self) -> Callable[..., Any]:
        return _load(self.engine)

    def render_fn(self) -> Callable[..., None] | None:
        return _load(self.render) if self.render else None

    def make_request(self, arguments: Mapping[str, Any]) -> Request:
        """Validate raw arguments; unknown names are refused with the accepted ones listed."""
        unknown = sorted(set(arguments) - set(self.field_names))
        if unknown:
            raise UnknownArgumentError(self, unknown)
        return self.request.model_validate(dict(arguments))

    def call(self, req: Request, progress: ProgressFn | None = None, roots: Any = None) -> BaseModel:
        """Run the engine on a validated request; the full result. ``roots``: the MCP face's allowed roots
        (the call is confined to them: ``atomic.confined_to``); ``None`` on the CLI."""
        takes = engine_parameters(self)
        kwargs = {k: getattr(req, k) for k in self.field_names if k not in FACE_FIELDS or k in takes}
        if self.progress:
            kwargs["progress"] = progress
        from mcp_server.atomic import confined_to, forced_writes

        # the call may replace read-only outputs (overwrite=true); over MCP it stays inside the roots
        with forced_writes(bool(getattr(req, "overwrite", False))), confined_to(roots):
            return self.engine_fn()(**kwargs)

    def shape(self, result: BaseModel, req: Request) -> BaseModel:
        """The answer both faces give: redacted (no token reaches an answer), and a summary
        unless ``detail`` was asked for."""
        from mcp_server.errors import redact_model

        result = finite(redact_model(result))
        if isinstance(req, SizedRequest) and not req.detail:
            from mcp_server.sizing import trim

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


def invalid_arguments(name: str, exc: ValidationError, what: str = "argument") -> str:
    """The one line every face says for a request its model refuses: ``NAME: invalid argument(s): loc: msg; ...``
    (``name`` the tool, or the CLI verb with ``what="option"``)."""
    parts = [f"{'.'.join(str(x) for x in e.get('loc', ())) or 'arguments'}: {e.get('msg', 'invalid')}"
             for e in exc.errors()]
    return f"{name}: invalid {what}(s): " + "; ".join(parts)


class UnknownArgumentError(InputError):
    """An argument name the operation does not take."""

    def __init__(self, op: Operation, unknown: list[str]):
        self.unknown = unknown
        super().__init__(
            f"{op.tool}: unknown argument(s) {', '.join(unknown)}",
            hint=f"accepted: {', '.join(op.field_names)}",
        )


def _load(spec: str) -> Callable[..., Any]:
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


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
