"""docs/REFERENCE.md, generated from the declared operations (docs/ARCHITECTURE.md, "Three faces").

One page lists every MCP tool and CLI verb with its parameters as the request
model declares them, so the reference cannot drift from the code:
``python -m mcp_server.faces.reference > docs/REFERENCE.md`` rewrites it and
tests/test_faces.py fails when it is stale.
"""
from __future__ import annotations

import sys
import typing
from typing import Any

from pydantic.fields import FieldInfo

from mcp_server.core.argbounds import plain_type
from mcp_server.core.envvars import VARS, EnvVar
from mcp_server.core.limits import human
from mcp_server.core.operation import Operation
from mcp_server.core.vocab import WarningCode
from mcp_server.faces.registry import operations


def _type_name(tp: Any) -> str:
    tp = plain_type(tp)  # the bounded types (argbounds) read as their plain type
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " \\| ".join(repr(v) for v in typing.get_args(tp))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " \\| ".join(_type_name(a) for a in args)
    if origin is not None:
        inner = ", ".join(_type_name(a) for a in typing.get_args(tp))
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    return getattr(tp, "__name__", str(tp))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    return "`" + repr(field.default) + "`"


def _cli(op: Operation, name: str) -> str:
    if name in op.positional:
        return name.upper()
    if name == op.remainder:
        return f"`-- {name.upper()}...`"
    flags = [f"--{name.replace('_', '-')}", *op.aliases.get(name, ())]
    return ", ".join(f"`{f}`" for f in flags)


def _hints(op: Operation) -> str:
    h = op.annotations  # as published over MCP
    words = ["read-only" if h.read_only else "writes or runs"]
    if h.destructive:
        words.append("destructive")
    words.append("idempotent" if h.idempotent else "not idempotent")
    if h.open_world:
        words.append("open world")
    return ", ".join(words)


def _warning_meanings() -> dict[str, str]:
    """code -> the comment beside its member in vocab.py (the one place each is explained)."""
    import inspect
    import re

    import mcp_server.core.vocab as vocab

    pat = re.compile(r'^\s+\w+\s*=\s*"([a-z0-9_]+)"\s*#\s*(.+)$')
    found = {}
    for line in inspect.getsource(vocab).splitlines():
        m = pat.match(line)
        if m:
            found[m.group(1)] = m.group(2).strip().replace("|", "\\|")
    return found


def _env_default(v: EnvVar) -> str:
    if v.value is None:
        return v.default
    if v.kind in ("bytes", "size"):
        shown = human(v.value)
    else:
        shown = f"{v.value:g} s" if v.kind == "seconds" else f"{v.value:,}"
    return f"{shown} {v.default}".strip()


def _env_table() -> list[str]:
    out = ["", "## Environment variables", "",
           "Every `KERNELSCOPE_*` variable the package reads (`mcp_server/core/envvars.py`); read at each use.", "",
           "| variable | read as | default | meaning |", "|---|---|---|---|"]
    for v in VARS:
        meaning = ("(internal) " if v.internal else "") + v.meaning
        out.append(f"| `{v.name}` | {v.kind} | {_env_default(v)} | {meaning.replace('|', chr(92) + '|')} |")
    return out


def render_reference() -> str:
    ops = operations()
    out = [
        "# kernelscope reference: every MCP tool and CLI verb",
        "",
        "Generated from the request models by `python -m mcp_server.faces.reference > docs/REFERENCE.md`;",
        "do not edit by hand (tests/test_faces.py fails when it is stale). Each tool's `--json` on the",
        "CLI prints exactly the tool's answer. Tools with `top_n`/`detail` answer with a summary",
        "unless `detail` is true.",
        "",
        "| MCP tool | CLI verb | what it does |",
        "|---|---|---|",
    ]
    for op in ops:
        out.append(f"| [`{op.tool}`](#{op.tool}) | `kernelscope {op.verb}` | {op.title} |")
    for op in ops:
        pos = " ".join(n.upper() for n in op.positional)
        rem = f" -- {op.remainder.upper()}..." if op.remainder else ""
        out += ["", f"## {op.tool}", "",
                f"`kernelscope {op.verb} {pos} [options]{rem} [--json]`".replace("  ", " "), "",
                op.description, "", f"Annotations: {_hints(op)}.", "",
                "| parameter | type | default | CLI | description |", "|---|---|---|---|---|"]
        for name, field in op.request.model_fields.items():
            desc = (field.description or "").replace("|", "\\|").replace("\n", " ")
            out.append(f"| `{name}` | {_type_name(field.annotation)} | {_default(field)} | {_cli(op, name)} | {desc} |")
    out += ["", "## Warning codes", "",
            "Every `warnings[].code` a result can carry (`mcp_server/core/vocab.py: WarningCode`):", ""]
    meaning = _warning_meanings()
    out += ["| code | meaning |", "|---|---|"]
    out += [f"| `{code.value}` | {meaning.get(code.value, '')} |" for code in WarningCode]
    out += _env_table()
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # pragma: no cover
    sys.stdout.write(render_reference())
