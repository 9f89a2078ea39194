"""Kineto (PyTorch profiler) trace loader: ``load_trace`` reads a trace into the numpy columns the analyzer uses.

Reads ``.json``, ``.json.gz`` or ``.json.zst`` (detected by the magic bytes, not the suffix). The work is
cut by stage, one module each:

* ``_reader``: the read-ahead thread that inflates the file into 8 MB blocks of text, with the size and
  ratio guards (stdlib only, so it starts before the heavy imports);
* ``stream``: cuts the text at event boundaries and decodes each chunk in place as blocks arrive (the one
  cut loop); a trace of 128 MiB or more on two or more cores is decoded by two processes (``split``,
  whose helper is ``split_child``);
* ``events``: what an event is (the categories kept, the msgspec structs decoded into, ids spelled
  several ways); ``collector``: decoded chunks -> columns (damaged events skipped and counted);
* ``columns``: ``RawTrace`` and the merge of the parts with canonical intern ids.

This module ties them together: the cyclic GC is off during the load (``gc_paused``), a layout the stream
cannot cut (e.g. no ``traceEvents`` key in the first 64 MB) is decoded as a whole document instead
(bounded by ``KERNELSCOPE_MAX_TRACE_UNSTREAMED_BYTES``), and read or decode failures become typed errors
that name the file. The count of damaged events is returned so the caller can warn.
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any, Callable, Optional

import msgspec

from mcp_server.core.errors import FileMissingError, TraceFormatError
from mcp_server.core.limits import limit
from mcp_server.traces._reader import BlockReader, GuardedReader, check_path, compression, decompress_errors
from mcp_server.traces.collector import Collector, decode_chunk, gc_paused
from mcp_server.traces.columns import RawTrace
from mcp_server.traces.events import GRAPH_LAUNCH_NAMES, KIND_NAMES, launch_kind, phase_of_annotation, top_dec
from mcp_server.traces.stream import FallBack, stream

__all__ = ["load_trace", "RawTrace", "gc_paused", "KIND_NAMES", "GRAPH_LAUNCH_NAMES", "launch_kind",
           "phase_of_annotation"]

_DECOMPRESS_ERRORS = decompress_errors()  # zlib.error and the fast backends' own error classes


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
            coll = Collector()
            try:
                meta = stream(p, coll, cb, blocks)
            except FallBack:
                coll = Collector()
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


def _whole(p: Path, coll: Collector) -> dict[str, Any]:
    """Decode a trace whose layout cannot be streamed in one piece: bounded by
    ``KERNELSCOPE_MAX_TRACE_UNSTREAMED_BYTES`` (real traces always stream), and the size/ratio guards."""
    with GuardedReader(p, cap=("TRACE_UNSTREAMED_BYTES", limit("TRACE_UNSTREAMED_BYTES"))) as f:
        blob = f.read_all()
    if not blob.strip():
        raise TraceFormatError("trace file is empty", path=p)
    try:
        top = top_dec.decode(blob)
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
        if not decode_chunk(b"[" + b",".join(bytes(r) for r in part) + b"]", coll):
            raise TraceFormatError("traceEvents holds invalid JSON", path=p)
    return meta


def _read_errors(p: Path, exc: BaseException) -> TraceFormatError:
    if isinstance(exc, EOFError):
        return TraceFormatError("gzip stream is truncated (file ended before the end-of-stream marker)", path=p,
                                hint="the file was cut short; copy or export it again")
    if compression(p) == "zstd" and isinstance(exc, _DECOMPRESS_ERRORS):
        return TraceFormatError(f"corrupt zstd data: {exc}", path=p, hint="the file is damaged; export it again")
    if isinstance(exc, (gzip.BadGzipFile, *_DECOMPRESS_ERRORS)):
        return TraceFormatError(f"corrupt gzip data: {exc}", path=p, hint="the file is damaged; export it again")
    return TraceFormatError(f"cannot read trace: {exc}", path=p)
