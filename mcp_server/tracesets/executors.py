"""Where the per-rank work runs: a local process pool (default), Ray, or this process.

Every executor takes the same ``RankTask`` list and yields, as ranks finish,
``(task, summary_dict, None)`` or ``(task, None, error_message)``: one rank that
fails (a bad trace, a worker killed by its memory limit, a Ray task error) is
reported and the others go on (docs/ARCHITECTURE.md, "Trace sets").
"""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, replace
from typing import Any, Iterator, Optional

from mcp_server.core.errors import InputError, KernelscopeError, SourceError, ToolMissingError, redact
from mcp_server.tracesets.worker import RankTask, summarize_rank

Outcome = tuple[RankTask, Optional[dict[str, Any]], Optional[str]]
#: a Ray instance started here gets this much object store (the answers are small dicts)
RAY_OBJECT_STORE = 128 << 20


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; the machine's count where there is none)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def default_workers(n_tasks: int) -> int:
    return max(1, min(n_tasks, available_cpus()))


#: the bound on local workers is the CPUs this process may use, and never below this (small machines and CI)
MIN_WORKER_BOUND = 4


def max_workers() -> int:
    """Local workers a trace-set call may start: the CPUs this process may use, at least ``MIN_WORKER_BOUND``."""
    return max(available_cpus(), MIN_WORKER_BOUND)


def check_workers(executor: str, workers: Optional[int], ray_address: Optional[str]) -> None:
    """Refuse more local workers than this process has CPUs: a rank's analysis is CPU-bound, so more only adds
    processes that each hold a trace in memory (64 workers on 2,000 traces took 3.9 GB, 400 took 10 GB). Checked
    before any worker starts; the inline executor and a remote Ray cluster start none here."""
    if workers is None or executor == "inline" or (executor == "ray" and ray_address):
        return
    cap = max_workers()
    if workers > cap:
        raise InputError(f"workers={workers} is over the bound on local workers, {cap} (the CPUs this process may "
                         f"use, at least {MIN_WORKER_BOUND})", hint=f"pass workers of at most {cap}, or leave it unset")


_OUT_OF_MEMORY = ("out of memory under the worker's address-space limit (raise worker_memory, e.g. 16G, or 0 for "
                  "none)")
#: how an import or mmap refused by the address-space limit reads
_MAP_FAILED = ("failed to map segment", "Cannot allocate memory", "cannot allocate memory")


def _message(exc: BaseException) -> str:
    """One line for a rank that failed: the typed error as is, anything else by its first line."""
    if isinstance(exc, KernelscopeError):
        return str(exc)
    text = str(exc)
    refused_map = isinstance(exc, (ImportError, OSError)) and any(m in text for m in _MAP_FAILED)
    if isinstance(exc, MemoryError) or refused_map:
        return _OUT_OF_MEMORY
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return redact(f"{type(exc).__name__}: {first[:300]}")


def _init(memory: Optional[int], parent: int) -> None:
    from mcp_server.core.limits import apply_memory_limit, die_with_parent

    die_with_parent(parent)
    apply_memory_limit(memory)


def _pool(workers: int, memory: Optional[int]) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                               initializer=_init, initargs=(memory, os.getpid()))


def run_inline(tasks: list[RankTask]) -> Iterator[Outcome]:
    """In this process, one rank after another (debugging; the CLI's --executor inline)."""
    for t in tasks:
        try:
            yield t, summarize_rank(asdict(t)), None
        except (KernelscopeError, MemoryError, ValueError, OSError) as exc:
            yield t, None, _message(exc)


def run_pool(tasks: list[RankTask], workers: int, memory: Optional[int]) -> Iterator[Outcome]:
    """A spawn process pool; a worker that dies takes only its own rank down.

    When a worker dies (native crash, memory limit) the pool breaks and every unfinished rank is
    re-run alone in a fresh one-worker pool, so the rank that kills its worker is the one reported."""
    pending = [replace(t, trace_split="off") for t in tasks] if workers > 1 else list(tasks)
    lone = False
    while pending:
        retry: list[RankTask] = []
        width = 1 if lone else min(workers, len(pending))
        batches = [[t] for t in pending] if lone else [pending]
        for batch in batches:
            with _pool(width, memory) as ex:
                futs: dict[Future, RankTask] = {ex.submit(summarize_rank, asdict(t)): t for t in batch}
                todo = set(futs)
                while todo:
                    done, todo = wait(todo, return_when=FIRST_COMPLETED)
                    for f in done:
                        t = futs[f]
                        try:
                            yield t, f.result(), None
                        except BrokenProcessPool:
                            if lone:
                                yield t, None, ("its worker process died (a native crash, or the memory limit "
                                                "of the worker: raise worker_memory)")
                            else:
                                retry.append(t)
                        except Exception as exc:  # the engine's typed error, pickled back
                            yield t, None, _message(exc)
        pending = sorted(retry, key=lambda t: t.rank)
        lone = True


#: seconds to wait for a TCP connection to a given Ray address before calling it unreachable
RAY_CONNECT_S = 5.0


def check_reachable(address: str) -> None:
    """Fail fast on a Ray address nothing listens on (``ray.init`` itself retries for minutes)."""
    import socket

    if address == "auto":
        return
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"Ray address {address!r} is not HOST:PORT, ray://HOST:PORT or auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_S):
            pass
    except OSError as exc:
        raise SourceError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}",
                          hint="check --ray-address (ray://HOST:10001 for a client, HOST:6379 for the head)") from None


def run_ray(tasks: list[RankTask], address: Optional[str], workers: int) -> Iterator[Outcome]:
    """One Ray task per trace. ``address``: a running cluster (``ray://host:10001``, ``host:6379`` or ``auto``);
    none starts a local instance with ``workers`` CPUs, shut down afterwards. Workers of a remote cluster need
    kernelscope installed and the traces on storage they can read."""
    try:
        import ray
    except ImportError:
        raise ToolMissingError("the ray executor needs Ray, which is not installed",
                               hint="pip install 'kernelscope[ray]', or use executor=process") from None
    started = False
    if not ray.is_initialized():
        try:
            if address:
                check_reachable(address)
                ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
            else:
                ray.init(num_cpus=workers, object_store_memory=RAY_OBJECT_STORE, include_dashboard=False,
                         log_to_driver=False, logging_level=logging.ERROR)
        except ConnectionError as exc:
            raise SourceError(f"cannot connect to the Ray cluster at {address}: {_message(exc)}",
                              hint="check --ray-address (ray://HOST:10001 or HOST:6379)") from None
        except (ValueError, RuntimeError) as exc:
            raise InputError(f"cannot start Ray: {_message(exc)}") from None
        started = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(summarize_rank)
        refs = {remote.remote(asdict(replace(t, trace_split="off"))): t for t in tasks}  # a task per CPU
        todo = list(refs)
        while todo:
            done, todo = ray.wait(todo, num_returns=1)
            for ref in done:
                t = refs[ref]
                try:
                    yield t, ray.get(ref), None
                except ray.exceptions.RayTaskError as exc:
                    cause = getattr(exc, "cause", None)
                    yield t, None, _message(cause) if isinstance(cause, BaseException) else _message(exc)
                except ray.exceptions.RayError as exc:  # a worker that died, an object lost
                    yield t, None, f"its Ray task failed: {_message(exc).splitlines()[0][:300]}"
    finally:
        if started:
            ray.shutdown()
