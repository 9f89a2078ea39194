"""One declaration per operation; the MCP tool and the CLI verb are generated from it.

An operation is declared once, in its engine package's ``ops.py``, as an
``Operation``: a request model (pydantic, ``Request`` subclass, declared next to
the engine), the result model, the engine function, annotations, and how the
CLI spells it. ``server.py`` turns every declared operation into an MCP tool
whose input schema *is* the request model's JSON schema; ``cli.py`` builds the
verb's argparse options from the same model. Unknown arguments are refused by
name on both faces. See docs/ARCHITECTURE.md, "Three faces".

The engine takes the request itself (``engine(XRequest)``: ``fn(req)``, plus
``progress=`` when the operation reports progress), so the request model is the
only place a parameter is written; tests/test_faces.py proves it for every operation.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_server.core.errors import InputError
from mcp_server.core.vocab import ProgressFn

#: Request fields handled by the faces (result sizing, overwrite permission): not filled by the positional
#: arguments of an engine's keyword form.
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
        from mcp_server.core.atomic import confined_to, forced_writes

        fn = self.engine_fn()
        # the call may replace read-only outputs (overwrite=true); over MCP it stays inside the roots
        with forced_writes(bool(getattr(req, "overwrite", False))), confined_to(roots):
            return fn(req, progress=progress) if self.progress else fn(req)


Result = TypeVar("Result")
ResultCo = TypeVar("ResultCo", covariant=True)
RequestT = TypeVar("RequestT", bound="Request")


class Engine(Protocol[RequestT, ResultCo]):
    """An engine as ``engine(request_model)`` leaves it: called with its request (``fn(req)``), or from Python with
    the request's fields (``fn(path, top_n=5)``); ``request`` is the model."""

    request: type[RequestT]

    def __call__(self, *args: Any, progress: ProgressFn | None = None, **fields: Any) -> ResultCo: ...


def engine(request: type[RequestT]) -> Callable[[Callable[..., Result]], Engine[RequestT, Result]]:
    """Declare an engine: ``fn(req: RequestModel, progress=None) -> ResultModel``. The request model is the only
    place a parameter, its default, bounds and help are written (docs/ARCHITECTURE.md, "Three faces").

    The function returned also takes the request's fields, which is how Python callers, tests and other engines
    call it: ``analyze_trace("t.json.gz", reference_trace=ref)``. Positional arguments fill the request's own
    fields in order (not the face fields ``top_n``, ``detail``, ``overwrite``); ``os.PathLike`` values become
    strings; the request is validated, and a refused one raises ``InputError`` with the faces' one-line text."""

    positional = [n for n in request.model_fields if n not in FACE_FIELDS]

    def wrap(fn: Callable[..., Result]) -> Engine[RequestT, Result]:
        takes_progress = "progress" in inspect.signature(fn).parameters

        @functools.wraps(fn)
        def call(*args: Any, progress: ProgressFn | None = None, **fields: Any) -> Result:
            if len(args) == 1 and not fields and isinstance(args[0], request):
                req = args[0]
            else:
                if len(args) > len(positional):
                    raise TypeError(f"{fn.__name__} takes at most {len(positional)} positional arguments")
                given = {**dict(zip(positional, args)), **fields}
                try:
                    req = request.model_validate({k: _plain(v) for k, v in given.items()})
                except ValidationError as exc:
                    raise InputError(invalid_arguments(fn.__name__, exc)) from None
            return fn(req, progress=progress) if takes_progress else fn(req)

        call.request = request  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap


def _plain(v: Any) -> Any:
    """A path object as the string a request field holds (lists and tuples of them too)."""
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if isinstance(v, (list, tuple)) and any(isinstance(x, os.PathLike) for x in v):
        return [os.fspath(x) if isinstance(x, os.PathLike) else x for x in v]
    return v


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
