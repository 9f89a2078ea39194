"""``budget``: per-category time of two runs side by side (works on CUDA-graph decode too).

Built from each side's full kernel list (trace, kernelscope report); from an
upstream report from its ``GPU Kernels`` sheet (and says when that sheet was
truncated). Each side's shares sum to 100 %; rows are sorted by |gap|.
"""
from __future__ import annotations

from typing import Optional

import pandas as pd

from mcp_server.compare.inputs import STEP_WEIGHT, Side, distinct_labels, filter_phase, load_sides, resolve_per_step
from mcp_server.compare.models import BudgetResult, BudgetRow, SideInfo
from mcp_server.compare.requests import BudgetRequest
from mcp_server.core.errors import InputError
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.vocab import MODULE_ATTRIBUTION_WARNINGS, WarningCode


def ratio(a: float, b: float) -> Optional[float]:
    """b / a; None when a is not positive."""
    return (b / a) if a > 0 else None


def _kernels_read(side: Side, g: pd.DataFrame) -> int:
    """Launches the side holds (whole, also when the rows are per step)."""
    return len(side.kernels) if side.kernels is not None else int(g["count"].sum())


def category_totals(side: Side) -> tuple[pd.DataFrame, str]:
    """(category, us, count) of one side and the name of the table used."""
    if side.kernels is not None:
        k = side.kernels
        w = k[STEP_WEIGHT] if STEP_WEIGHT in k else pd.Series(1.0, index=k.index)
        g = k.assign(_w=w).groupby("category", sort=False).agg(us=("dur_us", "sum"), count=("_w", "sum"))
        g["count"] = g["count"].round().astype(int)
        return g, "kernels"
    gk = side.gpu_kernels
    if gk is None:
        raise InputError("no kernel table to budget", path=side.path)
    g = gk.groupby("category", sort=False).agg(us=("total_us", "sum"), count=("count", "sum"))
    return g, "GPU Kernels"


def side_info(side: Side, *, total_us: float, count: int, table: str, phase: Optional[str],
              phases: list[str]) -> SideInfo:
    return SideInfo(
        label=side.label, path=side.path, kind=side.kind, source_table=table,
        truncated=bool(side.gpu_kernels_truncated if table == "GPU Kernels" else side.kernels_truncated),
        phase=phase or None, phases_present=phases, kernel_count=int(count), total_us=float(total_us),
        categories_sha256=side.categories_sha256, reference=side.reference,
        reference_phase=side.reference_phase or None, attribution_method=side.attribution_method or None,
        attribution_confidence=side.attribution_confidence, attribution_suspect=side.attribution_suspect,
        steps=side.steps,
    )


@engine(BudgetRequest)
def budget(req: BudgetRequest) -> BudgetResult:
    """Per category: each side's us and share, gap (b - a) and ratio (b / a), sorted by |gap|.

    ``per_step``: divide each side by its step count (graph replays + eager calls); None = automatic
    when the counts differ and the kernels per step agree. Differing counts are always warned."""
    phase = req.phase
    sa, sb = load_sides(req.a, req.b, categories=req.categories, purpose="budget")
    distinct_labels(sa, sb, req.labels)
    warnings: list[Warning_] = []
    phases = {id(s): s.phases for s in (sa, sb)}
    if phase:
        sa, sb = filter_phase(sa, phase), filter_phase(sb, phase)
    else:
        for s in (sa, sb):
            if len(phases[id(s)]) > 1:
                warnings.append(Warning_(code=WarningCode.mixed_phases, message=(
                    f"{s.label} holds both prefill and decode kernels; the budget mixes them "
                    "(pass phase='prefill' or 'decode')")))
    # the budget reads categories only: a side's module-attribution warnings say nothing about it
    warnings += [w for w in sa.warnings + sb.warnings if w.code not in MODULE_ATTRIBUTION_WARNINGS]
    resolve_per_step(sa, sb, req.per_step, warnings)
    ga, ta = category_totals(sa)
    gb, tb = category_totals(sb)
    tot_a, tot_b = float(ga["us"].sum()), float(gb["us"].sum())
    for s, tot in ((sa, tot_a), (sb, tot_b)):
        if tot <= 0:
            warnings.append(Warning_(code=WarningCode.empty_side, message=f"{s.label}: no kernel time to budget"))
    cats = list(dict.fromkeys(list(ga.index) + list(gb.index)))
    rows = []
    for c in cats:
        a_us = float(ga["us"].get(c, 0.0))
        b_us = float(gb["us"].get(c, 0.0))
        rows.append(BudgetRow(
            category=str(c), a_us=a_us, b_us=b_us,
            a_pct=100.0 * a_us / tot_a if tot_a > 0 else 0.0,
            b_pct=100.0 * b_us / tot_b if tot_b > 0 else 0.0,
            a_count=int(ga["count"].get(c, 0)), b_count=int(gb["count"].get(c, 0)),
            gap_us=b_us - a_us, ratio=ratio(a_us, b_us),
        ))
    rows.sort(key=lambda r: (-abs(r.gap_us), r.category))
    return BudgetResult(
        a=side_info(sa, total_us=tot_a, count=_kernels_read(sa, ga), table=ta, phase=phase, phases=phases[id(sa)]),
        b=side_info(sb, total_us=tot_b, count=_kernels_read(sb, gb), table=tb, phase=phase, phases=phases[id(sb)]),
        rows=rows, total_a_us=tot_a, total_b_us=tot_b, gap_us=tot_b - tot_a, ratio=ratio(tot_a, tot_b),
        mismatches=sa.mismatches + sb.mismatches, warnings=warnings,
    )
