"""Supervised worker processes: one hostile input cannot take the MCP server down.

The server runs every engine call in a warm worker process (docs/ARCHITECTURE.md,
"Isolation"). A worker has an address-space limit (``KERNELSCOPE_WORKER_MEMORY``,
default 8 GiB) and every call a time limit; a worker that aborts (a native
crash), runs out of memory or overruns is killed and replaced, and its call
answers a typed error naming what happened. Other calls and the server are
untouched. Inputs are request dicts and answers are JSON-able dicts, so the
parent rebuilds the result model without re-running anything.

Operations that execute user code or GPU programs (``Hints.runs_code``: run_ncu,
validate_candidate, the loop, the kernel benches) run without
the address-space limit, since CUDA reserves large virtual ranges; they bound
their own child processes with time limits.

Workers are started with ``spawn`` (never ``fork`` from a threaded server) and
send their stdout to stderr: on stdio the server's stdout is the protocol.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from mcp_server.core.envvars import default
from mcp_server.core.errors import KernelscopeError, redact
from mcp_server.core.limits import (  # noqa: F401  (re-exported)
    DEFAULT_MEMORY,
    apply_memory_limit,
    env_seconds,
    memory_limit,
    parse_size,
)

DEFAULT_CALL_TIMEOUT_S = float(default("KERNELSCOPE_CALL_TIMEOUT"))
#: extra seconds granted over a request's own ``timeout_s``, for start-up and teardown
TIMEOUT_MARGIN_S = 30.0


class WorkerLimitError(KernelscopeError):
    """A call overran its time limit or its worker died (native crash, out of memory)."""


@dataclass(frozen=True)
class Limits:
    memory_bytes: Optional[int]
    timeout_s: float


def executes_code(op: Any) -> bool:
    """Operations that run user or GPU code (``Hints.runs_code``): CUDA needs the address space."""
    return bool(op.hints.runs_code)


def limits_for(op: Any, args: dict[str, Any]) -> Limits:
    """The memory and time limits of one call of ``op``."""
    memory = None if executes_code(op) else memory_limit()
    timeout = env_seconds("KERNELSCOPE_CALL_TIMEOUT", DEFAULT_CALL_TIMEOUT_S)
    own = args.get("timeout_s")
    if isinstance(own, (int, float)) and own > 0:
        timeout = max(timeout, float(own) + TIMEOUT_MARGIN_S)
    return Limits(memory_bytes=memory, timeout_s=timeout)


def _worker_main(conn: Any, memory: Optional[int]) -> None:
    """The worker loop: one call at a time, answers as plain data."""
    os.dup2(2, 1)  # never write to the protocol channel
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    apply_memory_limit(memory)
    from pydantic import ValidationError

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        # the Operation itself (its models and engine importable by name), the server's environment at call
        # time (so a warm worker sees what a fresh one would) and the roots the call is confined to
        op, args, env, roots = msg
        tool = op.tool
        if env != dict(os.environ):
            os.environ.clear()
            os.environ.update(env)

        def progress(done: float, total: float | None = None, message: str | None = None) -> None:
            try:
                conn.send(("progress", (done, total, message)))
            except Exception:
                pass

        from mcp_server.faces.registry import shape

        try:
            req = op.make_request(args)
            res = shape(op.call(req, progress if op.progress else None, roots=roots), req)
            conn.send(("ok", res.model_dump(mode="json")))
        except ValidationError as exc:
            from mcp_server.core.operation import invalid_arguments
            conn.send(("error", invalid_arguments(tool, exc)))
        except KernelscopeError as exc:
            conn.send(("error", str(exc)))
        except MemoryError:
            conn.send(("error", f"{tool}: out of memory under the worker's limit "
                                f"({(memory or 0) >> 20} MiB; raise KERNELSCOPE_WORKER_MEMORY)"))
        except RecursionError:
            conn.send(("error", f"{tool}: input nested too deeply to process"))
        except BaseException as exc:  # noqa: BLE001 - report, never die silently
            text = redact(str(exc))[:500]
            conn.send(("internal", f"{tool}: internal error ({type(exc).__name__}): {text}"))


class _Worker:
    def __init__(self, ctx: Any, memory: Optional[int]):
        self.memory = memory
        self.conn, child = ctx.Pipe()
        # not daemonic: a call may start processes of its own (the trace-set ranks); the pool kills its
        # workers at exit (atexit, before multiprocessing joins its children)
        self.proc = ctx.Process(target=_worker_main, args=(child, memory), daemon=False)
        self.proc.start()
        child.close()

    def alive(self) -> bool:
        return self.proc.is_alive()

    def kill(self) -> None:
        try:
            self.proc.kill()
        except Exception:
            pass
        self.proc.join(timeout=5)
        try:
            self.conn.close()
        except Exception:
            pass


def _death_reason(code: Optional[int]) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}" + (" (a native crash in a reader)" if name == "SIGABRT" else "")
    return f"exited with status {code}"


class WorkerPool:
    """Warm workers keyed by memory limit; at most ``size`` calls run at once."""

    def __init__(self, size: Optional[int] = None):
        self.size = size or max(2, min(8, os.cpu_count() or 2))
        self._ctx = mp.get_context("spawn")
        self._idle: dict[Optional[int], list[_Worker]] = {}
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.size)
        import atexit
        import multiprocessing.util  # noqa: F401  (registers its own exit hook, which joins live children, first:
        # hooks run last-registered first, so this pool's kill runs before that join)

        atexit.register(self.close)

    def _take(self, memory: Optional[int]) -> _Worker:
        with self._lock:
            idle = self._idle.setdefault(memory, [])
            while idle:
                w = idle.pop()
                if w.alive():
                    return w
                w.kill()
        return _Worker(self._ctx, memory)

    def _give_back(self, w: _Worker) -> None:
        with self._lock:
            idle = self._idle.setdefault(w.memory, [])
            if len(idle) < self.size:
                idle.append(w)
                return
        w.conn.send(None)
        w.kill()

    def call(self, op: Any, args: dict[str, Any], progress: Optional[Callable[..., None]] = None,
             cancelled: Callable[[], bool] = lambda: False, roots: Optional[list[Any]] = None) -> dict[str, Any]:
        """Run one call in a worker (blocking; call from a thread). Returns the answer as JSON data.
        ``roots``: the directories the call is confined to (the MCP face's; None: not confined)."""
        lim = limits_for(op, args)
        with self._slots:
            w = self._take(lim.memory_bytes)
            deadline = time.monotonic() + lim.timeout_s
            try:
                w.conn.send((op, args, dict(os.environ), None if roots is None else [str(r) for r in roots]))
                while True:
                    if cancelled():
                        w.kill()
                        raise WorkerLimitError(f"{op.tool}: cancelled by the client; its worker was stopped")
                    left = deadline - time.monotonic()
                    if left <= 0:
                        w.kill()
                        raise WorkerLimitError(
                            f"{op.tool}: over its time limit of {lim.timeout_s:.0f} s; the call was stopped",
                            hint="pass a larger timeout_s where the tool takes one, or set KERNELSCOPE_CALL_TIMEOUT")
                    if not w.conn.poll(min(left, 0.2)):
                        if not w.alive():
                            raise self._died(op, w, lim)
                        continue
                    try:
                        kind, payload = w.conn.recv()
                    except (EOFError, OSError):
                        raise self._died(op, w, lim) from None
                    if kind == "progress":
                        if progress is not None:
                            progress(*payload)
                        continue
                    self._give_back(w)
                    if kind == "ok":
                        return payload
                    raise KernelscopeError(payload) if kind == "error" else WorkerLimitError(payload)
            except (KeyboardInterrupt, SystemExit):
                w.kill()
                raise

    def _died(self, op: Any, w: _Worker, lim: Limits) -> WorkerLimitError:
        w.proc.join(timeout=2)
        code = w.proc.exitcode
        w.kill()
        mem = f"; its memory limit was {lim.memory_bytes >> 20} MiB" if lim.memory_bytes else ""
        return WorkerLimitError(
            f"{op.tool}: the worker {_death_reason(code)} while handling this input{mem}; "
            "the server keeps serving", hint="check the input file; raise KERNELSCOPE_WORKER_MEMORY if it is genuine")

    def close(self) -> None:
        with self._lock:
            workers = [w for ws in self._idle.values() for w in ws]
            self._idle.clear()
        for w in workers:
            w.kill()
