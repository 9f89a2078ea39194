"""The loaded trace as numpy columns (``RawTrace``) and how the parts a collector gathered become them.

A part is one collector's state (``Collector.state``): per category a list of chunk tuples of columns,
with names, dims and threads as ids into that collector's own intern tables. ``merge`` concatenates the
parts (in text order) and renumbers every id canonically, so the result does not depend on where the
text was cut into chunks or parts:

* names by first appearance among python_function spans, then cpu ops, then kernels, then launches;
* dims by first appearance among cpu ops;
* threads per category (python_function, cpu_op, launches) in (pid, tid) order, or by first appearance
  where a category's ids are not all integers.

For one chunk this is the order the chunk decoder assigns, so a one-part merge keeps the ids as they are.
Chunk tuples (``Collector.add``): ``p`` (ts, end, thread, name), ``c`` (ts, end, thread, name, dims),
``k`` (name, kind, ts, dur, device, stream, correlations, comm), ``l`` (correlations, ts, thread, name,
kernel name).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

#: the collective metadata kept per communication kernel, in this order (``RawTrace.k_comm``)
COMM_FIELDS = ("Collective name", "Process Group Name", "Process Group Ranks", "Group size", "In msg nelems",
               "Out msg nelems", "Seq", "Src Rank", "Dst Rank")


@dataclass
class RawTrace:
    """The columns of one trace the analyzer needs (all numpy, names interned)."""

    path: str
    names: list[str]
    dims: list[str]  # interned ``Input Dims`` texts (c_dims indexes this)
    metadata: dict[str, Any]
    threads: list[tuple[Any, Any]]
    # GPU activities
    k_name: np.ndarray
    k_kind: np.ndarray
    k_ts: np.ndarray
    k_dur: np.ndarray
    k_device: np.ndarray
    k_stream: np.ndarray
    k_corr: np.ndarray
    # launches (runtime/driver calls with a correlation id)
    l_corr: np.ndarray
    l_ts: np.ndarray
    l_thread: np.ndarray
    l_name: np.ndarray
    l_kernel: np.ndarray  # name id of the kernel a launch names (HIP ``args.kernel``), 0 when none
    # python_function spans
    p_ts: np.ndarray
    p_end: np.ndarray
    p_thread: np.ndarray
    p_name: np.ndarray
    # cpu_op spans
    c_ts: np.ndarray
    c_end: np.ndarray
    c_thread: np.ndarray
    c_name: np.ndarray
    c_dims: np.ndarray
    event_count: int = 0
    skipped: int = 0
    skipped_gpu: int = 0  # of ``skipped``: GPU activities (kernel/memcpy/memset events)
    profiler_ranges: int = 0  # ``cuda_profiler_range`` events (CUPTI range profiler: counters, no timeline)
    skipped_examples: list[str] = field(default_factory=list)
    #: GPU activity index -> COMM_FIELDS values, for the kernels that carry a ``Collective name``
    k_comm: dict[int, tuple] = field(default_factory=dict)


Part = dict[str, Any]  # one collector's state (``Collector.state``)

_N, _D, _T = 0, 1, 2  # which id map of a part (names, dims, threads) a column's ids go through


def _col(st: Part, key: str, i: int) -> Optional[np.ndarray]:
    arrs = [t[i] for t in st[key]]
    return np.concatenate(arrs) if arrs else None


def _firsts(c: Optional[np.ndarray]) -> list[int]:
    """Distinct values of ``c`` in order of first appearance."""
    if c is None or not len(c):
        return []
    u, first = np.unique(c, return_index=True)
    return u[np.argsort(first, kind="stable")].tolist()


def _first_seen(parts: list[Part], table: str, cols: tuple[tuple[str, int], ...], empty: Any) -> dict[Any, int]:
    """Canonical ids of a part's intern ``table`` (names or dims): ``empty`` 0, then by first appearance in the
    columns ``cols`` ((category, column index), in that order) over the parts in text order."""
    out: dict[Any, int] = {empty: 0}
    for key, i in cols:
        for st in parts:
            loc = st[table]
            for j in _firsts(_col(st, key, i)):
                out.setdefault(loc[j], len(out))
    return out


def _thread_table(parts: list[Part]) -> dict[Any, int]:
    gth: dict[Any, int] = {}
    for key in ("p", "c", "l"):
        tcols = [(st, _col(st, key, 2)) for st in parts]
        if any(key in st["thread_fallback"] for st in parts):
            for st, c in tcols:
                loc = st["threads"]
                for j in _firsts(c):
                    gth.setdefault(loc[j], len(gth))
        else:
            keys: set[Any] = set()
            for st, c in tcols:
                if c is not None and len(c):
                    loc = st["threads"]
                    keys.update(loc[j] for j in np.unique(c).tolist())
            for t in sorted(keys):
                gth.setdefault(t, len(gth))
    return gth


def _id_maps(parts: list[Part], gname: dict, gdims: dict, gth: dict) -> tuple[list[tuple], bool]:
    """Per part, its (names, dims, threads) ids -> global ids; and whether that is the identity (one part
    whose ids are already canonical: the columns are used as they are)."""
    i32 = np.int32
    maps = []
    for st in parts:
        nm = np.array([gname.setdefault(s, len(gname)) for s in st["names"]], dtype=i32)
        dm = np.array([gdims.setdefault(s, len(gdims)) for s in st["dims"]], dtype=i32)
        tm = np.array([gth.setdefault(t, len(gth)) for t in st["threads"]] or [0], dtype=i32)
        maps.append((nm, dm, tm))
    ident = len(parts) == 1 and all((m == np.arange(len(m))).all() for m in maps[0][:2]) and \
        (maps[0][2] == np.arange(len(maps[0][2]))).all()
    return maps, bool(ident)


def _concat(parts: list[Part], maps: list[tuple], ident: bool, key: str, i: int, dtype: Any,
            which: Optional[int] = None) -> np.ndarray:
    """Column ``i`` of category ``key`` over every part (ids mapped through map ``which``); each chunk's
    column is dropped once copied (lower peak)."""
    arrs = []
    for st, m in zip(parts, maps):
        for t in st[key]:
            a, t[i] = t[i], None
            arrs.append(a if which is None or ident else m[which][a])
    return np.concatenate(arrs).astype(dtype, copy=False) if arrs else np.zeros(0, dtype=dtype)


def _ids(k: list, l: list) -> tuple[np.ndarray, np.ndarray]:
    """Correlation ids as int64; ids outside int64 (huge ids) are remapped consistently."""
    try:
        return np.array(k, dtype=np.int64), np.array(l, dtype=np.int64)
    except (OverflowError, ValueError, TypeError):
        table: dict[Any, int] = {}
        ka = np.array([table.setdefault(v, len(table)) for v in k], dtype=np.int64)
        la = np.array([table.setdefault(v, len(table)) for v in l], dtype=np.int64)
        return ka, la


def _correlations(parts: list[Part]) -> tuple[np.ndarray, np.ndarray]:
    allk = [t for st in parts for t in st["k"]]
    alll = [t for st in parts for t in st["l"]]
    kcor = [c for t in allk for c in t[6]] if any(t[6] for t in allk) else []
    lcor = [c for t in alll for c in t[0]] if any(t[0] for t in alll) else []
    for t in allk:
        t[6] = None
    for t in alll:
        t[0] = None
    return _ids(kcor, lcor)


def _listed(table: dict, empty: Any) -> list:
    out = [empty] * len(table)
    for v, i in table.items():
        out[i] = v
    return out


def _examples(parts: list[Part]) -> list[str]:
    """The first 5 examples of skipped events in rank order (see ``Collector.examples``)."""
    ranked: dict[int, list[str]] = {}
    for st in parts:
        for r, ex in st["examples"].items():
            ranked.setdefault(r, []).extend(ex)
    return [e for r in sorted(ranked) for e in ranked[r]][:5]


def _comm(parts: list[Part]) -> dict[int, tuple]:
    k_comm: dict[int, tuple] = {}
    off = 0
    for st in parts:
        for t in st["k"]:
            for i, meta in t[7]:
                k_comm[off + i] = meta
            off += len(t[2])
    return k_comm


def merge(parts: list[Part], path: str, metadata: dict[str, Any]) -> RawTrace:
    """The columns of every part (in text order) with canonical intern ids (see the module's docstring)."""
    for st in parts:  # lists, so each part's column is dropped once copied into the result (lower peak)
        for key in ("k", "l", "p", "c"):
            st[key] = [list(t) for t in st[key]]
    gname = _first_seen(parts, "names", (("p", 3), ("c", 3), ("k", 0), ("l", 3), ("l", 4)), "")
    gdims = _first_seen(parts, "dims", (("c", 4),), b"")
    gth = _thread_table(parts)
    maps, ident = _id_maps(parts, gname, gdims, gth)

    def cat(key: str, i: int, dtype: Any, which: Optional[int] = None) -> np.ndarray:
        return _concat(parts, maps, ident, key, i, dtype, which)

    k_corr, l_corr = _correlations(parts)
    names = _listed(gname, "")
    dims = [b.decode("utf-8", "replace") for b in _listed(gdims, b"")]
    threads = _listed(gth, ("", ""))
    examples, k_comm = _examples(parts), _comm(parts)
    f64, i32 = np.float64, np.int32
    return RawTrace(
        path=path, names=names, dims=dims, metadata=metadata, threads=threads,
        k_name=cat("k", 0, i32, _N), k_kind=cat("k", 1, np.int8), k_ts=cat("k", 2, f64), k_dur=cat("k", 3, f64),
        k_device=cat("k", 4, np.int64), k_stream=cat("k", 5, np.int64), k_corr=k_corr,
        l_corr=l_corr, l_ts=cat("l", 1, f64), l_thread=cat("l", 2, i32, _T), l_name=cat("l", 3, i32, _N),
        l_kernel=cat("l", 4, i32, _N),
        p_ts=cat("p", 0, f64), p_end=cat("p", 1, f64), p_thread=cat("p", 2, i32, _T), p_name=cat("p", 3, i32, _N),
        c_ts=cat("c", 0, f64), c_end=cat("c", 1, f64), c_thread=cat("c", 2, i32, _T), c_name=cat("c", 3, i32, _N),
        c_dims=cat("c", 4, i32, _D),
        event_count=sum(st["events"] for st in parts), skipped=sum(st["skipped"] for st in parts),
        skipped_gpu=sum(st["skipped_gpu"] for st in parts),
        profiler_ranges=sum(st["profiler_ranges"] for st in parts),
        skipped_examples=examples, k_comm=k_comm,
    )
