"""The analyzer's results from the attributed kernels: the per-kernel table, the module tree, the per-type
call statistics, the category and phase totals, the device and platform."""
from __future__ import annotations

import functools
from collections import defaultdict
from typing import Any, Optional

import numpy as np

from mcp_server.core.models import Warning_
from mcp_server.core.vocab import PHASE_CODES, WarningCode
from mcp_server.traces.attribution import Linked
from mcp_server.traces.loader import KIND_NAMES, RawTrace
from mcp_server.traces.models import (
    KERNEL_COLUMNS,
    CategoryTotal,
    ModuleNode,
    ModuleTypeStats,
    PhaseTotal,
    TraceAnalysis,
)


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


def kernel_frame(rt, lk, table, arrays, path_code, phase, confidence, layer, rules):
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


def summarise(rt: RawTrace, lk: Linked, table, arrays, path_code, span_pc, phase, rules) -> TraceAnalysis:
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
    cn = cat_names.__getitem__
    for k, c in enumerate(order.tolist()):
        m = nz[k]
        bdict = dict(zip(map(cn, rank_l[k][:m]), vals_l[k][:m]))
        out.append(dict(path=paths[c], name=inst[c], type=types[c], depth=depth_l[k],
                        phase=_phase_text(tuple(has_ph[k])), total_us=incl_l[k], self_us=self_l[k],
                        kernel_count=int(cnt_l[k]), breakdown=bdict))
    return _nodes_adapter().validate_python(out)  # one call into pydantic-core: ~3 us a node


@functools.cache  # eight combinations at most
def _phase_text(present: tuple[bool, ...]) -> str:
    """A node's phases joined by '+' (``prefill+decode``, ``decode+graph``); '' when none is known."""
    return "+".join(p for p, on in zip(PHASE_CODES[1:], present) if on)


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
