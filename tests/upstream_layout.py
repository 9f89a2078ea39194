"""Test helper: build report workbooks in torch-profiler-parser's documented layout.

Builds workbooks the way trace_module_analyzer lays them out (DESIGN.md
section 4), in both detail-title layouts:

* ``old``: A1 ``"{name} [phase] — N kernels"``, formula notes in rows 3-5, the
  category table from row 7;
* ``new``: A1 name, B1 kernel count, C1 parent path, the category table from row 4.

Both cap GPU Kernels and every detail kernel table at 1000 rows and then write
``... truncated at 1000 rows``. Also: ``make_analysis`` (a hand-built
``TraceAnalysis`` following the trace models' contract) and
``make_large_report`` (the benchmark's 50 x 1000-row workbook).
"""
from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

CAP = 1000
TRUNC = f"... truncated at {CAP} rows"


@dataclass
class UKernel:
    module: str  # leaf instance (Module column)
    name: str
    dur: float
    category: str
    dims: str = ""
    source: str = ""
    ts: float = 0.0


@dataclass
class UDetail:
    module_type: str
    instance: str
    phase: str  # "prefill" | "decode" | ""
    parent_path: str
    kernels: list[UKernel]
    variant: str = ""

    @property
    def sheet(self) -> str:
        parts = [p for p in (self.phase[:3] if self.phase else "", self.variant) if p]
        if parts:
            suffix = f" ({','.join(parts)})"
            return f"{self.module_type[:28 - len(suffix)]}{suffix}"
        return self.module_type[:28]


@dataclass
class UTreeRow:
    depth: int
    name: str
    total: float
    count: int
    breakdown: dict[str, float]
    phase: str = ""


@dataclass
class UpstreamSpec:
    details: list[UDetail]
    #: every kernel of the run as (name, category, dur, owning module type); default: the details' kernels
    all_kernels: Optional[list[tuple[str, str, float, str]]] = None
    tree: Optional[list[UTreeRow]] = None
    root_type: str = "Model"
    chain: list[str] = field(default_factory=list)

    def kernels(self) -> list[tuple[str, str, float, str]]:
        if self.all_kernels is not None:
            return self.all_kernels
        return [(k.name, k.category, k.dur, d.module_type) for d in self.details for k in d.kernels]


def _fmt_breakdown(bd: dict[str, float], total: float) -> str:
    parts = []
    for cat, us in sorted(bd.items(), key=lambda kv: -kv[1]):
        if us <= 0:
            continue
        parts.append(f"{cat}: {us:,.0f} us ({us / total * 100 if total > 0 else 0:.1f}%)")
    return ", ".join(parts)


def build_upstream_report(path: str, spec: UpstreamSpec, layout: str = "old", *, write_only: bool = False) -> None:
    """Write ``spec`` as an upstream-layout workbook at ``path`` (``layout``: 'old' | 'new')."""
    from openpyxl import Workbook
    from openpyxl.styles import Font, PatternFill
    from openpyxl.worksheet.properties import Outline

    assert layout in ("old", "new")
    hfont = Font(bold=True)
    hfill = PatternFill(start_color="CCE5FF", end_color="CCE5FF", fill_type="solid")
    wb = Workbook()

    def header(ws, row, values):
        for c, v in enumerate(values, 1):
            cell = ws.cell(row=row, column=c, value=v)
            cell.font = hfont
            cell.fill = hfill

    allk = spec.kernels()
    grand = sum(k[2] for k in allk)

    # Summary
    ws = wb.active
    ws.title = "Summary"
    header(ws, 1, ["Metric", "Value (us)", "Percentage", "Detail Tab"])
    ws.cell(row=2, column=1, value="Total Kernel Time").font = Font(bold=True)
    ws.cell(row=2, column=2, value=round(grand, 1))
    ws.cell(row=2, column=3, value="100.0%")
    ws.cell(row=3, column=1, value=spec.root_type)
    ws.cell(row=3, column=2, value=round(grand, 1))
    ws.cell(row=3, column=3, value="100.0%")
    row = 4
    chain = spec.chain or sorted({d.module_type for d in spec.details})
    by_type_total: dict[str, float] = defaultdict(float)
    for _name, _cat, dur, mt in allk:
        by_type_total[mt] += dur
    first_tab = {}
    for d in spec.details:
        first_tab.setdefault(d.module_type, d.sheet)
    for i, ctype in enumerate(chain):
        conn = "└── " if i == len(chain) - 1 else "├── "
        t = by_type_total.get(ctype, 0.0)
        ws.cell(row=row, column=1, value=f"    {conn}{ctype}")
        ws.cell(row=row, column=2, value=round(t, 1))
        ws.cell(row=row, column=3, value=f"{t / grand * 100 if grand else 0:.1f}%")
        if ctype in first_tab:
            ws.cell(row=row, column=4, value=first_tab[ctype])
        row += 1
    row += 1
    header(ws, row, ["Category", "Count", "Total (us)", "Avg (us)", "Percentage"])
    row += 1
    cat_agg: dict[str, list] = {}
    for _name, cat, dur, _mt in allk:
        e = cat_agg.setdefault(cat, [0.0, 0])
        e[0] += dur
        e[1] += 1
    for cat, (dur, cnt) in sorted(cat_agg.items(), key=lambda kv: -kv[1][0]):
        ws.cell(row=row, column=1, value=cat)
        ws.cell(row=row, column=2, value=cnt)
        ws.cell(row=row, column=3, value=round(dur, 1))
        ws.cell(row=row, column=4, value=round(dur / cnt, 1))
        ws.cell(row=row, column=5, value=f"{dur / grand * 100 if grand else 0:.1f}%")
        row += 1

    # Overview
    ws = wb.create_sheet("Overview")
    header(ws, 1, ["Module Type", "Depth", "Count", "Mean (us)", "Std (us)", "Min (us)", "Max (us)", "Total (us)",
                   "% of Parent", "Top Kernel"])
    ws.append([spec.root_type, 0, 1, round(grand, 1), 0, round(grand, 1), round(grand, 1), round(grand, 1), 100.0, ""])
    for ctype in chain:
        t = by_type_total.get(ctype, 0.0)
        ws.append([f"    ├── {ctype}", 1, 1, round(t, 1), 0, round(t, 1), round(t, 1), round(t, 1),
                   round(t / grand * 100 if grand else 0, 1), ""])

    # Module Tree
    ws = wb.create_sheet("Module Tree")
    ws.sheet_properties.outlinePr = Outline(summaryBelow=False, summaryRight=False)
    header(ws, 1, ["Module", "Total Time (us)", "Kernels/Ops", "Breakdown", "Phase"])
    tree = spec.tree
    if tree is None:
        root_bd: dict[str, float] = defaultdict(float)
        for _name, cat, dur, _mt in allk:
            root_bd[cat] += dur
        tree = [UTreeRow(0, f"{spec.root_type}_0", grand, len(allk), dict(root_bd))]
        for d in spec.details:
            bd: dict[str, float] = defaultdict(float)
            for k in d.kernels:
                bd[k.category] += k.dur
            tot = sum(bd.values())
            tree.append(UTreeRow(1, d.instance, tot, len(d.kernels), dict(bd), d.phase))
    for r, t in enumerate(tree, start=2):
        label = ("    " * t.depth + "├── " + t.name) if t.depth > 0 else t.name
        ws.cell(row=r, column=1, value=label)
        ws.cell(row=r, column=2, value=round(t.total, 1))
        ws.cell(row=r, column=3, value=t.count)
        ws.cell(row=r, column=4, value=_fmt_breakdown(t.breakdown, t.total))
        ws.cell(row=r, column=5, value=t.phase)
        if t.depth > 0:
            ws.row_dimensions[r].outline_level = min(t.depth, 7)

    # GPU Kernels
    ws = wb.create_sheet("GPU Kernels")
    header(ws, 1, ["Kernel Name", "Category", "Total Duration (us)", "Count", "Avg (us)", "% of Total",
                   "Module Types"])
    agg: dict[str, list] = {}
    for name, cat, dur, mt in allk:
        e = agg.setdefault(name, [0.0, 0, cat, set()])
        e[0] += dur
        e[1] += 1
        e[3].add(mt)
    items = sorted(agg.items(), key=lambda kv: -kv[1][0])
    r = 2
    for name, (dur, cnt, cat, mts) in items[:CAP]:
        ws.append([name, cat, round(dur, 1), cnt, round(dur / cnt, 1), round(dur / grand * 100 if grand else 0, 1),
                   ", ".join(sorted(mts))])
        r += 1
    if len(items) > CAP:
        ws.cell(row=r, column=1, value=TRUNC)

    # detail sheets
    for d in spec.details:
        ws = wb.create_sheet(d.sheet)
        ks = d.kernels
        ssum = sum(k.dur for k in ks)
        wall = (max(k.ts + k.dur for k in ks) - min(k.ts for k in ks)) if ks else 0.0
        if layout == "old":
            ph = f" [{d.phase}]" if d.phase else ""
            ws.cell(row=1, column=1, value=f"{d.instance}{ph} — {len(ks)} kernels").font = Font(bold=True, size=12)
        else:
            ws.cell(row=1, column=1, value=d.instance).font = Font(bold=True, size=12)
            ws.cell(row=1, column=2, value=len(ks))
            ws.cell(row=1, column=3, value=d.parent_path)
        ws.cell(row=2, column=1, value=f"Kernel sum: {ssum:,.0f} us  |  Wall time: {wall:,.0f} us  |  "
                                       f"Overlap: {ssum - wall:,.0f} us  (% uses wall time)")
        if layout == "old":
            ws.cell(row=3, column=1, value="gemm / moe:")
            ws.cell(row=3, column=2, value="TFLOP = 2*M*K*N / 1e12")
            ws.cell(row=4, column=1, value="attention:")
            ws.cell(row=4, column=2, value="TFLOP = 2*Sq*Skv*H*(dqk+dv) / 1e12")
            ws.cell(row=5, column=1, value="throughput:")
            ws.cell(row=5, column=2, value="TFLOPs = TFLOP / (Duration_us / 1e6)")
            cur = 7
        else:
            cur = 4
        header(ws, cur, ["Category", "Percentage (%)", "Total Duration (us)"])
        cur += 1
        cagg: dict[str, float] = defaultdict(float)
        for k in ks:
            cagg[k.category] += k.dur
        for cat, dur in sorted(cagg.items(), key=lambda kv: -kv[1]):
            ws.cell(row=cur, column=1, value=cat)
            ws.cell(row=cur, column=2, value=f"{dur / ssum * 100 if ssum else 0:.0f}%")
            ws.cell(row=cur, column=3, value=round(dur, 1))
            cur += 1
        ws.cell(row=cur, column=1, value="Total").font = Font(bold=True)
        ws.cell(row=cur, column=2, value="100%").font = Font(bold=True)
        ws.cell(row=cur, column=3, value=round(ssum, 1)).font = Font(bold=True)
        cur += 2
        header(ws, cur, ["Module", "Input Dims", "Kernel Name", "Duration (us)", "% of wall time", "Category",
                         "Formula", "TFLOP", "TFLOPs", "Source"])
        cur += 1
        for k in ks[:CAP]:
            ws.cell(row=cur, column=1, value=k.module)
            ws.cell(row=cur, column=2, value=k.dims)
            ws.cell(row=cur, column=3, value=k.name)
            ws.cell(row=cur, column=4, value=round(k.dur, 1))
            ws.cell(row=cur, column=5, value=round(k.dur / wall * 100 if wall else 0, 1))
            ws.cell(row=cur, column=6, value=k.category)
            ws.cell(row=cur, column=10, value=k.source)
            cur += 1
        if len(ks) > CAP:
            ws.cell(row=cur, column=1, value=TRUNC)
    wb.save(path)


# --------------------------------------------------------------------------- synthetic kernel names

#: (name template, leaf module type) — names typical of H200 / MI300 inference traces
KERNEL_POOL = [
    ("nvjet_tst_{t}x256_64x4_2x1_v_bz_coopA_NTN", "Linear"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_{t}x64_64x4_tn_align8>", "Linear"),
    ("Cijk_Alik_Bljk_BBS_BH_MT{t}x128x64_MI16x16x1_SN_1LDSB0", "Linear"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, {t}, 64, 4>, true>", "Attention"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<{t}, float>", "Attention"),
    ("void vllm::rms_norm_kernel<c10::BFloat16, {t}>", "RMSNorm"),
    ("void at::native::vectorized_elementwise_kernel<{t}, at::native::BinaryFunctor<float>>", "RMSNorm"),
    ("triton_poi_fused_mul_silu_{t}", "MLP"),
    ("void vllm::act_and_mul_kernel<c10::BFloat16, silu, {t}>", "MLP"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL_{t}", "Comm"),
    ("void rotary_embedding_kernel<c10::BFloat16, {t}>", "Rotary"),
    ("fused_moe_kernel_{t}", "Experts"),
    ("Memcpy DtoD (Device -> Device) {t}", "Linear"),
]


def kernel_names(n_variants: int = 30) -> list[tuple[str, str]]:
    out = []
    for tmpl, mt in KERNEL_POOL:
        for v in range(n_variants):
            out.append((tmpl.format(t=16 * (v + 1)), mt))
    return out


def make_large_spec(sheets: int = 50, rows: int = 1000, seed: int = 0, categories=None) -> UpstreamSpec:
    """A deterministic spec with ``sheets`` detail sheets of ``rows`` kernels each."""
    from mcp_server.core.categories import load_categories

    rules = categories or load_categories()
    rng = random.Random(seed)
    pool = kernel_names()
    details = []
    for i in range(sheets):
        mtype = f"DecoderLayerKind{i:02d}"
        phase = "prefill" if i % 2 == 0 else "decode"
        inst = f"{mtype}_{rng.randint(0, 60)}"
        ks = []
        ts = 0.0
        for j in range(rows):
            name, leaf = pool[rng.randrange(len(pool))]
            dur = round(rng.uniform(1.0, 400.0), 1)
            ks.append(UKernel(f"{leaf}_{j % 7}", name, dur, rules.classify(name), f"[[{j % 64}, 4096], [4096, 4096]]",
                              "model.py(123): forward", ts))
            ts += dur + 0.5
        details.append(UDetail(mtype, inst, phase, "Model_0/Body_0", ks))
    return UpstreamSpec(details=details, root_type="Model", chain=["Body"] + [d.module_type for d in details])


def make_large_report(path: str, sheets: int = 50, rows: int = 1000, seed: int = 0, layout: str = "new") -> str:
    """Write the benchmark workbook (upstream layout, ``sheets`` x ``rows`` detail rows); returns ``path``."""
    build_upstream_report(path, make_large_spec(sheets, rows, seed), layout)
    return path


# --------------------------------------------------------------------------- hand-built TraceAnalysis


def make_analysis(n_layers: int = 4, phase: str = "prefill", seed: int = 0, trace: str = "synthetic.json",
                  unattributed: int = 2, categories=None):
    """A ``TraceAnalysis`` built by hand following ``mcp_server.traces.models``' contract."""
    import pandas as pd

    from mcp_server.core.categories import load_categories
    from mcp_server.traces.models import KERNEL_COLUMNS, CategoryTotal, ModuleNode, ModuleTypeStats, TraceAnalysis

    rules = categories or load_categories()
    rng = random.Random(seed)
    root = "LlamaForCausalLM_0"
    model = f"{root}/LlamaModel_0"
    layer_mods = [
        ("LlamaRMSNorm_0", ["void vllm::rms_norm_kernel<c10::BFloat16, 128>"]),
        ("LlamaAttention_0/Linear_0", ["nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NTN"]),
        ("LlamaAttention_0", ["void rotary_embedding_kernel<c10::BFloat16, 128>",
                              "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>"]),
        ("LlamaAttention_0/Linear_1", ["nvjet_tst_64x256_64x4_2x1_v_bz_coopA_NTN"]),
        ("LlamaRMSNorm_1", ["void vllm::rms_norm_kernel<c10::BFloat16, 128>"]),
        ("LlamaMLP_0/Linear_2", ["nvjet_tst_256x256_64x4_2x1_v_bz_coopA_NTN"]),
        ("LlamaMLP_0/SiLU_0", ["triton_poi_fused_mul_silu_0"]),
        ("LlamaMLP_0/Linear_3", ["nvjet_tst_128x128_64x4_2x1_v_bz_coopA_NTN"]),
    ]
    rows = []
    ts = 0.0

    def add(name, path, kind="kernel"):
        nonlocal ts
        dur = round(rng.uniform(2.0, 50.0), 3)
        parts = path.split("/") if path else []
        mod = parts[-1] if parts else ""
        rows.append(dict(name=name, category=rules.classify(name), kind=kind, ts_us=ts, dur_us=dur, device=0,
                         stream=7, correlation=len(rows) + 1, module=mod,
                         module_type=mod.rsplit("_", 1)[0] if mod else "", module_path=path,
                         root_type=parts[0].rsplit("_", 1)[0] if parts else "", phase=phase if path else "",
                         cpu_op="aten::mm" if "nvjet" in name else "", input_dims="[[128, 4096], [4096, 4096]]"
                         if "nvjet" in name else "", source="modeling_llama.py(80): forward" if path else "",
                         graph=False, confidence=1.0 if path else 0.0, layer=-1))
        ts += dur + 1.0

    add("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16>", f"{model}/Embedding_0")
    for i in range(n_layers):
        for sub, names in layer_mods:
            for nm in names:
                add(nm, f"{model}/LlamaDecoderLayer_{i}/{sub}")
    add("void vllm::rms_norm_kernel<c10::BFloat16, 128>", f"{model}/LlamaRMSNorm_{n_layers * 2}")
    add("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NTN", f"{root}/Linear_{n_layers * 4}")
    for _ in range(unattributed):
        add("Memcpy DtoH (Device -> Pinned)", "", kind="memcpy")
    df = pd.DataFrame(rows, columns=list(KERNEL_COLUMNS))

    # tree: every path prefix is a node
    node_k: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(df["module_path"].tolist()):
        if not p:
            continue
        parts = p.split("/")
        for d in range(1, len(parts) + 1):
            node_k["/".join(parts[:d])].append(i)
    order = sorted(node_k, key=lambda p: min(node_k[p]) * 100 + p.count("/"))
    tree = []
    for p in order:
        idx = node_k[p]
        sub = df.iloc[idx]
        name = p.rsplit("/", 1)[-1]
        self_us = float(sub[sub["module_path"] == p]["dur_us"].sum())
        tree.append(ModuleNode(path=p, name=name, type=name.rsplit("_", 1)[0], depth=p.count("/"), phase=phase,
                               total_us=float(sub["dur_us"].sum()), self_us=self_us, kernel_count=len(idx),
                               breakdown={c: float(v) for c, v in sub.groupby("category")["dur_us"].sum().items()}))
    # per-type stats
    by_type: dict[str, list] = defaultdict(list)
    for n in tree:
        by_type[n.type].append(n)
    mods = []
    for t, ns in by_type.items():
        vals = [n.total_us for n in ns]
        mean = sum(vals) / len(vals)
        std = (sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0
        mods.append(ModuleTypeStats(type=t, depth=min(n.depth for n in ns), count=len(ns), total_us=sum(vals),
                                    mean_us=mean, std_us=std, min_us=min(vals), max_us=max(vals),
                                    pct_of_parent=0.0, top_kernel=""))
    total = float(df["dur_us"].sum())
    cats = [CategoryTotal(category=str(c), count=int(g.size), total_us=float(g.sum()),
                          pct=float(g.sum()) / total * 100) for c, g in df.groupby("category")["dur_us"]]
    ua = df[df["module_path"] == ""]
    a = TraceAnalysis(trace=trace, device="NVIDIA H200", platform="nvidia", total_kernel_us=total,
                      kernel_count=len(df), attributed_count=len(df) - len(ua), unattributed_count=len(ua),
                      unattributed_us=float(ua["dur_us"].sum()), categories=cats, modules=mods, tree=tree,
                      categories_source=rules.source, categories_sha256=rules.sha256)
    return a.with_kernels(df)
