"""Collectives across ranks: who arrives last, who waits, and in which layer.

Per rank (in the worker, from the single-trace analysis; no second read), the
collectives in time order: the communication kernels of the kernel table (NCCL /
RCCL, arrival = kernel start, end = kernel end, layer from the kernel's module
path) or, when the trace has none, the host-side ``c10d::<collective>`` ops of a
gloo run (arrival = op start, no end: gloo's work runs on its own threads;
layer from the enclosing decoder-layer span). In the parent the k-th collective
of each kind is matched across ranks (the same program issues them in the same
order on every rank); the last arrival sets its start; each rank's wait is
start - its arrival and, for kernels, its transfer is its end - start. Ranks of
one host share a clock; across hosts the clock offsets enter the waits.
See docs/ARCHITECTURE.md, "Trace sets".
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any, Optional

from mcp_server.tracesets.models import (
    CollectiveAnalysis,
    CollectiveInstance,
    CollectiveLayer,
    CollectiveRank,
    LayerTime,
    RankSummary,
)
from mcp_server.vocab import COMMUNICATION

_NCCL_KIND = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.I)
_C10D = re.compile(r"^c10d::_?([a-z_]+?)_?$")
#: a last arrival counts as late when it trails the second-to-last rank by this share of the median
#: interval between collectives (smaller gaps are scheduling noise)
LATE_SHARE = 0.25

Event = tuple[str, float, Optional[float], int]  # (kind, arrival us, end us or None, layer index or -1)


def _kind(name: str) -> str:
    m = _NCCL_KIND.match(name)
    return m.group(1) if m else name.split("(", 1)[0]


def _gpu_events(df: Any, layer_of: dict[str, int]) -> tuple[list[Event], Optional[float]]:
    """Communication kernels in time order, and the share of their time that overlaps compute on other streams."""
    comm = df[df["category"] == COMMUNICATION].sort_values("ts_us", kind="stable")
    events: list[Event] = []
    for name, ts, dur, path in zip(comm["name"], comm["ts_us"], comm["dur_us"], comm["module_path"]):
        layer = next((layer_of[p] for p in str(path).split("/") if p in layer_of), -1)
        events.append((_kind(str(name)), float(ts), float(ts + dur), layer))
    return events, _overlap(df, comm)


def _merged(starts: Any, ends: Any) -> tuple[Any, Any]:
    """Disjoint, sorted union of intervals (numpy arrays in, numpy arrays out)."""
    import numpy as np

    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx) if len(idx) else e[:0]


def _covered_before(t: Any, ms: Any, me: Any, cum: Any) -> Any:
    """Length of the union (ms, me; cum = lengths summed before each) that lies before each time in ``t``."""
    import numpy as np

    i = np.searchsorted(ms, t, side="right") - 1
    inside = np.where(i >= 0, np.clip(t - ms[np.maximum(i, 0)], 0, (me - ms)[np.maximum(i, 0)]), 0.0)
    return np.where(i >= 0, cum[np.maximum(i, 0)], 0.0) + inside


def _overlap(df: Any, comm: Any) -> Optional[float]:
    """Share of the collective kernels' time during which a compute kernel runs on another stream."""
    import numpy as np

    total = float(comm["dur_us"].sum())
    if total <= 0:
        return None
    compute = df[(df["category"] != COMMUNICATION) & (df["kind"] == "kernel")]
    covered = 0.0
    for stream, group in comm.groupby("stream"):
        other = compute[compute["stream"] != stream]
        if not len(other):
            continue
        s0 = other["ts_us"].to_numpy(float)
        ms, me = _merged(s0, s0 + other["dur_us"].to_numpy(float))
        cum = np.concatenate(([0.0], np.cumsum(me - ms)[:-1]))
        gs = group["ts_us"].to_numpy(float)
        ge = gs + group["dur_us"].to_numpy(float)
        covered += float((_covered_before(ge, ms, me, cum) - _covered_before(gs, ms, me, cum)).sum())
    return covered / total


def _cpu_events(rt: Any, layer_of: dict[str, int]) -> list[Event]:
    """Host-side ``c10d::`` collectives (gloo) in time order, each in the decoder-layer span around it."""
    import numpy as np

    names = rt.names
    kinds = {}
    for code in np.unique(rt.c_name).tolist():
        m = _C10D.match(names[code])
        if m and m.group(1) not in ("barrier", "monitored_barrier"):
            kinds[code] = m.group(1)
    if not kinds:
        return []
    span_codes = {code: layer_of[names[code][11:]] for code in np.unique(rt.p_name).tolist()
                  if names[code].startswith("nn.Module: ") and names[code][11:] in layer_of}
    spans = [(float(rt.p_ts[i]), float(rt.p_end[i]), span_codes[int(rt.p_name[i])])
             for i in np.flatnonzero(np.isin(rt.p_name, list(span_codes)))] if span_codes else []
    events: list[Event] = []
    for i in np.flatnonzero(np.isin(rt.c_name, list(kinds))):
        ts = float(rt.c_ts[i])
        layer = next((k for s, e, k in spans if s <= ts <= e), -1)
        events.append((kinds[int(rt.c_name[i])], ts, None, layer))
    events.sort(key=lambda e: e[1])
    return events


def rank_collectives(res: Any, layers: list[LayerTime]) -> tuple[str, list[Event], Optional[float]]:
    """(source, events, overlap share) of one rank's analysis; source "" when it has no collectives."""
    layer_of = {x.name: x.index for x in layers}
    if any(c.category == COMMUNICATION and c.count for c in res.categories):  # the kernel table only then
        events, overlap = _gpu_events(res.kernels, layer_of)
        return "communication kernels", events, overlap
    rt = getattr(res, "raw", None)
    if rt is not None:
        events = _cpu_events(rt, layer_of)
        if events:
            return "host c10d ops (gloo)", events, None
    return "", [], None


def analyze_collectives(summaries: list[RankSummary], layer_names: dict[int, str], top_n_instances: int = 200,
                        ) -> Optional[CollectiveAnalysis]:
    """Match the ranks' collectives and read waits, transfers, last arrivals per rank and per layer."""
    with_events = [s for s in summaries if s.collectives]
    if len(with_events) < 2:
        return None
    sources = sorted({s.collective_source for s in with_events})
    keyed: dict[int, dict[tuple[str, int], Event]] = {}
    for s in with_events:
        seen: Counter = Counter()
        keyed[s.rank] = {}
        for ev in s.collectives:
            keyed[s.rank][(ev[0], seen[ev[0]])] = tuple(ev)  # type: ignore[assignment]
            seen[ev[0]] += 1
    ranks = sorted(keyed)
    common = set.intersection(*(set(k) for k in keyed.values()))
    unmatched = sum(len(k) for k in keyed.values()) - len(common) * len(ranks)
    wait = dict.fromkeys(ranks, 0.0)
    transfer: dict[int, float] = dict.fromkeys(ranks, 0.0)
    has_end = all(keyed[r][key][2] is not None for r in ranks for key in common)
    last_count: Counter = Counter()
    layer_wait: dict[int, dict[int, float]] = defaultdict(lambda: dict.fromkeys(ranks, 0.0))
    layer_last: dict[int, Counter] = defaultdict(Counter)
    instances = []
    for key in sorted(common, key=lambda k: min(keyed[r][k][1] for r in ranks)):
        arrivals = {r: keyed[r][key][1] for r in ranks}
        last = max(ranks, key=lambda r: (arrivals[r], -r))
        start = arrivals[last]
        layer = keyed[last][key][3]
        last_count[last] += 1
        waits = {r: start - arrivals[r] for r in ranks}
        lateness = min((w for r, w in waits.items() if r != last), default=0.0)
        for r in ranks:
            wait[r] += waits[r]
            if has_end:
                end = keyed[r][key][2]
                transfer[r] += max(0.0, (end or start) - start)
            if layer >= 0:
                layer_wait[layer][r] += waits[r]
        if layer >= 0:
            layer_last[layer][last] += 1
        instances.append(CollectiveInstance(kind=key[0], index=key[1], layer=layer, last_rank=last, start_us=start,
                                            lateness_us=lateness, max_wait_us=max(waits.values()),
                                            per_rank_wait_us=waits))
    n = len(common)
    starts = [c.start_us for c in instances]
    gaps = sorted(b - a for a, b in zip(starts, starts[1:]))
    interval = gaps[len(gaps) // 2] if gaps else 0.0
    per_rank = [CollectiveRank(rank=r, wait_us=wait[r], transfer_us=transfer[r] if has_end else None,
                               last_count=last_count[r], overlap=next(
                                   (s.collective_overlap for s in with_events if s.rank == r), None))
                for r in ranks]
    per_rank.sort(key=lambda x: (-x.last_count, x.wait_us, x.rank))
    layers = []
    for idx in sorted(layer_wait):
        worst = max((c for c in instances if c.layer == idx), key=lambda c: (c.lateness_us, -c.index))
        late = worst.last_rank if interval > 0 and worst.lateness_us >= LATE_SHARE * interval else None
        layers.append(CollectiveLayer(index=idx, name=layer_names.get(idx, f"layer {idx}"),
                                      per_rank_wait_us=layer_wait[idx], late_rank=late, lateness_us=worst.lateness_us,
                                      last_counts=dict(layer_last[idx])))
    straggler, evidence = _verdict(layers, instances, interval)
    instances.sort(key=lambda c: (-c.lateness_us, c.kind, c.index))
    layers.sort(key=lambda x: (-x.lateness_us, x.index))
    return CollectiveAnalysis(
        source=", ".join(sources), ranks=len(ranks), matched=n, unmatched=unmatched, median_interval_us=interval,
        straggler_rank=straggler,
        evidence=evidence, per_rank=per_rank, layers=layers, instances=instances[:top_n_instances])


def _verdict(layers: list[CollectiveLayer], instances: list[CollectiveInstance], interval: float,
             ) -> tuple[Optional[int], str]:
    """The rank late (by LATE_SHARE of the median interval) in at least half of the layers with collectives;
    without layers, late at at least half of the collectives."""
    if not instances:
        return None, "no collective matched on every rank"
    floor = LATE_SHARE * interval
    if layers:
        late = Counter(x.late_rank for x in layers if x.late_rank is not None)
        where, total = "layers", len(layers)
    else:
        late = Counter(c.last_rank for c in instances if interval > 0 and c.lateness_us >= floor)
        where, total = "collectives", len(instances)
    if not late:
        return None, (f"no rank trails the others by {floor:,.1f} us ({LATE_SHARE:.0%} of the median "
                      f"{interval:,.1f} us between collectives) in any of the {total} {where}")
    rank, count = min(late.items(), key=lambda kv: (-kv[1], kv[0]))
    if count * 2 >= total:
        mine = [c for c in instances if c.last_rank == rank and c.lateness_us >= floor]
        caused = sum(sum(w for r, w in c.per_rank_wait_us.items() if r != rank) / max(len(c.per_rank_wait_us) - 1, 1)
                     for c in mine)
        return rank, (f"rank {rank} arrives last, by at least {floor:,.1f} us, in {count} of {total} {where}; "
                      f"the other ranks wait {caused:,.1f} us each for it there")
    spots = ", ".join(f"rank {r}: {k}" for r, k in sorted(late.items()))
    return None, (f"late arrivals (by at least {floor:,.1f} us) in {sum(late.values())} of {total} {where}, no rank "
                  f"in half of them ({spots}): a local delay, not a straggler rank")
