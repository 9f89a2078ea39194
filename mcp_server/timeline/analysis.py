"""Phase statistics, critical path and verdicts from a decoded probe buffer."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional, Sequence, Union

import numpy as np
import pandas as pd

from mcp_server.core.errors import BufferFormatError
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.vocab import ProgressFn, WarningCode
from mcp_server.timeline.decode import Decoded, decode_buffer, event_name_list
from mcp_server.timeline.export import write_gantt_png, write_perfetto
from mcp_server.timeline.models import (
    IMBALANCE_RATIO,
    CriticalSegment,
    DecodeSummary,
    Instant,
    Occurrence,
    Phase,
    ProbeOverhead,
    TimelineAnalysis,
    Verdict,
)
from mcp_server.timeline.overhead import load_overhead
from mcp_server.timeline.requests import AnalyzeTimelineRequest

#: a verdict needs at least this share of the kernel span at stake
MIN_SPAN_SHARE = 0.01
#: start skew is reported when wall - slowest is at least this share of the phase's wall time
SKEW_SHARE = 0.10
TOP_BLOCKS = 32


def _fmt_ns(ns: float) -> str:
    ns = float(ns)
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


def _names(dec: Decoded, event_names, warnings: list[Warning_]) -> dict[int, str]:
    names = event_name_list(event_names)
    ids = dec.event_ids
    out = {i: names[i] if i < len(names) and names[i] else f"event{i}" for i in ids}
    missing = [i for i in ids if i >= len(names) or not names[i]]
    if missing:
        warnings.append(Warning_(
            code=WarningCode.names_missing, count=len(missing),
            message=(f"{len(names)} event name(s) given but the buffer holds event id(s) "
                     f"{', '.join(map(str, missing[:10]))}{' ...' if len(missing) > 10 else ''}; "
                     "those are shown as event<id> (names are listed in event-id order, id 0 first)")))
    if len(names) > (max(ids) + 1 if ids else 0):  # so at least the last name is unused
        unused = [n for i, n in enumerate(names) if i not in set(ids)]
        warnings.append(Warning_(code=WarningCode.names_unused, count=len(unused),
                                 message=f"no records for event(s) {', '.join(unused[:10])}"))
    return out


def _decode_warnings(dec: Decoded) -> list[Warning_]:
    st = dec.stats
    w: list[Warning_] = []
    if st.overflow:
        w.append(Warning_(code=WarningCode.overflow, message=(
            "header overflow bit set: the bounds guard dropped records of at least one writer; "
            "phases after the drop are missing or unmatched (give the buffer more records per writer)")))
    # Filling the last round is a truncation only where nothing would have said so: kernelscope's writers
    # (kernelscope_probe.cuh, the Triton helper; the "sm" tag layout) keep a bounds guard that sets the
    # overflow bit instead of dropping records silently, so an "sm" buffer sized exactly (as the bundled
    # ones are) is complete; legacy-layout (FlashInfer) writers have no guard, and there it is said.
    if st.truncated_lanes and not st.overflow and dec.tag_layout != "sm":
        w.append(Warning_(code=WarningCode.truncation_possible, count=st.truncated_lanes, message=(
            f"{st.truncated_lanes} writer(s) recorded in the buffer's last round: if they recorded more, "
            "it was written past the end (no bounds check) or lost; size the buffer with spare rounds")))
    # the decoder's counts of records it excluded, repaired or doubts: (count, code, message), in this order
    counted = (
        (st.unmatched_begins, WarningCode.unmatched_begin,
         f"{st.unmatched_begins} begin record(s) without a matching end (excluded)"),
        (st.unmatched_ends, WarningCode.unmatched_end,
         f"{st.unmatched_ends} end record(s) without a preceding begin (excluded)"),
        (st.zero_slots, WarningCode.zero_slots,
         f"{st.zero_slots} zero slot(s) inside writers' records (holes): a writer skipped a slot, or the "
         "buffer was partly overwritten"),
        (st.tag_mismatches, WarningCode.tag_mismatch,
         f"{st.tag_mismatches} record(s) whose tag names another block than their slot position "
         f"({dec.tag_layout} layout); positions were used. Wrong ngroups in the header, wrong tag layout, "
         "or writers sharing a lane"),
        (st.bad_type, WarningCode.bad_type,
         f"{st.bad_type} record(s) with event type 3 (not begin/end/instant), ignored"),
        (st.timer_wraps, WarningCode.timer_wrap,
         f"the 32-bit timer wrapped on {st.timer_wraps} writer(s); unwrapped (exact while consecutive records "
         "of a writer are < 4.29 s apart)"),
        (st.non_monotonic, WarningCode.non_monotonic,
         f"{st.non_monotonic} step(s) of more than 2.1 s between consecutive records of a writer after "
         "unwrapping: a record earlier than its predecessor (out of order, corrupted buffer) shows up as a "
         "~4.29 s jump; or a real stall that long"),
    )
    w += [Warning_(code=code, count=n, message=text) for n, code, text in counted if n]
    if st.partial_round:
        w.append(Warning_(code=WarningCode.partial_round, message=(
            "buffer length is not header + a whole number of rounds (nblocks*ngroups slots): "
            "the copy may be truncated")))
    if dec.tag_layout == "sm" and dec.nblocks >= 8:
        used = dec.lane_sm[dec.lane_sm >= 0]
        if used.size and np.unique(used).size == 1:
            w.append(Warning_(code=WarningCode.sm_single, message=(
                f"every writer's tag names SM {int(used[0])}: for {dec.nblocks} blocks that is unlikely; the tags "
                "may be in the legacy layout (block_group << 12), so SM ids are probably wrong")))
    if dec.layout_auto and dec.tag_layout == "legacy" and dec.ngroups == 1:
        w.append(Warning_(code=WarningCode.layout_ambiguous, message=(
            "tags carry no SM id (legacy and sm layouts agree here); SM ids unknown")))
    return w


def analyze_decoded(dec: Decoded, event_names=None, *, overhead: Optional[ProbeOverhead] = None,
                    extra_warnings: Sequence[Warning_] = ()) -> TimelineAnalysis:
    warnings = list(extra_warnings) + _decode_warnings(dec)
    names = _names(dec, event_names, warnings)
    iv = _interval_frame(dec)
    span_ns = int(iv["end"].max() - iv["begin"].min()) if len(iv) else 0
    phases: list[Phase] = []
    segments: list[CriticalSegment] = []
    sync: dict[str, tuple[int, int]] = {}
    unsync: list[str] = []
    if len(iv):
        blk, occ = _occurrences(iv)
        sync = {names.get(int(e), f"event{int(e)}"): v for e, v in _sync_waits(blk).items()}
        unsync = [names.get(int(e), f"event{int(e)}") for e in _unsynchronised(occ)]
        if unsync:
            warnings.append(Warning_(code=WarningCode.unsynchronised, count=len(unsync), message=(
                f"{', '.join(unsync)}: occurrence k+1 begins on some blocks before occurrence k has ended on "
                "others, so no grid-wide synchronisation separates them (a persistent kernel claiming work, "
                "or programs that loop without a barrier). Per-occurrence start skew, wall and critical path "
                "then compare unsynchronised work: read the per-block durations and the gaps between a "
                "writer's intervals instead; no start_skew verdict is given (for any phase: a grid-wide "
                "barrier between rounds would have separated these).")))
        nested_events = set(iv.loc[iv["depth"] > 1, "event"].unique().tolist())
        segments, crit_by_event = _critical_path(occ, nested_events, names)
        phases = _phases(blk, occ, _waits_after(iv), crit_by_event, nested_events, names)
    instants = _instants(dec, names)
    if not phases:
        warnings.append(Warning_(code=WarningCode.no_intervals, message="no matched begin/end pairs: nothing to "
                                                                        "analyse"))
    res = TimelineAnalysis(
        source=dec.source, nblocks=dec.nblocks, ngroups=dec.ngroups, tag_layout=dec.tag_layout,
        tag_layout_auto=dec.layout_auto, sm_known=bool((dec.lane_sm >= 0).any()),
        records=dec.stats.records, intervals=int(dec.event.size), instants=instants,
        event_names=[names[i] for i in sorted(names)],
        decode=DecodeSummary.model_validate(dec.stats, from_attributes=True),  # DecodeStats less ``records``
        span_ns=span_ns, phases=phases, critical_path=segments, verdicts=[], warnings=warnings,
        probe_overhead=overhead,
    )
    res.verdicts = _verdicts(res, sync, bool(unsync))
    return res


#: consecutive occurrences overlap when the later one begins this share of the earlier one's wall before it ends
UNSYNC_OVERLAP = 0.1


def _unsynchronised(occ: pd.DataFrame) -> list[int]:
    """Events whose consecutive occurrences overlap across blocks in most pairs: occurrence k + 1 begins on some
    block at least ``UNSYNC_OVERLAP`` of occurrence k's wall before occurrence k ends on another. A kernel with
    a grid-wide barrier between rounds never does this (its fixtures: every pair at least 0.6 walls apart)."""
    out = []
    for ev, g in occ.groupby(level=0, sort=True):
        g = g.droplevel(0).sort_index()
        if len(g) < 2:
            continue
        ends, begins, walls = g["end"].values[:-1], g["begin"].values[1:], g["wall"].values[:-1].clip(min=1)
        hits = int(((ends - begins) >= UNSYNC_OVERLAP * walls).sum())
        if 2 * hits > len(ends):
            out.append(int(ev))
    return out


#: an occurrence reads as "ends at a barrier" when its begins spread over at least this share of its wall...
SYNC_BEGIN_SPREAD = 0.3
#: ...while its ends lie within this share of the begin spread
SYNC_END_ALIGN = 0.1


def _sync_waits(blk: pd.DataFrame) -> dict[int, tuple[int, int]]:
    """Events whose intervals contain a synchronisation wait: in most occurrences (at least 4 blocks)
    the blocks begin scattered but end together (the probe end sits after a barrier, so every block's
    interval stretches to the release). Per event: (occurrences of that shape, occurrences)."""
    out: dict[int, tuple[int, int]] = {}
    g = blk.groupby(["event", "occ"], sort=True).agg(n=("block", "size"), b0=("begin", "min"), b1=("begin", "max"),
                                                      e0=("end", "min"), e1=("end", "max"))
    g = g[g["n"] >= 4]
    if not len(g):
        return out
    wall = (g["e1"] - g["b0"]).clip(lower=1)
    bs = g["b1"] - g["b0"]
    es = g["e1"] - g["e0"]
    hit = (bs >= SYNC_BEGIN_SPREAD * wall) & (es <= SYNC_END_ALIGN * bs)
    for ev, h in hit.groupby(level=0):
        k, n = int(h.sum()), int(h.size)
        if k and 2 * k > n:
            out[int(ev)] = (k, n)
    return out


def _interval_frame(dec: Decoded) -> pd.DataFrame:
    """One row per matched interval, with its writer's block."""
    iv = pd.DataFrame({
        "event": dec.event.astype(np.int64), "lane": dec.lane.astype(np.int64),
        "occ": dec.occurrence.astype(np.int64), "begin": dec.begin, "end": dec.end,
        "depth": dec.depth.astype(np.int64),
    })
    iv["block"] = iv["lane"] // dec.ngroups
    return iv


def _occurrences(iv: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Block-level spans (a block's groups from first begin to last end) and, per (event,
    occurrence), the statistics over its blocks: wall, slowest, mean, std, skew, last block."""
    blk = iv.groupby(["event", "occ", "block"], sort=True).agg(begin=("begin", "min"), end=("end", "max"))
    blk["dur"] = blk["end"] - blk["begin"]
    blk = blk.reset_index()
    g = blk.groupby(["event", "occ"], sort=True)
    occ = g.agg(blocks=("block", "size"), begin=("begin", "min"), end=("end", "max"),
                last_begin=("begin", "max"), slowest=("dur", "max"), mean=("dur", "mean"),
                std=("dur", "std"))
    occ["last_block"] = blk.loc[g["end"].idxmax().values, "block"].values
    occ["slowest_block"] = blk.loc[g["dur"].idxmax().values, "block"].values
    occ["last_dur"] = blk.loc[g["end"].idxmax().values, "dur"].values
    occ["std"] = occ["std"].fillna(0.0)
    occ["wall"] = occ["end"] - occ["begin"]
    occ["skew"] = occ["last_begin"] - occ["begin"]
    return blk, occ


def _waits_after(iv: pd.DataFrame) -> pd.DataFrame:
    """Per event, mean and max gap on a lane from an outermost interval's end to the lane's next begin."""
    top = iv[iv["depth"] == 1].sort_values(["lane", "begin"], kind="stable")
    nxt_begin = top["begin"].shift(-1)
    same = top["lane"].shift(-1) == top["lane"]
    gap = (nxt_begin - top["end"]).where(same)
    top = top.assign(wait=gap.clip(lower=0))
    return top.groupby("event")["wait"].agg(["mean", "max"])


def _critical_path(occ: pd.DataFrame, nested_events: set, names: dict[int, str]
                   ) -> tuple[list[CriticalSegment], dict[int, int]]:
    """The critical path over outermost events, in order of their last end, and its time per event."""
    segments: list[CriticalSegment] = []
    chain = occ.reset_index()
    chain = chain[~chain["event"].isin(nested_events)].sort_values(["end", "begin"], kind="stable")
    prev_end = int(chain["begin"].min()) if len(chain) else 0
    crit_by_event: dict[int, int] = {}
    for r in chain.itertuples(index=False):
        c = max(0, int(r.end) - prev_end)
        work = min(int(r.last_dur), c)
        segments.append(CriticalSegment(
            phase=names.get(int(r.event), f"event{int(r.event)}"), occurrence=int(r.occ),
            last_block=int(r.last_block), begin_ns=int(r.begin), end_ns=int(r.end),
            critical_ns=c, work_ns=work, release_ns=c - work))
        crit_by_event[int(r.event)] = crit_by_event.get(int(r.event), 0) + c
        prev_end = max(prev_end, int(r.end))
    return segments, crit_by_event


def _phases(blk: pd.DataFrame, occ: pd.DataFrame, wait_ev: pd.DataFrame, crit_by_event: dict[int, int],
            nested_events: set, names: dict[int, str]) -> list[Phase]:
    """One ``Phase`` per event: its occurrences and the per-block statistics over all of them."""
    phases: list[Phase] = []
    bmean = blk.groupby(["event", "block"])["dur"].mean()
    wait = wait_ev.reindex(occ.index.unique(level=0)).fillna(0.0)  # 0 for an event never followed on its lane
    for ev, o in occ.groupby(level=0, sort=True):
        o = o.droplevel(0)
        occs = []
        for k, r in o.iterrows():
            mean = float(r["mean"])
            occs.append(Occurrence(
                index=int(k), blocks=int(r["blocks"]), begin_ns=int(r["begin"]), end_ns=int(r["end"]),
                wall_ns=int(r["wall"]), slowest_ns=int(r["slowest"]), mean_ns=round(mean, 1),
                cv=round(float(r["std"]) / mean, 4) if mean > 0 else 0.0,
                imbalance=round(float(r["slowest"]) / mean, 4) if mean > 0 else 1.0,
                skew_ns=int(r["skew"]), last_block=int(r["last_block"]), slowest_block=int(r["slowest_block"])))
        bm = bmean.loc[ev].sort_values(ascending=False, kind="stable")
        last_blocks = [x.last_block for x in occs]
        phases.append(Phase(
            name=names.get(int(ev), f"event{int(ev)}"), event_id=int(ev), occurrences=occs,
            imbalance=max(x.imbalance for x in occs), cv_max=max(x.cv for x in occs),
            slowest_blocks=[int(b) for b in bm.index[:TOP_BLOCKS]],
            slowest_block_mean_ns=[round(float(v), 1) for v in bm.values[:TOP_BLOCKS]],
            block_mean_ns=round(float(blk.loc[blk["event"] == ev, "dur"].mean()), 1),
            last_blocks=last_blocks,
            last_block_always_same=len(set(last_blocks)) == 1,
            stragglers_consistent=_consistent(blk[blk["event"] == ev], last_blocks),
            total_wall_ns=int(o["wall"].sum()), total_slowest_ns=int(o["slowest"].sum()),
            total_mean_ns=round(float(o["mean"].sum()), 1), total_skew_ns=int(o["skew"].sum()),
            wait_after_mean_ns=round(float(wait.loc[ev, "mean"]), 1), wait_after_max_ns=int(wait.loc[ev, "max"]),
            critical_ns=crit_by_event.get(int(ev), 0),
            imbalance_at_stake_ns=round(float((o["slowest"] - o["mean"]).sum()), 1),
            skew_at_stake_ns=round(float((o["wall"] - o["slowest"]).sum()), 1),
            nested=int(ev) in nested_events,
        ))
    return phases


def _instants(dec: Decoded, names: dict[int, str]) -> list[Instant]:
    instants: list[Instant] = []
    idf = pd.DataFrame({"event": dec.instant_event.astype(np.int64), "lane": dec.instant_lane, "ts": dec.instant_ts})
    for ev, d in idf.groupby("event", sort=True):
        i_last = int(d["ts"].values.argmax())
        instants.append(Instant(name=names.get(int(ev), f"event{int(ev)}"), event_id=int(ev), count=len(d),
                                first_ns=int(d["ts"].min()), last_ns=int(d["ts"].max()),
                                last_block=int(d["lane"].values[i_last]) // dec.ngroups))
    return instants


def _consistent(blk_ev: pd.DataFrame, last_blocks: list[int]) -> Optional[bool]:
    """Is every occurrence's last block slow (>= IMBALANCE_RATIO x mean) in every occurrence it ran?"""
    if len(last_blocks) < 2:
        return None
    cand = blk_ev[blk_ev["block"].isin(set(last_blocks))]
    means = blk_ev.groupby("occ")["dur"].mean()
    ratio = cand["dur"].values / means.reindex(cand["occ"]).values
    return bool((ratio >= IMBALANCE_RATIO).all())


def _verdicts(res: TimelineAnalysis, sync: Optional[dict[str, tuple[int, int]]] = None,
              unsync: bool = False) -> list[Verdict]:
    """Every phase's verdicts (no start skew when ``unsync``: no grid-wide synchronisation between rounds), then
    the critical path's, ``balanced`` when no phase is imbalanced and the probes' cost when measured; ranked by
    the time at stake."""
    span = max(res.span_ns, 1)
    out: list[Verdict] = [v for p in res.phases for v in _phase_verdicts(p, span, sync, unsync)
                          if not (unsync and v.kind == "start_skew")]
    if res.critical_path:
        crit = sorted(res.phases, key=lambda p: -p.critical_ns)
        total = sum(s.critical_ns for s in res.critical_path) or 1
        rel = sum(s.release_ns for s in res.critical_path)
        parts = ", ".join(f"{p.name} {_fmt_ns(p.critical_ns)} "
                          f"({100 * p.critical_ns / total:.0f}%)" for p in crit if p.critical_ns)
        out.append(Verdict(kind="critical_phase", phase=crit[0].name, at_stake_ns=0.0, message=(
            f"critical path {_fmt_ns(total)} over {len(res.critical_path)} phase step(s): {parts}; of it "
            f"{_fmt_ns(rel)} is release/wait before the last block of a step began.")))
    if not any(v.kind in ("imbalance", "fixed_straggler", "moving_straggler") for v in out) and res.phases:
        most = max(res.phases, key=lambda p: p.imbalance)
        out.append(Verdict(kind="balanced", phase=most.name, at_stake_ns=0.0, message=(
            f"no load imbalance: the largest slowest/mean is {most.imbalance:.2f}x ({most.name}), under the "
            f"{IMBALANCE_RATIO:.2f}x threshold, or too little time at stake.")))
    if res.probe_overhead is not None:
        po = res.probe_overhead
        out.append(Verdict(kind="data_quality", at_stake_ns=0.0, message=(
            f"probes changed the kernel time by {po.overhead_pct:+.2f}% ({po.without_median_us:.1f} -> "
            f"{po.with_median_us:.1f} us, " + (f"medians of {po.samples})" if po.samples else "medians from the file)")
            + (", within run-to-run noise" if po.within_noise else "") +
            "; probes perturb what they measure: accept or revert a change on an unprofiled A/B benchmark.")))
    out.sort(key=lambda v: -v.at_stake_ns)
    return out


def _phase_verdicts(p: Phase, span: int, sync: Optional[dict[str, tuple[int, int]]],
                    unsync: bool = False) -> list[Verdict]:
    """A synchronisation wait inside the phase (``sync``: per phase, occurrences with one), else its
    imbalance, its start skew and the wait after it (``unsync``: no grid-wide synchronisation between rounds, so
    the wait after a phase is not read as one)."""
    k = len(p.occurrences)
    if sync and p.name in sync:
        hits, n = sync[p.name]
        return [Verdict(kind="barrier_wait", phase=p.name, at_stake_ns=p.skew_at_stake_ns + p.total_mean_ns, message=(
            f"{p.name}: this interval contains a synchronisation wait; move the probe end before the barrier. "
            f"In {hits} of {n} occurrence(s) the blocks begin up to "
            f"{_fmt_ns(max(o.skew_ns for o in p.occurrences))} apart but end together, so each block's time "
            f"is mostly waiting for the last one: the {p.imbalance:.2f}x imbalance and the start skew of "
            f"this phase measure the wait, not the phase's work."))]
    out = []
    share = p.imbalance_at_stake_ns / span
    imbalanced = p.imbalance >= IMBALANCE_RATIO and share >= MIN_SPAN_SHARE
    if imbalanced:
        out.append(_imbalance_verdict(p, share, unsync))
    if p.total_wall_ns > 0:
        sk = p.skew_at_stake_ns
        if sk / p.total_wall_ns >= SKEW_SHARE and sk / span >= MIN_SPAN_SHARE:
            out.append(Verdict(kind="start_skew", phase=p.name, at_stake_ns=sk, message=(
                f"{p.name}: wall time exceeds the slowest block by {_fmt_ns(sk)} over {k} occurrence(s) "
                f"({100 * sk / p.total_wall_ns:.0f}% of its wall); blocks start up to "
                f"{_fmt_ns(max(o.skew_ns for o in p.occurrences))} apart: slow release after the preceding "
                "synchronisation, or blocks launched/scheduled late.")))
    wait_total = p.wait_after_mean_ns * k
    if not imbalanced and wait_total / span >= 5 * MIN_SPAN_SHARE:
        out.append(Verdict(kind="barrier_wait", phase=p.name, at_stake_ns=round(wait_total, 1), message=(
            f"after {p.name}, a writer waits on average {_fmt_ns(p.wait_after_mean_ns)} (max "
            f"{_fmt_ns(p.wait_after_max_ns)}) before its next phase begins, {_fmt_ns(wait_total)} per run "
            "summed over occurrences, while the blocks are balanced within the phase: "
            + ("waiting for its next piece of work (no grid-wide synchronisation here), or work outside the probes."
               if unsync else "barrier/release cost, start skew, or work outside the probes."))))
    return out


def _imbalance_verdict(p: Phase, share: float, unsync: bool = False) -> Verdict:
    """An imbalanced phase: a fixed straggler, several equally slow blocks, or a moving straggler."""
    k = len(p.occurrences)
    worst = max(p.occurrences, key=lambda o: o.imbalance)
    top = ", ".join(f"{b} ({_fmt_ns(v)})" for b, v in zip(p.slowest_blocks[:5], p.slowest_block_mean_ns[:5]))
    base = (f"{p.name}: the slowest block takes {p.imbalance:.2f}x the mean "
            f"({_fmt_ns(worst.slowest_ns)} vs {_fmt_ns(worst.mean_ns)}, occurrence {worst.index}; "
            f"CV {p.cv_max:.2f}); slowest blocks by mean: {top}, against a block mean of "
            f"{_fmt_ns(p.block_mean_ns)}. Up to {_fmt_ns(p.imbalance_at_stake_ns)} per run at stake "
            f"(sum of slowest - mean over {k} occurrence(s), {100 * share:.1f}% of the span).")
    if p.wait_after_mean_ns > 0:
        base += (f" A writer waits {_fmt_ns(p.wait_after_mean_ns)} on average before its next phase begins "
                 "(no grid-wide synchronisation: it is not waiting for the slowest block)." if unsync else
                 f" Meanwhile the other writers wait {_fmt_ns(p.wait_after_mean_ns)} on average at the "
                 "following synchronisation.")
    top_mean = p.slowest_block_mean_ns[0] if p.slowest_block_mean_ns else 0.0
    peers = [b for b, v in zip(p.slowest_blocks, p.slowest_block_mean_ns) if v >= 0.95 * top_mean]
    kind: Literal["imbalance", "fixed_straggler", "moving_straggler"] = "imbalance"
    if p.last_block_always_same and k >= 2:
        kind = "fixed_straggler"
        tail = (f" Block {p.last_blocks[0]} finishes last in every occurrence ({k}/{k}), but blocks "
                f"{', '.join(map(str, peers))} are within 5% of each other: all of them carry the extra "
                "work; move work off all of them (split their tiles, rebalance the schedule)." if len(peers) > 1 else
                f" Block {p.last_blocks[0]} finishes last in every occurrence ({k}/{k}): its share "
                "of the work is too large; move work off it (split its tile, rebalance the schedule).")
    elif k == 1:
        tail = (f" One occurrence only: block {p.last_blocks[0]} finished last; record more occurrences "
                "(iterations, rounds) to tell a fixed straggler from a moving one.")
    elif p.stragglers_consistent:
        tail = (f" The last finisher moves among blocks {', '.join(map(str, sorted(set(p.last_blocks))))}, "
                "each slow in every occurrence"
                + (f" (blocks {', '.join(map(str, peers))} are within 5% of the slowest)" if len(peers) > 1 else "")
                + ": they carry similar extra work; give them less, or split their work across more blocks.")
    else:
        kind = "moving_straggler"
        tail = (f" The last block changes between occurrences ({', '.join(map(str, p.last_blocks))}) and "
                "is not slow in every occurrence: contention (memory, atomics, co-scheduled work) or "
                "synchronisation, not a fixed share of the work.")
    return Verdict(kind=kind, phase=p.name, at_stake_ns=p.imbalance_at_stake_ns, message=base + tail)


@engine(AnalyzeTimelineRequest)
def analyze_timeline(req: AnalyzeTimelineRequest, progress: ProgressFn | None = None) -> TimelineAnalysis:
    """Decode a probe buffer and analyse its phases.

    ``event_names``: list, comma-separated string or a file (one name per line, event id order).
    When ``event_names`` is None, a file ``<buffer stem>.events`` beside the buffer is used if present.
    ``overhead_path``: a JSON of probe timings; by default ``<buffer stem>.overhead.json`` beside it.
    (A buffer already in memory: ``analyze_path``.)
    """
    if progress:
        progress(0, 3, "decode")
    dec, res = analyze_path(req.buffer_path, req.event_names, tag_layout=req.tag_layout,
                            overhead_path=req.overhead_path)
    if progress:
        progress(1, 3, "analyse")
    if req.perfetto_path is not None:
        res.outputs["perfetto"] = str(write_perfetto(dec, res, req.perfetto_path))
    if req.png_path is not None:
        res.outputs["png"] = str(write_gantt_png(dec, res, req.png_path))
    if progress:
        progress(3, 3, "done")
    return res


def analyze_path(buffer_path, event_names=None, *, tag_layout: Optional[str] = None,
                 overhead_path: Union[None, str, os.PathLike] = None) -> tuple[Decoded, TimelineAnalysis]:
    """Decode and analyse one buffer; (decoded buffer, analysis) for callers that export too."""
    dec = decode_buffer(buffer_path, tag_layout=tag_layout)
    extra: list[Warning_] = []
    if event_names is None and isinstance(buffer_path, (str, os.PathLike)):
        side = Path(buffer_path).with_suffix(".events")
        if side.exists():
            event_names = str(side)
    overhead = None
    if overhead_path is not None:
        overhead = load_overhead(overhead_path)
    elif isinstance(buffer_path, (str, os.PathLike)):
        found = Path(buffer_path).with_suffix(".overhead.json")  # the default beside the buffer
        if found.exists():
            try:
                overhead = load_overhead(found)
            except BufferFormatError as exc:
                extra.append(Warning_(code=WarningCode.overhead_unreadable, message=str(exc)))
    return dec, analyze_decoded(dec, event_names, overhead=overhead, extra_warnings=extra)
