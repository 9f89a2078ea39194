"""The ``kernelscope`` command, generated from the declared operations (docs/ARCHITECTURE.md, "Three faces").

Every ``Operation`` becomes a verb (``verb="timeline analyze"`` nests); its
options come from the request model's fields: ``--field-name`` for each (plus the
declared aliases), the declared positional fields positionally, the
``remainder`` field from everything after ``--``. Only the options given on the
command line reach the request model, so defaults are the model's on both
faces. ``--json`` prints exactly the MCP tool's answer; without it the verb's
renderer prints a rich view of the full result. Errors print one line to stderr
and exit with status 2; a completed run with a negative verdict exits 3 (the
result's ``exit_code()``; ``vocab.ExitCode``, README "Exit status"); a closed
pipe ends quietly with 0. Progress goes to stderr, so stdout stays clean.
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import sys
import types
import typing
from typing import Any, Iterator, Literal, Union

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from rich.console import Console

from mcp_server import __version__
from mcp_server.core.argbounds import plain_type
from mcp_server.core.errors import InputError, KernelscopeError
from mcp_server.core.operation import Operation, invalid_arguments
from mcp_server.core.textable import PipeConsole, quiet_stdout
from mcp_server.core.vocab import ExitCode, ProgressFn
from mcp_server.faces.registry import operations, shape

out = PipeConsole(highlight=False, soft_wrap=False)  # a closed pipe ends the run quietly with 0 (main)
err = Console(stderr=True, highlight=False)


# --------------------------------------------------------------------------- options from request fields


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
        scalars = [a for a in args if typing.get_origin(a) is None]
        if scalars and len(scalars) < len(args):  # e.g. list[str] | str: the CLI takes the string form
            return scalars[0]
        return Union[tuple(args)]  # noqa: UP007
    return tp


def _length(field: FieldInfo) -> int | None:
    lo = hi = None
    for m in field.metadata:
        lo = getattr(m, "min_length", lo)
        hi = getattr(m, "max_length", hi)
    return hi if lo is not None and lo == hi else None


def _json_value(text: str) -> Any:
    from mcp_server.core.limits import loads_json

    try:
        return loads_json(text, "JSON value")  # nesting bounded before the parser recurses
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc.msg}") from None
    except KernelscopeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def option_spec(name: str, field: FieldInfo) -> dict[str, Any]:
    """``add_argument`` keywords for one request field (also used by tests/test_faces.py)."""
    tp = _unwrap_optional(plain_type(field.annotation))
    help_text = field.description or ""
    if not field.is_required() and field.default is not None and not isinstance(field.default, bool):
        help_text += f" (default {field.default})"
    kw: dict[str, Any] = {"help": help_text.replace("%", "%%")}
    origin = typing.get_origin(tp)
    if tp is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif origin is Literal:
        values = typing.get_args(tp)
        kw.update(choices=list(values), type=type(values[0]))
    elif origin is list and typing.get_args(tp) and typing.get_args(tp)[0] in (str, int, float):
        kw.update(nargs=_length(field) or "+", type=typing.get_args(tp)[0])
    elif tp in (str, int, float):
        kw["type"] = tp
    else:  # dicts, lists of records, unions: JSON text
        kw.update(type=_json_value, metavar="JSON")
    return kw


def add_operation(sub: argparse._SubParsersAction, op: Operation, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=op.help or op.title, description=op.description,
                       argument_default=argparse.SUPPRESS)
    fields = op.request.model_fields
    for fname in op.positional:
        kw = option_spec(fname, fields[fname])
        kw.pop("action", None)
        if not fields[fname].is_required():  # an optional positional (e.g. validate's SPEC_PATH)
            kw["nargs"] = "*" if kw.get("nargs") == "+" else "?"
        p.add_argument(fname, metavar=fname.upper(), **kw)
    for fname, field in fields.items():
        if fname in op.positional or fname == op.remainder:
            continue
        flags = [f"--{fname.replace('_', '-')}", *op.aliases.get(fname, ())]
        p.add_argument(*flags, dest=fname, **option_spec(fname, field))
    if op.remainder:
        p.epilog = f"Everything after '--' is {op.remainder.upper()} (an argument list, never a shell string)."
    p.add_argument("--json", action="store_true", default=False, dest="_json",
                   help="print the tool-identical JSON answer (a summary unless --detail)")
    p.add_argument("--width", type=int, default=None, dest="_width", metavar="COLUMNS",
                   help="text view only: render at this many columns (default: the terminal's, 80 when piped)")
    p.add_argument("--max-memory", default=None, dest="_max_memory", metavar="SIZE",
                   help="address-space limit of this run, e.g. 8G (default $KERNELSCOPE_WORKER_MEMORY or 8G, "
                        "the MCP workers' limit; not applied to verbs that run GPU code); 0 for none")
    p.add_argument("--time-limit", type=float, default=None, dest="_time_limit", metavar="SECONDS",
                   help="stop this run after so many seconds (default $KERNELSCOPE_CALL_TIMEOUT or 900, as over MCP)")
    p.set_defaults(_op=op)
    return p


def cli_flags(op: Operation) -> list[str]:
    """The primary spelling of every option of ``op``'s verb: ``--field-name`` per non-positional field."""
    return [f"--{f.replace('_', '-')}" for f in op.field_names if f not in op.positional and f != op.remainder]


def build_parser(ops: list[Operation] | None = None) -> argparse.ArgumentParser:
    ops = operations() if ops is None else ops
    p = argparse.ArgumentParser(prog="kernelscope", description=(
        "GPU kernel performance tooling for LLM inference (MCP server, CLI, skills)."))
    p.add_argument("--version", action="version", version=f"kernelscope {__version__}")
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    s = sub.add_parser("serve", help="run the MCP server on stdio (same as python -m mcp_server)")
    s.set_defaults(_op=None)
    groups: dict[str, argparse._SubParsersAction] = {}
    for op in ops:
        words = op.verb.split()
        parent = sub
        for i, word in enumerate(words[:-1]):
            key = " ".join(words[: i + 1])
            if key not in groups:
                g = parent.add_parser(word, help=f"{word} actions: " + ", ".join(dict.fromkeys(  # each once
                    o.verb.split()[i + 1] for o in ops if o.verb.split()[: i + 1] == words[: i + 1])))
                groups[key] = g.add_subparsers(dest=f"{word}_action", metavar="ACTION")
                groups[key].required = True
            parent = groups[key]
        add_operation(parent, op, words[-1])
    return p


# --------------------------------------------------------------------------- verbs that take over


class _Probe(argparse.ArgumentParser):
    """A parser that reports instead of printing and exiting (used to look at arguments only)."""

    def error(self, message: str) -> typing.NoReturn:
        raise ValueError(message)


def _names_several(value: Any) -> bool:
    """A directory, or a glob pattern that is not itself a file: the argument names several traces."""
    import os
    from pathlib import Path

    if not isinstance(value, str):
        return False
    p = Path(os.path.expanduser(value))
    return p.is_dir() or (any(ch in value for ch in "*?[") and not p.exists())


def route(argv: list[str], ops: list[Operation]) -> list[str]:
    """``kernelscope analyze DIR`` -> ``kernelscope traceset analyze DIR`` (``Operation.takes_over``).

    An operation taking over a verb gets that verb's command line when a positional argument of the
    verb names several traces (a directory or glob) or more existing files are given than it takes."""
    import os

    if not argv:
        return argv
    default = next((o for o in ops if o.default_action and o.verb.split()[0] == argv[0]), None)
    if default is not None:
        actions = {o.verb.split()[1] for o in ops if " " in o.verb and o.verb.split()[0] == argv[0]}
        if len(argv) > 1 and argv[1] not in actions and argv[1] not in ("-h", "--help"):
            return default.verb.split() + argv[1:]
    if any(a in ("-h", "--help") for a in argv[1:]):
        return argv
    for op in ops:
        base = next((o for o in ops if o.verb == op.takes_over), None) if op.takes_over == argv[0] else None
        if base is None:
            continue
        probe = _Probe(add_help=False)
        add_operation(probe.add_subparsers(), base, argv[0])
        try:
            ns, extra = probe.parse_known_args(argv)
        except (ValueError, SystemExit):
            continue
        values = [getattr(ns, f, None) for f in base.positional]
        # a path that exists but is no regular file (a FIFO) goes along too: the set's reader names what it is
        more_files = [e for e in extra if not e.startswith("-") and os.path.exists(os.path.expanduser(e))]
        if any(_names_several(v) for v in values) or more_files:
            return op.verb.split() + argv[1:]
    return argv


# --------------------------------------------------------------------------- running


@contextlib.contextmanager
def progress_bar(description: str) -> Iterator[ProgressFn]:
    """A rich progress bar on stderr; yields the engine's ``progress`` callback."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    if not err.is_terminal:
        def silent(done: float, total: float | None = None, message: str | None = None) -> None:
            return None

        yield silent
        return
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[msg]}"),
        TimeElapsedColumn(), console=err, transient=True,
    ) as prog:
        task = prog.add_task(description, total=None, msg="")

        def cb(done: float, total: float | None = None, message: str | None = None) -> None:
            prog.update(task, completed=done, total=total, msg=message or "")

        yield cb


def print_error(message: str, style: str | None = "bold red") -> None:
    """``error: MESSAGE`` on one line of stderr. The message is plain text: no rich markup (``[bold]``), no emoji
    codes (``:x:``), control characters escaped (``errors.one_line``), secrets redacted."""
    from rich.text import Text

    from mcp_server.core.errors import one_line, redact

    line = Text.assemble(("error:", style or ""), " ", one_line(redact(message)))
    err.print(line, markup=False, emoji=False, highlight=False, soft_wrap=True)


def emit_json(model: Any) -> None:
    """Print the tool-identical JSON of a result model."""
    # through model_dump_json: a non-finite number prints as null, never as Infinity (invalid JSON)
    data = json.loads(model.model_dump_json()) if isinstance(model, BaseModel) else model
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


def _split_remainder(argv: list[str]) -> tuple[list[str], list[str] | None]:
    if "--" not in argv:
        return argv, None
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def run_operation(op: Operation, given: dict[str, Any], as_json: bool, width: int | None = None) -> int:
    try:
        req = op.make_request(given)
    except ValidationError as exc:
        raise InputError(invalid_arguments(op.verb, exc, "option")) from None
    if op.outputs:  # the output rule of both faces, before any work (confine.py; no roots on the CLI)
        from mcp_server.faces.confine import check_outputs

        check_outputs(op, req, None)
    with progress_bar(op.verb) as cb:
        res = op.call(req, cb if op.progress else None)
    status = exit_status(res)
    if as_json:
        emit_json(shape(res, req))
        return status
    render = op.render_fn()
    if width:
        out.width = max(40, width)
    from mcp_server.core.errors import redact_model

    res = redact_model(res)  # the text view shows what --json shows: no token a candidate printed
    if render is None:
        emit_json(shape(res, req))
    elif "request" in inspect.signature(render).parameters:
        render(res, out, request=req)
    else:
        render(res, out)
    return status


def exit_status(res: Any) -> int:
    """0, or the status a result with a verdict asks for (``exit_code()``: 3 for a negative verdict);
    README, "Exit status"."""
    fn = getattr(res, "exit_code", None)
    return int(fn()) if callable(fn) else int(ExitCode.ok)


def _unknown_options(op: Operation, extra: list[str], ops: list[Operation], args: argparse.Namespace) -> str:
    """The error for options the verb does not take; when they belong to the operation that takes this
    verb over (``analyze DIR --executor ray``), say why it did not: the path is missing or names one trace."""
    import os

    flags = [e.split("=", 1)[0] for e in extra if e.startswith("-")]
    for taker in ops:
        if taker.takes_over != op.verb or not flags:
            continue
        theirs = set(cli_flags(taker)) | {a for names in taker.aliases.values() for a in names}
        if not set(flags) <= theirs:
            continue
        for fname in op.positional:
            value = getattr(args, fname, None)
            if isinstance(value, str) and not os.path.exists(os.path.expanduser(value)):
                return (f"{op.verb}: {value}: no such file or directory ({' '.join(flags)} "
                        f"{'is an option' if len(flags) == 1 else 'are options'} of `kernelscope {op.verb}` "
                        f"over a trace set: a directory, a glob or several traces)")
        verb = "applies" if len(flags) == 1 else "apply"
        return (f"{op.verb}: {' '.join(flags)} {verb} only to a trace set (`kernelscope {op.verb}` over a directory, "
                f"a glob or several traces); one trace takes: {', '.join(cli_flags(op))}")
    accepted = ", ".join(cli_flags(op))
    return f"{op.verb}: unknown option(s) {' '.join(extra)} (accepted: {accepted})"


def apply_limits(op: Operation, args: argparse.Namespace) -> None:
    """The MCP workers' limits for a console run (``entry``): memory and time (docs/ARCHITECTURE.md, "Isolation")."""
    import signal

    from mcp_server.faces.workers import WorkerLimitError, apply_memory_limit, executes_code, limits_for, memory_limit

    op.engine_fn()  # import the engine and renderer first: native libraries reserve their arenas unlimited
    op.render_fn()
    lim = limits_for(op, {})
    text = args._max_memory
    memory = lim.memory_bytes if text is None else memory_limit(text)
    if not executes_code(op):
        apply_memory_limit(memory)
    seconds = args._time_limit if args._time_limit is not None else lim.timeout_s  # KERNELSCOPE_CALL_TIMEOUT
    if seconds and seconds > 0 and hasattr(signal, "SIGALRM"):
        def over(_sig: int, _frame: Any) -> None:
            raise WorkerLimitError(f"{op.verb}: over its time limit of {seconds:.0f} s; stopped",
                                   hint="pass --time-limit SECONDS for a longer run")

        signal.signal(signal.SIGALRM, over)
        signal.setitimer(signal.ITIMER_REAL, seconds)


def main(argv: list[str] | None = None, limits: bool = False) -> int:
    """Run one verb. ``limits``: apply the memory and time limits (the console script does)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ops = operations()
    argv = route(argv, ops)
    head, rest = _split_remainder(argv)
    parser = build_parser(ops)
    args, extra = parser.parse_known_args(head if rest is not None else argv)
    op: Operation | None = args._op
    if extra:
        text = (f"{args.verb}: unknown option(s) {' '.join(extra)} (accepted: none)" if op is None
                else _unknown_options(op, extra, ops, args))
        print_error(text, style=None)
        return ExitCode.bad_input
    try:
        if op is None:
            from mcp_server.faces.front import serve_stdio

            serve_stdio()
            return 0
        given = {k: v for k, v in vars(args).items() if k in op.request.model_fields}
        if rest is not None:
            if op.remainder is None:  # a plain '--' separator: let argparse treat it as usual
                args, _ = parser.parse_known_args(argv)
                given = {k: v for k, v in vars(args).items() if k in op.request.model_fields}
            else:
                given[op.remainder] = rest
        if limits:
            apply_limits(op, args)
        return run_operation(op, given, args._json, args._width)
    except MemoryError:  # plain write: printing through rich could need memory (and imports) itself
        sys.stderr.write(f"error: {args.verb}: out of memory under this run's limit (raise it with --max-memory, "
                         "e.g. --max-memory 32G, or --max-memory 0 for none)\n")
        return ExitCode.bad_input
    except KernelscopeError as exc:
        print_error(str(exc))
        return ExitCode.bad_input
    except KeyboardInterrupt:
        err.print("interrupted")
        return ExitCode.interrupted
    except BrokenPipeError:  # the reader closed the pipe (`| head`): what it wanted was printed
        quiet_stdout()
        return ExitCode.ok


def entry() -> None:  # pragma: no cover - console script shim
    sys.exit(main(limits=True))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(limits=True))
