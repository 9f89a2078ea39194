"""GPU time breakdown: busy / idle / computation / communication / memory / exposed communication.

The figures TraceLens's ``gpu_timeline`` and HTA's temporal breakdown and communication-computation
overlap report, defined the same way (their docs, and their reference CSVs in the field corpus):

* every GPU event (kernel, memcpy, memset) is an interval ``[ts, ts + dur)``; time is the length of
  a union of intervals, so overlapping events (several streams) count once;
* classes: **communication** = kernels the categories CSV files under ``communication`` (NCCL/RCCL,
  DeepEP, custom all-reduce); **memory** = memcpy and memset events (HTA's MEMORY kernels; TraceLens
  counts memsets as computation, a difference of the memsets' time, well under 1 % on the corpus);
  **computation** = every other kernel;
* ``window_us`` = end of the last event - start of the first, over the events measured;
  ``busy_us`` = |union of all|, ``idle_us`` = window - busy;
  ``computation_us`` / ``communication_us`` / ``memory_us`` = |union of the class|;
  ``exposed_communication_us`` = |communication \\ computation| (TraceLens's exposed_comm_time);
  ``exposed_memory_us`` = |memory \\ (computation ∪ communication)| (TraceLens's exposed_memcpy_time);
  so computation + exposed communication + exposed memory + idle = window, and exposed communication
  + exposed memory = HTA's non-compute time;
  ``comm_overlap_pct`` = |communication ∩ computation| / |communication| (HTA's comp_comm_overlap).

The window: GPU events whose launch event is in the trace, from the first to the last of them, when
the trace holds both launched events and events without a launch (those ran before the profiler
recorded the CPU side: warm-up work flushed into the trace; TraceLens leaves them out the same way);
otherwise every GPU event. Rows: the whole trace, each device (when there are several), each stream
(over its device's window).

Everything is numpy: one sort per call, unions by a running maximum of the end times, groups kept
apart by offsetting each group past the previous one.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from mcp_server.traces.models import GpuBreakdown, TimeBreakdown

#: class codes of ``classify_events``
COMPUTATION, COMMUNICATION, MEMORY = 0, 1, 2

WINDOW_ALL = "all GPU events"
WINDOW_LAUNCHED = "launched GPU events"


def _sorted_union(s: np.ndarray, e: np.ndarray, g: np.ndarray, groups: int) -> np.ndarray:
    """Per group, the union length of intervals already sorted by (group, start) and offset so that every
    group's intervals start after the previous group's end (one running maximum, no re-sort)."""
    n = len(s)
    if not n:
        return np.zeros(groups, dtype=np.float64)
    reach = np.maximum.accumulate(e)
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.greater(s[1:], reach[:-1], out=new[1:])
    first = np.flatnonzero(new)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = n - 1
    return np.bincount(g[first], weights=reach[last] - s[first], minlength=groups)


def _sort_groups(start: np.ndarray, end: np.ndarray, group: np.ndarray):
    """(order, shifted start, shifted end): events sorted by (group, start), each group moved past the last."""
    base = float(start.min())
    span = float(end.max()) - base + 1.0
    order = np.lexsort((start, group))
    off = group[order].astype(np.float64) * span
    return order, start[order] - base + off, end[order] - base + off


def union_length(start: np.ndarray, end: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """Per group, the length of the union of the intervals ``[start, end)`` of that group."""
    if not len(start):
        return np.zeros(groups, dtype=np.float64)
    order, s, e = _sort_groups(start, end, group)
    return _sorted_union(s, e, group[order], groups)


def _rows(ts: np.ndarray, end: np.ndarray, cls: np.ndarray, group: np.ndarray, groups: int,
          w0: np.ndarray, w1: np.ndarray) -> list[dict]:
    """Breakdown figures per group (windows ``w0``..``w1`` per group): one sort, five running maxima."""
    order, s, e = _sort_groups(ts, end, group)
    g, c_ = group[order], cls[order]

    def u(mask: Optional[np.ndarray]) -> np.ndarray:
        if mask is None:
            return _sorted_union(s, e, g, groups)
        return _sorted_union(s[mask], e[mask], g[mask], groups)

    comp, comm, mem = c_ == COMPUTATION, c_ == COMMUNICATION, c_ == MEMORY
    busy = u(None)
    c = u(comp) if comp.any() else np.zeros(groups)
    m = u(comm) if comm.any() else np.zeros(groups)
    y = u(mem) if mem.any() else np.zeros(groups)
    cm = u(comp | comm) if comm.any() else c
    count = np.bincount(group, minlength=groups)
    window = w1 - w0
    rows = []
    for i in range(groups):
        win = float(window[i])
        b, ci, mi, yi, cmi = float(busy[i]), float(c[i]), float(m[i]), float(y[i]), float(cm[i])
        rows.append(dict(
            kernel_count=int(count[i]), window_start_us=float(w0[i]), window_us=win, busy_us=b,
            idle_us=max(win - b, 0.0), computation_us=ci, communication_us=mi, memory_us=yi,
            exposed_communication_us=max(cmi - ci, 0.0), exposed_memory_us=max(b - cmi, 0.0),
            busy_pct=100.0 * b / win if win > 0 else 0.0,
            comm_overlap_pct=100.0 * (ci + mi - cmi) / mi if mi > 0 else None))
    return rows


def compute_breakdown(ts: np.ndarray, dur: np.ndarray, cls: np.ndarray, device: np.ndarray, stream: np.ndarray,
                      launched: Optional[np.ndarray] = None) -> Optional[GpuBreakdown]:
    """The breakdown of a trace's GPU events (None when there are none).

    ``cls``: per event COMPUTATION / COMMUNICATION / MEMORY; ``launched``: per event whether its
    launch event is in the trace (None: unknown, every event is measured)."""
    n = len(ts)
    if not n:
        return None
    keep = np.ones(n, dtype=bool)
    window = WINDOW_ALL
    if launched is not None and launched.any() and not launched.all():
        keep = launched
        window = WINDOW_LAUNCHED
    excluded = int(n - keep.sum())
    excluded_us = float(dur[~keep].sum()) if excluded else 0.0
    early = int((ts[~keep] < ts[keep].min()).sum()) if excluded else 0
    ts, dur, cls, device, stream = ts[keep], dur[keep], cls[keep], device[keep], stream[keep]
    end = ts + dur
    zero = np.zeros(len(ts), dtype=np.int64)
    t0, t1 = np.array([ts.min()]), np.array([end.max()])
    total_row = _rows(ts, end, cls, zero, 1, t0, t1)[0]
    total = TimeBreakdown(scope="trace", **total_row)

    dev_u, dev_g = np.unique(device, return_inverse=True)
    D = len(dev_u)
    d0 = np.full(D, np.inf)
    d1 = np.full(D, -np.inf)
    np.minimum.at(d0, dev_g, ts)
    np.maximum.at(d1, dev_g, end)
    devices: list[TimeBreakdown] = []
    if D > 1:
        devices = [TimeBreakdown(scope="device", device=int(dev_u[i]), **r)
                   for i, r in enumerate(_rows(ts, end, cls, dev_g, D, d0, d1))]
        devices.sort(key=lambda r: -r.busy_us)

    su, sg = np.unique(stream, return_inverse=True)  # stream ids may be pointer-sized: number them first
    pu, pg = np.unique(dev_g.astype(np.int64) * len(su) + sg, return_inverse=True)
    P = len(pu)
    pdev = np.zeros(P, dtype=np.int64)
    pdev[pg] = dev_g
    pstream = np.zeros(P, dtype=np.int64)
    pstream[pg] = stream
    rows = [total_row] if P == 1 else _rows(ts, end, cls, pg, P, d0[pdev], d1[pdev])  # one stream: the trace's row
    streams = [TimeBreakdown(scope="stream", device=int(dev_u[pdev[i]]), stream=int(pstream[i]), **r)
               for i, r in enumerate(rows)]
    streams.sort(key=lambda r: -r.busy_us)
    if window == WINDOW_LAUNCHED:
        note = (f"first to last GPU event whose launch is in the trace; {excluded} GPU event(s) "
                f"({excluded_us:,.1f} us) without a launch event are left out ({early} of them ran before the "
                "first launched one: work queued before the profiler recorded the CPU side)")
    else:
        note = "first to last GPU event of the trace"
    return GpuBreakdown(window=window, window_note=note, excluded_count=excluded, excluded_us=excluded_us,
                        total=total, devices=devices, streams=streams)
