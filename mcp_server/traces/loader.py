"""Kineto (PyTorch profiler) trace loader.

Reads ``.json``, ``.json.gz`` or ``.json.zst`` (detected by the magic bytes, not the suffix)
and keeps only what the analyzer uses, in compact numpy columns:

* GPU activities (``cat`` kernel / gpu_memcpy / gpu_memset),
* runtime / driver API calls that carry a correlation id (launches), with the
  kernel name a HIP launch carries in ``args.kernel``,
* ``python_function`` spans that the analyzer can use (``nn.Module:`` spans,
  phase markers, user-code frames; builtins and frames inside torch/ are
  dropped here), ``user_annotation`` spans that mark a phase (``PHASE_ANNOTATION``,
  kept with the python spans) and ``cpu_op`` spans (with ``Input Dims``).

Speed and memory: the decompressed text arrives in 8 MB blocks from a
read-ahead thread (``_reader``); each block is cut at an event boundary and
decoded in place with msgspec into small typed structs (only the fields used;
unknown fields are skipped without allocation), with the cyclic GC off. The
structs of a chunk are sorted into per-category buckets and turned into numpy
columns with one list comprehension per field. Names and input dims are
interned (int32 ids into ``names`` / ``dims``). If the streaming cut cannot be
made (unusual layout, e.g. a bare event array), the whole document is decoded
at once instead.

Older and other schemas read like current ones: PyTorch 1.8/1.9 (Kineto's first
schema) writes the categories ``Kernel``, ``Memcpy``, ``Memset``, ``Runtime``,
``Operator`` (capitalised), GPU ``tid`` strings such as ``"stream 7"``, CPU ``tid``
strings of digits and ``Input dims``; ROCm writes ``args.stream`` of HIP runtime
calls as a hex string (``"0x0"``). Ids given as strings of digits (or hex) are
read as the integers they spell, so a thread or stream named both ways is one.

Damaged events (missing fields, odd types) are skipped and counted; the count
is returned so the caller can warn. Unreadable files raise typed errors that
name the file.
"""
from __future__ import annotations

import contextlib
import gc
import gzip
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union

import msgspec
import numpy as np

from mcp_server.core.envvars import env
from mcp_server.core.errors import FileMissingError, TraceFormatError
from mcp_server.core.limits import limit
from mcp_server.traces._reader import AHEAD as _AHEAD
from mcp_server.traces._reader import BlockReader, GuardedReader, check_path, compression, decompress_errors
from mcp_server.traces._reader import blocks as _read_blocks

# GPU activity categories -> kind (index into KIND_NAMES); the capitalised names are PyTorch 1.8/1.9's
KERNEL_CATS = {"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2, "Kernel": 0, "Memcpy": 1, "Memset": 2}
KIND_NAMES = ("kernel", "memcpy", "memset")
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "runtime", "driver",
                         "Runtime", "Driver"})
CPU_OP_CATS = frozenset({"cpu_op", "Operator"})
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch", "hipGraphLaunch"})
#: record_function annotations that say the phase of what runs inside them: SGLang's ``step[DECODE bs=32]`` /
#: ``step[EXTEND bs=15 toks=15360]`` and graph captures ``capture_32_DECODE``; the ``execute_[N_]context_C(...)
#: _generation_G(...)`` step annotation (C prefill and G decode requests) seen in SGLang and vLLM traces
PHASE_ANNOTATION = re.compile(r"^(?:step\[(?:DECODE|EXTEND|PREFILL)\b|capture_\d+_(?:DECODE|EXTEND|PREFILL)\b"
                              r"|execute(?:_\d+)?_context_\d+\(.*\)_generation_\d+\()")
_EXECUTE_COUNTS = re.compile(r"_context_(\d+)\(.*\)_generation_(\d+)\(")


def phase_of_annotation(name: str) -> str:
    """'prefill' / 'decode' for a phase annotation (``PHASE_ANNOTATION``), '' otherwise (also a step mixing
    prefill and decode requests)."""
    if not PHASE_ANNOTATION.match(name):
        return ""
    if name.startswith(("step[", "capture_")):
        return "decode" if "DECODE" in name.split("]")[0] else "prefill"
    m = _EXECUTE_COUNTS.search(name)
    if not m:
        return ""
    ctx, gen = int(m.group(1)), int(m.group(2))
    return "prefill" if ctx and not gen else "decode" if gen and not ctx else ""


def launch_kind(name: str) -> int:
    """What a runtime/driver call starts on the GPU: 0 a kernel (``cudaLaunchKernel``, ``cuLaunchKernelEx``,
    ``hipExtModuleLaunchKernel``, ...), 1 a copy (``cudaMemcpyAsync``, ``hipMemcpyWithStream``), 2 a memset,
    -1 nothing (other API calls, graph launches)."""
    if name in GRAPH_LAUNCH_NAMES or not name.startswith(("cuda", "cu", "hip")):
        return -1
    if "LaunchKernel" in name or "LaunchCooperativeKernel" in name:
        return 0
    if "Memcpy" in name:
        return 1
    if "Memset" in name:
        return 2
    return -1

_BLOCK = 8 << 20
_HEAD_MAX = 8 * _BLOCK  # the events array must start within this much text
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")


class _Args(msgspec.Struct, gc=False):
    # ids may come as strings: ROCm writes a HIP call's stream as hex ("0x0"); see _as_int
    correlation: Union[int, str, None] = None
    stream: Union[int, str, None] = None
    device: Union[int, str, None] = None
    kernel: Optional[str] = None  # the kernel a HIP launch starts (roctracer's launch events)
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")  # type: ignore[assignment]
    input_dims_old: msgspec.Raw = msgspec.field(default=None, name="Input dims")  # type: ignore[assignment]
    # what PyTorch records about a collective on its communication kernels (any JSON type: read in tracesets)
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    group_size: Any = msgspec.field(default=None, name="Group size")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    seq: Any = msgspec.field(default=None, name="Seq")
    src: Any = msgspec.field(default=None, name="Src Rank")
    dst: Any = msgspec.field(default=None, name="Dst Rank")


class _Event(msgspec.Struct, gc=False):
    cat: Optional[str] = None
    name: Optional[str] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Optional[float] = None
    dur: Optional[float] = None
    args: Optional[_Args] = None


class _Top(msgspec.Struct):
    traceEvents: Optional[list[msgspec.Raw]] = None
    deviceProperties: Any = None
    schemaVersion: Any = None
    cuda_driver_version: Any = None
    cuda_runtime_version: Any = None
    cupti_version: Any = None
    hip_runtime_version: Any = None
    roctracer_version: Any = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    traceName: Any = None
    distributedInfo: Any = None
    kernelscope_fixture: Any = None


_events_dec = msgspec.json.Decoder(list[_Event])
_event_dec = msgspec.json.Decoder(_Event)
_raws_dec = msgspec.json.Decoder(list[msgspec.Raw])
_top_dec = msgspec.json.Decoder(Union[_Top, list[msgspec.Raw]])
_any_dec = msgspec.json.Decoder()


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


#: the collective metadata kept per communication kernel, in this order (``RawTrace.k_comm``)
COMM_FIELDS = ("Collective name", "Process Group Name", "Process Group Ranks", "Group size", "In msg nelems",
               "Out msg nelems", "Seq", "Src Rank", "Dst Rank")


_NAN = float("nan")


class _Collector:
    """Accumulates numpy columns from decoded event chunks.

    Each chunk's events are first sorted into per-category buckets (one dict
    lookup and one append per event), then every column is pulled out of a
    bucket with one list comprehension and turned into a numpy array; names
    are factorised per chunk and mapped onto one global intern table.
    """

    def __init__(self) -> None:
        self.names: dict[str, int] = {"": 0}
        self.dims: dict[bytes, int] = {b"": 0}
        self.threads: dict[tuple[Any, Any], int] = {}
        self.k: list[tuple] = []
        self.l: list[tuple] = []
        self.p: list[tuple] = []
        self.c: list[tuple] = []
        self.events = 0
        self.skipped = 0
        self.skipped_gpu = 0
        self.profiler_ranges = 0
        # up to 5 examples per rank (-1: undecodable event, 0-3: python_function, cpu_op, kernel, runtime);
        # ``finish`` keeps the first 5 in rank order, so the examples do not depend on where chunks are cut
        self.examples: dict[int, list[str]] = {}
        self.py_keep: dict[str, bool] = {}
        self.thread_fallback: set[str] = set()  # categories whose (pid, tid) took the per-event path
        self.absorbed: list[dict[str, Any]] = []  # states of other collectors (a split decode), in text order

    def skip(self, why: str, n: int = 1, rank: int = -1) -> None:
        self.skipped += n
        if rank == 2:
            self.skipped_gpu += n
        ex = self.examples.setdefault(rank, [])
        if len(ex) < 5:
            ex.append(why)

    def _intern(self, values: list, table: Optional[dict] = None) -> np.ndarray:
        """Global intern ids of ``values`` (one dict lookup per value, misses added after)."""
        names = self.names if table is None else table
        get = names.get
        ids = np.array([get(v, -1) for v in values], dtype=np.int32)
        miss = np.flatnonzero(ids < 0)
        for i in miss.tolist():
            v = values[i]
            g = get(v)
            if g is None:
                g = names[v] = len(names)
            ids[i] = g
        return ids

    def _intern_names(self, evs: list) -> np.ndarray:
        """``_intern`` of the events' names, read straight off the events."""
        names = self.names
        get = names.get
        ids = np.array([get(e.name, -1) for e in evs], dtype=np.int32)
        miss = np.flatnonzero(ids < 0)
        for i in miss.tolist():
            v = evs[i].name
            g = get(v)
            if g is None:
                g = names[v] = len(names)
            ids[i] = g
        return ids

    def _py_keep_miss(self, n: str) -> bool:
        """Whether the analyzer uses python_function frames named ``n`` (module spans, phase markers,
        user-code frames; not builtins or frames inside torch/); remembered per name."""
        k = self.py_keep[n] = n.startswith("nn.Module: ") or not (n.startswith(("<", "torch/")) or "/torch/" in n) \
            or bool(PHASE_ANNOTATION.match(n))
        return k

    def _thread(self, evs: list, cat: str) -> np.ndarray:
        """Thread ids of (pid, tid) pairs; integer pids/tids take a vectorised path."""
        th = self.threads
        try:
            pid = np.array([e.pid for e in evs], dtype=np.int64)
            tid = np.array([e.tid for e in evs], dtype=np.int64)
        except (TypeError, ValueError, OverflowError):  # string ids ("stream 7", "1234"): one id per spelling
            self.thread_fallback.add(cat)
            return np.array([th.setdefault((_id_key(e.pid), _id_key(e.tid)), len(th)) for e in evs], dtype=np.int32)
        if not len(pid):
            return np.zeros(0, dtype=np.int32)
        same = (pid == pid[0]) & (tid == tid[0])
        if same.all():
            return np.full(len(pid), th.setdefault((int(pid[0]), int(tid[0])), len(th)), dtype=np.int32)
        pairs, inv = np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)
        table = np.array([th.setdefault((int(a), int(b)), len(th)) for a, b in pairs.tolist()], dtype=np.int32)
        return table[inv.reshape(-1)]

    @staticmethod
    def _valid(evs: list, need_dur: bool) -> tuple[list, int]:
        if need_dur:
            good = [e for e in evs if e.ts is not None and e.dur is not None and e.name is not None]
        else:
            good = [e for e in evs if e.ts is not None and e.name is not None]
        return good, len(evs) - len(good)

    def add(self, events: list[_Event]) -> None:
        self.events += len(events)
        py: list = []
        cpu: list = []
        ker: list = []
        lau: list = []
        ranges: list = []
        notes: list = []
        route: dict[Optional[str], list] = {"python_function": py, "cuda_profiler_range": ranges,
                                            "user_annotation": notes}
        for c in CPU_OP_CATS:
            route[c] = cpu
        for c in KERNEL_CATS:
            route[c] = ker
        for c in LAUNCH_CATS:
            route[c] = lau
        get = route.get
        for e in events:
            b = get(e.cat)
            if b is not None:
                b.append(e)
        self.profiler_ranges += len(ranges)
        if notes:  # phase annotations join the python spans (the analyzer reads markers there)
            py.extend(e for e in notes if e.name is not None and PHASE_ANNOTATION.match(e.name))
        f64 = np.float64
        for evs, is_cpu in ((py, False), (cpu, True)):
            if not evs:
                continue
            rank = 1 if is_cpu else 0
            evs, bad = self._valid(evs, True)
            if bad:
                self.skip(f"{'cpu_op' if is_cpu else 'python_function'} event without ts/dur/name", bad, rank)
            if not evs:
                continue
            if not is_cpu:
                # keep only frames the analyzer uses: module spans, phase markers, user-code frames
                kg, miss = self.py_keep.get, self._py_keep_miss
                evs = [e for e in evs if (k := kg(e.name)) or (k is None and miss(e.name))]
                if not evs:
                    continue
            ts = np.array([e.ts for e in evs], dtype=f64)
            dur = np.array([e.dur for e in evs], dtype=f64)
            bad_t = _bad_times(ts, dur)
            if bad_t is not None:
                self.skip(f"{'cpu_op' if is_cpu else 'python_function'} event with a non-finite, negative or "
                          f"implausible ts/dur (e.g. dur={_first_bad(dur, ts, bad_t)})", int(bad_t.sum()), rank)
                keep = ~bad_t
                evs = [e for e, k in zip(evs, keep.tolist()) if k]
                if not evs:
                    continue
                ts, dur = ts[keep], dur[keep]
            end = ts + dur
            cols = (ts, end, self._thread(evs, "c" if is_cpu else "p"), self._intern_names(evs))
            if is_cpu:
                dims = [bytes(a.input_dims) if (a := e.args) is not None and a.input_dims is not None
                        else bytes(a.input_dims_old) if a is not None and a.input_dims_old is not None else b""
                        for e in evs]
                self.c.append(cols + (self._intern(dims, self.dims),))
            else:
                self.p.append(cols)
        if ker:
            good = [e for e in ker if e.ts is not None and e.dur is not None and e.name is not None
                    and e.args is not None and _fix_corr(e.args)]
            if len(good) < len(ker):
                self.skip("kernel/memcpy/memset event without ts/dur/name/args.correlation", len(ker) - len(good), 2)
            if good:
                kts = np.array([e.ts for e in good], dtype=f64)
                kdur = np.array([e.dur for e in good], dtype=f64)
                bad_t = _bad_times(kts, kdur)
                if bad_t is not None:  # excluded from every sum, counted in the damaged-events warning
                    self.skip(f"kernel/memcpy/memset event with a non-finite, negative or implausible duration or "
                              f"timestamp (e.g. dur={_first_bad(kdur, kts, bad_t)} us)", int(bad_t.sum()), 2)
                    keep = ~bad_t
                    good = [e for e, k in zip(good, keep.tolist()) if k]
                    kts, kdur = kts[keep], kdur[keep]
            if good:
                kind = np.array([KERNEL_CATS[e.cat] for e in good], dtype=np.int8)
                args = [e.args for e in good]
                dev = [a.device for a in args]
                if None in dev:  # no args.device: the pid stands in, else -1
                    dev = [d if d is not None else e.pid for d, e in zip(dev, good)]
                stream = [a.stream for a in args]
                if None in stream:  # no args.stream: the tid stands in ("stream 7" in PyTorch 1.8/1.9), else -1
                    stream = [s if s is not None else e.tid for s, e in zip(stream, good)]
                comm = [(i, (a.coll_name, a.pg_name, a.pg_ranks, a.group_size, a.in_nelems, a.out_nelems, a.seq,
                             a.src, a.dst)) for i, a in enumerate(args) if a.coll_name is not None]
                self.k.append((self._intern_names(good), kind, kts, kdur, _int_col(dev), _int_col(stream),
                               [a.correlation for a in args], comm))
        if lau:
            lau = [e for e in lau if e.args is not None and _fix_corr(e.args)]
            good = [e for e in lau if e.ts is not None and e.name is not None]
            if len(good) < len(lau):
                self.skip("runtime event without ts/name", len(lau) - len(good), 3)
            if good:
                lts = np.array([e.ts for e in good], dtype=f64)
                bad_t = _bad_times(lts, None)
                if bad_t is not None:
                    self.skip("runtime event with a non-finite or implausible ts", int(bad_t.sum()), 3)
                    keep = ~bad_t
                    good = [e for e, k in zip(good, keep.tolist()) if k]
                    lts = lts[keep]
            if good:
                kn = [e.args.kernel or "" for e in good]
                self.l.append(([e.args.correlation for e in good], lts,
                               self._thread(good, "l"), self._intern_names(good), self._intern(kn)))

    def state(self) -> dict[str, Any]:
        """This collector's columns and tables as plain data (what a split decode's helper hands back)."""
        return {"names": list(self.names), "dims": list(self.dims), "threads": list(self.threads),
                "thread_fallback": sorted(self.thread_fallback), "k": self.k, "l": self.l, "p": self.p,
                "c": self.c, "events": self.events, "skipped": self.skipped, "examples": self.examples,
                "skipped_gpu": self.skipped_gpu, "profiler_ranges": self.profiler_ranges}

    def absorb(self, state: dict[str, Any]) -> None:
        """Append the events another collector decoded (the text after this one's)."""
        self.absorbed.append(state)

    def finish(self, path: str, metadata: dict[str, Any]) -> RawTrace:
        """The columns of every part (this collector, then the absorbed ones) with canonical intern ids.

        Ids do not depend on where the text was cut into chunks or parts: names are numbered by first
        appearance among python_function spans, then cpu ops, then kernels, then launches; dims by first
        appearance among cpu ops; threads per category (python_function, cpu_op, launches) in (pid, tid)
        order, or first appearance where a category's ids are not all integers. For one chunk this is the
        order the chunk decoder assigns.
        """
        parts = [self.state()] + self.absorbed
        self.k, self.l, self.p, self.c, self.absorbed = [], [], [], [], []
        for st in parts:  # lists, so each part's column is dropped once copied into the result (lower peak)
            for key in ("k", "l", "p", "c"):
                st[key] = [list(t) for t in st[key]]
        f64, i32 = np.float64, np.int32

        def col(st: dict[str, Any], key: str, i: int) -> Optional[np.ndarray]:
            arrs = [t[i] for t in st[key]]
            return np.concatenate(arrs) if arrs else None

        def firsts(c: Optional[np.ndarray]) -> list[int]:
            """Distinct values of ``c`` in order of first appearance."""
            if c is None or not len(c):
                return []
            u, first = np.unique(c, return_index=True)
            return u[np.argsort(first, kind="stable")].tolist()

        # names
        gname: dict[str, int] = {"": 0}
        for key, i in (("p", 3), ("c", 3), ("k", 0), ("l", 3), ("l", 4)):
            for st in parts:
                loc = st["names"]
                for j in firsts(col(st, key, i)):
                    gname.setdefault(loc[j], len(gname))
        # dims
        gdims: dict[bytes, int] = {b"": 0}
        for st in parts:
            loc = st["dims"]
            for j in firsts(col(st, "c", 4)):
                gdims.setdefault(loc[j], len(gdims))
        # threads
        gth: dict[Any, int] = {}
        for key in ("p", "c", "l"):
            tcols = [(st, col(st, key, 2)) for st in parts]
            if any(key in st["thread_fallback"] for st in parts):
                for st, c in tcols:
                    loc = st["threads"]
                    for j in firsts(c):
                        gth.setdefault(loc[j], len(gth))
            else:
                keys: set[Any] = set()
                for st, c in tcols:
                    if c is not None and len(c):
                        loc = st["threads"]
                        keys.update(loc[j] for j in np.unique(c).tolist())
                for t in sorted(keys):
                    gth.setdefault(t, len(gth))
        maps = []
        for st in parts:
            nm = np.array([gname.setdefault(s, len(gname)) for s in st["names"]], dtype=i32)
            dm = np.array([gdims.setdefault(s, len(gdims)) for s in st["dims"]], dtype=i32)
            tm = np.array([gth.setdefault(t, len(gth)) for t in st["threads"]] or [0], dtype=i32)
            maps.append((nm, dm, tm))
        ident = len(parts) == 1 and all((m == np.arange(len(m))).all() for m in maps[0][:2]) and \
            (maps[0][2] == np.arange(len(maps[0][2]))).all()

        def cat(key: str, i: int, dtype, which: Optional[int] = None) -> np.ndarray:
            arrs = []
            for st, m in zip(parts, maps):
                for t in st[key]:
                    a, t[i] = t[i], None
                    arrs.append(a if which is None or ident else m[which][a])
            return np.concatenate(arrs).astype(dtype, copy=False) if arrs else np.zeros(0, dtype=dtype)

        allk = [t for st in parts for t in st["k"]]
        alll = [t for st in parts for t in st["l"]]
        kcor = [c for t in allk for c in t[6]] if any(t[6] for t in allk) else []
        lcor = [c for t in alll for c in t[0]] if any(t[0] for t in alll) else []
        for t in allk:
            t[6] = None
        for t in alll:
            t[0] = None
        k_corr, l_corr = _ids(kcor, lcor)
        del kcor, lcor, allk, alll
        names = [""] * len(gname)
        for s, i in gname.items():
            names[i] = s
        dims = [""] * len(gdims)
        for b, i in gdims.items():
            dims[i] = b.decode("utf-8", "replace")
        threads = [("", "")] * len(gth)
        for t, i in gth.items():
            threads[i] = t
        ranked: dict[int, list[str]] = {}
        for st in parts:
            for r, ex in st["examples"].items():
                ranked.setdefault(r, []).extend(ex)
        examples = [e for r in sorted(ranked) for e in ranked[r]][:5]
        k_comm: dict[int, tuple] = {}
        off = 0
        for st in parts:
            for t in st["k"]:
                for i, meta in t[7]:
                    k_comm[off + i] = meta
                off += len(t[2])
        N, D, T = 0, 1, 2
        return RawTrace(
            path=path, names=names, dims=dims, metadata=metadata, threads=threads,
            k_name=cat("k", 0, i32, N), k_kind=cat("k", 1, np.int8), k_ts=cat("k", 2, f64), k_dur=cat("k", 3, f64),
            k_device=cat("k", 4, np.int64), k_stream=cat("k", 5, np.int64), k_corr=k_corr,
            l_corr=l_corr, l_ts=cat("l", 1, f64), l_thread=cat("l", 2, i32, T), l_name=cat("l", 3, i32, N),
            l_kernel=cat("l", 4, i32, N),
            p_ts=cat("p", 0, f64), p_end=cat("p", 1, f64), p_thread=cat("p", 2, i32, T), p_name=cat("p", 3, i32, N),
            c_ts=cat("c", 0, f64), c_end=cat("c", 1, f64), c_thread=cat("c", 2, i32, T), c_name=cat("c", 3, i32, N),
            c_dims=cat("c", 4, i32, D),
            event_count=sum(st["events"] for st in parts), skipped=sum(st["skipped"] for st in parts),
            skipped_gpu=sum(st["skipped_gpu"] for st in parts),
            profiler_ranges=sum(st["profiler_ranges"] for st in parts),
            skipped_examples=examples, k_comm=k_comm,
        )


_MAX_TS_US = 1e18  # timestamps are us since an epoch (about 1.7e15 today): past this is not a clock reading


def _bad_times(ts: np.ndarray, dur: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """Mask of events whose ts/dur cannot be real: non-finite, a negative duration, a duration over
    ``KERNELSCOPE_MAX_DURATION_US`` (default 1e12 us, 11.6 days) or a timestamp past 1e18 us.
    None when every event is fine (the usual case, one vector test)."""
    bad = ~(np.abs(ts) <= _MAX_TS_US)  # NaN compares False: caught here
    if dur is not None:
        bad |= ~((dur >= 0) & (dur <= float(limit("DURATION_US"))))
    return bad if bad.any() else None


def _first_bad(dur: np.ndarray, ts: np.ndarray, bad: np.ndarray) -> str:
    i = int(np.flatnonzero(bad)[0])
    return f"{float(dur[i])!r}" if abs(ts[i]) <= _MAX_TS_US else f"{float(dur[i])!r}, ts={float(ts[i])!r}"


def _int_col(values: list) -> np.ndarray:
    """int64 column; strings are read as the integer they spell (``"0x0"``, ``"7"``, ``"stream 7"``), else -1."""
    try:
        return np.array(values, dtype=np.int64)
    except (OverflowError, ValueError, TypeError):
        out = []
        for v in values:
            if isinstance(v, str):
                v = _as_int(v)
            out.append(v if isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63 else -1)
        return np.array(out, dtype=np.int64)


_TRAILING_INT = re.compile(r"(?:^|\s)(\d+)$")


def _as_int(v: Any) -> Optional[int]:
    """The integer an id spells: an int; a string of decimal or ``0x`` hex digits (ROCm writes HIP streams
    as ``"0x0"``); a name ending in one (PyTorch 1.8's GPU ``tid`` ``"stream 7"``); else None."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if not isinstance(v, str):
        return None
    t = v.strip()
    try:
        return int(t, 0) if t[:2].lower() in ("0x", "0o", "0b") else int(t, 10)
    except ValueError:
        m = _TRAILING_INT.search(t)
        return int(m.group(1)) if m else None


def _id_key(v: Any) -> Any:
    """A pid/tid as one key: strings of digits become the integer (``"1234"`` and 1234 are one thread)."""
    if isinstance(v, str):
        t = v.strip()
        if t.isdigit():
            return int(t)
    return v


def _fix_corr(a: _Args) -> bool:
    """Whether the event's correlation id is usable; a string of digits is turned into the integer."""
    c = a.correlation
    if c is None:
        return False
    if isinstance(c, str):
        n = _as_int(c) if c.strip()[:1].isdigit() else None
        if n is None:
            return False
        a.correlation = n
    return True


def _ids(k: list, l: list) -> tuple[np.ndarray, np.ndarray]:
    """Correlation ids as int64; ids outside int64 (huge ids) are remapped consistently."""
    try:
        return np.array(k, dtype=np.int64), np.array(l, dtype=np.int64)
    except (OverflowError, ValueError, TypeError):
        table: dict[Any, int] = {}
        ka = np.array([table.setdefault(v, len(table)) for v in k], dtype=np.int64)
        la = np.array([table.setdefault(v, len(table)) for v in l], dtype=np.int64)
        return ka, la


# ----------------------------------------------------------------------------- reading


_DECOMPRESS_ERRORS = decompress_errors()  # zlib.error and the fast backends' own error classes


def _read_errors(p: Path, exc: BaseException) -> TraceFormatError:
    if isinstance(exc, EOFError):
        return TraceFormatError("gzip stream is truncated (file ended before the end-of-stream marker)", path=p,
                                hint="the file was cut short; copy or export it again")
    if compression(p) == "zstd" and isinstance(exc, _DECOMPRESS_ERRORS):
        return TraceFormatError(f"corrupt zstd data: {exc}", path=p, hint="the file is damaged; export it again")
    if isinstance(exc, (gzip.BadGzipFile, *_DECOMPRESS_ERRORS)):
        return TraceFormatError(f"corrupt gzip data: {exc}", path=p, hint="the file is damaged; export it again")
    return TraceFormatError(f"cannot read trace: {exc}", path=p)


def _decode_chunk(text: bytes | memoryview, coll: _Collector) -> bool:
    """Decode one ``[...]`` array of events into ``coll``. False when ``text`` is not valid JSON."""
    try:
        events = _events_dec.decode(text)
    except msgspec.ValidationError:
        try:
            raws = _raws_dec.decode(text)
        except msgspec.DecodeError:
            return False
        events = []
        for r in raws:
            try:
                events.append(_event_dec.decode(r))
            except msgspec.DecodeError as exc:
                coll.events += 1
                coll.skip(f"event with odd field types ({exc})", rank=-1)
        coll.add(events)
        return True
    except msgspec.DecodeError:
        return False
    coll.add(events)
    return True


class _FallBack(Exception):
    pass


def _grow(buf: bytearray, block: bytes) -> bytearray:
    try:
        buf += block
    except BufferError:
        buf = bytearray(buf) + block
    return buf


def _drop_front(buf: bytearray, n: int) -> bytearray:
    try:
        del buf[:n]
    except BufferError:
        buf = bytearray(buf[n:])
    return buf


def _stream(p: Path, coll: _Collector, progress: Optional[Callable[[int], None]],
            blocks: Optional[BlockReader] = None) -> dict[str, Any]:
    """Streaming decode; raises _FallBack when the layout is not the usual ``{..."traceEvents": [...]...}``.

    A large trace on a machine with two or more cores is decoded in two parts (``_Split``): a helper
    process decodes the text after a split point while this one decodes the text before it.
    """
    if blocks is None:  # a split decode needs little read-ahead (the helper reads its part itself)
        blocks = _read_blocks(p, _BLOCK, ahead=3 if _split_point(p, 0) is not None else _AHEAD)
    split: Optional[_Split] = None
    try:
        head = next(blocks)
        eof = not head
        # the events array may start past the first block (large metadata first): look up to _HEAD_MAX
        while not eof and len(head) < _HEAD_MAX and not re.search(rb'"traceEvents"\s*:\s*\[', head):
            more = next(blocks)
            eof = not more
            head += more
        m = re.search(rb'"traceEvents"\s*:\s*\[', head)
        bare = m is None and head.lstrip()[:1] == b"["
        if bare:  # a bare event array: [ {...}, {...} ]
            meta: dict[str, Any] = {}
            start = head.index(b"[") + 1
        else:
            if not m:
                raise _FallBack()
            try:
                meta = _any_dec.decode(head[: m.start()] + b'"__ks":0}')
            except msgspec.DecodeError:
                raise _FallBack() from None
            if not isinstance(meta, dict):
                raise _FallBack()
            meta.pop("__ks", None)
            start = m.end()
        at = None if eof else _split_point(p, len(head))
        if at is not None:
            split = _Split.start(p, at, bare)
            if split is not None:
                blocks.pause_at(at + 2 * _BLOCK)  # the rest is the helper's: read only past the split point
        # buf holds the not yet decoded events, preceded by one byte set to '['; a chunk is
        # decoded in place by writing ']' after its last event (no copies of the block).
        buf = bytearray(b"[")
        buf += head[start:]
        off = start - 1  # offset of buf[0] in the text
        done_bytes = len(head)
        while True:
            block = next(blocks) if not eof else b""
            if not block:
                eof = True
                if split is not None:  # the text ended before the split point
                    split.close()
                    split = None
                tail_meta = _finish_tail(bytes(buf[1:]), coll, bare)
                if tail_meta is None:
                    raise _FallBack()
                meta.update(tail_meta)
                return meta
            done_bytes += len(block)
            if progress:
                progress(done_bytes if split is None else int(done_bytes * split.scale))
            buf = _grow(buf, block)
            if split is not None and off + len(buf) > split.at:
                # cut at the first event boundary at or after the split point (the helper starts there)
                sm = _BOUNDARY.search(buf, split.at - off)
                if sm is None:
                    if off + len(buf) - split.at > 8 * _BLOCK:
                        split.close()
                        split = None
                    continue
                cut = sm.start() + 1
                ok, buf = _decode_at(buf, cut, coll)
                if ok:
                    got = split.result(off + sm.start())
                    split.close()
                    split = None
                    if got is not None:  # the helper decoded the rest, tail included
                        coll.absorb(got[1])
                        meta.update(got[0])
                        return meta
                    nxt = buf.index(b"{", cut)
                    buf[nxt - 1] = 0x5B  # '['
                    buf = _drop_front(buf, nxt - 1)
                    off += nxt - 1
                    continue
                split.close()  # the text before the boundary is not a list of events: decode alone
                split = None
            cuts: list[int] = []
            q = len(buf)
            while len(cuts) < 3 and q > 0:
                q = buf.rfind(b"}", 0, q)
                if q < 0:
                    break
                if _BOUNDARY.match(buf, q):
                    cuts.append(q + 1)
            ok = False
            for cut in cuts:
                ok, buf = _decode_at(buf, cut, coll)
                if ok:
                    nxt = buf.index(b"{", cut)
                    buf[nxt - 1] = 0x5B  # '['
                    buf = _drop_front(buf, nxt - 1)
                    off += nxt - 1
                    break
            if not ok and len(buf) > 8 * _BLOCK:  # no event is this large: not a usual layout
                raise _FallBack()
    finally:
        if split is not None:
            split.close()
        blocks.close()


def _decode_at(buf: bytearray, cut: int, coll: _Collector) -> tuple[bool, bytearray]:
    """Decode the events of ``buf[1:cut]`` in place (``buf[0]`` is '['); ``buf`` itself is unchanged."""
    saved = buf[cut]
    buf[cut] = 0x5D  # ']'
    ok = False
    with memoryview(buf) as mv:
        sub = mv[: cut + 1]
        try:
            ok = _decode_chunk(sub, coll)
        finally:
            try:
                sub.release()
            except BufferError:  # a decoded object still points into buf: detach
                buf = bytearray(buf)
    buf[cut] = saved
    return ok, buf


# ----------------------------------------------------------------------------- split decode

_SPLIT_MIN = 128 << 20  # less text is decoded in one process: the helper costs ~0.2 s of CPU (90 MB: 1.12 vs 1.07 s)
_SPLIT_SHARE = 0.58  # share of the text decoded here: the helper first starts Python and skips to its part
_SPLIT_WAIT = 600.0  # seconds the helper may take after this process finished its part


def _split_point(p: Path, head_len: int) -> Optional[int]:
    """Text offset where the helper's part starts, or None to decode in this process alone.

    ``KERNELSCOPE_TRACE_SPLIT``: ``off`` never splits, ``force`` splits any streamable trace (tests),
    default: a trace of at least 128 MiB of text when this process may run on two or more cores.
    """
    mode = (env("KERNELSCOPE_TRACE_SPLIT") or "").strip().lower()
    if mode in ("0", "off", "no", "false") or not sys.executable:
        return None
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    size = _text_size(p)
    if size is None:
        return None
    if mode != "force" and (cpus < 2 or size < _SPLIT_MIN):
        return None
    at = int(size * _SPLIT_SHARE)
    return at if at > head_len else None


def _text_size(p: Path) -> Optional[int]:
    """Size of the trace's text: the file size, gzip's ISIZE (mod 4 GiB, unwrapped by the plausible ratio
    of profiler JSON), zstd's frame content size; None when unknown."""
    size = p.stat().st_size
    kind = compression(p)
    if kind == "":
        return size
    try:
        with open(p, "rb") as f:
            if kind == "gzip":
                f.seek(-4, os.SEEK_END)
                isize = int.from_bytes(f.read(4), "little")
                while isize < 3 * size:  # JSON compresses 5-30:1: ISIZE wrapped around 4 GiB
                    isize += 1 << 32
                return isize
            import zstandard

            n = zstandard.frame_content_size(f.read(18))
            return n if n > 0 else None
    except (OSError, ImportError, ValueError):
        return None
    except Exception:  # zstandard.ZstdError on a damaged header
        return None


# The helper imports only the loader: no site (its sys.path is this process's), and a bare
# ``mcp_server.traces`` package so the package's __init__ (pydantic models) is not run; ~0.1 s to start.
_CHILD = """import os, sys, types
sys.path[:0] = [p for p in os.environ.pop("KERNELSCOPE_SPLIT_SYSPATH", "").split(os.pathsep) if p]
import mcp_server
pkg = types.ModuleType("mcp_server.traces")
pkg.__path__ = [os.path.join(mcp_server.__path__[0], "traces")]
sys.modules["mcp_server.traces"] = pkg
from mcp_server.traces.loader import _split_child
_split_child()
"""


class _Split:
    """The helper process that decodes the text from ``at`` on (``_split_child``).

    It starts at the first event boundary at or after ``at`` (the same one ``_stream`` cuts at), decodes
    to the end with the same chunk decoder and size/ratio guards, and hands back its collector's state
    and the trailing metadata (pickled, on its stdout). Anything unusual there (damaged data, another
    layout, a crash) makes it answer "no": this process then decodes the rest itself, so every error is
    raised here, as without a split. The helper inherits this process's limits (RLIMIT_AS), dies with it
    (PR_SET_PDEATHSIG) and is killed on every exit from ``_stream``.
    """

    def __init__(self, proc: subprocess.Popen, at: int, total: int) -> None:
        self.proc, self.at = proc, at
        self.scale = total / max(at, 1)

    @classmethod
    def start(cls, p: Path, at: int, bare: bool) -> Optional["_Split"]:
        import mcp_server

        env = dict(os.environ)
        root = str(Path(mcp_server.__file__).resolve().parent.parent)
        env["KERNELSCOPE_SPLIT_SYSPATH"] = os.pathsep.join([root] + [x for x in sys.path if x])
        env["KERNELSCOPE_TRACE_SPLIT"] = "off"
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"  # the helper does no linear algebra: no BLAS thread pool to start
        try:
            proc = subprocess.Popen([sys.executable, "-S", "-c", _CHILD, str(p), str(at), "1" if bare else "0"],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                    env=env, close_fds=True)
        except OSError:
            return None
        return cls(proc, at, _text_size(p) or at)

    def result(self, cut: int) -> Optional[tuple[dict[str, Any], dict[str, Any]]]:
        """(tail metadata, collector state) when the helper decoded the rest from boundary ``cut``, else None."""
        import pickle

        assert self.proc.stdout is not None
        try:
            data = self.proc.stdout.read()
            rc = self.proc.wait(_SPLIT_WAIT)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if rc != 0 or not data:
            return None
        try:
            got = pickle.loads(data)  # written by _split_child of this package, never by trace content
        except Exception:
            return None
        if not (isinstance(got, tuple) and len(got) == 4 and got[0] == "ok" and got[1] == cut):
            return None
        return got[2], got[3]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:  # pragma: no cover - already gone
                pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:  # pragma: no cover - a killed process is reaped at once
            pass


def _split_child() -> None:
    """The helper's main: ``argv = [-c, path, at, bare]``; one pickled answer on stdout, then exit."""
    import pickle

    from mcp_server.core.limits import die_with_parent

    die_with_parent(os.getppid())  # a killed analyzer leaves no helper behind
    try:
        with gc_paused():
            res: tuple = _decode_rest(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1")
    except BaseException:  # damaged data, limits, a layout it cannot stream: the parent decodes it itself
        res = ("no",)
    out = sys.stdout.buffer
    out.write(pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL))
    out.flush()
    os._exit(0)  # no teardown of millions of objects


def _decode_rest(p: Path, at: int, bare: bool) -> tuple:
    """``("ok", boundary, tail metadata, collector state)`` for the events after the first boundary at or
    after text offset ``at``; ``("no",)`` when there is none."""
    blocks = _read_blocks(p, _BLOCK, start=at, ahead=2)  # little text waiting: both processes share the RSS
    try:
        buf = bytearray()
        while True:
            b = next(blocks)
            if not b:
                return ("no",)
            buf += b
            m = _BOUNDARY.search(buf)
            if m is not None:
                break
            if len(buf) > 8 * _BLOCK:
                return ("no",)
        if blocks.skipped != at:
            return ("no",)
        coll = _Collector()
        body = bytearray(b"[")
        body += memoryview(buf)[m.end() - 1:]
        del buf
        while True:
            block = next(blocks)
            if not block:
                tail = _finish_tail(bytes(body[1:]), coll, bare)
                if tail is None:
                    return ("no",)
                return ("ok", at + m.start(), tail, coll.state())
            body = _grow(body, block)
            cuts: list[int] = []
            q = len(body)
            while len(cuts) < 3 and q > 0:
                q = body.rfind(b"}", 0, q)
                if q < 0:
                    break
                if _BOUNDARY.match(body, q):
                    cuts.append(q + 1)
            ok = False
            for cut in cuts:
                ok, body = _decode_at(body, cut, coll)
                if ok:
                    nxt = body.index(b"{", cut)
                    body[nxt - 1] = 0x5B  # '['
                    body = _drop_front(body, nxt - 1)
                    break
            if not ok and len(body) > 8 * _BLOCK:
                return ("no",)
    finally:
        blocks.close()


def _finish_tail(data: bytes, coll: _Collector, bare: bool = False) -> Optional[dict[str, Any]]:
    q = len(data)
    for _ in range(64):
        q = data.rfind(b"]", 0, q)
        if q < 0:
            return None
        trailer = data[q + 1:]
        if bare:
            if trailer.strip():
                return None
            trailer = b"}"
        try:
            tail = _any_dec.decode(b'{"__ks":0' + trailer)
        except msgspec.DecodeError:
            continue
        if not isinstance(tail, dict):
            continue
        body = data[:q].strip()
        if body and not _decode_chunk(b"[" + body + b"]", coll):
            return None
        tail.pop("__ks", None)
        return tail
    return None


def _whole(p: Path, coll: _Collector) -> dict[str, Any]:
    """Decode a trace whose layout cannot be streamed in one piece: bounded by
    ``KERNELSCOPE_MAX_TRACE_UNSTREAMED_BYTES`` (real traces always stream), and the size/ratio guards."""
    with GuardedReader(p, cap=("TRACE_UNSTREAMED_BYTES", limit("TRACE_UNSTREAMED_BYTES"))) as f:
        parts = []
        while True:
            b = f.read(_BLOCK)
            if not b:
                break
            parts.append(b)
        blob = b"".join(parts)
        del parts
    if not blob.strip():
        raise TraceFormatError("trace file is empty", path=p)
    try:
        top = _top_dec.decode(blob)
    except msgspec.ValidationError as exc:  # valid JSON, wrong shape (ValidationError subclasses DecodeError)
        raise TraceFormatError(f"JSON is not a Kineto trace: {exc}", path=p,
                               hint="'traceEvents' must be a list of event objects") from None
    except msgspec.DecodeError as exc:
        text = str(exc)
        if "UTF-8" in text:
            raise TraceFormatError(f"invalid UTF-8 in the JSON text ({text})", path=p,
                                   hint="the file is damaged or not a profiler export") from None
        raise TraceFormatError(f"not valid JSON ({text})", path=p,
                               hint="expected a PyTorch-profiler (Kineto) trace") from None
    if isinstance(top, list):
        raws, meta = top, {}
    else:
        if top.traceEvents is None:
            raise TraceFormatError("JSON has no 'traceEvents' list", path=p,
                                   hint="expected a PyTorch-profiler (Kineto) trace exported with export_chrome_trace")
        raws = top.traceEvents
        meta = {k: getattr(top, k) for k in top.__struct_fields__ if k != "traceEvents" and getattr(top, k) is not None}
    del blob
    step = 50_000
    for i in range(0, len(raws), step):
        part = raws[i:i + step]
        if not _decode_chunk(b"[" + b",".join(bytes(r) for r in part) + b"]", coll):
            raise TraceFormatError("traceEvents holds invalid JSON", path=p)
    return meta


_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bulk load; the previous state comes back on exit.

    Nested and concurrent loads (``load_sides`` reads two traces on two threads) share one pause:
    the first to enter records the state, the last to leave restores it.
    """
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()


def load_trace(path: str | os.PathLike, progress: Optional[Callable[[int, int], None]] = None,
               blocks: Optional[BlockReader] = None) -> RawTrace:
    """Load a Kineto trace into numpy columns. ``progress(done_bytes, total_bytes_estimate)``.

    ``blocks``: an already started ``_reader.blocks(path)`` iterator (read-ahead).
    """
    p = check_path(path)
    total = _size_hint(p)
    cb = (lambda done: progress(min(done, total), total)) if progress else None
    try:
        with gc_paused():  # millions of small objects, none cyclic: the cycle collector only costs time
            coll = _Collector()
            try:
                meta = _stream(p, coll, cb, blocks)
            except _FallBack:
                coll = _Collector()
                meta = _whole(p, coll)
            except msgspec.DecodeError as exc:  # pragma: no cover - defensive
                raise TraceFormatError(f"not valid JSON ({exc})", path=p) from None
    except RecursionError:
        raise TraceFormatError("JSON nested too deeply (deeper than the decoder's recursion limit, about 1000 "
                               "levels); a profiler trace nests a few levels", path=p,
                               hint="the file is damaged or not a profiler export") from None
    except MemoryError:
        raise TraceFormatError("out of memory while decoding", path=p,
                               hint="the trace is larger than this process may hold") from None
    except (EOFError, OSError, *_DECOMPRESS_ERRORS) as exc:
        if isinstance(exc, FileNotFoundError):
            raise FileMissingError("trace file not found", path=p) from None
        raise _read_errors(p, exc) from None
    if coll.events == 0 and not meta:
        raise TraceFormatError("trace has no events", path=p)
    return coll.finish(str(p), meta)


def _size_hint(p: Path) -> int:
    """Decompressed size estimate (gzip ISIZE field, mod 4 GiB) for progress."""
    size = p.stat().st_size
    kind = compression(p)
    if kind == "zstd":
        return size * 10  # no cheap trailer field; profiler JSON compresses about 10-30:1
    if kind != "gzip":
        return size
    try:
        with open(p, "rb") as f:
            f.seek(-4, os.SEEK_END)
            isize = int.from_bytes(f.read(4), "little")
        return max(isize, size)
    except OSError:
        return size * 8
