"""Kineto (PyTorch profiler) trace loader.

Reads ``.json`` or ``.json.gz`` (detected by the gzip magic, not the suffix)
and keeps only what the analyzer uses, in compact numpy columns:

* GPU activities (``cat`` kernel / gpu_memcpy / gpu_memset),
* runtime / driver API calls that carry a correlation id (launches),
* ``python_function`` spans and ``cpu_op`` spans (with ``Input Dims``).

Speed and memory: the decompressed text is read in blocks; each block is cut
at an event boundary and decoded with msgspec into small typed structs (only
the fields used; unknown fields are skipped without allocation), with the
cyclic GC off. Repeated strings (names, input dims) are interned into one
table and stored as int32 ids. If the streaming cut cannot be made (unusual
layout), the whole document is decoded at once instead.

Damaged events (missing fields, odd types) are skipped and counted; the count
is returned so the caller can warn. Unreadable files raise typed errors that
name the file.
"""
from __future__ import annotations

import gc
import gzip
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union

import msgspec
import numpy as np

from mcp_server.errors import FileMissingError, TraceFormatError

KERNEL_CATS = {"kernel": 0, "gpu_memcpy": 1, "gpu_memset": 2}
KIND_NAMES = ("kernel", "memcpy", "memset")
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "runtime", "driver"})
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch", "hipGraphLaunch"})

_BLOCK = 8 << 20
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")


class _Args(msgspec.Struct, gc=False):
    correlation: Optional[int] = None
    stream: Optional[int] = None
    device: Optional[int] = None
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")  # type: ignore[assignment]


class _Event(msgspec.Struct, gc=False):
    cat: Optional[str] = None
    name: Optional[str] = None
    ph: Optional[str] = None
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
    skipped_examples: list[str] = field(default_factory=list)


class _Collector:
    """Accumulates columns from decoded event chunks (plain lists, converted at the end)."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {"": 0}
        self.threads: dict[tuple[Any, Any], int] = {}
        self.k = ([], [], [], [], [], [], [])  # name kind ts dur device stream corr
        self.l = ([], [], [], [])  # corr ts thread name
        self.p = ([], [], [], [])  # ts end thread name
        self.c = ([], [], [], [], [])  # ts end thread name dims
        self.events = 0
        self.skipped = 0
        self.examples: list[str] = []

    def skip(self, why: str) -> None:
        self.skipped += 1
        if len(self.examples) < 5:
            self.examples.append(why)

    def add(self, events: list[_Event]) -> None:
        names = self.names
        threads = self.threads
        kn, kk, kts, kdur, kdev, kstr, kcor = self.k
        lc, lts, lth, lnm = self.l
        pts, pend, pth, pnm = self.p
        cts, cend, cth, cnm, cdm = self.c
        kcats = KERNEL_CATS
        lcats = LAUNCH_CATS
        self.events += len(events)
        for e in events:
            cat = e.cat
            if cat is None:
                continue
            if cat == "python_function" or cat == "cpu_op":
                ts, dur, name = e.ts, e.dur, e.name
                if ts is None or dur is None or name is None:
                    self.skip(f"{cat} event without ts/dur/name")
                    continue
                key = (e.pid, e.tid)
                th = threads.get(key)
                if th is None:
                    th = threads[key] = len(threads)
                nid = names.get(name)
                if nid is None:
                    nid = names[name] = len(names)
                if cat == "python_function":
                    pts.append(ts)
                    pend.append(ts + dur)
                    pth.append(th)
                    pnm.append(nid)
                else:
                    cts.append(ts)
                    cend.append(ts + dur)
                    cth.append(th)
                    cnm.append(nid)
                    a = e.args
                    d = a.input_dims if a is not None else None
                    if d is None:
                        cdm.append(0)
                    else:
                        s = bytes(d).decode("utf-8", "replace")
                        did = names.get(s)
                        if did is None:
                            did = names[s] = len(names)
                        cdm.append(did)
            elif cat in kcats:
                a = e.args
                if e.ts is None or e.dur is None or e.name is None or a is None or a.correlation is None:
                    self.skip(f"{cat} event without ts/dur/name/args.correlation")
                    continue
                name = e.name
                nid = names.get(name)
                if nid is None:
                    nid = names[name] = len(names)
                kn.append(nid)
                kk.append(kcats[cat])
                kts.append(e.ts)
                kdur.append(e.dur)
                kdev.append(a.device if a.device is not None else (e.pid if isinstance(e.pid, int) else -1))
                kstr.append(a.stream if a.stream is not None else (e.tid if isinstance(e.tid, int) else -1))
                kcor.append(a.correlation)
            elif cat in lcats:
                a = e.args
                if a is None or a.correlation is None:
                    continue
                if e.ts is None or e.name is None:
                    self.skip(f"{cat} event without ts/name")
                    continue
                key = (e.pid, e.tid)
                th = threads.get(key)
                if th is None:
                    th = threads[key] = len(threads)
                name = e.name
                nid = names.get(name)
                if nid is None:
                    nid = names[name] = len(names)
                lc.append(a.correlation)
                lts.append(e.ts)
                lth.append(th)
                lnm.append(nid)

    def finish(self, path: str, metadata: dict[str, Any]) -> RawTrace:
        f64, i32 = np.float64, np.int32
        kn, kk, kts, kdur, kdev, kstr, kcor = self.k
        lc, lts, lth, lnm = self.l
        pts, pend, pth, pnm = self.p
        cts, cend, cth, cnm, cdm = self.c
        k_corr, l_corr = _ids(kcor, lc)
        names = [""] * len(self.names)
        for s, i in self.names.items():
            names[i] = s
        threads = [("", "")] * len(self.threads)
        for t, i in self.threads.items():
            threads[i] = t
        return RawTrace(
            path=path, names=names, metadata=metadata, threads=threads,
            k_name=np.array(kn, dtype=i32), k_kind=np.array(kk, dtype=np.int8),
            k_ts=np.array(kts, dtype=f64), k_dur=np.array(kdur, dtype=f64),
            k_device=_int_col(kdev), k_stream=_int_col(kstr), k_corr=k_corr,
            l_corr=l_corr, l_ts=np.array(lts, dtype=f64), l_thread=np.array(lth, dtype=i32),
            l_name=np.array(lnm, dtype=i32),
            p_ts=np.array(pts, dtype=f64), p_end=np.array(pend, dtype=f64),
            p_thread=np.array(pth, dtype=i32), p_name=np.array(pnm, dtype=i32),
            c_ts=np.array(cts, dtype=f64), c_end=np.array(cend, dtype=f64),
            c_thread=np.array(cth, dtype=i32), c_name=np.array(cnm, dtype=i32),
            c_dims=np.array(cdm, dtype=i32),
            event_count=self.events, skipped=self.skipped, skipped_examples=list(self.examples),
        )


def _int_col(values: list) -> np.ndarray:
    try:
        return np.array(values, dtype=np.int64)
    except (OverflowError, ValueError, TypeError):
        return np.array([v if isinstance(v, int) and -(2**63) <= v < 2**63 else -1 for v in values], dtype=np.int64)


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


def _check_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.exists():
        raise FileMissingError("trace file not found", path=p, hint="pass a Kineto .json or .json.gz file")
    if p.is_dir():
        raise FileMissingError("trace path is a directory, expected a .json or .json.gz file", path=p)
    if p.stat().st_size == 0:
        raise TraceFormatError("trace file is empty", path=p, hint="re-export the profiler trace")
    return p


def _is_gzip(p: Path) -> bool:
    with open(p, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _open(p: Path):
    return gzip.open(p, "rb") if _is_gzip(p) else open(p, "rb")


def _read_errors(p: Path, exc: BaseException) -> TraceFormatError:
    if isinstance(exc, EOFError):
        return TraceFormatError("gzip stream is truncated (file ended before the end-of-stream marker)", path=p,
                                hint="the file was cut short; copy or export it again")
    if isinstance(exc, (gzip.BadGzipFile, zlib.error)):
        return TraceFormatError(f"corrupt gzip data: {exc}", path=p, hint="the file is damaged; export it again")
    return TraceFormatError(f"cannot read trace: {exc}", path=p)


def _decode_chunk(text: bytes, coll: _Collector) -> bool:
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
                coll.skip(f"event with odd field types ({exc})")
        coll.add(events)
        return True
    except msgspec.DecodeError:
        return False
    coll.add(events)
    return True


class _FallBack(Exception):
    pass


def _stream(p: Path, coll: _Collector, progress: Optional[Callable[[int], None]]) -> dict[str, Any]:
    """Streaming decode; raises _FallBack when the layout is not the usual ``{..."traceEvents": [...]...}``."""
    with _open(p) as f:
        head = f.read(_BLOCK)
        m = re.search(rb'"traceEvents"\s*:\s*\[', head)
        if not m:
            raise _FallBack()
        try:
            meta = _any_dec.decode(head[: m.start()] + b'"__ks":0}')
        except msgspec.DecodeError:
            raise _FallBack() from None
        if not isinstance(meta, dict):
            raise _FallBack()
        meta.pop("__ks", None)
        pending = head[m.end():]
        done_bytes = len(head)
        eof = False
        while True:
            if not eof:
                block = f.read(_BLOCK)
                if not block:
                    eof = True
                data = pending + block if block else pending
                done_bytes += len(block)
                if progress:
                    progress(done_bytes)
            else:
                data = pending
            if eof:
                tail_meta = _finish_tail(data, coll)
                if tail_meta is None:
                    raise _FallBack()
                meta.update(tail_meta)
                return meta
            # cut at the last event boundary in the final part of the buffer
            window_start = max(0, len(data) - (1 << 20))
            cuts = [mm.start() + 1 for mm in _BOUNDARY.finditer(data, window_start)]
            ok = False
            for cut in reversed(cuts[-3:]):
                if _decode_chunk(b"[" + data[:cut] + b"]", coll):
                    nxt = data.index(b"{", cut)
                    pending = data[nxt:]
                    ok = True
                    break
            if not ok:
                if len(data) > 64 * _BLOCK:
                    raise _FallBack()
                pending = data


def _finish_tail(data: bytes, coll: _Collector) -> Optional[dict[str, Any]]:
    q = len(data)
    for _ in range(64):
        q = data.rfind(b"]", 0, q)
        if q < 0:
            return None
        trailer = data[q + 1:]
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
    with _open(p) as f:
        blob = f.read()
    if not blob.strip():
        raise TraceFormatError("trace file is empty", path=p)
    try:
        top = _top_dec.decode(blob)
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


def load_trace(path: str | os.PathLike, progress: Optional[Callable[[int, int], None]] = None) -> RawTrace:
    """Load a Kineto trace into numpy columns. ``progress(done_bytes, total_bytes_estimate)``."""
    p = _check_path(path)
    total = _size_hint(p)
    cb = (lambda done: progress(min(done, total), total)) if progress else None
    gc_was = gc.isenabled()
    gc.disable()
    try:
        coll = _Collector()
        try:
            meta = _stream(p, coll, cb)
        except _FallBack:
            coll = _Collector()
            meta = _whole(p, coll)
        except msgspec.DecodeError as exc:  # pragma: no cover - defensive
            raise TraceFormatError(f"not valid JSON ({exc})", path=p) from None
    except (EOFError, OSError, zlib.error) as exc:
        if isinstance(exc, FileNotFoundError):
            raise FileMissingError("trace file not found", path=p) from None
        raise _read_errors(p, exc) from None
    finally:
        if gc_was:
            gc.enable()
    if coll.events == 0 and not meta:
        raise TraceFormatError("trace has no events", path=p)
    return coll.finish(str(p), meta)


def _size_hint(p: Path) -> int:
    """Decompressed size estimate (gzip ISIZE field, mod 4 GiB) for progress."""
    size = p.stat().st_size
    if not _is_gzip(p):
        return size
    try:
        with open(p, "rb") as f:
            f.seek(-4, os.SEEK_END)
            isize = int.from_bytes(f.read(4), "little")
        return max(isize, size)
    except OSError:
        return size * 8
