"""``analyze_trace``: the trace analyzer engine.

Stages: load (msgspec, numpy columns) -> link kernels to launches and the
spans enclosing them -> attribute CUDA-graph replays -> per-kernel DataFrame
-> module tree, per-type statistics, category and phase totals -> optional
xlsx report.

Phase: a kernel whose launch lies inside a python function named with
``forward_extend`` / ``forward_decode`` (SGLang's markers) is prefill / decode.
Without a marker, graph-replay kernels are ``decode`` (serving engines capture
graphs for decode batches only), and an eager kernel inherits the phase of
the root-module call it belongs to as inferred from that call's
``aten::embedding`` input ids: 2-D ids ``[batch, seq]`` with ``seq == 1`` are
decode, ``seq > 1`` prefill; otherwise the phase stays ``''`` (unknown).
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pandas as pd

from mcp_server.compare.categories import load_categories
from mcp_server.errors import KernelscopeError, WriteError
from mcp_server.models import Warning_
from mcp_server.traces import graph as G
from mcp_server.traces.attribution import Linked, link, module_type
from mcp_server.traces.loader import KIND_NAMES, RawTrace, load_trace
from mcp_server.traces.models import (
    KERNEL_COLUMNS,
    CategoryTotal,
    GraphAttribution,
    ModuleNode,
    ModuleTypeStats,
    PhaseTotal,
    TraceAnalysis,
)

ProgressFn = Callable[[float, Optional[float], Optional[str]], None]
_PHASES = ("prefill", "decode")
_COMM = "communication"


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
            dims = json.loads(names[cpu.extra[i]]) if cpu.extra is not None and cpu.extra[i] else None
        except ValueError:
            dims = None
        if isinstance(dims, list) and len(dims) >= 2 and isinstance(dims[1], list) and len(dims[1]) == 2:
            out[r] = "decode" if dims[1][1] == 1 else "prefill"
    return out


def _eager_reference(rt: RawTrace, lk: Linked, eager_path: list[str]) -> G.Reference:
    m = lk.module_span >= 0
    idx = np.flatnonzero(m)
    idx = idx[np.argsort(rt.k_ts[idx], kind="stable")]
    roots = _roots(lk.modules.parent) if len(lk.modules) else np.zeros(0, dtype=np.int64)
    names = rt.names
    return G.learn([names[rt.k_name[i]] for i in idx], [eager_path[i] for i in idx],
                   [int(roots[lk.module_span[i]]) for i in idx])


def analyze_trace(
    trace_path: str | os.PathLike,
    *,
    output_xlsx: str | os.PathLike | None = None,
    categories: str | os.PathLike | None = None,
    reference_trace: str | os.PathLike | None = None,
    progress: Optional[ProgressFn] = None,
) -> TraceAnalysis:
    """Attribute every GPU kernel of a Kineto trace to module, category and phase."""
    total_steps = 6.0 + (1 if output_xlsx else 0) + (1 if reference_trace else 0)

    def report(done: float, msg: str) -> None:
        if progress:
            progress(done, total_steps, msg)

    rules = load_categories(categories)
    report(0, "reading trace")
    rt = load_trace(trace_path, progress=(lambda d, t: report(min(d / max(t, 1), 0.99), "reading trace")) if progress else None)
    report(1, "linking kernels to launches and modules")
    lk = link(rt)
    names = rt.names
    n = len(rt.k_name)
    warnings: list[Warning_] = []
    if rt.skipped:
        warnings.append(Warning_(code="damaged_events", count=rt.skipped,
                                 message=f"skipped {rt.skipped} damaged event(s) (missing fields or odd types), e.g. {rt.skipped_examples[0]}"))

    # ---- per-kernel direct attribution
    paths_tab = ["", G.UNATTRIBUTED_GRAPH] + lk.module_paths
    span_path_code = np.arange(len(lk.module_paths), dtype=np.int64) + 2
    path_code = np.zeros(n, dtype=np.int64)
    has_mod = lk.module_span >= 0
    path_code[has_mod] = span_path_code[lk.module_span[has_mod]]
    confidence = np.where(has_mod, 1.0, 0.0)
    eager_path = [paths_tab[c] for c in path_code]

    phase_tab = np.array(["", "prefill", "decode"], dtype=object)
    ph_names = lk.phases.name
    ph_code_of_span = np.array([1 if "forward_extend" in names[i] else 2 for i in ph_names], dtype=np.int8)
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

    # ---- CUDA-graph replays
    report(2, "attributing CUDA-graph replays")
    layer = np.full(n, -1, dtype=np.int64)
    gstat = GraphAttribution()
    gidx = np.flatnonzero(lk.graph)
    if len(gidx):
        ref = _eager_reference(rt, lk, eager_path)
        method = "same-trace"
        if reference_trace:
            report(2.5, "learning from the reference trace")
            rrt = load_trace(reference_trace)
            rlk = link(rrt)
            rpaths = ["", G.UNATTRIBUTED_GRAPH] + rlk.module_paths
            rcode = np.zeros(len(rrt.k_name), dtype=np.int64)
            rm = rlk.module_span >= 0
            rcode[rm] = np.arange(len(rlk.module_paths), dtype=np.int64)[rlk.module_span[rm]] + 2
            rref = _eager_reference(rrt, rlk, [rpaths[c] for c in rcode])
            if not rref.empty:
                ref, method = rref, "reference-trace"
            else:
                gstat.notes.append(f"reference trace {reference_trace} has no attributed eager kernels")
        path_index = {p: i for i, p in enumerate(paths_tab)}
        cat_comm = {i: rules.classify(names[i]) == _COMM for i in np.unique(rt.k_name[gidx])}
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
                ps, cs, how = G.attribute_sequence(seq, ref) if not ref.empty else ([""] * len(seq), [0.0] * len(seq), "none")
                codes = []
                for p in ps:
                    if p not in path_index:
                        path_index[p] = len(paths_tab)
                        paths_tab.append(p)
                    codes.append(path_index[p] if p else 1)
                lay, cut, nl = G.layer_cuts(np.asarray(key), np.array([cat_comm[i] for i in key], dtype=bool))
                res = memo[key] = (np.array(codes), np.array(cs), how, lay, cut, nl)
            codes, cs, how, lay, cut, nl = res
            path_code[part] = codes
            confidence[part] = cs
            layer[part] = lay
            methods.add(how)
            cuts[cut] += 1
            layers_found = max(layers_found, nl)
        phase[gidx[phase[gidx] == 0]] = 2  # replays without a marker: decode
        attributed = int((path_code[gidx] > 1).sum())
        gstat.graph_kernel_count = int(len(gidx))
        gstat.attributed_count = attributed
        gstat.method = method if attributed else "unattributed"
        gstat.mean_confidence = float(confidence[gidx].mean())
        gstat.layer_cut = max(cuts, key=cuts.get) if cuts else "none"  # type: ignore[assignment]
        gstat.layers_found = layers_found
        gstat.notes.append(f"{len(bounds) + 1} replay(s), {len(memo)} distinct kernel sequence(s); "
                           f"attribution by {', '.join(sorted(methods))}")
        if attributed < len(gidx):
            gstat.notes.append(f"{len(gidx) - attributed} replay kernel(s) in '{G.UNATTRIBUTED_GRAPH}'")

    # ---- DataFrame
    report(3, "building the kernel table")
    df = _kernel_frame(rt, lk, paths_tab, path_code, phase_tab[phase], confidence, layer, rules)
    report(4, "module tree and statistics")
    res = _summarise(rt, lk, df, paths_tab, path_code, rules)
    res.graph = gstat
    res.warnings = warnings + res.warnings
    res.with_kernels(df)
    report(5, "summary ready")
    if output_xlsx:
        report(6, "writing the xlsx report")
        try:
            from mcp_server.reports.xlsx_writer import write_analysis_report
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
    report(total_steps, "done")
    return res


def _cat(values: np.ndarray, codes: np.ndarray) -> pd.Categorical:
    """Categorical column from a (possibly non-unique-free) table and codes."""
    uniq, inv = np.unique(codes, return_inverse=True)
    cats = [values[u] for u in uniq]
    if len(set(cats)) == len(cats):
        return pd.Categorical.from_codes(inv, categories=cats)
    return pd.Categorical([cats[i] for i in inv])


def _kernel_frame(rt, lk, paths_tab, path_code, phase, confidence, layer, rules) -> pd.DataFrame:
    names = rt.names
    n = len(rt.k_name)
    name_cat = _cat(names, rt.k_name)
    cats = pd.Categorical([rules.classify(c) for c in name_cat.categories])
    category = pd.Categorical.from_codes(cats.codes[name_cat.codes], categories=cats.categories) if n else pd.Categorical([])
    inst = [p.rsplit("/", 1)[-1] if i > 1 else "" for i, p in enumerate(paths_tab)]
    mtype = [module_type(s) for s in inst]
    rtype = [module_type(p.split("/", 1)[0]) if i > 1 else "" for i, p in enumerate(paths_tab)]

    def spanned(ss, which, attr):
        codes = np.zeros(n, dtype=np.int64)
        m = which >= 0
        col = getattr(ss, attr)
        codes[m] = col[which[m]]
        return _cat(names, codes)

    dims = spanned(lk.cpu, lk.cpu_op, "extra") if lk.cpu.extra is not None else pd.Categorical([""] * n)
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
        "module_path": _cat(paths_tab, path_code),
        "root_type": _cat(rtype, path_code),
        "phase": pd.Categorical(phase, categories=["", "prefill", "decode"]),
        "cpu_op": spanned(lk.cpu, lk.cpu_op, "name"),
        "input_dims": dims,
        "source": spanned(lk.sources, lk.source, "name"),
        "graph": lk.graph,
        "confidence": confidence,
        "layer": layer,
    }
    df = pd.DataFrame(data, columns=list(KERNEL_COLUMNS))
    return df.sort_values("ts_us", kind="stable", ignore_index=True)


def _summarise(rt: RawTrace, lk: Linked, df: pd.DataFrame, paths_tab, path_code, rules) -> TraceAnalysis:
    dur = rt.k_dur
    total = float(dur.sum())
    n = len(dur)
    attributed = path_code > 1
    warnings: list[Warning_] = []
    un_n = int((~attributed).sum())
    un_us = float(dur[~attributed].sum())
    if un_n:
        nolaunch = int((lk.launch_idx < 0).sum())
        warnings.append(Warning_(code="unattributed_kernels", count=un_n,
                                 message=f"{un_n} kernel(s) ({un_us:,.1f} us) have no owning module "
                                         f"({nolaunch} without a launch event in the trace); kept under module ''"))

    # categories and phases
    cat_rows = []
    g = df.groupby("category", observed=True)["dur_us"].agg(["count", "sum"]).sort_values("sum", ascending=False)
    for c, row in g.iterrows():
        cat_rows.append(CategoryTotal(category=str(c), count=int(row["count"]), total_us=float(row["sum"]),
                                      pct=100.0 * float(row["sum"]) / total if total else 0.0))
    phases = []
    gp = df.groupby("phase", observed=True)["dur_us"].agg(["count", "sum"])
    for ph, row in gp.iterrows():
        phases.append(PhaseTotal(phase=str(ph), kernel_count=int(row["count"]), total_us=float(row["sum"])))

    tree = _tree(df)
    modules = _type_stats(rt, lk, df, paths_tab, path_code, total)
    md = rt.metadata
    dev = None
    props = md.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        dev = props[0].get("name")
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


def _tree(df: pd.DataFrame) -> list[ModuleNode]:
    sub = df[(df["module"] != "")]
    if sub.empty:
        return []
    g = sub.groupby(["module_path", "category", "phase"], observed=True).agg(
        us=("dur_us", "sum"), cnt=("dur_us", "size"), first=("ts_us", "min"))
    nodes: dict[str, dict] = {}
    for (path, cat, ph), row in g.iterrows():
        us, cnt, first = float(row["us"]), int(row["cnt"]), float(row["first"])
        parts = str(path).split("/")
        for d in range(1, len(parts) + 1):
            p = "/".join(parts[:d])
            nd = nodes.get(p)
            if nd is None:
                nd = nodes[p] = {"total": 0.0, "self": 0.0, "count": 0, "bd": defaultdict(float), "phases": set(),
                                 "first": first}
            nd["total"] += us
            nd["count"] += cnt
            nd["bd"][str(cat)] += us
            if ph:
                nd["phases"].add(str(ph))
            nd["first"] = min(nd["first"], first)
            if d == len(parts):
                nd["self"] += us
    out = []
    for p, nd in sorted(nodes.items(), key=lambda kv: (kv[1]["first"], kv[0].count("/"), kv[0])):
        name = p.rsplit("/", 1)[-1]
        bd = dict(sorted(nd["bd"].items(), key=lambda kv: -kv[1]))
        out.append(ModuleNode(path=p, name=name, type=module_type(name), depth=p.count("/"),
                              phase="+".join(x for x in _PHASES if x in nd["phases"]), total_us=nd["total"],
                              self_us=nd["self"], kernel_count=nd["count"], breakdown=bd))
    return out


def _type_stats(rt, lk, df, paths_tab, path_code, total) -> list[ModuleTypeStats]:
    """Per-type call statistics. A call is a module span (eager) or a (replay, module path) pair."""
    dur = rt.k_dur
    calls_path: list[str] = []
    calls_parent: list[int] = []
    call_of_kernel = np.full(len(dur), -1, dtype=np.int64)
    # eager calls: module spans
    ns = len(lk.modules)
    calls_path.extend(lk.module_paths)
    calls_parent.extend(lk.modules.parent.tolist())
    m = lk.module_span >= 0
    call_of_kernel[m] = lk.module_span[m]
    # replay calls
    gm = lk.graph & (path_code > 1)
    if gm.any():
        gi = np.flatnonzero(gm)
        keyed: dict[tuple[int, str], int] = {}

        def call_for(group: int, path: str) -> int:
            c = keyed.get((group, path))
            if c is not None:
                return c
            par = call_for(group, path.rsplit("/", 1)[0]) if "/" in path else -1
            c = keyed[(group, path)] = len(calls_path)
            calls_path.append(path)
            calls_parent.append(par)
            return c

        pairs = pd.DataFrame({"g": lk.graph_group[gi], "p": path_code[gi], "i": gi})
        for (grp, pc), idx in pairs.groupby(["g", "p"]).groups.items():
            c = call_for(int(grp), paths_tab[pc])
            call_of_kernel[pairs.loc[idx, "i"].to_numpy()] = c
    nc = len(calls_path)
    if nc == 0:
        return []
    parent = np.array(calls_parent, dtype=np.int64)
    has = call_of_kernel >= 0
    tot = np.bincount(call_of_kernel[has], weights=dur[has], minlength=nc)
    cnt = np.bincount(call_of_kernel[has], minlength=nc).astype(np.int64)
    depth = np.array([p.count("/") for p in calls_path], dtype=np.int64)
    for d in range(int(depth.max()), 0, -1):
        sel = np.flatnonzero((depth == d) & (parent >= 0))
        np.add.at(tot, parent[sel], tot[sel])
        np.add.at(cnt, parent[sel], cnt[sel])
    types = [module_type(p.rsplit("/", 1)[-1]) for p in calls_path]
    # top kernel per type (kernels anywhere below a call of that type)
    sub = df[df["module"] != ""]
    top: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    if not sub.empty:
        g = sub.groupby(["module_path", "name"], observed=True)["dur_us"].sum()
        for (path, name), us in g.items():
            for t in {module_type(x) for x in str(path).split("/")}:
                top[t][str(name)] += float(us)
    by_type: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(types):
        if cnt[i] > 0:
            by_type[t].append(i)
    out = []
    for t, idx in by_type.items():
        ix = np.array(idx)
        v = tot[ix]
        par = parent[ix]
        ptot = float(np.where(par >= 0, tot[np.maximum(par, 0)], total).sum())
        tk = max(top[t].items(), key=lambda kv: kv[1])[0] if top.get(t) else ""
        out.append(ModuleTypeStats(
            type=t, depth=int(depth[ix].min()), count=len(ix), total_us=float(v.sum()), mean_us=float(v.mean()),
            std_us=float(v.std(ddof=1)) if len(v) > 1 else 0.0, min_us=float(v.min()), max_us=float(v.max()),
            pct_of_parent=100.0 * float(v.sum()) / ptot if ptot else 0.0, top_kernel=tk))
    out.sort(key=lambda s: (s.depth, -s.total_us))
    return out
