"""Write a trace analysis as a report workbook in the upstream layout.

Sheets, in order: ``Summary``, ``Overview``, ``Module Tree``, ``GPU Kernels``,
one detail sheet per (repeated module type, phase[, variant]), then
kernelscope's extras: ``Kernels (full)`` (every kernel, every column of
``KERNEL_COLUMNS``, no cap) and ``Metadata``. The upstream sheets follow the
trace_module_analyzer layout (DESIGN.md section 4) so either tool's compare
reads the other's reports. Written with openpyxl's write-only mode and saved
atomically (temp file in the same directory, then ``os.replace``).
"""
from __future__ import annotations

import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from mcp_server import __version__
from mcp_server.core.atomic import check_output_path, probe_writable
from mcp_server.core.vocab import KERNEL_COLUMNS
from mcp_server.reports import layout as L
from mcp_server.reports.workbook import Sheet, atomic_save

#: Excel's row limit is 1,048,576; the full table is split into sheets of this many rows.
FULL_SHEET_ROWS = 1_000_000


@dataclass
class _Node:
    path: str
    name: str
    type: str
    depth: int
    phase: str
    total_us: float
    self_us: float
    kernel_count: int
    breakdown: dict[str, float]
    children: list["_Node"] = field(default_factory=list)


@dataclass
class DetailPlan:
    """One detail sheet: a representative instance of a repeated module type."""

    sheet: str
    module_type: str
    phase: str
    variant: str
    rep: _Node


# --------------------------------------------------------------------------- tree helpers


def _build_tree(analysis) -> list[_Node]:
    """Rebuild parent/child links from ``analysis.tree`` (paths), keeping list order."""
    nodes = [
        _Node(n.path, n.name, n.type, n.depth, n.phase or "", float(n.total_us), float(n.self_us),
              int(n.kernel_count), dict(n.breakdown or {}))
        for n in analysis.tree
    ]
    by_key: dict[tuple[str, str], _Node] = {}
    by_path: dict[str, _Node] = {}
    for n in nodes:
        by_key.setdefault((n.path, n.phase), n)
        by_path.setdefault(n.path, n)
    roots: list[_Node] = []
    for n in nodes:
        parent_path = n.path.rsplit("/", 1)[0] if "/" in n.path else ""
        parent = None
        if parent_path:
            parent = by_key.get((parent_path, n.phase)) or by_path.get(parent_path)
        if parent is None or parent is n:
            roots.append(n)
        else:
            parent.children.append(n)
    return roots


def _walk(nodes: Iterable[_Node]):
    stack = list(reversed(list(nodes)))
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def plan_details(roots: list[_Node]) -> tuple[dict[tuple[str, str], list[str]], list[DetailPlan]]:
    """Wrapper chains per (root type, phase) and the detail sheets to write.

    Starting at the roots, follow the dominant child type (>= 80 % of the parent's
    time) while it wraps its parent one-to-one; the first dominant child type that
    repeats inside its parent (decoder layers) is the detail type. Instances whose
    child-type signature differs (dense vs MoE layers) form variants A, B, ...
    when each holds at least 10 % of the instances.
    """
    groups: dict[tuple[str, str], list[_Node]] = defaultdict(list)
    for r in roots:
        groups[(r.type, r.phase)].append(r)
    chains: dict[tuple[str, str], list[str]] = {}
    plans: list[DetailPlan] = []
    used_names: set[str] = set()
    for (rtype, phase), current in sorted(groups.items(), key=lambda kv: -sum(n.total_us for n in kv[1])):
        chain = [rtype]
        detail_nodes = current
        for _ in range(64):
            kids: dict[str, list[_Node]] = defaultdict(list)
            for n in current:
                for c in n.children:
                    kids[c.type].append(c)
            if not kids:
                break
            cur_total = sum(n.total_us for n in current)
            dtype, dnodes = max(kids.items(), key=lambda kv: sum(c.total_us for c in kv[1]))
            if cur_total <= 0 or sum(c.total_us for c in dnodes) < 0.5 * cur_total:
                break
            chain.append(dtype)
            detail_nodes = dnodes
            if len(dnodes) > len(current):
                break
            current = dnodes
        chains[(rtype, phase)] = chain
        if not detail_nodes or sum(n.kernel_count for n in detail_nodes) == 0:
            continue
        dtype = detail_nodes[0].type
        sig_groups: dict[frozenset, list[_Node]] = defaultdict(list)
        for n in detail_nodes:
            sig_groups[frozenset(c.type for c in n.children)].append(n)
        min_count = max(1, len(detail_nodes) // 10)
        significant = sorted((g for g in sig_groups.values() if len(g) >= min_count), key=lambda g: -len(g))
        if len(significant) <= 1:
            variants = [("", detail_nodes)]
        else:
            variants = [(chr(ord("A") + i), g) for i, g in enumerate(significant[:26])]
        for vlabel, members in variants:
            # a node covers all its phases ("prefill+decode"): one sheet per phase
            phases = sorted({ph for n in members for ph in (n.phase.split("+") if n.phase else [""])},
                            key=lambda x: ("prefill", "decode", "graph", "").index(x)
                            if x in ("prefill", "decode", "graph", "") else 9)
            for ph in phases:
                cand = [n for n in members if not ph or ph in n.phase.split("+")]
                ordered = sorted(cand, key=lambda n: n.total_us)
                rep = ordered[len(ordered) // 2]
                name = L.detail_sheet_name(dtype, ph, vlabel)
                if name in used_names or name in L.NON_DETAIL_SHEETS:
                    continue
                used_names.add(name)
                plans.append(DetailPlan(name, dtype, ph, vlabel, rep))
    return chains, plans


# --------------------------------------------------------------------------- sheets


def _category_table(df) -> list[tuple[str, int, float]]:
    if df is None or len(df) == 0:
        return []
    g = df.groupby("category", sort=False)["dur_us"].agg(["count", "sum"])
    rows = [(str(c), int(r["count"]), float(r["sum"])) for c, r in g.iterrows()]
    rows.sort(key=lambda r: -r[2])
    return rows


def _write_summary(wb, analysis, df, roots, chains, plans) -> None:
    s = Sheet(wb, L.SUMMARY, {"A": 40, "B": 18, "C": 18, "D": 30, "E": 15})
    total = float(df["dur_us"].sum()) if df is not None and len(df) else float(analysis.total_kernel_us)
    s.header(L.SUMMARY_HEADERS)
    s.bold([L.SUMMARY_TOTAL_LABEL, round(total, 1), "100.0%"])
    tab_of: dict[str, str] = {}
    for p in plans:
        if p.variant in ("", "A"):
            tab_of.setdefault(p.module_type, p.sheet)
    groups: dict[tuple[str, str], list[_Node]] = defaultdict(list)
    for r in roots:
        groups[(r.type, r.phase)].append(r)
    for (rtype, phase), rlist in sorted(groups.items(), key=lambda kv: -sum(n.total_us for n in kv[1])):
        by_type: dict[str, float] = defaultdict(float)
        for n in _walk(rlist):
            by_type[n.type] += n.total_us
        rt = sum(n.total_us for n in rlist)
        label = f"{rtype} [{phase}]" if phase and len({p for (_, p) in groups}) > 1 else rtype
        s.append([label, round(rt, 1), L.share_text(rt, total)])
        chain = chains.get((rtype, phase), [rtype])
        kids = chain[1:]
        for i, ctype in enumerate(kids):
            conn = "└── " if i == len(kids) - 1 else "├── "
            ct = by_type.get(ctype, 0.0)
            tab = tab_of.get(ctype)
            row = [f"    {conn}{ctype}", round(ct, 1), L.share_text(ct, total)]
            if tab:
                s.bold(row + [tab])
            else:
                s.append(row)
    if analysis.unattributed_us and analysis.unattributed_us > 0:
        ua = float(analysis.unattributed_us)
        s.append(["(unattributed)", round(ua, 1), L.share_text(ua, total)])
    s.blank()
    s.header(L.SUMMARY_CATEGORY_HEADERS)
    for cat, cnt, us in _category_table(df):
        s.append([cat, cnt, round(us, 3), round(us / cnt, 3) if cnt else 0.0, L.share_text(us, total)])


def _write_overview(wb, analysis, roots) -> None:
    s = Sheet(wb, L.OVERVIEW, {"A": 45, "J": 80})
    s.header(L.OVERVIEW_HEADERS)
    stats = {m.type: m for m in analysis.modules}
    # the module types in tree order, then any the tree lacks
    for t in dict.fromkeys([n.type for n in _walk(roots) if n.type in stats] + list(stats)):
        m = stats[t]
        label = ("    " * m.depth + "├── " + t) if m.depth > 0 else t
        row = [label, m.depth, m.count, round(m.mean_us, 3), round(m.std_us, 3), round(m.min_us, 3),
               round(m.max_us, 3), round(m.total_us, 3), round(m.pct_of_parent, 1), m.top_kernel]
        if m.depth == 0:
            s.bold(row)
        else:
            s.append(row)


def _write_tree(wb, roots) -> None:
    from openpyxl.worksheet.properties import Outline

    s = Sheet(wb, L.MODULE_TREE, {"A": 50, "D": 80, "F": 60})
    s.ws.sheet_properties.outlinePr = Outline(summaryBelow=False, summaryRight=False)
    max_depth = max((n.depth for n in _walk(roots)), default=0)
    s.ws.sheet_format.outlineLevelRow = min(max_depth, 7)
    s.header(L.TREE_HEADERS + [L.TREE_PATH_HEADER])
    for n in _walk(roots):
        label = ("    " * n.depth + "├── " + n.name) if n.depth > 0 else n.name
        s.append([label, round(n.total_us, 3), n.kernel_count, L.format_breakdown(n.breakdown, n.total_us),
                  n.phase, n.path], outline=min(n.depth, 7))


def _write_gpu_kernels(wb, df) -> None:
    s = Sheet(wb, L.GPU_KERNELS, {"A": 80, "G": 50})
    s.header(L.GPU_KERNEL_HEADERS)
    if df is None or len(df) == 0:
        return
    total = float(df["dur_us"].sum())
    g = df.groupby("name", sort=False).agg(
        category=("category", "first"), total=("dur_us", "sum"), count=("dur_us", "size"))
    mt = df[df["module_type"].astype(str) != ""].groupby("name", sort=False)["module_type"].agg(
        lambda x: ", ".join(sorted(set(map(str, x)))))
    g = g.join(mt.rename("module_types"))
    g = g.sort_values("total", ascending=False, kind="stable")
    for name, r in g.head(L.MAX_ROWS).iterrows():
        tot, cnt = float(r["total"]), int(r["count"])
        mts = r["module_types"] if isinstance(r["module_types"], str) else ""
        s.append([name, r["category"], round(tot, 3), cnt, round(tot / cnt, 3) if cnt else 0.0,
                  round(tot / total * 100 if total > 0 else 0.0, 2), mts])
    if len(g) > L.MAX_ROWS:
        s.append([L.truncated_line()])


def _detail_rows(df, rep: _Node, phase: str):
    if df is None or len(df) == 0:
        return df
    mp = df["module_path"].astype(str)
    mask = (mp == rep.path) | mp.str.startswith(rep.path + "/")
    if phase:
        mask &= df["phase"].astype(str) == phase
    return df[mask].sort_values("ts_us", kind="stable")


def _peak_tflops(device: str | None) -> tuple[float | None, str]:
    """The GPU's dense bf16 TFLOP/s (measured ceiling first) and where it came from; (None, '') if unknown."""
    if not device:
        return None, ""
    try:
        from mcp_server.core.gpu_specs import find_gpu

        spec = find_gpu(device)
    except Exception:  # noqa: BLE001 - a missing or malformed spec table only leaves the column empty
        return None, ""
    c = spec.ceiling("bf16_tflops") if spec is not None else None
    return (c.value, f"{spec.key} {c.source}") if (c is not None and spec is not None) else (None, "")


def _flops_cells(op: str, dims: str, dur_us: float, peak: float | None) -> tuple:
    """(Formula, TFLOP, TFLOPs, % of peak) of one launch; Nones where the op or dims do not allow it."""
    from mcp_server.reports.flops import launch_flops

    got = launch_flops(op, dims)
    if got is None:
        return None, None, None, None
    formula, flop = got
    tflop = flop / 1e12
    rate = tflop / (dur_us / 1e6) if dur_us > 0 else None
    pct = round(100.0 * rate / peak, 2) if (rate is not None and peak) else None
    return formula, float(f"{tflop:.3g}"), (round(rate, 3) if rate is not None else None), pct


def _write_detail(wb, plan: DetailPlan, df, peak: float | None = None) -> None:
    s = Sheet(wb, plan.sheet, {"A": 35, "B": 60, "C": 80, "G": 24, "J": 70})
    k = _detail_rows(df, plan.rep, plan.phase)
    n = 0 if k is None else len(k)
    parent = plan.rep.path.rsplit("/", 1)[0] if "/" in plan.rep.path else ""
    s.title([plan.rep.name, n, parent])
    if n:
        ssum = float(k["dur_us"].sum())
        start = float(k["ts_us"].min())
        end = float((k["ts_us"] + k["dur_us"]).max())
        wall = end - start
    else:
        ssum = wall = 0.0
    s.append([f"Kernel sum: {ssum:,.0f} us  |  Wall time: {wall:,.0f} us  |  Overlap: {ssum - wall:,.0f} us  "
              f"(% uses wall time)"])
    s.blank()
    s.header(L.DETAIL_CATEGORY_HEADERS)
    cats = _category_table(k)
    for cat, _cnt, us in cats:
        s.append([cat, f"{us / ssum * 100 if ssum > 0 else 0:.0f}%", round(us, 3)])
    s.bold(["Total", "100%", round(ssum, 3)])
    s.blank()
    s.header(L.DETAIL_KERNEL_HEADERS + [L.PEAK_HEADER])
    if n:
        ops = k["cpu_op"].astype(str).tolist() if "cpu_op" in k else [""] * n
        cols = [k[c].tolist() for c in ("module", "input_dims", "name", "dur_us", "category", "source")]
        for i in range(min(n, L.MAX_ROWS)):
            mod, dims, name, dur, cat, src = (c[i] for c in cols)
            dur = float(dur)
            flops = cat in ("gemm", "attention", "moe")
            formula, tflop, rate, pct = (_flops_cells(ops[i], str(dims), dur, peak) if flops
                                         else (None, None, None, None))
            s.append([mod, dims, name, round(dur, 3), round(dur / wall * 100 if wall > 0 else 0.0, 2), cat,
                      formula, tflop, rate, src, pct])
        if n > L.MAX_ROWS:
            s.append([L.truncated_line()])


def _write_full(wb, df) -> list:
    """The full-table sheets with their header row; returns [(sheet, rows)] for ``fill_full_tables``."""
    cols = list(KERNEL_COLUMNS)
    n = 0 if df is None else len(df)
    chunks = max(1, math.ceil(n / FULL_SHEET_ROWS))
    parts = []
    for ci in range(chunks):
        title = L.full_table_sheet_name(ci)
        s = Sheet(wb, title, {"A": 80, "K": 60})
        s.header(cols)
        if n:
            parts.append((title, df.iloc[ci * FULL_SHEET_ROWS:(ci + 1) * FULL_SHEET_ROWS]))
    return parts


def _write_metadata(wb, analysis, df, plans, peak: float | None = None, peak_src: str = "") -> None:
    import json

    s = Sheet(wb, L.METADATA, {"A": 30, "B": 100})
    s.header(["Key", "Value"])
    sha = analysis.categories_sha256
    src = analysis.categories_source
    rows: list[tuple[str, Any]] = [
        ("kernelscope_version", __version__),
        ("written_utc", datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")),
        ("trace", analysis.trace),
        ("trace_name", Path(analysis.trace).name if analysis.trace else ""),
        ("device", analysis.device or ""),
        ("platform", analysis.platform),
        ("kernel_count", int(analysis.kernel_count)),
        ("attributed_count", int(analysis.attributed_count)),
        ("unattributed_count", int(analysis.unattributed_count)),
        ("total_kernel_us", float(analysis.total_kernel_us)),
        ("unattributed_us", float(analysis.unattributed_us)),
        ("full_table_rows", 0 if df is None else int(len(df))),
        ("detail_sheets", ", ".join(p.sheet for p in plans)),
        ("categories_source", src),
        ("categories_sha256", sha),
        ("bf16_peak_tflops", "" if peak is None else f"{peak} ({peak_src}; the '% of bf16 peak' column)"),
        ("graph_attribution", json.dumps(analysis.graph.model_dump(mode="json"), sort_keys=True)),
    ]
    for k, v in sorted((analysis.metadata or {}).items()):
        rows.append((f"trace.{k}", v if isinstance(v, (int, float, str)) else json.dumps(v, default=str)))
    for k, v in rows:
        s.append([k, v])


def gpu_time_rows(b, rank: Any = None) -> list[list[Any]]:
    """Rows of the GPU Time sheet for one breakdown (``traces.models.GpuBreakdown``), ``GPU_TIME_HEADERS``
    order; ``rank`` (a trace set) goes in front of each row."""
    out = []
    for r in [b.total, *b.devices, *b.streams]:
        row = [r.scope, "" if r.device is None else r.device, "" if r.stream is None else r.stream, r.kernel_count,
               r.window_us, r.busy_us, r.idle_us, r.computation_us, r.communication_us, r.memory_us,
               r.exposed_communication_us, r.exposed_memory_us, round(r.busy_pct, 3),
               "" if r.comm_overlap_pct is None else round(r.comm_overlap_pct, 3)]
        out.append(row if rank is None else [rank, *row])
    return out


def _write_gpu_time(wb, analysis) -> None:
    b = getattr(analysis, "breakdown", None)
    if b is None:
        return
    s = Sheet(wb, L.GPU_TIME, {"A": 12, "E": 14, "F": 14, "G": 14, "H": 16, "I": 18, "J": 18, "K": 24, "L": 24})
    s.bold([f"Window: {b.window} ({b.window_note})"])
    s.header(L.GPU_TIME_HEADERS)
    for row in gpu_time_rows(b):
        s.append(row)


# --------------------------------------------------------------------------- entry point


def write_analysis_report(analysis, path: str | os.PathLike, *, force: bool = False) -> None:
    """Write ``analysis`` (a ``TraceAnalysis`` with ``.kernels``) to ``path`` atomically.

    Raises ``WriteError`` naming the path when the directory is missing or the
    write fails; an existing file at ``path`` is left intact on failure.
    """
    from openpyxl import Workbook

    out = check_output_path(path, "report")
    probe_writable(out, "report", force=force)  # a read-only directory or report fails here, before the build
    df = analysis.kernels
    roots = _build_tree(analysis)
    chains, plans = plan_details(roots)

    wb = Workbook(write_only=True)
    _write_summary(wb, analysis, df, roots, chains, plans)
    _write_overview(wb, analysis, roots)
    _write_tree(wb, roots)
    _write_gpu_kernels(wb, df)
    peak, peak_src = _peak_tflops(analysis.device)
    for p in plans:
        _write_detail(wb, p, df, peak)
    _write_gpu_time(wb, analysis)
    parts = _write_full(wb, df)
    _write_metadata(wb, analysis, df, plans, peak, peak_src)
    atomic_save(wb, out, full_tables=parts, force=force)
