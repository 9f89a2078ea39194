"""The CPU ops of a trace with every recorded argument, and which op launched each GPU activity.

The analyzer keeps only the columns attribution needs (``loader.py``); a replay needs each op's whole
record (``Input Dims``, ``Input type``, ``Input Strides``, ``Concrete Inputs``). This reads them in one
guarded pass (same size and ratio limits as the loader) and links each launch (by correlation id) to
the innermost op enclosing it on its thread.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import msgspec

from mcp_server.core.errors import TraceFormatError
from mcp_server.traces._reader import GuardedReader, check_path, decompress_errors

_OP_CATS = frozenset({"cpu_op", "operator"})  # current and PyTorch 1.8/1.9 spellings (lower-cased)
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime"})


class _Ev(msgspec.Struct, gc=False):
    cat: Optional[str] = None
    name: Optional[str] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Optional[float] = None
    dur: Optional[float] = None
    args: msgspec.Raw = msgspec.field(default=None)  # type: ignore[assignment]


class _Top(msgspec.Struct):
    traceEvents: Optional[list[_Ev]] = None


class _Corr(msgspec.Struct):
    correlation: Union[int, str, None] = None


_dec = msgspec.json.Decoder(Union[_Top, list[_Ev]])
_corr_dec = msgspec.json.Decoder(_Corr)
_args_dec = msgspec.json.Decoder(dict[str, Any])


@dataclass
class CpuOp:
    index: int
    name: str
    thread: tuple[Any, Any]
    ts: float
    end: float
    args: dict[str, Any]


@dataclass
class LaunchOps:
    ops: list[CpuOp]
    by_correlation: dict[int, int]  # launch correlation id -> index of the innermost enclosing op (-1: none)


def _corr(raw: msgspec.Raw) -> Optional[int]:
    if not raw:
        return None
    try:
        c = _corr_dec.decode(raw).correlation
    except msgspec.DecodeError:
        return None
    if isinstance(c, str):
        try:
            return int(c, 0)
        except ValueError:
            return None
    return c


def read_cpu_ops(path: str | os.PathLike) -> LaunchOps:
    """Every CPU op of the trace with its arguments, nested per thread, and the launch -> op links."""
    p: Path = check_path(path)
    try:
        with GuardedReader(p) as r:
            top = _dec.decode(r.read_all())
    except msgspec.DecodeError as exc:
        raise TraceFormatError(f"not a readable Kineto JSON trace ({exc})", path=p) from None
    except RecursionError:
        raise TraceFormatError("JSON nested too deeply", path=p) from None
    except (EOFError, OSError, *decompress_errors()) as exc:
        raise TraceFormatError(f"cannot read the trace ({type(exc).__name__})", path=p) from None
    events = top if isinstance(top, list) else (top.traceEvents or [])
    ops: list[CpuOp] = []
    launches: list[tuple[tuple[Any, Any], float, int]] = []
    for e in events:
        cat = (e.cat or "").lower()
        if e.ts is None:
            continue
        if cat in _OP_CATS and e.name:
            try:
                args = _args_dec.decode(e.args) if e.args else {}
            except msgspec.DecodeError:
                args = {}
            ops.append(CpuOp(len(ops), e.name, (e.pid, e.tid), float(e.ts), float(e.ts) + float(e.dur or 0.0), args))
        elif cat in _LAUNCH_CATS:
            c = _corr(e.args)
            if c is not None:
                launches.append(((e.pid, e.tid), float(e.ts), c))
    by_thread: dict[tuple[Any, Any], list[CpuOp]] = {}
    for op in ops:
        by_thread.setdefault(op.thread, []).append(op)
    for lst in by_thread.values():  # nesting: parents before children (longer first at equal start)
        lst.sort(key=lambda o: (o.ts, -o.end))
    by_corr: dict[int, int] = {}
    launches.sort(key=lambda x: x[1])
    per_thread_l: dict[tuple[Any, Any], list[tuple[float, int]]] = {}
    for th, ts, c in launches:
        per_thread_l.setdefault(th, []).append((ts, c))
    for th, ls in per_thread_l.items():
        lst = by_thread.get(th, [])
        i = 0
        stack: list[CpuOp] = []
        for ts, c in ls:
            while i < len(lst) and lst[i].ts <= ts:
                while stack and stack[-1].end < lst[i].ts:
                    stack.pop()
                stack.append(lst[i])
                i += 1
            while stack and stack[-1].end < ts:
                stack.pop()
            by_corr[c] = stack[-1].index if stack else -1
    return LaunchOps(ops=ops, by_correlation=by_corr)
