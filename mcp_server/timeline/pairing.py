"""Match a decoded buffer's begin and end records into intervals (vectorised with numpy).

Input: the round-major [rounds, lanes] grids :mod:`mcp_server.timeline.decode` builds (record
type, event id, time). Output: one row per matched begin/end pair, as numpy columns (event,
lane, occurrence, begin, end, depth, SM id), and the counts of unmatched begins and ends.

The fastest matcher that applies is used: flat begin/end pairs in rounds (the usual probe
pattern), the writers' few distinct programs paired once, or the general nesting-aware matcher
(a radix sort on the 16-bit event id, no Python loop over records).
"""
from __future__ import annotations

import numpy as np

from mcp_server.timeline.layout import BEGIN, END, N_EVENTS

#: the interval columns: event, lane, occurrence, begin, end, depth, sm
Intervals = tuple[np.ndarray, ...]


def match_intervals(kind: np.ndarray, event: np.ndarray, ts: np.ndarray, lanes2d: np.ndarray,
                    lane_sm: np.ndarray) -> tuple[Intervals, int, int]:
    """Matched begin/end pairs and the numbers of unmatched begins and ends, by the fastest matcher
    that applies: flat pairs in rounds, the writers' few distinct programs paired once, or the
    general matcher in lane order."""
    iv = _pair_rounds(kind, event, ts, lanes2d, lane_sm)
    if iv is not None:
        return iv, 0, 0
    found = _pair_programs(kind, event, ts, lane_sm)  # nested or interleaved, but few distinct programs
    if found is not None:
        return found
    # writers differ: the general matcher, in lane order
    rounds, nlanes = kind.shape
    lanes_idx = np.arange(nlanes, dtype=np.int64)
    kind_t = np.ascontiguousarray(kind.T)
    keep = (kind_t == BEGIN) | (kind_t == END)
    f_kind, f_event = kind_t[keep], np.ascontiguousarray(event.T)[keep]
    del kind_t
    f_lane = np.repeat(lanes_idx.astype(np.int32), np.count_nonzero(keep, axis=1))
    if ts.flags.c_contiguous:   # gather times by round-major position instead of transposing them
        pos = np.flatnonzero(keep)  # lane-major flat index l * rounds + r
        l, r = np.divmod(pos, rounds)
        f_ts = ts.reshape(-1)[r * nlanes + l]
        del pos, r, l
    else:                        # ts is already a lane-major view's transpose
        f_ts = np.ascontiguousarray(ts.T)[keep]
    iv = _pair_alternating(f_kind, f_event, f_lane, f_ts, lane_sm)
    if iv is not None:
        return iv, 0, 0
    return _pair(f_kind, f_event, f_lane, f_ts, lane_sm[f_lane])


def _pair_rounds(kind, event, ts, lanes2d, lane_sm):
    """Fast path on the round-major grid: every writer's begin/end records come as pairs in
    rounds (2j, 2j+1), begin then end of the same event (flat phases: the usual probe pattern);
    only instants or empty slots follow. Returns None when that does not hold for every writer."""
    rounds = kind.shape[0]
    r2 = rounds - rounds % 2
    if r2 == 0:
        return None
    kb, ke = kind[0:r2:2], kind[1:r2:2]
    eb = event[0:r2:2]
    pair_ok = (kb == BEGIN) & (ke == END) & (eb == event[1:r2:2])
    be = np.count_nonzero((kind == BEGIN) | (kind == END), axis=0)
    if not np.array_equal(2 * np.count_nonzero(pair_ok, axis=0), be):
        return None
    if pair_ok.all():
        sel = slice(None)
        ev = eb.reshape(-1)
        ln = lanes2d[0:r2:2].reshape(-1)
        b = ts[0:r2:2].reshape(-1)
        e = ts[1:r2:2].reshape(-1)
    else:
        sel = pair_ok
        ev, ln = eb[pair_ok], lanes2d[0:r2:2][pair_ok]
        b, e = ts[0:r2:2][pair_ok], ts[1:r2:2][pair_ok]
    # occurrence: per writer, how many earlier pairs had the same event
    uniq = np.flatnonzero(np.bincount(ev, minlength=N_EVENTS)) if ev.size else np.zeros(0, np.int64)
    if uniq.size == 1:
        occ2d = np.broadcast_to(np.arange(eb.shape[0], dtype=np.int32)[:, None], eb.shape)
        if not isinstance(sel, slice):
            occ2d = np.cumsum(pair_ok, axis=0, dtype=np.int32) - 1
    elif pair_ok.all() and (eb == eb[:, :1]).all():
        # every writer ran the same event sequence: one occurrence row serves all
        row = eb[:, 0]
        occ_row = np.zeros(row.size, dtype=np.int32)
        for u in uniq.tolist():
            m = row == u
            occ_row[m] = np.arange(int(m.sum()), dtype=np.int32)
        occ2d = np.broadcast_to(occ_row[:, None], eb.shape)
    else:
        occ2d = np.zeros(eb.shape, dtype=np.int32)
        for u in uniq.tolist():
            m = pair_ok & (eb == u)
            c = np.cumsum(m, axis=0, dtype=np.int32)
            c -= 1
            np.copyto(occ2d, c, where=m)
    occ = occ2d.reshape(-1) if isinstance(sel, slice) else occ2d[pair_ok]
    return (ev, ln, np.ascontiguousarray(occ), b, e, np.ones(ev.size, dtype=np.int16), lane_sm[ln])


MAX_PROGRAMS = 64  # more distinct writer programs than this: the per-writer matcher


def _spread(per_program: np.ndarray, inv: np.ndarray) -> np.ndarray:
    """(rows x programs) -> (rows x writers): each writer's column is its program's. Broadcast
    selects for a few programs (contiguous passes), a column gather beyond that."""
    G = per_program.shape[1]
    if G > 8:
        return per_program[:, inv]
    out = np.empty((per_program.shape[0], inv.size), dtype=per_program.dtype)
    out[...] = per_program[:, :1]
    for g in range(1, G):
        np.copyto(out, per_program[:, g:g + 1], where=(inv == g)[None, :])
    return out


def _pair_programs(kind, event, ts, lane_sm):
    """Fast path for nested or interleaved phases when the writers ran few distinct programs
    (sequences of (event, type)): a persistent kernel whose blocks all run one phase program, or
    a few roles (a block that also reduces, producer and consumer groups). Writers are grouped by
    program (a hash of their column, then checked exactly); the begin/end matching is done once
    per program, on its sequence (rounds long), and applied to all its writers by gathering the
    time grid. Unmatched records count once per writer. None when there are more than
    ``MAX_PROGRAMS`` programs."""
    rounds, nlanes = kind.shape
    if (np.array_equal(kind, np.broadcast_to(kind[:, :1], kind.shape))
            and np.array_equal(event, np.broadcast_to(event[:, :1], event.shape))):
        return _spread_pairs(kind, event, ts, lane_sm, np.zeros(nlanes, np.int64), np.zeros(1, np.int64))
    code = event.astype(np.uint64) * np.uint64(5) + (kind + 1).astype(np.uint64)  # type -1 (empty) .. 3
    weights = np.random.default_rng(0x6B73).integers(1, 1 << 62, size=rounds, dtype=np.uint64) | np.uint64(1)
    with np.errstate(over="ignore"):
        h = (code * weights[:, None]).sum(axis=0, dtype=np.uint64)  # wraps mod 2**64
    del code
    uniq, first, inv = np.unique(h, return_index=True, return_inverse=True)
    if uniq.size > MAX_PROGRAMS:
        return None
    reps = first.astype(np.int64)  # one writer per program
    # every writer's column against its program's representative
    if not (np.array_equal(kind, _spread(kind[:, reps], inv)) and np.array_equal(event, _spread(event[:, reps], inv))):
        return None  # a hash collision: writers that only looked alike
    return _spread_pairs(kind, event, ts, lane_sm, inv.astype(np.int64), reps)


def _spread_pairs(kind, event, ts, lane_sm, inv: np.ndarray, reps: np.ndarray) -> tuple[Intervals, int, int]:
    """Pair each program's sequence once (on its representative writer ``reps[g]``) and spread the
    intervals to the writers of that program (``inv``: program of each writer)."""
    nlanes = kind.shape[1]
    G = reps.size
    writers = np.bincount(inv, minlength=G)
    progs = []
    unmatched_begins = unmatched_ends = 0
    for g, rep in enumerate(reps.tolist()):
        k0, e0 = kind[:, rep], event[:, rep]
        sel = np.flatnonzero((k0 == BEGIN) | (k0 == END))
        (ev, _, occ, rb, re_, depth, _), n_begins, n_ends = _pair(
            k0[sel], e0[sel], np.zeros(sel.size, np.int32), sel.astype(np.int64), np.full(sel.size, -1, np.int16))
        progs.append((ev, occ, rb, re_, depth))
        unmatched_begins += n_begins * int(writers[g])
        unmatched_ends += n_ends * int(writers[g])
    lanes = np.arange(nlanes, dtype=np.int32)
    if G == 1:
        ev, occ, rb, re_, depth = progs[0]
        n = ev.size
        return ((np.repeat(ev, nlanes), np.tile(lanes, n), np.repeat(occ, nlanes), ts[rb].reshape(-1),
                 ts[re_].reshape(-1), np.repeat(depth, nlanes), np.tile(lane_sm, n)), unmatched_begins, unmatched_ends)
    # pairs of all programs side by side (padded to the longest), then spread to the writers
    P = max(pr[0].size for pr in progs)
    EV = np.zeros((P, G), np.int16)
    OCC = np.zeros((P, G), np.int32)
    RB = np.zeros((P, G), np.int64)
    RE = np.zeros((P, G), np.int64)
    DEP = np.zeros((P, G), np.int16)
    valid = np.zeros((P, G), bool)
    for g, (ev, occ, rb, re_, depth) in enumerate(progs):
        n = ev.size
        EV[:n, g], OCC[:n, g], RB[:n, g], RE[:n, g], DEP[:n, g] = ev, occ, rb, re_, depth
        valid[:n, g] = True

    def times(rounds_of: np.ndarray) -> np.ndarray:
        """Each writer's time at its program's rounds (of the begins or of the ends)."""
        flat = _spread(rounds_of, inv)
        flat *= nlanes
        flat += lanes[None, :]  # round-major positions
        return ts.reshape(-1)[flat.reshape(-1)]

    b, e = times(RB), times(RE)
    cols: Intervals = (_spread(EV, inv).reshape(-1), np.tile(lanes, P), _spread(OCC, inv).reshape(-1), b, e,
                       _spread(DEP, inv).reshape(-1), np.tile(lane_sm, P))
    if not valid.all():  # programs of unequal length: drop the padding
        sel = valid[:, inv].reshape(-1)
        cols = tuple(c[sel] for c in cols)
    return cols, unmatched_begins, unmatched_ends


def _pair_alternating(kind, event, lane, ts, lane_sm):
    """Second fast path (records in lane order): per (lane, event) the records alternate begin,
    end, begin, end... (different events may interleave or nest, the same event does not)."""
    n = kind.size
    if n == 0 or n % 2:
        return None
    order = np.argsort(event, kind="stable")  # radix sort on int16: keeps lane and time order
    k = kind[order]
    if k[0::2].any() or not k[1::2].all():
        return None
    ob, oe = order[0::2], order[1::2]
    ev, ln = event[ob], lane[ob]
    if not (np.array_equal(ln, lane[oe]) and np.array_equal(ev, event[oe])):
        return None
    m = ev.size
    start = np.empty(m, dtype=bool)
    start[0] = True
    np.not_equal(ev[1:], ev[:-1], out=start[1:])
    start[1:] |= ln[1:] != ln[:-1]
    idx = np.arange(m, dtype=np.int32)
    first = np.where(start, idx, 0)
    np.maximum.accumulate(first, out=first)
    return (ev, ln, idx - first, ts[ob], ts[oe], np.ones(m, dtype=np.int16), lane_sm[ln])


def _pair(kind, event, lane, ts, sm) -> tuple[Intervals, int, int]:
    """Match begins and ends per (lane, event) with nesting; the intervals and the numbers of
    unmatched begins and ends."""
    empty = (np.zeros(0, np.int16), np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int64),
             np.zeros(0, np.int64), np.zeros(0, np.int16), np.zeros(0, np.int16))
    if kind.size == 0:
        return empty, 0, 0
    # (event, lane, position) order: stable radix sort on the 16-bit event id keeps (lane, round)
    order = np.argsort(event, kind="stable")
    kind, event, lane, ts, sm = kind[order], event[order], lane[order], ts[order], sm[order]
    n = kind.size
    key = event.astype(np.int64) * (1 << 32) + lane
    start = np.ones(n, dtype=bool)
    start[1:] = key[1:] != key[:-1]
    gid = np.cumsum(start) - 1
    step = np.where(kind == BEGIN, 1, -1).astype(np.int64)
    s = np.cumsum(step)
    gstart_idx = np.flatnonzero(start)
    s_before_group = (s - step)[gstart_idx]           # running sum before each group
    s_rel = s - s_before_group[gid]                    # sum within the group, inclusive
    # clamp at zero: an end with nothing open is unmatched and does not close anything
    big = np.int64(n + 2)
    shifted = np.minimum(s_rel, 0) - gid * big
    runmin = np.minimum.accumulate(shifted) + gid * big
    depth_after = s_rel - np.minimum(runmin, 0)
    # an end is unmatched when the clamped depth before it is 0
    prev_depth = np.where(start, 0, np.concatenate([[0], depth_after[:-1]]))
    unmatched_end = (kind == END) & (prev_depth == 0)
    n_unmatched_ends = int(unmatched_end.sum())
    level = np.where(kind == BEGIN, depth_after, prev_depth)
    v = ~unmatched_end
    kind, event, lane, ts, sm, gid, level = kind[v], event[v], lane[v], ts[v], sm[v], gid[v], level[v]
    idx = np.arange(kind.size)
    if kind.size and level.max() > 1:
        o = np.lexsort((idx, level, gid))
    else:
        o = idx
    k2, l2, g2 = kind[o], level[o], gid[o]
    same = np.zeros(k2.size, dtype=bool)
    same[:-1] = (g2[1:] == g2[:-1]) & (l2[1:] == l2[:-1])
    pair_b = np.zeros(k2.size, dtype=bool)
    pair_b[:-1] = same[:-1] & (k2[:-1] == BEGIN) & (k2[1:] == END)
    n_unmatched_begins = int(((k2 == BEGIN) & ~pair_b).sum())
    bi = o[np.flatnonzero(pair_b)]
    ei = o[np.flatnonzero(pair_b) + 1]
    # occurrence order: by begin position within (event, lane)
    if bi.size and level.max() > 1:
        oo = np.lexsort((bi, gid[bi]))
        bi, ei = bi[oo], ei[oo]
    g = gid[bi]
    first = np.ones(g.size, dtype=bool)
    first[1:] = g[1:] != g[:-1]
    starts = np.flatnonzero(first)
    occ = (np.arange(g.size) - np.repeat(starts, np.diff(np.append(starts, g.size)))).astype(np.int32)
    return ((event[bi], lane[bi], occ, ts[bi], ts[ei], level[bi].astype(np.int16), sm[bi]), n_unmatched_begins,
            n_unmatched_ends)

