"""``analyze_trace``: the trace analyzer engine.

Stages: load (msgspec, numpy columns) -> link kernels to launches and the
spans enclosing them -> attribute CUDA-graph replays -> per-kernel DataFrame
-> module tree, per-type statistics, category and phase totals -> optional
xlsx report.

Phase: a kernel whose launch lies inside a phase marker is prefill / decode: a
python function named with ``forward_extend`` / ``forward_decode`` (SGLang), or
an annotation ``step[DECODE ...]`` / ``step[EXTEND ...]`` / ``capture_N_DECODE``
(SGLang) / ``execute_..._context_C(...)_generation_G(...)`` (C prefill, G decode
requests). Without a marker an eager kernel inherits the phase of the
root-module call it belongs to as inferred from that call's ``aten::embedding``
input ids: 2-D ids ``[batch, seq]`` with ``seq == 1`` are decode, ``seq > 1``
prefill; otherwise the phase stays ``''`` (unknown). A graph-replay kernel
without a marker takes the phase its reference teaches (the capture launch or
the aligned eager step it was attributed from), else ``graph``: replayed, phase
unknown (training and diffusion replay graphs too).
"""
from __future__ import annotations

import functools
import json
import os
from collections import defaultdict
from typing import Any, Literal, Optional

import numpy as np

from mcp_server.core.categories import load_categories
from mcp_server.core.errors import KernelscopeError, WriteError
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.vocab import COMMUNICATION, PHASE_CODES, ProgressFn, WarningCode, module_type
from mcp_server.traces import graph as G
from mcp_server.traces._reader import BlockReader
from mcp_server.traces.attribution import Linked, link, phase_of_frame
from mcp_server.traces.loader import KIND_NAMES, RawTrace, launch_kind, load_trace
from mcp_server.traces.models import (
    KERNEL_COLUMNS,
    CategoryTotal,
    GraphAttribution,
    ModuleNode,
    ModuleTypeStats,
    PhaseTotal,
    TraceAnalysis,
)
from mcp_server.traces.requests import AnalyzeTraceRequest


class PathTable:
    """Interned module instance paths; code 0 = '' (unattributed), 1 = the graph bucket.

    Adding a path adds its ancestors too, so every code's parent is a code.
    """

    def __init__(self) -> None:
        self.paths: list[str] = ["", G.UNATTRIBUTED_GRAPH]
        self.index: dict[str, int] = {"": 0, G.UNATTRIBUTED_GRAPH: 1}
        self._parent: list[int] = [-1, -1]

    def code(self, path: str) -> int:
        c = self.index.get(path)
        if c is not None:
            return c
        par = self.code(path.rsplit("/", 1)[0]) if "/" in path else -1
        c = self.index[path] = len(self.paths)
        self.paths.append(path)
        self._parent.append(par)
        return c

    def arrays(self):
        """parent, depth, instance names, type names, root types (numpy / lists, by code)."""
        parent = np.array(self._parent, dtype=np.int64)
        depth = np.array([p.count("/") for p in self.paths], dtype=np.int64)
        inst = [p.rsplit("/", 1)[-1] if i > 1 else "" for i, p in enumerate(self.paths)]
        types = [module_type(x) for x in inst]
        roots = [module_type(p.split("/", 1)[0]) if i > 1 else "" for i, p in enumerate(self.paths)]
        return parent, depth, inst, types, roots


def _propagate(parent: np.ndarray, depth: np.ndarray, *arrays: np.ndarray, mins: tuple = ()) -> None:
    """Add each row of ``arrays`` into its parent's row, deepest first (in place)."""
    if not len(depth):
        return
    for d in range(int(depth.max()), 0, -1):
        sel = np.flatnonzero((depth == d) & (parent >= 0))
        if not len(sel):
            continue
        for a in arrays:
            np.add.at(a, parent[sel], a[sel])
        for a in mins:
            np.minimum.at(a, parent[sel], a[sel])


def _roots(parent: np.ndarray) -> np.ndarray:
    root = np.arange(len(parent))
    for _ in range(512):
        p = parent[root]
        m = p >= 0
        if not m.any():
            break
        root[m] = p[m]
    return root


def _infer_root_phase(rt: RawTrace, lk: Linked) -> dict[int, str]:
    """Phase per root module span from its aten::embedding input ids (see module doc)."""
    out: dict[int, str] = {}
    names = rt.names
    emb = [i for i, s in enumerate(names) if s == "aten::embedding"]
    if not emb or not len(lk.modules):
        return out
    cpu = lk.cpu
    m = np.isin(cpu.name, emb)
    if not m.any():
        return out
    idx = np.flatnonzero(m)
    span = lk.modules.enclosing(cpu.thread[idx], cpu.ts[idx])
    roots = _roots(lk.modules.parent)
    for i, s in zip(idx, span):
        if s < 0:
            continue
        r = int(roots[s])
        if r in out:
            continue
        try:
            dims = json.loads(rt.dims[cpu.extra[i]]) if cpu.extra is not None and cpu.extra[i] else None
        except ValueError:
            dims = None
        if isinstance(dims, list) and len(dims) >= 2 and isinstance(dims[1], list) and len(dims[1]) == 2:
            out[r] = "decode" if dims[1][1] == 1 else "prefill"
    return out


def _eager_reference(rt: RawTrace, lk: Linked, table: "PathTable", path_code: np.ndarray,
                     phase: np.ndarray) -> G.Reference:
    """What the attributed eager kernels teach about replays: step sequences (with their phase) and
    per-name votes; and the graph captures the trace holds."""
    captures = _captures(rt, lk)
    idx = np.flatnonzero(lk.module_span >= 0)
    if not len(idx):
        return G.Reference(captures=captures)
    names, paths = rt.names, table.paths
    roots = _roots(lk.modules.parent)[lk.module_span[idx]]
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


def _main_phase(codes: np.ndarray, share: float = 0.9) -> str:
    """The phase of at least ``share`` of the kernels (prefill or decode), else ''."""
    if not len(codes):
        return ""
    n = np.bincount(codes.astype(np.int64), minlength=len(PHASE_CODES))
    for c in (1, 2):
        if n[c] >= share * len(codes):
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
    inferred = _infer_root_phase(rt, lk)
    roots = _roots(lk.modules.parent) if len(lk.modules) else np.zeros(0, dtype=np.int64)
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


def _capture_warning(rt: RawTrace, lk: Linked) -> list[Warning_]:
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


@engine(AnalyzeTraceRequest)
def analyze_trace(req: AnalyzeTraceRequest, progress: Optional[ProgressFn] = None) -> TraceAnalysis:
    """Attribute every GPU kernel of a Kineto trace to module, category and phase.

    The faces call this one: the CLI imports it (numpy, msgspec) before it applies its memory limit.
    Python callers use ``mcp_server.traces.analyze_trace``, which starts reading the trace first."""
    return analyze(req, progress)


def analyze(req: AnalyzeTraceRequest, progress: Optional[ProgressFn] = None,
            blocks: Optional[BlockReader] = None) -> TraceAnalysis:
    """The analysis; ``blocks``: a started ``_reader.blocks`` iterator over ``req.trace_path`` (read-ahead)."""
    output_xlsx, reference_trace = req.output_xlsx, req.reference_trace
    total_steps = 6.0 + (1 if output_xlsx else 0) + (1 if reference_trace else 0)

    def report(done: float, msg: str) -> None:
        if progress:
            progress(done, total_steps, msg)

    rules = load_categories(req.categories)
    report(0, "reading trace")
    def reading(done: int, total: int) -> None:
        report(min(done / max(total, 1), 0.99), "reading trace")

    rt = load_trace(req.trace_path, progress=reading if progress else None, blocks=blocks)
    report(1, "linking kernels to launches and modules")
    lk = link(rt)
    warnings: list[Warning_] = rules.reserved_warnings() + _load_warnings(rt)
    table = PathTable()
    span_pc, path_code, confidence = _direct_attribution(lk, table, len(rt.k_name))
    phase = _kernel_phases(rt, lk)

    report(2, "attributing CUDA-graph replays")
    layer = np.full(len(rt.k_name), -1, dtype=np.int64)
    gstat = GraphAttribution()
    if lk.graph.any():
        warnings += _attribute_replays(rt, lk, table, rules, reference_trace, report,
                                       path_code, confidence, phase, layer, gstat)
    else:
        warnings += _capture_warning(rt, lk)

    report(3, "building the kernel table")
    arrays = table.arrays()
    report(4, "module tree and statistics")
    res = _summarise(rt, lk, table, arrays, path_code, span_pc, phase, rules)
    res.graph = gstat
    res.breakdown = _breakdown(rt, lk, rules)
    res.warnings = warnings + res.warnings + _coverage_warnings(rt, lk, path_code)
    # the DataFrame is built on first access of ``res.kernels`` (pandas is not imported otherwise)
    res.with_kernels(lambda: _kernel_frame(rt, lk, table, arrays, path_code, phase, confidence, layer, rules))
    res._raw = rt  # already held by the kernel-table builder above
    report(5, "summary ready")
    if output_xlsx:
        report(6, "writing the xlsx report")
        _write_report(res, output_xlsx)
    report(total_steps, "done")
    return res


def _load_warnings(rt: RawTrace) -> list[Warning_]:
    out = []
    if rt.skipped:
        out.append(Warning_(code=WarningCode.damaged_events, count=rt.skipped,
                            message=f"skipped {rt.skipped} damaged event(s) (missing fields or odd types), "
                                    f"e.g. {rt.skipped_examples[0]}"))
    if not len(rt.k_name):
        out.append(_no_gpu_warning(rt))
    return out


def _no_gpu_warning(rt: RawTrace) -> Warning_:
    """Why a trace gives no GPU kernel at all (``no_gpu_events``): never a silent zero."""
    kinds = [launch_kind(rt.names[i]) for i in np.unique(rt.l_name).tolist()]
    by_name = dict(zip(np.unique(rt.l_name).tolist(), kinds))
    launches = int(sum(1 for i in rt.l_name.tolist() if by_name[i] >= 0)) if len(rt.l_name) else 0
    if rt.skipped_gpu:
        why = (f"all {rt.skipped_gpu} of its GPU activity events (kernel/memcpy/memset) were damaged and "
               "skipped (see damaged_events); export the trace again")
    elif rt.profiler_ranges:
        why = (f"it holds {rt.profiler_ranges} cuda_profiler_range events: a CUPTI range-profiler trace records "
               "hardware counters per kernel, not a timeline; profile with ProfilerActivity.CUDA (activity "
               "tracing) for kernel durations, or read the counters with Nsight Compute")
    elif launches:
        why = (f"it holds {launches} kernel/copy launch call(s) but no GPU activity: GPU activity tracing was "
               "off or failed (ProfilerActivity.CUDA not enabled, CUPTI/roctracer unavailable), or it is a "
               "CUDA/HIP-graph capture (launches during capture run nothing): pass such a trace as "
               "reference_trace (--reference-trace) to attribute the replays of a replay trace")
    elif rt.event_count:
        why = ("it holds CPU events only (a CPU-only trace: the profiler ran without ProfilerActivity.CUDA, "
               "or no GPU work ran while it recorded)")
    else:
        why = "it holds no events"
    return Warning_(code=WarningCode.no_gpu_events,
                    message=f"no GPU kernel, copy or memset in the trace: {why}; every total here is 0")


def _direct_attribution(lk: Linked, table: PathTable, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per module span its path code; per kernel the path code of its enclosing module span and the
    confidence (1 when a module encloses the launch, else 0)."""
    span_pc = np.array([table.code(p) for p in lk.module_paths], dtype=np.int64)
    path_code = np.zeros(n, dtype=np.int64)
    has_mod = lk.module_span >= 0
    path_code[has_mod] = span_pc[lk.module_span[has_mod]]
    confidence = np.where(has_mod, 1.0, 0.0)
    return span_pc, path_code, confidence


def _kernel_phases(rt: RawTrace, lk: Linked) -> np.ndarray:
    """Per kernel the phase code (index into ``PHASE_CODES``): the SGLang marker enclosing its
    launch, else the phase inferred for its root-module call (see the module doc)."""
    names = rt.names
    n = len(rt.k_name)
    has_mod = lk.module_span >= 0
    ph_code_of_span = np.array([PHASE_CODES.index(phase_of_frame(names[i])) for i in lk.phases.name], dtype=np.int8)
    phase = np.zeros(n, dtype=np.int8)
    hp = lk.phase_span >= 0
    phase[hp] = ph_code_of_span[lk.phase_span[hp]]
    inferred = _infer_root_phase(rt, lk)
    if inferred:
        roots = _roots(lk.modules.parent)
        need = np.flatnonzero((phase == 0) & has_mod)
        for i in need:
            p = inferred.get(int(roots[lk.module_span[i]]))
            if p:
                phase[i] = 1 if p == "prefill" else 2
    return phase


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
    rspan = np.array([rtable.code(p) for p in rlk.module_paths], dtype=np.int64)
    rcode = np.zeros(len(rrt.k_name), dtype=np.int64)
    rm = rlk.module_span >= 0
    rcode[rm] = rspan[rlk.module_span[rm]]
    rref = _eager_reference(rrt, rlk, rtable, rcode, _kernel_phases(rrt, rlk))
    if not rref.empty:
        if rref.captures:
            gstat.notes.append(f"reference trace {reference_trace} holds {len(rref.captures)} graph capture(s) "
                               f"({', '.join(str(len(c.kinds)) for c in rref.captures[:8])} launches)")
        return rref, "reference-trace"
    gstat.notes.append(f"reference trace {reference_trace} has no attributed eager kernels and no graph capture")
    return ref, "same-trace"


def _attribute_replays(rt: RawTrace, lk: Linked, table: PathTable, rules, reference_trace, report,
                       path_code: np.ndarray, confidence: np.ndarray, phase: np.ndarray, layer: np.ndarray,
                       gstat: GraphAttribution) -> list[Warning_]:
    """Attribute CUDA-graph replay kernels (in place: path codes, confidence, phase, layer) and fill
    ``gstat``. Each distinct replayed kernel sequence is cut into layers and attributed once."""
    names = rt.names
    gidx = np.flatnonzero(lk.graph)
    ref, method = _replay_reference(rt, lk, table, path_code, phase, reference_trace, report, gstat)
    cat_comm = {i: rules.classify(names[i]) == COMMUNICATION for i in np.unique(rt.k_name[gidx])}
    gidx = gidx[np.lexsort((rt.k_ts[gidx], lk.graph_group[gidx]))]
    groups = lk.graph_group[gidx]
    bounds = np.flatnonzero(np.diff(groups)) + 1
    memo: dict[tuple, tuple] = {}
    methods: set[str] = set()
    cuts: dict[str, int] = defaultdict(int)
    layers_found = 0
    for part in np.split(gidx, bounds):
        key = tuple(rt.k_name[part].tolist())
        res = memo.get(key)
        if res is None:
            seq = [names[i] for i in key]
            lay, cut, nl = G.layer_cuts(np.asarray(key), np.array([cat_comm[i] for i in key], dtype=bool))
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
            res = memo[key] = (np.array(codes), np.array(cs), how, lay, cut, nl, pcodes)
        codes, cs, how, lay, cut, nl, pcodes = res
        path_code[part] = codes
        confidence[part] = cs
        layer[part] = lay
        unmarked = phase[part] == 0  # a marker around the graph launch wins
        phase[part[unmarked]] = pcodes[unmarked]
        methods.add(how)
        cuts[cut] += 1
        layers_found = max(layers_found, nl)
    attributed = int((path_code[gidx] > 1).sum())
    gstat.graph_kernel_count = int(len(gidx))
    gstat.attributed_count = attributed
    gstat.method = method if attributed else "unattributed"
    gstat.mean_confidence = float(confidence[gidx].mean())
    cut_kind: str = max(cuts, key=lambda c: cuts[c]) if cuts else "none"
    gstat.layer_cut = cut_kind  # type: ignore[assignment]  # a layer_cuts kind
    gstat.layers_found = layers_found
    gstat.notes.append(f"{len(bounds) + 1} replay(s), {len(memo)} distinct kernel sequence(s); "
                       f"attribution by {', '.join(sorted(methods))}")
    if attributed < len(gidx):
        gstat.notes.append(f"{len(gidx) - attributed} replay kernel(s) in '{G.UNATTRIBUTED_GRAPH}'")
    if (ref.empty or not attributed) and attributed < len(gidx):  # say which input would attribute them
        left = ~(path_code[gidx] > 1)
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
    if attributed and gstat.mean_confidence < 0.5 and "capture" in methods:
        return [Warning_(code=WarningCode.low_graph_confidence, count=int(len(gidx)),
                         message=f"CUDA-graph replay attribution has mean confidence {gstat.mean_confidence:.2f}: the "
                                 "graph capture's launches do not match the replay's kernels one to one and name no "
                                 "kernel, so they were placed by launch order; pass the capture of this very graph "
                                 "(same batch size), or an eager step of the same model")]
    if attributed and gstat.mean_confidence < 0.5:
        return [Warning_(code=WarningCode.low_graph_confidence, count=int(len(gidx)),
                         message=f"CUDA-graph replay attribution has mean confidence {gstat.mean_confidence:.2f} "
                                 f"({', '.join(sorted(methods))}): the eager kernels may come from another model or "
                                 "phase; pass --reference-trace with an eager trace of the same model and batch shape")]
    return []


def _us_text(us: float) -> str:
    return f"{us / 1e3:,.2f} ms" if us >= 1e3 else f"{us:,.1f} us"


def _coverage_warnings(rt: RawTrace, lk: Linked, path_code: np.ndarray) -> list[Warning_]:
    """Why eager kernels are unattributed, one warning per reason found (beside ``unattributed_kernels``; graph
    replays with nothing to learn from have ``replays_unattributed``)."""
    un = path_code <= 1
    if not un.any():
        return []
    dur = rt.k_dur
    total = float(dur.sum())

    def share(mask: np.ndarray) -> str:
        us = float(dur[mask].sum())
        pct = 100.0 * us / total if total else 0.0
        return f"{int(mask.sum())} GPU event(s), {_us_text(us)} ({pct:.1f}% of GPU time)"

    out: list[Warning_] = []
    eager_un = un & ~lk.graph
    if not len(lk.modules):
        if eager_un.any():
            out.append(Warning_(code=WarningCode.no_module_spans, count=int(eager_un.sum()), message=(
                f"the trace holds no nn.Module spans, so no kernel has a module ({share(eager_un)}): profile with "
                "with_stack=True (or with_modules=True) to attribute kernels to modules; categories and kernel "
                "names are still exact")))
        return out
    launched = lk.launch_idx >= 0
    if launched.any():
        early = eager_un & ~launched & (rt.k_ts < rt.k_ts[launched].min())
        if early.any():
            out.append(Warning_(code=WarningCode.kernels_before_first_step, count=int(early.sum()), message=(
                f"{share(early)} ran before the first kernel launched in the trace and have no launch event: work "
                "queued before the profiled steps that was still running when the profiler started recording; "
                "they cannot be attributed (the GPU time breakdown leaves them out); call "
                "torch.cuda.synchronize() before the profiled steps begin to keep them out of the trace")))
    mod_threads = np.unique(lk.modules.thread)
    idx = np.flatnonzero(eager_un & launched)
    if len(idx):
        lth = rt.l_thread[lk.launch_idx[idx]]
        off = idx[~np.isin(lth, mod_threads)]
        if len(off):
            mask = np.zeros(len(un), dtype=bool)
            mask[off] = True
            ops = {rt.names[i] for i in np.unique(lk.cpu.name[lk.cpu_op[off][lk.cpu_op[off] >= 0]]).tolist()}
            why = ("the autograd engine's backward thread" if any("backward" in o.lower() for o in ops)
                   else "a thread that holds no module spans")
            out.append(Warning_(code=WarningCode.thread_without_modules, count=len(off), message=(
                f"{share(mask)} were launched from {why}; module spans exist only on the thread that ran "
                "forward, so these have no module (backward kernels are listed by category and name)")))
        between = idx[np.isin(lth, mod_threads)]
        if len(between):
            mask = np.zeros(len(un), dtype=bool)
            mask[between] = True
            out.append(Warning_(code=WarningCode.outside_modules, count=len(between), message=(
                f"{share(mask)} were launched on a thread that runs modules but outside every module call "
                "(input preparation, sampling, copies between steps): they belong to no module; listed by "
                "category and name")))
    return out


def _breakdown(rt: RawTrace, lk: Linked, rules):
    """The GPU time breakdown (``traces.breakdown``): classes from the event kind and the category rules."""
    from mcp_server.traces import breakdown as B

    n = len(rt.k_name)
    if not n:
        return None
    names = rt.names
    used = np.unique(rt.k_name)
    comm_name = np.zeros(len(names), dtype=bool)
    comm_name[used] = [rules.classify(names[u]) == COMMUNICATION for u in used.tolist()]
    cls = np.full(n, B.COMPUTATION, dtype=np.int8)
    cls[comm_name[rt.k_name]] = B.COMMUNICATION
    cls[rt.k_kind != 0] = B.MEMORY
    return B.compute_breakdown(rt.k_ts, rt.k_dur, cls, rt.k_device, rt.k_stream, lk.launch_idx >= 0)


def _write_report(res: TraceAnalysis, output_xlsx: str | os.PathLike) -> None:
    try:
        from mcp_server.reports import write_analysis_report
    except ImportError as exc:
        raise WriteError(f"the xlsx report writer is not available in this installation ({exc})",
                         path=output_xlsx, hint="run without -o/--output, or install the reports package") from None
    res.output_xlsx = str(output_xlsx)
    try:
        write_analysis_report(res, str(output_xlsx))
    except KernelscopeError:
        raise
    except OSError as exc:
        raise WriteError(f"cannot write the report: {exc}", path=output_xlsx) from None


def _cat(values, codes: np.ndarray):
    """Categorical column: ``values[codes]`` without building per-row Python objects."""
    import pandas as pd

    codes = np.asarray(codes, dtype=np.int64)
    if not len(codes):
        return pd.Categorical([])
    present = np.zeros(len(values), dtype=bool)
    present[codes] = True
    uniq = np.flatnonzero(present)
    inv = (np.cumsum(present) - 1)[codes]
    sub = np.empty(len(uniq), dtype=object)
    sub[:] = [values[u] for u in uniq]
    c2, cats = pd.factorize(sub, use_na_sentinel=False)
    return pd.Categorical.from_codes(c2[inv], categories=cats)


def _kernel_frame(rt, lk, table, arrays, path_code, phase, confidence, layer, rules):
    """The per-kernel DataFrame (columns ``KERNEL_COLUMNS``), sorted by start time."""
    import pandas as pd

    names = rt.names
    n = len(rt.k_name)
    _, _, inst, mtype, rtype = arrays
    name_cat = _cat(names, rt.k_name)
    if n:
        cats = pd.Categorical([rules.classify(c) for c in name_cat.categories])
        category = pd.Categorical.from_codes(cats.codes[name_cat.codes], categories=cats.categories)
    else:
        category = pd.Categorical([])

    def spanned(ss, which, attr, table=names):
        codes = np.zeros(n, dtype=np.int64)
        m = which >= 0
        col = getattr(ss, attr)
        codes[m] = col[which[m]]
        return _cat(table, codes)

    dims = spanned(lk.cpu, lk.cpu_op, "extra", rt.dims) if lk.cpu.extra is not None else pd.Categorical([""] * n)
    data = {
        "name": name_cat,
        "category": category,
        "kind": pd.Categorical.from_codes(rt.k_kind.astype(np.int64), categories=list(KIND_NAMES)),
        "ts_us": rt.k_ts,
        "dur_us": rt.k_dur,
        "device": rt.k_device,
        "stream": rt.k_stream,
        "correlation": rt.k_corr,
        "module": _cat(inst, path_code),
        "module_type": _cat(mtype, path_code),
        "module_path": _cat(table.paths, path_code),
        "root_type": _cat(rtype, path_code),
        "phase": pd.Categorical.from_codes(phase.astype(np.int64), categories=list(PHASE_CODES)),
        "cpu_op": spanned(lk.cpu, lk.cpu_op, "name"),
        "input_dims": dims,
        "source": spanned(lk.sources, lk.source, "name"),
        "graph": lk.graph,
        "confidence": confidence,
        "layer": layer,
    }
    df = pd.DataFrame(data, columns=list(KERNEL_COLUMNS))
    return df.sort_values("ts_us", kind="stable", ignore_index=True)


#: characters of a device name kept from the trace metadata (real ones: "NVIDIA H200", "AMD Instinct MI300X")
DEVICE_NAME_CHARS = 200


def _device_name(props: Any, warnings: list[Warning_]) -> Optional[str]:
    """``deviceProperties[0].name``, or None with a ``metadata_ignored`` warning when it is not a short string."""
    if not (isinstance(props, list) and props and isinstance(props[0], dict)) or props[0].get("name") is None:
        return None
    name = props[0]["name"]
    if isinstance(name, str) and 0 < len(name) <= DEVICE_NAME_CHARS:
        return name
    what = (f"a string of {len(name):,} characters (at most {DEVICE_NAME_CHARS})" if isinstance(name, str)
            else f"not a string (a JSON {_json_type(name)})")
    warnings.append(Warning_(code=WarningCode.metadata_ignored, count=1, message=(
        f"deviceProperties[0].name is {what}; the device is left unknown")))
    return None


def _json_type(v: Any) -> str:
    return {bool: "boolean", int: "number", float: "number", list: "array", dict: "object"}.get(type(v), "value")


def _summarise(rt: RawTrace, lk: Linked, table, arrays, path_code, span_pc, phase, rules) -> TraceAnalysis:
    dur = rt.k_dur
    total = float(dur.sum())
    n = len(dur)
    attributed = path_code > 1
    warnings: list[Warning_] = []
    un_n = int((~attributed).sum())
    un_us = float(dur[~attributed].sum())
    if un_n:
        nolaunch = int((lk.launch_idx < 0).sum())
        warnings.append(Warning_(code=WarningCode.unattributed_kernels, count=un_n,
                                 message=f"{un_n} kernel(s) ({un_us:,.1f} us) have no owning module "
                                         f"({nolaunch} without a launch event in the trace); kept under module ''"))

    # per-kernel category / phase codes (load order)
    names = rt.names
    used = np.flatnonzero(np.bincount(rt.k_name, minlength=len(names))) if n else np.zeros(0, np.int64)
    cat_names = sorted({rules.classify(names[u]) for u in used})
    cat_idx = {c: i for i, c in enumerate(cat_names)}
    name_to_cat = np.zeros(len(names), dtype=np.int64)
    name_to_cat[used] = [cat_idx[rules.classify(names[u])] for u in used]
    k_cat = name_to_cat[rt.k_name]
    k_phase = phase.astype(np.int64)
    C = max(len(cat_names), 1)
    c_us = np.bincount(k_cat, weights=dur, minlength=C)
    c_n = np.bincount(k_cat, minlength=C)
    cat_rows = [CategoryTotal(category=cat_names[i], count=int(c_n[i]), total_us=float(c_us[i]),
                              pct=100.0 * float(c_us[i]) / total if total else 0.0)
                for i in sorted(np.flatnonzero(c_n).tolist(), key=lambda i: -c_us[i])]
    p_us = np.bincount(k_phase, weights=dur, minlength=len(PHASE_CODES))
    p_n = np.bincount(k_phase, minlength=len(PHASE_CODES))
    phases = [PhaseTotal(phase=ph, kernel_count=int(p_n[i]), total_us=float(p_us[i]))
              for i, ph in enumerate(PHASE_CODES) if p_n[i]]
    tree = _tree(rt, table, arrays, path_code, k_cat, cat_names, k_phase)
    modules = _type_stats(rt, lk, table, arrays, path_code, span_pc, total)
    md = rt.metadata
    dev = _device_name(md.get("deviceProperties"), warnings)
    platform = "unknown"
    lnames = {rt.names[i] for i in np.unique(rt.l_name)}
    if any(s.startswith("hip") for s in lnames) or "hip_runtime_version" in md or "roctracer_version" in md:
        platform = "amd"
    elif any(s.startswith(("cuda", "cu")) for s in lnames) or "cuda_runtime_version" in md:
        platform = "nvidia"
    meta = {k: v for k, v in md.items() if k in ("schemaVersion", "deviceProperties", "cuda_driver_version",
                                                   "cuda_runtime_version", "cupti_version", "hip_runtime_version",
                                                   "roctracer_version", "baseTimeNanoseconds", "traceName",
                                                   "distributedInfo", "kernelscope_fixture", "with_stack",
                                                   "record_shapes", "with_modules")}
    meta["event_count"] = rt.event_count
    return TraceAnalysis(
        trace=rt.path, device=dev, platform=platform, total_kernel_us=total, kernel_count=n,
        attributed_count=n - un_n, unattributed_count=un_n, unattributed_us=un_us, phases=phases,
        categories=cat_rows, modules=modules, tree=tree, categories_source=rules.source,
        categories_sha256=rules.sha256, warnings=warnings, metadata=meta,
    )


def _tree(rt, table, arrays, path_code, k_cat, cat_names, k_phase) -> list[ModuleNode]:
    parent, depth, inst, types, _ = arrays
    P, C = len(table.paths), max(len(cat_names), 1)
    att = path_code > 1
    if not att.any():
        return []
    pc, dur = path_code[att], rt.k_dur[att]
    self_us = np.bincount(pc, weights=dur, minlength=P)
    incl = self_us.copy()
    cnt = np.bincount(pc, minlength=P).astype(np.float64)
    bd = np.bincount(pc * C + k_cat[att], weights=dur, minlength=P * C).reshape(P, C)
    NP = len(PHASE_CODES)
    ph = np.bincount(pc * NP + k_phase[att], minlength=P * NP).reshape(P, NP).astype(np.float64)
    first = np.full(P, np.inf)
    np.minimum.at(first, pc, rt.k_ts[att])
    _propagate(parent, depth, incl, cnt, bd, ph, mins=(first,))
    live = np.flatnonzero((cnt > 0) & (np.arange(P) > 1))
    order = live[np.lexsort((depth[live], first[live]))]
    out = []
    paths = table.paths
    # breakdown: categories by time, largest first (ties in category order), zeros left out
    bdo = bd[order]
    rank = np.argsort(-bdo, axis=1, kind="stable")
    vals = np.take_along_axis(bdo, rank, axis=1)
    nz = (vals != 0).sum(axis=1).tolist()
    rank_l, vals_l = rank.tolist(), vals.tolist()
    has_ph = (ph[order, 1:] > 0).tolist()  # prefill, decode, graph
    incl_l, self_l = incl[order].tolist(), self_us[order].tolist()
    cnt_l, depth_l = cnt[order].tolist(), depth[order].tolist()
    phase_txt: dict[tuple, str] = {}
    cn = cat_names.__getitem__
    for k, c in enumerate(order.tolist()):
        m = nz[k]
        bdict = dict(zip(map(cn, rank_l[k][:m]), vals_l[k][:m]))
        out.append(dict(path=paths[c], name=inst[c], type=types[c], depth=depth_l[k],
                        phase=_phase_text(phase_txt, tuple(has_ph[k])), total_us=incl_l[k], self_us=self_l[k],
                        kernel_count=int(cnt_l[k]), breakdown=bdict))
    return _nodes_adapter().validate_python(out)  # one call into pydantic-core: ~3 us a node


def _phase_text(memo: dict[tuple, str], present: tuple) -> str:
    """A node's phases joined by '+' (``prefill+decode``, ``decode+graph``); '' when none is known."""
    t = memo.get(present)
    if t is None:
        t = memo[present] = "+".join(p for p, on in zip(PHASE_CODES[1:], present) if on)
    return t


@functools.lru_cache(maxsize=1)
def _nodes_adapter():
    from pydantic import TypeAdapter

    return TypeAdapter(list[ModuleNode])


def _calls(lk: Linked, P: int, parent_pc: np.ndarray, path_code: np.ndarray, span_pc: np.ndarray, n: int,
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The calls: every module span, then every (replay, module path) pair with its parents' pairs. Per call its
    path code and parent call (-1 for none); per kernel its call (-1 for none)."""
    S = len(span_pc)
    call_pc = [span_pc]
    call_parent = [lk.modules.parent.astype(np.int64)]
    call_of_kernel = np.full(n, -1, dtype=np.int64)
    m = lk.module_span >= 0
    call_of_kernel[m] = lk.module_span[m]
    gm = lk.graph & (path_code > 1)
    if gm.any():
        gi = np.flatnonzero(gm)
        _, grp = np.unique(lk.graph_group[gi], return_inverse=True)
        keys = np.unique(grp * P + path_code[gi])
        frontier = keys
        while len(frontier):  # close under parents
            g_, p_ = frontier // P, frontier % P
            par = parent_pc[p_]
            up = np.unique(g_[par >= 0] * P + par[par >= 0])
            frontier = np.setdiff1d(up, keys, assume_unique=True)
            keys = np.union1d(keys, frontier)
        g_, p_ = keys // P, keys % P
        par = parent_pc[p_]
        cpar = np.where(par >= 0, S + np.searchsorted(keys, g_ * P + np.maximum(par, 0)), -1)
        call_pc.append(p_)
        call_parent.append(cpar)
        call_of_kernel[gi] = S + np.searchsorted(keys, grp * P + path_code[gi])
    return np.concatenate(call_pc), np.concatenate(call_parent), call_of_kernel


def _top_kernels(rt: RawTrace, parent_pc: np.ndarray, types: list, path_code: np.ndarray, P: int,
                 ) -> dict[str, dict[int, float]]:
    """Per module type, kernel name code -> its time under that type: kernels grouped by the chain of types on
    their path (few distinct chains)."""
    dur = rt.k_dur
    att = np.flatnonzero(path_code > 1)
    top: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    if len(att):
        chain_code = np.zeros(P, dtype=np.int64)
        chain_of: dict[tuple[int, str], int] = {}
        chains: list[frozenset] = [frozenset()]
        for c in range(2, P):  # parents are added to the table before their children
            pc_ = int(parent_pc[c])
            base = int(chain_code[pc_]) if pc_ >= 0 else 0
            key = (base, types[c])
            cc = chain_of.get(key)
            if cc is None:
                cc = chain_of[key] = len(chains)
                chains.append(chains[base] | {types[c]})
            chain_code[c] = cc
        N = len(rt.names) + 1
        key = chain_code[path_code[att]] * N + rt.k_name[att]
        uk, inv = np.unique(key, return_inverse=True)
        sums = np.bincount(inv, weights=dur[att])
        for k_, us in zip(uk.tolist(), sums.tolist()):
            cc, nm = divmod(k_, N)
            for t in chains[cc]:
                top[t][nm] += us
    return top


def _type_stats(rt, lk, table, arrays, path_code, span_pc, total) -> list[ModuleTypeStats]:
    """Per-type call statistics. A call is a module span (eager) or a (replay, module path) pair."""
    parent_pc, depth_pc, inst, types, _ = arrays
    dur = rt.k_dur
    cpc, cparent, call_of_kernel = _calls(lk, len(table.paths), parent_pc, path_code, span_pc, len(dur))
    nc = len(cpc)
    if nc == 0:
        return []
    has = call_of_kernel >= 0
    tot = np.bincount(call_of_kernel[has], weights=dur[has], minlength=nc)
    cnt = np.bincount(call_of_kernel[has], minlength=nc).astype(np.float64)
    cdepth = depth_pc[cpc]
    _propagate(cparent, cdepth, tot, cnt)
    tmap: dict[str, int] = {}
    tcode_of_pc = np.array([tmap.setdefault(t, len(tmap)) for t in types], dtype=np.int64)
    type_names = list(tmap)
    T = len(type_names)
    live = np.flatnonzero(cnt > 0)
    tc = tcode_of_pc[cpc[live]]
    v = tot[live]
    count = np.bincount(tc, minlength=T)
    s1 = np.bincount(tc, weights=v, minlength=T)
    s2 = np.bincount(tc, weights=v * v, minlength=T)
    vmin = np.full(T, np.inf)
    vmax = np.full(T, -np.inf)
    dmin = np.full(T, 1 << 30)
    np.minimum.at(vmin, tc, v)
    np.maximum.at(vmax, tc, v)
    np.minimum.at(dmin, tc, cdepth[live])
    lp = cparent[live]
    # % of parent: the type's time over the time of the distinct parent calls it ran under (a parent
    # with four Linear children counts once; root calls' parent is the whole trace, counted once)
    pair = np.unique(tc.astype(np.int64) * (nc + 1) + (lp.astype(np.int64) + 1))
    pt, pp = np.divmod(pair, nc + 1)
    ptot = np.bincount(pt, weights=np.where(pp > 0, tot[np.maximum(pp - 1, 0)], total), minlength=T)
    top = _top_kernels(rt, parent_pc, types, path_code, len(table.paths))
    out = []
    for t in np.flatnonzero(count):
        name = str(type_names[t])
        k = int(count[t])
        mean = s1[t] / k
        var = max((s2[t] - k * mean * mean) / (k - 1), 0.0) if k > 1 else 0.0
        tk = top.get(name)
        out.append(ModuleTypeStats(
            type=name, depth=int(dmin[t]), count=k, total_us=float(s1[t]), mean_us=float(mean),
            std_us=float(np.sqrt(var)), min_us=float(vmin[t]), max_us=float(vmax[t]),
            pct_of_parent=100.0 * float(s1[t]) / float(ptot[t]) if ptot[t] else 0.0,
            top_kernel=rt.names[max(tk.items(), key=lambda kv: kv[1])[0]] if tk else ""))
    out.sort(key=lambda s: (s.depth, -s.total_us))
    return out
