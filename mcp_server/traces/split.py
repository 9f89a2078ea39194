"""The split decode: a large trace is decoded by two processes, this one and a helper.

The helper (``python -S -m mcp_server.traces.split_child``: only the loader's modules are imported, about
0.1 s to start) inflates and skips to ``SPLIT_SHARE`` of the text, starts at the first event boundary
there and decodes to the end with the same cut loop, chunk decoder and size/ratio guards
(``stream.decode_rest``); it hands back its collector's state and the trailing metadata, pickled on its
stdout. This process decodes up to that boundary and absorbs the helper's part (``stream._cut_loop``).
Anything unusual there (damaged data, another layout, a crash) makes the helper answer "no": this process
then decodes the rest itself, so every error is raised here, as without a split. The helper inherits this
process's limits (RLIMIT_AS), dies with it (PR_SET_PDEATHSIG) and is killed on every exit from
``stream.stream``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from mcp_server.core.envvars import env
from mcp_server.traces._reader import compression

SPLIT_MIN = 128 << 20  # less text is decoded in one process: the helper costs ~0.2 s of CPU (90 MB: 1.12 vs 1.07 s)
SPLIT_SHARE = 0.58  # share of the text decoded here: the helper first starts Python and skips to its part
SPLIT_WAIT = 600.0  # seconds the helper may take after this process finished its part
CHILD_MODULE = "mcp_server.traces.split_child"


def split_point(p: Path, head_len: int) -> Optional[int]:
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
    size = text_size(p)
    if size is None:
        return None
    if mode != "force" and (cpus < 2 or size < SPLIT_MIN):
        return None
    at = int(size * SPLIT_SHARE)
    return at if at > head_len else None


def text_size(p: Path) -> Optional[int]:
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
    except Exception:  # OSError, no zstandard, zstandard.ZstdError on a damaged header
        return None


def _child_env(root: str) -> dict[str, str]:
    """The helper's environment: this process's import path (it runs without site), no split of its own,
    no BLAS thread pool."""
    child = dict(os.environ)
    child["PYTHONPATH"] = os.pathsep.join([root] + [x for x in sys.path if x])
    child["KERNELSCOPE_TRACE_SPLIT"] = "off"
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        child[var] = "1"  # the helper does no linear algebra: no BLAS thread pool to start
    return child


class Split:
    """The helper process that decodes the text from ``at`` on (``split_child``)."""

    def __init__(self, proc: subprocess.Popen, at: int, total: int) -> None:
        self.proc, self.at = proc, at
        self.scale = total / max(at, 1)

    @classmethod
    def start(cls, p: Path, at: int, bare: bool) -> Optional["Split"]:
        import mcp_server

        root = str(Path(mcp_server.__file__).resolve().parent.parent)
        # run from the directory that holds the package: ``-m`` puts the working directory first on the path
        argv = [sys.executable, "-S", "-m", CHILD_MODULE, os.path.abspath(p), str(at), "1" if bare else "0",
                str(os.getpid())]
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, env=_child_env(root), cwd=root, close_fds=True)
        except OSError:
            return None
        return cls(proc, at, text_size(p) or at)

    def result(self, cut: int) -> Optional[tuple[dict[str, Any], dict[str, Any]]]:
        """(tail metadata, collector state) when the helper decoded the rest from boundary ``cut``, else None."""
        import pickle

        assert self.proc.stdout is not None
        try:
            data = self.proc.stdout.read()
            rc = self.proc.wait(SPLIT_WAIT)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if rc != 0 or not data:
            return None
        try:
            got = pickle.loads(data)  # written by split_child of this package, never by trace content
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
