"""Collectives across ranks: who arrives last, who waits, and in which layer.

Per rank (in the worker, from the single-trace analysis; no second read), the
collectives in time order: the communication kernels of the kernel table (NCCL /
RCCL, arrival = kernel start, end = kernel end, layer from the kernel's module
path) with what PyTorch recorded about each on the kernel (collective name,
process group and its ranks, message size, sequence number, point-to-point peer:
``CollectiveMeta``) or, when the trace has none, the host-side ``c10d::<collective>``
ops of a gloo run (arrival = op start, no end: gloo's work runs on its own threads;
layer from the enclosing decoder-layer span).

In the parent, collectives are matched by what the traces say about them: the
process group (a point-to-point pair for send / recv with their peers), then the
sequence number where every event of the group carries one, else the kind and
its order within the group. A kernel without metadata (a CUDA-graph replay)
takes the group of the same kind's recorded kernels on its rank when they name
one group. A collective is computed only when every rank of its group is in the
set, every one of them holds it, the ranks agree on its name (and size, for
collectives whose size is the same on every rank), and, for kernels, the kernels
overlap in time; otherwise it is counted and warned about (``collective_*``
codes), never turned into a wait. Events that name no group are matched by kind
and order only in a set known to hold every rank of the run (distributedInfo's
world size). The last arrival sets the start; each rank's wait is start - its
arrival and, for kernels, its transfer is its end - start: with the overlap
required, the wait never exceeds the rank's own kernel. Ranks of one host share
a clock; across hosts the clock offsets enter the waits (and can break the
overlap, which is then reported, not computed). See docs/ARCHITECTURE.md, "Trace sets".
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Optional

from mcp_server.core.models import Warning_
from mcp_server.core.vocab import COMMUNICATION, WarningCode
from mcp_server.tracesets.combine import rank_ranges
from mcp_server.tracesets.models import (
    CollectiveAnalysis,
    CollectiveInstance,
    CollectiveLayer,
    CollectiveMeta,
    CollectiveRank,
    LayerTime,
    RankSummary,
)

_NCCL_KIND = re.compile(r"^(?:nccl|rccl)(?:Dev)?Kernel_([A-Za-z]+)", re.I)
_C10D = re.compile(r"^c10d::_?([a-z_]+?)_?$")
#: a last arrival counts as late when it trails the second-to-last rank by this share of the median
#: interval between collectives (smaller gaps are scheduling noise)
LATE_SHARE = 0.25

Event = tuple[str, float, Optional[float], int]  # (kind, arrival us, end us or None, layer index or -1)
#: per rank: match key -> (event, meta, group id or None) (``_keyed``)
Keyed = dict[int, dict[tuple, tuple]]


def _kind(name: str) -> str:
    m = _NCCL_KIND.match(name)
    return m.group(1) if m else name.split("(", 1)[0]


def _int(v: Any) -> Optional[int]:
    """An integer field as recorded (int, or a string of digits); None otherwise."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
        return int(v)
    return None


def _ranks(v: Any) -> Optional[list[int]]:
    """'Process Group Ranks' ("[0, 1]" or a list); None when cut short ("[0, 1, ..., 127]") or unreadable."""
    if isinstance(v, list):
        items: list[Any] = v
    elif isinstance(v, str) and re.fullmatch(r"\s*\[[\d\s,]*\]\s*", v):
        items = [x for x in v.strip()[1:-1].split(",") if x.strip()]
    else:
        return None
    out = [_int(x) for x in items]
    return None if not out or any(x is None for x in out) else [x for x in out if x is not None]


def parse_meta(values: Optional[tuple]) -> Optional[CollectiveMeta]:
    """``CollectiveMeta`` from the loader's ``COMM_FIELDS`` values of one kernel (None without a name)."""
    if not values or not isinstance(values[0], str) or not values[0]:
        return None
    name, group, ranks, size, nelems, _out, seq, src, dst = (tuple(values) + (None,) * 9)[:9]
    return CollectiveMeta(name=name, group=str(group) if group is not None else "", ranks=_ranks(ranks),
                          size=_int(size), nelems=_int(nelems), seq=_int(seq), src=_int(src), dst=_int(dst))


def _gpu_events(df: Any, layer_of: dict[str, int], comm_meta: Optional[dict] = None,
                ) -> tuple[list[Event], list[Optional[CollectiveMeta]], Optional[float]]:
    """Communication kernels in time order with what the trace records about each, and the share of their
    time that overlaps compute on other streams. ``comm_meta``: (correlation, start us) -> COMM_FIELDS values."""
    comm = df[df["category"] == COMMUNICATION].sort_values("ts_us", kind="stable")
    events: list[Event] = []
    metas: list[Optional[CollectiveMeta]] = []
    meta_of = comm_meta or {}
    for name, ts, dur, path, corr in zip(comm["name"], comm["ts_us"], comm["dur_us"], comm["module_path"],
                                         comm["correlation"]):
        layer = next((layer_of[p] for p in str(path).split("/") if p in layer_of), -1)
        events.append((_kind(str(name)), float(ts), float(ts + dur), layer))
        metas.append(parse_meta(meta_of.get((int(corr), float(ts)))) if meta_of else None)
    return events, metas, _overlap(df, comm)


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


def rank_collectives(res: Any, layers: list[LayerTime],
                     ) -> tuple[str, list[Event], list[Optional[CollectiveMeta]], Optional[float]]:
    """(source, events, what the trace records about each, overlap share) of one rank's analysis;
    source "" when it has no collectives."""
    layer_of = {x.name: x.index for x in layers}
    rt = getattr(res, "raw", None)
    if any(c.category == COMMUNICATION and c.count for c in res.categories):  # the kernel table only then
        k_comm = getattr(rt, "k_comm", None) or {}
        meta = {(int(rt.k_corr[i]), float(rt.k_ts[i])): v for i, v in k_comm.items()} if rt is not None else None
        events, metas, overlap = _gpu_events(res.kernels, layer_of, meta)
        return "communication kernels", events, metas, overlap
    if rt is not None:
        events = _cpu_events(rt, layer_of)
        if events:
            return "host c10d ops (gloo)", events, [None] * len(events), None
    return "", [], [], None


_P2P = {"send", "recv", "sendrecv", "batch_isend_irecv", "isend", "irecv"}
#: collectives whose message size is the same on every rank of the group (checked when recorded)
_SAME_SIZE = {"allreduce", "broadcast", "reduce", "allreduce_coalesced"}


@dataclass(frozen=True)
class _Group:
    """A process group (or a point-to-point pair) as the traces name it."""

    gid: str
    members: Optional[frozenset]  # global ranks; None when the trace cut the list short
    size: Optional[int]


def _group_of(m: CollectiveMeta, world: Optional[int]) -> Optional[_Group]:
    """The group a recorded collective runs in; for send / recv with both peers known, the pair."""
    ranks = m.ranks
    if m.name.lower() in _P2P and m.src is not None and m.dst is not None:
        def glob(r: int) -> Optional[int]:  # peers are ranks of the group: global through its rank list
            if ranks is not None:
                return ranks[r] if 0 <= r < len(ranks) else None
            return r if world is not None and m.size == world else None
        a, b = glob(m.src), glob(m.dst)
        if a is not None and b is not None:
            lo, hi = min(a, b), max(a, b)
            return _Group(f"p2p {lo}<->{hi}", frozenset((lo, hi)), 2 if lo != hi else 1)
    if not m.group and ranks is None and m.size is None:
        return None
    label = f"group {m.group or '?'}"
    if ranks is not None:
        label += f" ranks {rank_ranges(ranks, sep=',')}"
    elif m.size is not None:
        label += f" ({m.size} ranks)"
    return _Group(label, frozenset(ranks) if ranks is not None else None,
                  len(ranks) if ranks is not None else m.size)


def _keyed(summaries: list[RankSummary], world: Optional[int],
           ) -> tuple[Keyed, dict[str, _Group]]:
    """Per rank: match key -> (event, meta, group id or None). Keys: (group id, 'seq', seq) where every event of the
    group carries a sequence number, else (group id, kind, order within the group and kind)."""
    groups: dict[str, _Group] = {}
    assigned: dict[int, list[tuple[Event, Optional[CollectiveMeta], Optional[str]]]] = {}
    for s in summaries:
        metas = list(s.collective_meta) + [None] * (len(s.collectives) - len(s.collective_meta))
        rows: list[tuple[Event, Optional[CollectiveMeta], Optional[str]]] = []
        kind_groups: dict[str, set[str]] = defaultdict(set)
        for ev, m in zip(s.collectives, metas):
            g = _group_of(m, world) if m is not None else None
            if g is not None:
                groups.setdefault(g.gid, g)
                kind_groups[ev[0]].add(g.gid)
            rows.append((tuple(ev), m, g.gid if g else None))  # type: ignore[arg-type]
        # a kernel without metadata (a graph replay) joins the one group its kind's recorded kernels name
        rows = [(ev, m, gid if gid is not None or len(kind_groups[ev[0]]) != 1 else next(iter(kind_groups[ev[0]])))
                for ev, m, gid in rows]
        assigned[s.rank] = rows
    with_seq = {gid: all(m is not None and m.seq is not None for rows in assigned.values()
                         for _, m, g in rows if g == gid) for gid in groups}
    keyed: dict[int, dict[tuple, tuple]] = {}
    for rank, rows in assigned.items():
        seen: Counter = Counter()
        out: dict[tuple, tuple] = {}
        for ev, m, gid in rows:
            if gid is not None and with_seq.get(gid) and m is not None:
                key: tuple = (gid, "seq", m.seq, ev[0])
            else:
                key = (gid, ev[0], seen[(gid, ev[0])])
                seen[(gid, ev[0])] += 1
            out[key] = (ev, m, gid)
        keyed[rank] = out
    return keyed, groups


@dataclass
class _Skipped:
    """The collectives not computed, by reason: each reason is one warning (``_warnings``)."""

    incomplete: Counter = field(default_factory=Counter)  # group id -> collectives skipped for ranks outside the set
    missing_of: dict[str, set[int]] = field(default_factory=dict)
    held_of: dict[str, int] = field(default_factory=dict)  # groups whose rank list the trace cut short: ranks held
    unverified: int = 0
    no_overlap: list[str] = field(default_factory=list)
    mismatch: list[str] = field(default_factory=list)


@dataclass
class _Tally:
    """Per rank and per layer sums over the computed collectives."""

    ranks: list[int]
    has_end: bool
    used: Counter = field(default_factory=Counter)
    wait: dict[int, float] = field(default_factory=dict)
    transfer: dict[int, float] = field(default_factory=dict)
    last_count: Counter = field(default_factory=Counter)
    layer_wait: dict[int, dict[int, float]] = field(default_factory=dict)
    layer_last: dict[int, Counter] = field(default_factory=lambda: defaultdict(Counter))
    instances: list[CollectiveInstance] = field(default_factory=list)


def analyze_collectives(summaries: list[RankSummary], layer_names: dict[int, str], world: Optional[int] = None,
                        top_n_instances: int = 200) -> tuple[Optional[CollectiveAnalysis], list[Warning_]]:
    """Match the ranks' collectives and read waits, transfers, last arrivals per rank and per layer, with a warning
    (and no figure) for every collective that cannot be matched with evidence (see the module doc)."""
    with_events = [s for s in summaries if s.collectives]
    if len(with_events) < 2:
        return None, []
    set_ranks = {s.rank for s in summaries}
    whole_run = world is not None and set(range(world)) <= set_ranks
    sources = sorted({s.collective_source for s in with_events})
    keyed, groups = _keyed(with_events, world)
    computed, skipped = _match(keyed, groups, set_ranks, whole_run)
    warnings = _warnings(skipped, groups, world, set_ranks)
    if not computed:
        return None, warnings
    t = _tally(computed, keyed)
    starts = [c.start_us for c in t.instances]  # in order of first arrival
    gaps = sorted(b - a for a, b in zip(starts, starts[1:]))
    interval = gaps[len(gaps) // 2] if gaps else 0.0
    per_rank = [CollectiveRank(rank=r, wait_us=t.wait[r], transfer_us=t.transfer[r] if t.has_end else None,
                               last_count=t.last_count[r], overlap=next(
                                   (s.collective_overlap for s in with_events if s.rank == r), None))
                for r in t.ranks if t.used[r]]
    per_rank.sort(key=lambda x: (-x.last_count, x.wait_us, x.rank))
    layers = _layers(t, layer_names, interval)
    straggler, evidence = _verdict(layers, t.instances, interval)
    instances = sorted(t.instances, key=lambda c: (-c.lateness_us, c.kind, c.index))
    layers.sort(key=lambda x: (-x.lateness_us, x.index))
    return CollectiveAnalysis(
        source=", ".join(sources), ranks=sum(1 for r in t.ranks if t.used[r]), matched=len(computed),
        unmatched=sum(len(d) for d in keyed.values()) - sum(t.used.values()), median_interval_us=interval,
        straggler_rank=straggler, evidence=evidence, per_rank=per_rank, layers=layers,
        instances=instances[:top_n_instances]), warnings


def _match(keyed: Keyed, groups: dict[str, _Group], set_ranks: set[int], whole_run: bool,
           ) -> tuple[list[tuple[tuple, list[int]]], _Skipped]:
    """The collectives to compute, each with the ranks taking part, in order of first arrival; and the skipped."""
    ranks = sorted(keyed)
    all_keys = sorted({k for d in keyed.values() for k in d}, key=lambda k: min(
        d[k][0][1] for d in keyed.values() if k in d))
    skipped = _Skipped()
    computed: list[tuple[tuple, list[int]]] = []
    for key in all_keys:
        members = _members(key, keyed, groups, ranks, set_ranks, whole_run, skipped)  # None: counted in skipped
        if members is None or len(members) < 2 or any(key not in keyed[r] for r in members):
            continue  # not on every rank of the group: counted as unmatched
        if _consistent(key, members, keyed, skipped):
            computed.append((key, members))
    return computed, skipped


def _members(key: tuple, keyed: Keyed, groups: dict[str, _Group], ranks: list[int],
             set_ranks: set[int], whole_run: bool, skipped: _Skipped) -> Optional[list[int]]:
    """The ranks of the collective's group; None (and counted in ``skipped``) when the set cannot hold them all."""
    gid = key[0]
    if gid is None:
        if not whole_run:
            skipped.unverified += 1
            return None
        return ranks
    g = groups[gid]
    if g.members is not None:
        out = g.members - set_ranks
        if out:
            skipped.incomplete[gid] += 1
            skipped.missing_of[gid] = set(out)
            return None
        return sorted(g.members)
    present = [r for r in ranks if any(v[2] == gid for v in keyed[r].values())]
    if g.size is None or len(present) < g.size:
        skipped.incomplete[gid] += 1
        skipped.held_of[gid] = len(present)
        return None
    return present


def _consistent(key: tuple, members: list[int], keyed: Keyed, skipped: _Skipped) -> bool:
    """Whether the ranks agree on the collective (name, size) and their kernels overlap in time; else it is
    counted in ``skipped`` (``mismatch`` / ``no_overlap``)."""
    gid = key[0]
    metas = [keyed[r][key][1] for r in members]
    names = {m.name.lower() for m in metas if m is not None}
    sizes = {m.nelems for m in metas if m is not None and m.nelems is not None}
    p2p = bool(names & _P2P)
    if (len(names) > 1 and not p2p) or (len(sizes) > 1 and names <= _SAME_SIZE):
        skipped.mismatch.append(f"{key[1] if key[1] != 'seq' else key[3]} #{key[2]} of {gid}: "
                                f"{', '.join(sorted(names))} / {', '.join(str(x) for x in sorted(sizes))} elements")
        return False
    evs = [keyed[r][key][0] for r in members]
    ends = [e[2] for e in evs]
    if all(e is not None for e in ends):
        first_end = min(e for e in ends if e is not None)
        last_start = max(e[1] for e in evs)
        if last_start > first_end:
            r_end = members[[e[2] for e in evs].index(first_end)]
            r_start = members[[e[1] for e in evs].index(last_start)]
            skipped.no_overlap.append(f"{evs[0][0]} #{key[-1] if key[1] != 'seq' else key[2]}"
                                      f"{' of ' + gid if gid else ''}: rank {r_end} ended "
                                      f"{last_start - first_end:,.1f} us before rank {r_start} started")
            return False
    return True


def _tally(computed: list[tuple[tuple, list[int]]], keyed: Keyed) -> _Tally:
    """Per collective its last arrival (the start), each rank's wait and transfer; summed per rank and layer."""
    ranks = sorted(keyed)
    t = _Tally(ranks=ranks, has_end=all(keyed[r][key][0][2] is not None for key, members in computed for r in members),
               wait=dict.fromkeys(ranks, 0.0), transfer=dict.fromkeys(ranks, 0.0),
               layer_wait=defaultdict(lambda: dict.fromkeys(ranks, 0.0)))
    for key, members in computed:
        ev = {r: keyed[r][key][0] for r in members}
        arrivals = {r: ev[r][1] for r in members}
        last = max(members, key=lambda r: (arrivals[r], -r))
        start = arrivals[last]
        layer = ev[last][3]
        t.last_count[last] += 1
        waits = {r: start - arrivals[r] for r in members}
        lateness = min((w for r, w in waits.items() if r != last), default=0.0)
        for r in members:
            t.used[r] += 1
            t.wait[r] += waits[r]
            if t.has_end:
                end = ev[r][2]
                t.transfer[r] += max(0.0, (end if end is not None else start) - start)
            if layer >= 0:
                t.layer_wait[layer][r] += waits[r]
        if layer >= 0:
            t.layer_last[layer][last] += 1
        kind = key[3] if key[1] == "seq" else key[1]
        t.instances.append(CollectiveInstance(kind=kind, index=key[2], layer=layer, last_rank=last, start_us=start,
                                              lateness_us=lateness, max_wait_us=max(waits.values()),
                                              per_rank_wait_us=waits))
    return t


def _layers(t: _Tally, layer_names: dict[int, str], interval: float) -> list[CollectiveLayer]:
    """Per layer with collectives: each rank's wait, and the rank late at the layer's latest collective."""
    layers = []
    for idx in sorted(t.layer_wait):
        worst = max((c for c in t.instances if c.layer == idx), key=lambda c: (c.lateness_us, -c.index))
        late = worst.last_rank if interval > 0 and worst.lateness_us >= LATE_SHARE * interval else None
        layers.append(CollectiveLayer(index=idx, name=layer_names.get(idx, f"layer {idx}"),
                                      per_rank_wait_us={r: w for r, w in t.layer_wait[idx].items() if t.used[r]},
                                      late_rank=late, lateness_us=worst.lateness_us,
                                      last_counts=dict(t.layer_last[idx])))
    return layers


def _warnings(sk: _Skipped, groups: dict[str, _Group], world: Optional[int], set_ranks: set[int]) -> list[Warning_]:
    out = []
    incomplete, no_overlap, mismatch = sk.incomplete, sk.no_overlap, sk.mismatch
    if incomplete:
        parts = []
        for gid, n in incomplete.most_common(3):
            g = groups[gid]
            miss = sk.missing_of.get(gid)
            why = (f"its ranks {rank_ranges(miss, sep=',')} are not in the set" if miss else
                   f"the set holds {sk.held_of.get(gid, 0)} of its ranks" if g.size is not None else
                   "its size is not recorded")
            parts.append(f"{n} of {gid}: {why}")
        more = f" and {len(incomplete) - 3} more group(s)" if len(incomplete) > 3 else ""
        out.append(Warning_(code=WarningCode.collective_group_incomplete, count=sum(incomplete.values()), message=(
            f"collectives whose process group is not all in the set were not matched, no wait is computed for them: "
            f"{'; '.join(parts)}{more}; the set holds ranks {rank_ranges(set_ranks, sep=',')}. Pass every rank of the "
            f"group (a collective's waits need all its participants)")))
    if sk.unverified:
        unverified = sk.unverified
        why = ("no trace carries distributedInfo's world size" if world is None else
               f"ranks {rank_ranges(set(range(world)) - set_ranks, sep=',')} of the {world}-rank run are not in the "
               "set")
        out.append(Warning_(code=WarningCode.collective_set_unverified, count=unverified, message=(
            f"{unverified} collective(s) record no process group and {why}: they were not matched by kind and order "
            f"(their counterparts may be on ranks outside the set), no wait is computed for them. Pass the whole run, "
            f"or traces from a PyTorch that records collective metadata on its kernels")))
    if no_overlap:
        out.append(Warning_(code=WarningCode.collective_no_overlap, count=len(no_overlap), message=(
            f"{len(no_overlap)} collective(s) matched by group and order whose kernels do not overlap in time on every "
            f"rank (e.g. {no_overlap[0]}): not the same operation (a profiling window cut differently on each "
            f"rank) or clocks of different hosts; no wait is computed for them")))
    if mismatch:
        out.append(Warning_(code=WarningCode.collective_mismatch, count=len(mismatch), message=(
            f"{len(mismatch)} collective(s) at the same position differ across ranks in name or message size "
            f"(e.g. {mismatch[0]}): the ranks ran different collectives there; no wait is computed for them")))
    return out


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
