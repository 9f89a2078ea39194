"""CUDA/HIP-graph replays in the analyzer: what the trace (or the reference trace) teaches about them,
the captures it holds, and the attribution of each distinct replayed kernel sequence (``graph``)."""
from __future__ import annotations

from collections import defaultdict
from typing import Literal

import numpy as np

from mcp_server.core.models import Warning_
from mcp_server.core.vocab import COMMUNICATION, PHASE_CODES, WarningCode
from mcp_server.traces import graph as G
from mcp_server.traces.attribution import (
    Linked,
    PathTable,
    direct_attribution,
    infer_root_phase,
    kernel_phases,
    link,
    phase_of_frame,
    root_of,
)
from mcp_server.traces.loader import RawTrace, launch_kind, load_trace
from mcp_server.traces.models import GraphAttribution


def _eager_reference(rt: RawTrace, lk: Linked, table: PathTable, path_code: np.ndarray,
                     phase: np.ndarray) -> G.Reference:
    """What the attributed eager kernels teach about replays: step sequences (with their phase) and
    per-name votes; and the graph captures the trace holds."""
    captures = _captures(rt, lk)
    idx = np.flatnonzero(lk.module_span >= 0)
    if not len(idx):
        return G.Reference(captures=captures)
    names, paths = rt.names, table.paths
    roots = root_of(lk.modules.parent)[lk.module_span[idx]]
    order = np.lexsort((rt.k_ts[idx], roots))
    idx, roots = idx[order], roots[order]
    cuts = np.flatnonzero(np.diff(roots)) + 1
    steps: list[tuple[list[str], list[str]]] = []
    step_phases: list[str] = []
    seen: set[tuple] = set()
    parts = sorted(np.split(idx, cuts), key=lambda part: rt.k_ts[part[0]])
    for part in parts:
        key = tuple(rt.k_name[part].tolist())
        if key in seen:
            continue
        seen.add(key)
        steps.append(([names[i] for i in key], [paths[c] for c in path_code[part].tolist()]))
        step_phases.append(_main_phase(phase[part]))
        if len(steps) >= 16:
            break
    # majority vote per kernel name
    P = len(paths)
    pair, cnt = np.unique(rt.k_name[idx].astype(np.int64) * P + path_code[idx], return_counts=True)
    nm, pc = pair // P, pair % P
    o = np.lexsort((-cnt, nm))
    nm, pc, cnt = nm[o], pc[o], cnt[o]
    first = np.flatnonzero(np.r_[True, nm[1:] != nm[:-1]])
    tot = np.add.reduceat(cnt, first)
    vote = {names[int(nm[f])]: (paths[int(pc[f])], float(cnt[f] / t)) for f, t in zip(first, tot)}
    ref = G.Reference(steps, vote, step_phases=step_phases, phase=_main_phase(phase[idx]), captures=captures)
    G.learn_layers(ref, [names[i] for i in rt.k_name[idx].tolist()], [paths[c] for c in path_code[idx].tolist()])
    return ref


def _main_phase(codes: np.ndarray) -> str:
    """The phase of at least 90 % of the kernels (prefill or decode), else ''."""
    if not len(codes):
        return ""
    n = np.bincount(codes.astype(np.int64), minlength=len(PHASE_CODES))
    for c in (1, 2):
        if n[c] >= 0.9 * len(codes):
            return PHASE_CODES[c]
    return ""


_CAPTURE_BEGIN, _CAPTURE_END = "StreamBeginCapture", "StreamEndCapture"


def _captures(rt: RawTrace, lk: Linked) -> list[G.Capture]:
    """The CUDA/HIP-graph captures of a trace: per ``*StreamBeginCapture`` .. ``*StreamEndCapture`` window on
    its thread, the kernel/copy/memset launches in it whose kernel did not run (a launch during capture
    only records a graph node), in launch order, with the module span and phase around each launch."""
    if not len(rt.l_name):
        return []
    names = rt.names
    uniq = np.unique(rt.l_name)
    kind_of = np.full(len(names), -1, dtype=np.int64)
    kind_of[uniq] = [launch_kind(names[i]) for i in uniq.tolist()]
    lkind = kind_of[rt.l_name]
    ran = np.isin(rt.l_corr, rt.k_corr)
    cand = (lkind >= 0) & ~ran
    if not cand.any():
        return []
    begin_ids = [i for i in uniq.tolist() if _CAPTURE_BEGIN in names[i]]
    end_ids = [i for i in uniq.tolist() if _CAPTURE_END in names[i]]
    windows: list[np.ndarray] = []
    if begin_ids:  # without the capture calls a launch that ran nothing may as well be untraced GPU work
        b = np.flatnonzero(np.isin(rt.l_name, begin_ids))
        e = np.flatnonzero(np.isin(rt.l_name, end_ids))
        for bi in b[np.argsort(rt.l_ts[b], kind="stable")].tolist():
            th, t0 = rt.l_thread[bi], rt.l_ts[bi]
            later = e[(rt.l_thread[e] == th) & (rt.l_ts[e] > t0)]
            t1 = float(rt.l_ts[later].min()) if len(later) else np.inf
            sel = np.flatnonzero(cand & (rt.l_thread == th) & (rt.l_ts > t0) & (rt.l_ts < t1))
            if len(sel):
                windows.append(sel)
    if not windows:
        return []
    inferred = infer_root_phase(rt, lk)
    roots = root_of(lk.modules.parent) if len(lk.modules) else np.zeros(0, dtype=np.int64)
    out = []
    for sel in windows:
        sel = sel[np.argsort(rt.l_ts[sel], kind="stable")]
        th, ts = rt.l_thread[sel], rt.l_ts[sel]
        span = lk.modules.enclosing(th, ts)
        mark = lk.phases.enclosing(th, ts)
        paths = [lk.module_paths[s] if s >= 0 else "" for s in span.tolist()]
        phases = []
        for s, m in zip(span.tolist(), mark.tolist()):
            ph = phase_of_frame(names[lk.phases.name[m]]) if m >= 0 else ""
            if not ph and s >= 0:
                ph = inferred.get(int(roots[s]), "")
            phases.append(ph)
        out.append(G.Capture(kinds=lkind[sel].tolist(), kernels=[names[i] for i in rt.l_kernel[sel].tolist()],
                             paths=paths, phases=phases))
    return out


def capture_warning(rt: RawTrace, lk: Linked) -> list[Warning_]:
    """``graph_capture``: the trace is (or holds) a CUDA/HIP-graph capture and no replay: its launches ran
    nothing, so its kernel time is not the model's; it is the reference for the replays' trace."""
    names = rt.names
    uniq = np.unique(rt.l_name).tolist() if len(rt.l_name) else []
    if not any(_CAPTURE_BEGIN in names[i] for i in uniq):
        return []  # cheap test first: no capture call
    caps = _captures(rt, lk)
    if not caps:
        return []
    n = sum(len(c.kinds) for c in caps)
    return [Warning_(code=WarningCode.graph_capture, count=n, message=(
        f"the trace holds {len(caps)} CUDA/HIP-graph capture(s) ({n} launches recorded as graph nodes, no kernel "
        f"run): its {len(rt.k_name)} kernel(s) are not the captured work; pass this trace as --reference-trace "
        "(reference_trace) of the trace that profiles the graph's replays, to attribute them to modules"))]


def _replay_reference(rt: RawTrace, lk: Linked, table: PathTable, path_code: np.ndarray, phase: np.ndarray,
                      reference_trace, report, gstat: GraphAttribution
                      ) -> tuple[G.Reference, Literal["same-trace", "reference-trace"]]:
    """What replays are attributed from: this trace's eager kernels and captures, or the reference trace's
    (an eager step, or the profiled graph capture) when given and usable. Returns (reference, method)."""
    ref = _eager_reference(rt, lk, table, path_code, phase)
    if not reference_trace:
        return ref, "same-trace"
    report(2.5, "learning from the reference trace")
    rrt = load_trace(reference_trace)
    rlk = link(rrt)
    rtable = PathTable()
    rcode = direct_attribution(rlk, rtable, len(rrt.k_name))[1]
    rref = _eager_reference(rrt, rlk, rtable, rcode, kernel_phases(rrt, rlk))
    if not rref.empty:
        if rref.captures:
            gstat.notes.append(f"reference trace {reference_trace} holds {len(rref.captures)} graph capture(s) "
                               f"({', '.join(str(len(c.kinds)) for c in rref.captures[:8])} launches)")
        return rref, "reference-trace"
    gstat.notes.append(f"reference trace {reference_trace} has no attributed eager kernels and no graph capture")
    return ref, "same-trace"


def attribute_replays(rt: RawTrace, lk: Linked, table: PathTable, rules, reference_trace, report,
                      path_code: np.ndarray, confidence: np.ndarray, phase: np.ndarray, layer: np.ndarray,
                      gstat: GraphAttribution) -> list[Warning_]:
    """Attribute CUDA-graph replay kernels (in place: path codes, confidence, phase, layer) and fill
    ``gstat``. Each distinct replayed kernel sequence is cut into layers and attributed once."""
    gidx = np.flatnonzero(lk.graph)
    ref, method = _replay_reference(rt, lk, table, path_code, phase, reference_trace, report, gstat)
    comm = {i: rules.classify(rt.names[i]) == COMMUNICATION for i in np.unique(rt.k_name[gidx])}
    gidx = gidx[np.lexsort((rt.k_ts[gidx], lk.graph_group[gidx]))]
    bounds = np.flatnonzero(np.diff(lk.graph_group[gidx])) + 1
    memo: dict[tuple, tuple] = {}
    cuts: dict[str, int] = defaultdict(int)
    for part in np.split(gidx, bounds):
        key = tuple(rt.k_name[part].tolist())
        if key not in memo:
            memo[key] = _attribute_sequence(rt, key, part, ref, table, comm)
        codes, cs, _, lay, cut, _, pcodes = memo[key]
        path_code[part] = codes
        confidence[part] = cs
        layer[part] = lay
        unmarked = phase[part] == 0  # a marker around the graph launch wins
        phase[part[unmarked]] = pcodes[unmarked]
        cuts[cut] += 1
    methods = {r[2] for r in memo.values()}
    attributed = int((path_code[gidx] > 1).sum())
    gstat.graph_kernel_count = int(len(gidx))
    gstat.attributed_count = attributed
    gstat.method = method if attributed else "unattributed"
    gstat.mean_confidence = float(confidence[gidx].mean())
    cut_kind: str = max(cuts, key=lambda c: cuts[c]) if cuts else "none"
    gstat.layer_cut = cut_kind  # type: ignore[assignment]  # a layer_cuts kind
    gstat.layers_found = max((r[5] for r in memo.values()), default=0)
    gstat.notes.append(f"{len(bounds) + 1} replay(s), {len(memo)} distinct kernel sequence(s); "
                       f"attribution by {', '.join(sorted(methods))}")
    if attributed < len(gidx):
        gstat.notes.append(f"{len(gidx) - attributed} replay kernel(s) in '{G.UNATTRIBUTED_GRAPH}'")
    return _replay_warnings(rt, gidx, path_code, ref, reference_trace, gstat, methods)


def _attribute_sequence(rt: RawTrace, key: tuple, part: np.ndarray, ref: G.Reference, table: PathTable,
                        comm: dict[int, bool]) -> tuple:
    """One distinct replayed kernel sequence (``part``: one replay of it): its layer cut, then per kernel the
    path code, confidence and phase code from the reference's captures, else its eager steps. Returns
    (codes, confidences, method, layer per kernel, cut kind, layers, phase codes)."""
    seq = [rt.names[i] for i in key]
    lay, cut, nl = G.layer_cuts(np.asarray(key), np.array([comm[i] for i in key], dtype=bool))
    got = G.attribute_from_capture(seq, rt.k_kind[part].tolist(), ref.captures) if ref.captures else None
    if got is not None:
        ps, cs, kph = got
        how = "capture"
    elif not ref.empty:
        ps, cs, how, step_ph = G.attribute_sequence(seq, ref, lay.tolist())
        kph = [step_ph] * len(seq)
    else:
        ps, cs, how, kph = [""] * len(seq), [0.0] * len(seq), "none", [""] * len(seq)
    codes = [table.code(p) if p else 1 for p in ps]
    # the phase the reference teaches, else graph (replayed, phase unknown)
    pcodes = np.array([PHASE_CODES.index(p) if p in ("prefill", "decode") else 3 for p in kph], dtype=np.int8)
    return np.array(codes), np.array(cs), how, lay, cut, nl, pcodes


def _replay_warnings(rt: RawTrace, gidx: np.ndarray, path_code: np.ndarray, ref: G.Reference, reference_trace,
                     gstat: GraphAttribution, methods: set[str]) -> list[Warning_]:
    """``replays_unattributed`` (saying which input would attribute them), else ``low_graph_confidence``."""
    attributed = gstat.attributed_count
    left = ~(path_code[gidx] > 1)
    if (ref.empty or not attributed) and left.any():
        left_us = float(rt.k_dur[gidx][left].sum())
        src = f"the reference trace {reference_trace}" if reference_trace else "the trace"
        why = (f"{src} has no attributed eager kernels or graph capture{' either' if reference_trace else ''}"
               if ref.empty else f"the graph capture(s) and eager kernels of {src} do not match the replays "
                                 "(another model, graph, phase or batch shape)" if ref.captures
               else f"the eager kernels of {src} do not match the replays (another model, phase or batch shape)")
        if not reference_trace and ref.empty:
            why = "the trace holds no eager step with module spans and no graph capture to learn them from"
        return [Warning_(code=WarningCode.replays_unattributed, count=int(left.sum()),
                         message=f"{int(left.sum())} CUDA-graph replay kernel(s) ({left_us:,.1f} us) are not "
                                 f"attributed to modules: {why}; pass --reference-trace "
                                 "(reference_trace) with an eager trace of the same model (one step profiled with "
                                 "CUDA graphs off) or the trace profiled while the graph was captured")]
    if attributed and gstat.mean_confidence < 0.5:
        why = (": the graph capture's launches do not match the replay's kernels one to one and name no kernel, so "
               "they were placed by launch order; pass the capture of this very graph (same batch size), or an eager "
               "step of the same model" if "capture" in methods else
               f" ({', '.join(sorted(methods))}): the eager kernels may come from another model or phase; pass "
               "--reference-trace with an eager trace of the same model and batch shape")
        return [Warning_(code=WarningCode.low_graph_confidence, count=int(len(gidx)),
                         message=f"CUDA-graph replay attribution has mean confidence {gstat.mean_confidence:.2f}{why}")]
    return []
