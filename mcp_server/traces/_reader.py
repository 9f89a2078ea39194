"""Stdlib-only part of the trace loader: path checks and the read-ahead block reader.

Kept free of numpy/pandas/msgspec imports so ``analyze_trace`` can start
decompressing on a helper thread before the heavy modules are imported.

gzip is inflated by the fastest installed backend: ISA-L (``isal.igzip``), else zlib-ng
(``zlib_ng.gzip_ng``), else the standard library; ``KERNELSCOPE_TRACE_GZIP=isal|zlib-ng|stdlib``
picks one (tests compare them). All three release the GIL while inflating, so the read-ahead
thread's inflation overlaps the caller's decoding. ``.json.zst`` (zstd magic) is read with
``zstandard`` when installed. The same size and ratio guards apply to every backend.
"""
from __future__ import annotations

import contextlib
import gzip
import os
import queue
import threading
import zlib
from pathlib import Path
from typing import Any, Iterator

from mcp_server.core.envvars import env
from mcp_server.core.errors import FileMissingError, TraceFormatError
from mcp_server.core.limits import human, limit, over

BLOCK = 8 << 20
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
GZIP_BACKENDS = ("isal", "zlib-ng", "stdlib")
AHEAD = 8  # blocks the reader may run ahead (bounded memory: AHEAD * BLOCK)
RATIO_AFTER = 64 << 20  # the compression-ratio guard starts once this much text came out


def check_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.exists():
        raise FileMissingError("trace file not found", path=p, hint="pass a Kineto .json or .json.gz file")
    if p.is_dir():
        raise FileMissingError("trace path is a directory, expected a .json or .json.gz file", path=p)
    if not p.is_file():  # a FIFO, socket or device: reading could block forever or never end
        raise FileMissingError("not a regular file (a FIFO, socket or device); a trace is read from a file",
                               path=p, hint="save the trace to a file first")
    if p.stat().st_size == 0:
        raise TraceFormatError("trace file is empty", path=p, hint="re-export the profiler trace")
    return p


def compression(p: Path) -> str:
    """``"gzip"``, ``"zstd"`` or ``""`` (plain text), from the file's magic bytes."""
    with open(p, "rb") as f:
        head = f.read(4)
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head == ZSTD_MAGIC:
        return "zstd"
    return ""


def gzip_backend(name: "str | None" = None) -> str:
    """The gzip backend to use: ``name``, else ``KERNELSCOPE_TRACE_GZIP``, else the fastest installed."""
    want = name or (env("KERNELSCOPE_TRACE_GZIP") or "").strip().lower() or None
    if want is not None and want not in GZIP_BACKENDS:
        raise TraceFormatError("KERNELSCOPE_TRACE_GZIP names no gzip backend" if name is None else
                               f"unknown gzip backend {want!r}",
                               hint="use one of: " + ", ".join(GZIP_BACKENDS))
    for b in GZIP_BACKENDS if want is None else (want,):
        if _gzip_class(b) is not None:
            return b
    pkg = "isal" if want == "isal" else "zlib-ng"
    raise TraceFormatError(f"gzip backend {want!r} is not installed",
                           hint=f"pip install {pkg}, or unset KERNELSCOPE_TRACE_GZIP")


def _gzip_class(name: str) -> Any:
    """The gzip file class of backend ``name``; None when its package is not installed."""
    try:
        if name == "isal":
            from isal import igzip
            return igzip.IGzipFile
        if name == "zlib-ng":
            from zlib_ng import gzip_ng
            return gzip_ng.GzipFile
    except ImportError:
        return None
    return gzip.GzipFile


def decompress_errors() -> tuple:
    """Exception classes the installed decompressors raise on damaged data (besides EOFError/OSError)."""
    import importlib

    errs: list = [zlib.error]
    for module, name in (("isal.isal_zlib", "error"), ("zlib_ng.zlib_ng", "error"), ("zstandard", "ZstdError")):
        try:
            errs.append(getattr(importlib.import_module(module), name))
        except ImportError:
            pass
    return tuple(errs)


def _zstd_reader(p: Path, raw: Any) -> Any:
    try:
        import zstandard
    except ImportError:
        raw.close()
        raise TraceFormatError("the trace is zstd-compressed and the zstandard package is not installed", path=p,
                               hint="pip install zstandard, or decompress it first (zstd -d)") from None
    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=False)


class GuardedReader(contextlib.AbstractContextManager["GuardedReader"]):
    """Decompressed text of a trace, read in blocks with the size and ratio guards applied.

    ``KERNELSCOPE_MAX_TRACE_BYTES`` bounds the text; for gzip and zstd files ``KERNELSCOPE_MAX_TRACE_RATIO`` bounds
    text / compressed bytes consumed so far once ``RATIO_AFTER`` bytes came out (a gzip of zeros reaches
    1000:1; profiler JSON is 5-30:1). ``cap`` (optional) is a tighter bound on the text for one use.
    """

    def __init__(self, p: Path, cap: "tuple[str, int] | None" = None) -> None:
        self.p = p
        kind = compression(p)
        self.raw = open(p, "rb")
        self.gz = bool(kind)  # compressed: the ratio guard applies
        try:
            if kind == "gzip":
                self.f = _gzip_class(gzip_backend())(fileobj=self.raw, mode="rb")
            elif kind == "zstd":
                self.f = _zstd_reader(p, self.raw)
            else:
                self.f = self.raw
        except BaseException:
            self.raw.close()
            raise
        self.out = 0
        self.max_bytes = limit("TRACE_BYTES")
        self.max_ratio = limit("TRACE_RATIO")
        self.cap = cap

    def read(self, n: int) -> bytes:
        b = self.f.read(n)
        self.out += len(b)
        if self.out > self.max_bytes:
            raise over("TRACE_BYTES", "the decompressed trace text", path=self.p, unit="bytes")
        if self.cap is not None and self.out > self.cap[1]:
            raise over(self.cap[0], "the decompressed text of a trace whose layout cannot be streamed "
                       "(no 'traceEvents' array found to stream)", path=self.p, unit="bytes")
        if self.gz and self.out > RATIO_AFTER:
            used = max(self.raw.tell(), 1)
            if self.out > self.max_ratio * used:
                raise over("TRACE_RATIO", "the gzip compression ratio", f"{self.out // used}:1 after "
                           f"{human(self.out)} of text", path=self.p)
        return b

    def read_all(self) -> bytes:
        """The whole (remaining) text, read in ``BLOCK``-sized guarded reads."""
        return b"".join(iter(lambda: self.read(BLOCK), b""))

    def skip(self, n: int) -> int:
        """Move ``n`` bytes into the text (plain files seek; compressed ones inflate and discard, guarded).
        Returns the bytes skipped (fewer at the end of the text)."""
        if not self.gz:
            size = os.fstat(self.raw.fileno()).st_size
            n = max(0, min(n, size - self.raw.tell()))
            self.raw.seek(n, os.SEEK_CUR)
            self.out += n
            if self.out > self.max_bytes:
                raise over("TRACE_BYTES", "the decompressed trace text", path=self.p, unit="bytes")
            return n
        done = 0
        while done < n:
            b = self.read(min(BLOCK, n - done))
            if not b:
                break
            done += len(b)
        return done

    def close(self) -> None:
        try:
            if self.gz:
                self.f.close()
        finally:
            self.raw.close()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def blocks(p: Path, block: int = BLOCK, start: int = 0, ahead: int = AHEAD) -> "BlockReader":
    """Decompressed blocks of the file, read ahead by a helper thread started now.

    zlib releases the GIL while inflating, so decompression overlaps the
    caller's imports and decoding. At most ``ahead`` blocks wait in the queue.
    The last block yielded is ``b""``. Close the iterator to stop the thread.
    ``start``: the first block begins this many bytes into the text (``BlockReader.skipped`` says how many
    were skipped; fewer when the text is shorter). ``BlockReader.pause_at(n)`` makes the thread wait once it
    has read ``n`` bytes of text, until the consumer asks for a block the queue does not hold.
    """
    return BlockReader(p, block, start, ahead)


class BlockReader(Iterator[bytes]):
    """Iterator over the reader thread's blocks; ``close()`` stops the thread even if never iterated."""

    def __init__(self, p: Path, block: int, start: int, ahead: int) -> None:
        self._q: "queue.Queue[tuple[str, Any]]" = queue.Queue(maxsize=ahead)
        self._stop = threading.Event()
        self._resume = threading.Event()
        self._paused = threading.Event()
        self._pause = 0  # bytes of text after which the thread waits for ``_resume`` (0: never)
        self.skipped = 0  # bytes of text skipped before the first block (``start``); valid once a block was read
        self._done = False
        self._t = threading.Thread(target=self._work, args=(p, block, start), name="kernelscope-trace-reader",
                                   daemon=True)
        self._t.start()

    def _work(self, p: Path, block: int, start: int) -> None:
        try:
            with GuardedReader(p) as f:
                if start:
                    self.skipped = f.skip(start)
                while not self._stop.is_set():
                    if self._pause and f.out >= self._pause and not self._resume.is_set():
                        self._paused.set()
                        while not self._resume.wait(0.05):
                            if self._stop.is_set():
                                return
                    b = f.read(block)
                    self._q.put(("data", b))
                    if not b:
                        return
        except BaseException as exc:  # handed to the consumer
            self._q.put(("error", exc))

    def pause_at(self, n: int) -> None:
        """Let the thread read no more than about ``n`` bytes of text ahead unless a block is asked for."""
        self._pause = n

    def __next__(self) -> bytes:
        if self._done:
            raise StopIteration
        while True:
            try:
                kind, item = self._q.get(timeout=0.05) if self._pause else self._q.get()
                break
            except queue.Empty:
                if self._paused.is_set():
                    self._resume.set()
        if kind == "error":
            self.close()
            raise item
        if not item:
            self._done = True
        return item

    def close(self) -> None:
        self._done = True
        self._stop.set()
        while self._t.is_alive():
            try:
                self._q.get_nowait()
            except queue.Empty:
                self._t.join(0.01)
