"""A make_repro directory as a target: recognise it and build the command that replays one of its ops.

Shared by the engines that take a repro directory (``ops.json`` + ``repro.py``, written by
``kernelscope repro``): ``repro.run`` times it, ``ncu.runner`` profiles one op of it inside that op's
NVTX range, and the loop profiles that op and validates candidates against the op's spec. Those
engines do not import one another, so the recognition lives here, in the shared base.

The replay command of op ``OP`` is ``[python, DIR/repro.py, --only, OP, --cache, cold, --iters, N,
--nvtx]``: ``repro.py`` wraps every timed call of ``OP`` (3 warm-up calls, then ``N`` with inputs
rotated past the L2) in an NVTX push/pop range named ``OP``, so ncu's filter ``--nvtx --nvtx-include
OP/`` (the trailing ``/`` names a push/pop range) profiles exactly the op's kernels and nothing the
script does around them. ``--cache cold`` keeps torch.profiler (which the warm mode uses to read kernel
times) out of an ncu run.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from mcp_server.core.errors import ReproError

#: Timed calls of the op per replay under a profiler (each also has 3 warm-up calls inside the range).
PROFILE_ITERS = 5
#: The op a repro directory names when no op is given: make_repro numbers ops slowest first.
DEFAULT_OP = "op0"
OP_ID = re.compile(r"^op[0-9]{1,6}$")
OP_NAME = re.compile(r"^[A-Za-z_][\w.]{0,80}::[\w.]{1,120}$")


@dataclass(frozen=True)
class ReproTarget:
    """One op of a repro directory as a command: ``argv`` replays it, ``nvtx_include`` selects its kernels,
    ``spec`` is its validate_candidate spec (``spec_<op>.toml``; None for an op that has none)."""

    directory: Path
    op: str
    name: str                   # the op's name in the trace, e.g. aten::mm
    argv: tuple[str, ...]
    nvtx_include: str
    spec: Optional[Path]


def load_repro_dir(path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    """The directory (resolved) and its ``ops.json``; a ReproError when it is not a make_repro directory."""
    d = Path(os.path.expanduser(str(path))).resolve()
    if not d.is_dir():
        raise ReproError("not a directory", path=d, hint="give the output_dir of a make_repro call")
    if not (d / "ops.json").is_file() or not (d / "repro.py").is_file():
        raise ReproError("not a repro directory (no ops.json and repro.py)", path=d,
                         hint="write one with `kernelscope repro TRACE -o DIR`")
    try:
        doc = json.loads((d / "ops.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        raise ReproError("ops.json is not the JSON make_repro writes", path=d / "ops.json") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("ops"), list):
        raise ReproError("ops.json holds no op list", path=d / "ops.json")
    return d, doc


def op_ids(doc: dict[str, Any]) -> list[str]:
    """The rebuilt ops' ids in ``ops.json`` (only well-formed ids: nothing else of the file is echoed)."""
    return [str(o["id"]) for o in doc.get("ops", []) if isinstance(o, dict) and OP_ID.match(str(o.get("id", "")))]


def replay_argv(directory: Path, op: str, iters: int = PROFILE_ITERS, python: Optional[str] = None) -> list[str]:
    """The command replaying ``op`` alone, each timed call inside an NVTX range named ``op``."""
    return [python or sys.executable, str(directory / "repro.py"), "--only", op, "--cache", "cold",
            "--iters", str(int(iters)), "--nvtx"]


def nvtx_range(op: str) -> str:
    """ncu's ``--nvtx-include`` expression for the op's push/pop range."""
    return f"{op}/"


def repro_target(target: Sequence[str], op: Optional[str] = None, cwd: Optional[str] = None) -> Optional[ReproTarget]:
    """The repro op a target names, or None for an ordinary command.

    A target naming a repro directory is exactly one element, that directory (relative paths are read from
    ``cwd`` when given). ``op`` (default op0, the slowest) must be one of its rebuilt ops; giving ``op``
    with any other target is an error, and so is a target that is one directory but not a repro one (a
    directory is no command)."""
    first = target[0] if len(target) == 1 else None
    path = None
    if first is not None:
        path = Path(os.path.expanduser(first))
        if not path.is_absolute() and cwd:
            path = Path(cwd) / path
    if op is None and (path is None or not path.is_dir()):
        return None
    if path is None:
        raise ReproError(f"repro_op={op!r} needs the target to be one repro directory, not a {len(target)}-word "
                         "command", hint="e.g. --repro-op op0 -- out/attn (a `kernelscope repro -o` directory)")
    d, doc = load_repro_dir(path)
    known = op_ids(doc)
    op = op or DEFAULT_OP
    if not OP_ID.match(op) or op not in known:
        held = ", ".join(known[:20]) or "none"
        raise ReproError(f"op {op!r} is not a rebuilt op of this directory (it holds {held})",
                         path=d / "ops.json", hint="`kernelscope repro` lists the rebuilt ops; ops.json holds them")
    entry = next(o for o in doc["ops"] if isinstance(o, dict) and str(o.get("id")) == op)
    spec = d / f"spec_{op}.toml"
    name = str(entry.get("name", ""))
    name = name if OP_NAME.match(name) else "?"  # only a dispatcher name (ns::op.overload) is echoed
    return ReproTarget(directory=d, op=op, name=name, argv=tuple(replay_argv(d, op)), nvtx_include=nvtx_range(op),
                       spec=spec if spec.is_file() else None)
