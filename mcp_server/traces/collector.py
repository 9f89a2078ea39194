"""Decoded event chunks -> numpy columns: what the loader keeps of each event, and the damaged ones it counts.

Kept: GPU activities (``cat`` kernel / gpu_memcpy / gpu_memset), runtime / driver API calls that carry a
correlation id (launches, with the kernel name a HIP launch carries in ``args.kernel``), ``python_function``
spans that the analyzer can use (``nn.Module:`` spans, phase markers, user-code frames; builtins and
frames inside torch/ are dropped here), ``user_annotation`` spans that mark a phase (``PHASE_ANNOTATION``,
kept with the python spans) and ``cpu_op`` spans (with ``Input Dims``).

Each chunk's events are first sorted into per-category buckets (one dict lookup and one append per
event), then every column is pulled out of a bucket with one list comprehension and turned into a numpy
array; names and input dims are factorised per chunk and mapped onto the collector's intern tables
(int32 ids). Damaged events (missing fields, odd types, impossible times) are skipped and counted.
"""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Any, Iterator, Optional

import msgspec
import numpy as np

from mcp_server.core.limits import limit
from mcp_server.traces.columns import RawTrace, merge
from mcp_server.traces.events import (
    CPU_OP_CATS,
    KERNEL_CATS,
    LAUNCH_CATS,
    PHASE_ANNOTATION,
    Event,
    event_dec,
    events_dec,
    fix_corr,
    id_key,
    int_col,
    raws_dec,
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


def _keep(evs: list, mask: np.ndarray) -> list:
    return [e for e, k in zip(evs, mask.tolist()) if k]


class Collector:
    """Accumulates numpy columns from decoded event chunks (the tuples ``columns.merge`` reads)."""

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

    # ------------------------------------------------------------------ interning

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
            return np.array([th.setdefault((id_key(e.pid), id_key(e.tid)), len(th)) for e in evs], dtype=np.int32)
        if not len(pid):
            return np.zeros(0, dtype=np.int32)
        same = (pid == pid[0]) & (tid == tid[0])
        if same.all():
            return np.full(len(pid), th.setdefault((int(pid[0]), int(tid[0])), len(th)), dtype=np.int32)
        pairs, inv = np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)
        table = np.array([th.setdefault((int(a), int(b)), len(th)) for a, b in pairs.tolist()], dtype=np.int32)
        return table[inv.reshape(-1)]

    # ------------------------------------------------------------------ one chunk

    def add(self, events: list[Event]) -> None:
        """Sort one chunk's events into category buckets and append their columns."""
        self.events += len(events)
        py: list = []
        cpu: list = []
        ker: list = []
        lau: list = []
        ranges: list = []
        notes: list = []
        route: dict[Optional[str], list] = {"python_function": py, "cuda_profiler_range": ranges,
                                            "user_annotation": notes, **dict.fromkeys(CPU_OP_CATS, cpu),
                                            **dict.fromkeys(KERNEL_CATS, ker), **dict.fromkeys(LAUNCH_CATS, lau)}
        get = route.get
        for e in events:
            b = get(e.cat)
            if b is not None:
                b.append(e)
        self.profiler_ranges += len(ranges)
        # phase annotations join the python spans (the analyzer reads markers there)
        py.extend(e for e in notes if e.name is not None and PHASE_ANNOTATION.match(e.name))
        self._add_spans(py, False)  # each of these returns at once on an empty bucket
        self._add_spans(cpu, True)
        self._add_gpu(ker)
        self._add_launches(lau)

    def _add_spans(self, evs: list, is_cpu: bool) -> None:
        """python_function (``is_cpu`` False) or cpu_op spans: ts, end, thread, name (and dims for cpu ops)."""
        rank = 1 if is_cpu else 0
        what = "cpu_op" if is_cpu else "python_function"
        good = [e for e in evs if e.ts is not None and e.dur is not None and e.name is not None]
        if len(good) < len(evs):
            self.skip(f"{what} event without ts/dur/name", len(evs) - len(good), rank)
        evs = good
        if evs and not is_cpu:
            # keep only frames the analyzer uses: module spans, phase markers, user-code frames
            kg, miss = self.py_keep.get, self._py_keep_miss
            evs = [e for e in evs if (k := kg(e.name)) or (k is None and miss(e.name))]
        if not evs:
            return
        ts = np.array([e.ts for e in evs], dtype=np.float64)
        dur = np.array([e.dur for e in evs], dtype=np.float64)
        bad_t = _bad_times(ts, dur)
        if bad_t is not None:
            self.skip(f"{what} event with a non-finite, negative or implausible ts/dur "
                      f"(e.g. dur={_first_bad(dur, ts, bad_t)})", int(bad_t.sum()), rank)
            keep = ~bad_t
            evs = _keep(evs, keep)
            if not evs:
                return
            ts, dur = ts[keep], dur[keep]
        cols = (ts, ts + dur, self._thread(evs, "c" if is_cpu else "p"), self._intern_names(evs))
        if not is_cpu:
            self.p.append(cols)
            return
        dims = [bytes(a.input_dims) if (a := e.args) is not None and a.input_dims is not None
                else bytes(a.input_dims_old) if a is not None and a.input_dims_old is not None else b""
                for e in evs]
        self.c.append(cols + (self._intern(dims, self.dims),))

    def _add_gpu(self, ker: list) -> None:
        """Kernels, memcpys, memsets: name, kind, ts, dur, device, stream, correlation, collective metadata."""
        good = [e for e in ker if e.ts is not None and e.dur is not None and e.name is not None
                and e.args is not None and fix_corr(e.args)]
        if len(good) < len(ker):
            self.skip("kernel/memcpy/memset event without ts/dur/name/args.correlation", len(ker) - len(good), 2)
        if not good:
            return
        kts = np.array([e.ts for e in good], dtype=np.float64)
        kdur = np.array([e.dur for e in good], dtype=np.float64)
        bad_t = _bad_times(kts, kdur)
        if bad_t is not None:  # excluded from every sum, counted in the damaged-events warning
            self.skip(f"kernel/memcpy/memset event with a non-finite, negative or implausible duration or "
                      f"timestamp (e.g. dur={_first_bad(kdur, kts, bad_t)} us)", int(bad_t.sum()), 2)
            keep = ~bad_t
            good = _keep(good, keep)
            kts, kdur = kts[keep], kdur[keep]
            if not good:
                return
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
        self.k.append((self._intern_names(good), kind, kts, kdur, int_col(dev), int_col(stream),
                       [a.correlation for a in args], comm))

    def _add_launches(self, lau: list) -> None:
        """Runtime/driver calls with a correlation id: correlation, ts, thread, name, kernel name (HIP)."""
        lau = [e for e in lau if e.args is not None and fix_corr(e.args)]
        good = [e for e in lau if e.ts is not None and e.name is not None]
        if len(good) < len(lau):
            self.skip("runtime event without ts/name", len(lau) - len(good), 3)
        if not good:
            return
        lts = np.array([e.ts for e in good], dtype=np.float64)
        bad_t = _bad_times(lts, None)
        if bad_t is not None:
            self.skip("runtime event with a non-finite or implausible ts", int(bad_t.sum()), 3)
            keep = ~bad_t
            good = _keep(good, keep)
            lts = lts[keep]
            if not good:
                return
        kn = [e.args.kernel or "" for e in good]
        self.l.append(([e.args.correlation for e in good], lts,
                       self._thread(good, "l"), self._intern_names(good), self._intern(kn)))

    # ------------------------------------------------------------------ parts

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
        """The columns of every part (this collector, then the absorbed ones) with canonical intern ids
        (``columns.merge``)."""
        parts = [self.state()] + self.absorbed
        self.k, self.l, self.p, self.c, self.absorbed = [], [], [], [], []
        return merge(parts, path, metadata)


def decode_chunk(text: bytes | memoryview, coll: Collector) -> bool:
    """Decode one ``[...]`` array of events into ``coll``. False when ``text`` is not valid JSON."""
    try:
        events = events_dec.decode(text)
    except msgspec.ValidationError:
        try:
            raws = raws_dec.decode(text)
        except msgspec.DecodeError:
            return False
        events = []
        for r in raws:
            try:
                events.append(event_dec.decode(r))
            except msgspec.DecodeError as exc:
                coll.events += 1
                coll.skip(f"event with odd field types ({exc})", rank=-1)
        coll.add(events)
        return True
    except msgspec.DecodeError:
        return False
    coll.add(events)
    return True


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
