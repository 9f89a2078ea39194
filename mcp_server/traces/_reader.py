"""Stdlib-only part of the trace loader: path checks and the read-ahead block reader.

Kept free of numpy/pandas/msgspec imports so ``analyze_trace`` can start
decompressing on a helper thread before the heavy modules are imported.
"""
from __future__ import annotations

import gzip
import os
import queue
import threading
from pathlib import Path
from typing import Any

from mcp_server.errors import FileMissingError, TraceFormatError
from mcp_server.limits import human, limit, over

BLOCK = 8 << 20
AHEAD = 8  # blocks the reader may run ahead (bounded memory: AHEAD * BLOCK)
RATIO_AFTER = 64 << 20  # the compression-ratio guard starts once this much text came out


def check_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    if not p.exists():
        raise FileMissingError("trace file not found", path=p, hint="pass a Kineto .json or .json.gz file")
    if p.is_dir():
        raise FileMissingError("trace path is a directory, expected a .json or .json.gz file", path=p)
    if p.stat().st_size == 0:
        raise TraceFormatError("trace file is empty", path=p, hint="re-export the profiler trace")
    return p


def is_gzip(p: Path) -> bool:
    with open(p, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def open_trace(p: Path):
    return gzip.open(p, "rb") if is_gzip(p) else open(p, "rb")


class GuardedReader:
    """Decompressed text of a trace, read in blocks with the size and ratio guards applied.

    ``KERNELSCOPE_MAX_TRACE_BYTES`` bounds the text; for gzip files ``KERNELSCOPE_MAX_TRACE_RATIO`` bounds
    text / compressed bytes consumed so far once ``RATIO_AFTER`` bytes came out (a gzip of zeros reaches
    1000:1; profiler JSON is 5-30:1). ``cap`` (optional) is a tighter bound on the text for one use.
    """

    def __init__(self, p: Path, cap: "tuple[str, int] | None" = None) -> None:
        self.p = p
        self.raw = open(p, "rb")
        self.gz = is_gzip(p)
        self.f = gzip.GzipFile(fileobj=self.raw, mode="rb") if self.gz else self.raw
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

    def close(self) -> None:
        try:
            if self.gz:
                self.f.close()
        finally:
            self.raw.close()

    def __enter__(self) -> "GuardedReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def blocks(p: Path, block: int = BLOCK) -> "BlockReader":
    """Decompressed blocks of the file, read ahead by a helper thread started now.

    zlib releases the GIL while inflating, so decompression overlaps the
    caller's imports and decoding. At most ``AHEAD`` blocks wait in the queue.
    The last block yielded is ``b""``. Close the iterator to stop the thread.
    """
    q: "queue.Queue[tuple[str, Any]]" = queue.Queue(maxsize=AHEAD)
    stop = threading.Event()

    def work() -> None:
        try:
            with GuardedReader(p) as f:
                while not stop.is_set():
                    b = f.read(block)
                    q.put(("data", b))
                    if not b:
                        return
        except BaseException as exc:  # handed to the consumer
            q.put(("error", exc))

    t = threading.Thread(target=work, name="kernelscope-trace-reader", daemon=True)
    t.start()
    return BlockReader(q, stop, t)


class BlockReader:
    """Iterator over the reader thread's blocks; ``close()`` stops the thread even if never iterated."""

    def __init__(self, q: "queue.Queue[tuple[str, Any]]", stop: threading.Event, thread: threading.Thread) -> None:
        self._q, self._stop, self._t = q, stop, thread
        self._done = False

    def __iter__(self) -> "BlockReader":
        return self

    def __next__(self) -> bytes:
        if self._done:
            raise StopIteration
        kind, item = self._q.get()
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
