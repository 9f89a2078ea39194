"""One side of a comparison, from a trace or a report.

``load_side`` accepts:

* a PyTorch-profiler trace (``.json`` / ``.json.gz``): analysed on the fly
  (``mcp_server.traces.analyze_trace``), categories from the current rules;
* a kernelscope report (``.xlsx`` with the full kernel table);
* a torch-profiler-parser report (``.xlsx``, either layout): kernels assembled
  from the detail sheets (capped at 1000 rows each upstream), plus the
  ``GPU Kernels`` sheet for the budget.

Report categories are re-applied with the current rules (``categories`` or
``_shared/kernel_categories.csv``); the stored ones are kept to list the kernels
whose category changed (``Side.mismatches``). Upstream truncation is noted.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Sequence

import pandas as pd

from mcp_server.compare.models import CategoryMismatch, SideKind
from mcp_server.core.categories import CategoryRules, load_categories
from mcp_server.core.errors import FileMissingError, InputError
from mcp_server.core.models import Warning_
from mcp_server.core.vocab import PHASES, WarningCode
from mcp_server.traces import analyze_trace  # the read-ahead entry (mcp_server/traces/__init__ loads it lazily)

Purpose = Literal["budget", "diff"]
TRACE_SUFFIXES = (".json", ".json.gz")
REPORT_SUFFIXES = (".xlsx", ".xlsm")


@dataclass
class Side:
    """Kernels of one run, with current categories, in execution order."""

    label: str
    path: str
    kind: SideKind
    kernels: Optional[pd.DataFrame]  # KERNEL_COLUMNS (+ stored_category for reports); None if not read
    gpu_kernels: Optional[pd.DataFrame] = None  # upstream 'GPU Kernels': name, category, total_us, count
    gpu_kernels_truncated: bool = False
    kernels_truncated: bool = False
    categories_sha256: str = ""
    mismatches: list[CategoryMismatch] = field(default_factory=list)
    warnings: list[Warning_] = field(default_factory=list)
    reference: Optional[str] = None  # eager trace that attributed this side's CUDA-graph replays
    reference_phase: str = ""  # that trace's phase ('' unknown)
    attribution_method: str = ""  # GraphAttribution.method of this side ('' for reports / no replays)
    attribution_confidence: Optional[float] = None  # mean confidence of the replay attribution
    attribution_suspect: bool = False  # reference of another phase, or low confidence: module blocks may be wrong
    steps: Optional[int] = None  # steps (iterations / replays) the side holds, when known

    @property
    def phases(self) -> list[str]:
        if self.kernels is None or "phase" not in self.kernels or not len(self.kernels):
            return []
        return sorted(p for p in self.kernels["phase"].astype(str).unique() if p in PHASES)


def default_label(path: str | os.PathLike) -> str:
    name = Path(path).name
    for suf in (".json.gz", ".json", ".xlsx", ".xlsm"):
        if name.lower().endswith(suf):
            return name[: -len(suf)]
    return name


def _kind_of(path: Path) -> Literal["trace", "report"]:
    low = path.name.lower()
    if low.endswith(TRACE_SUFFIXES):
        return "trace"
    if low.endswith(REPORT_SUFFIXES):
        return "report"
    raise InputError(
        "unknown input type; expected a trace (.json, .json.gz) or a report (.xlsx)", path=path,
    )


def _mismatches(label: str, names: pd.Series, stored: pd.Series, current: pd.Series,
                us: pd.Series) -> list[CategoryMismatch]:
    st = stored.astype(str).str.strip()
    diff = (st != current.astype(str)) & (st != "")
    if not diff.any():
        return []
    sub = pd.DataFrame({"kernel": names[diff], "stored": stored[diff], "current": current[diff], "us": us[diff]})
    agg = sub.groupby(["kernel", "stored", "current"], sort=False, as_index=False)["us"].sum()
    agg = agg.sort_values("us", ascending=False)
    return [CategoryMismatch(side=label, kernel=str(r.kernel), stored=str(r.stored), current=str(r.current),
                             us=float(r.us))
            for r in agg.itertuples(index=False)]


def _recategorize(df: pd.DataFrame, rules: CategoryRules, *, inplace: bool = False) -> pd.DataFrame:
    names = df["name"].astype(str)
    uniq = names.unique()
    mapping = {n: rules.classify(n) for n in uniq}
    out = df if inplace else df.copy()
    out["stored_category"] = out["category"].astype(str) if "category" in out else ""
    out["category"] = names.map(mapping)
    return out


def side_from_frame(df: pd.DataFrame, *, label: str, path: str = "<table>", categories: str | os.PathLike | None = None,
                    recategorize: bool = True) -> Side:
    """A side from a kernel table already in the ``KERNEL_COLUMNS`` shape (Python use, tests)."""
    rules = load_categories(categories)
    k = df.reset_index(drop=True)
    mism: list[CategoryMismatch] = []
    if recategorize:
        k = _recategorize(k, rules)
        mism = _mismatches(label, k["name"], k["stored_category"], k["category"], k["dur_us"])
    return Side(label=label, path=path, kind="table", kernels=k, categories_sha256=rules.sha256, mismatches=mism)


def load_side(path: str | os.PathLike, *, categories: str | os.PathLike | None = None, phase: Optional[str] = None,
              label: Optional[str] = None, purpose: Purpose = "diff",
              reference: str | os.PathLike | None = None) -> Side:
    """Load one side of a comparison (see module doc).

    ``phase`` (prefill | decode) keeps only that phase's kernels; it is an error when the
    side has kernels but none in that phase. ``purpose='budget'`` reads only what the budget
    needs (for an upstream report: the ``GPU Kernels`` sheet). ``reference``: an eager trace of
    the same model that attributes a trace's CUDA-graph replays to modules (traces only).
    """
    if phase:
        _check_phase(phase)
    p = Path(path)
    if not p.exists():
        raise FileMissingError("input not found", path=p, hint="pass a trace (.json/.json.gz) or a report (.xlsx)")
    if p.is_dir():
        raise FileMissingError("input is a directory, expected a trace or report file", path=p)
    lbl = label or default_label(p)
    rules = load_categories(categories)
    if _kind_of(p) == "trace":
        side = _load_trace(p, lbl, categories, rules, reference)
    else:
        if reference:
            raise InputError("a reference trace applies to trace inputs only, not to reports", path=p)
        side = _load_report(p, lbl, rules, purpose)
    if not any(w.code == WarningCode.reserved_category_missing for w in side.warnings):  # traces carry it
        side.warnings[:0] = rules.reserved_warnings()
    if phase:
        side = filter_phase(side, phase)
    return side


def _check_phase(phase: str) -> None:
    if phase not in PHASES:
        raise InputError(f"phase must be {' or '.join(repr(p) for p in PHASES)}, got {phase!r}")


def _load_trace(p: Path, label: str, categories, rules: CategoryRules, reference=None) -> Side:
    res = analyze_trace(p, categories=categories or None, reference_trace=reference or None)
    df = res.kernels
    if df is None:
        raise InputError("the trace analysis returned no kernel table", path=p)
    if "ts_us" in df and len(df):
        df = df.sort_values("ts_us", kind="stable")
    df = df.reset_index(drop=True)
    warnings = [Warning_(code=w.code, message=w.message, count=w.count) for w in getattr(res, "warnings", [])]
    side = Side(label=label, path=str(p), kind="trace", kernels=df, categories_sha256=rules.sha256, warnings=warnings)
    g = res.graph
    if g.graph_kernel_count:
        side.attribution_method = g.method
        side.attribution_confidence = round(float(g.mean_confidence), 3)
    if reference:
        side.reference = str(reference)
        _check_reference(side, res, reference, categories)
    return side


#: replay attribution whose mean confidence is below this is called low in compare's warnings
LOW_CONFIDENCE = 0.6


def _majority_phase(phases) -> str:
    known = [(p.kernel_count, p.phase) for p in phases if p.phase in PHASES]
    return max(known)[1] if known else ""


def _check_reference(side: Side, res, reference, categories) -> None:
    """Warn when the reference trace's phase is not the compared kernels' phase, or the replay
    alignment's confidence is low: the module blocks of this side are then not to be trusted."""
    try:
        ref = analyze_trace(reference, categories=categories or None)
        side.reference_phase = _majority_phase(ref.phases)
    except Exception:  # noqa: BLE001 - the attribution already read it; a second read failing leaves phase unknown
        side.reference_phase = ""
    graph_phase = ""
    k = side.kernels
    if k is not None and len(k) and "graph" in k:
        gp = k.loc[k["graph"].astype(bool), "phase"].astype(str)
        gp = gp[gp.isin(PHASES)]
        graph_phase = gp.mode().iat[0] if len(gp) else ""
    own = graph_phase or _majority_phase(res.phases)
    conf = side.attribution_confidence
    # replays that did not take the reference's phase (traces: a loose alignment teaches no phase) are 'graph'
    loose = bool(k is not None and len(k) and "graph" in k and k["graph"].astype(bool).any() and not graph_phase)
    if side.reference_phase and loose:
        why = (f"{side.label}: the reference trace {reference} is a {side.reference_phase} trace but the replays did "
               f"not align with it closely enough to take its phase (their phase is unknown, 'graph'): it is probably "
               f"of another phase or batch shape, so modules of other kernels are taken for the replays' (alignment "
               f"confidence {conf if conf is not None else 'n/a'}); pass an eager step of the replays' phase, model "
               "and batch, or their graph capture")
    elif side.reference_phase and own and side.reference_phase != own:
        why = (f"{side.label}: the reference trace {reference} is a {side.reference_phase} trace but the compared "
               f"kernels are {own}: replays are attributed by aligning them with the reference's eager kernels, so "
               f"modules of another phase (other shapes, other kernels) are taken for this one's (alignment "
               f"confidence {conf if conf is not None else 'n/a'}); pass an eager {own} trace of the same model and "
               "batch")
    elif conf is not None and conf < LOW_CONFIDENCE:
        why = (f"{side.label}: replay attribution from {reference} has mean confidence {conf:.2f} (under "
               f"{LOW_CONFIDENCE}): module blocks of this side may be wrong")
    else:
        return
    side.attribution_suspect = True
    side.warnings.append(Warning_(code=WarningCode.reference_mismatch, message=why))


def _load_report(p: Path, label: str, rules: CategoryRules, purpose: Purpose) -> Side:
    from mcp_server.reports import is_kernelscope_report, kernel_table, read_report

    if purpose == "budget" and not is_kernelscope_report(p):
        rep = read_report(p, need=("gpu_kernels",))
    else:
        rep = read_report(p, need=("kernels",))
    upstream = rep.source != "kernelscope"
    if purpose == "budget" and upstream:
        gk = _recategorize(rep.gpu_kernels, rules)
        mism = _mismatches(label, gk["name"], gk["stored_category"], gk["category"], gk["total_us"])
        side = Side(label=label, path=str(p), kind="upstream-report", kernels=None, gpu_kernels=gk,
                    gpu_kernels_truncated=rep.gpu_kernels_truncated, categories_sha256=rules.sha256, mismatches=mism)
        if rep.gpu_kernels_truncated:
            side.warnings.append(Warning_(code=WarningCode.gpu_kernels_truncated, message=(
                f"{p}: the upstream 'GPU Kernels' sheet was truncated at its row cap; "
                f"{label}'s budget is a lower bound (the kernels past the cap are missing)")))
        return side
    k = _recategorize(kernel_table(rep), rules, inplace=True)  # kernel_table returns a new frame
    mism = _mismatches(label, k["name"], k["stored_category"], k["category"], k["dur_us"])
    side = Side(label=label, path=str(p), kind="upstream-report" if upstream else "kernelscope-report", kernels=k,
                kernels_truncated=rep.kernels_truncated, categories_sha256=rules.sha256, mismatches=mism)
    if rep.kernels_truncated:
        side.warnings.append(Warning_(code=WarningCode.detail_truncated, message=(
            f"{p}: at least one upstream detail sheet was cut at 1000 rows; {label}'s module totals are lower bounds")))
    if upstream:
        extra = (f"; {rep.residual_us:.1f} us of kernels outside them from 'GPU Kernels'" if rep.residual_us else "")
        side.warnings.append(Warning_(code=WarningCode.upstream_detail, message=(
            f"{p}: upstream report: kernels come from the non-overlapping detail sheets "
            f"({', '.join(rep.covering_sheets) or 'none'}){extra}")))
        if rep.unreconciled:
            want, got = rep.unreconciled
            side.warnings.append(Warning_(code=WarningCode.upstream_unreconciled, message=(
                f"{p}: the detail sheets and 'GPU Kernels' account for {got:.1f} us but the report's Summary says "
                f"{want:.1f} us ({(got - want) / want * 100:+.1f} %): module blocks of {label} are not proven; "
                f"trust the category budget (kernelscope budget), which reads 'GPU Kernels'")))
    return side


def load_sides(a, b, *, categories: str | os.PathLike | None = None, phase: Optional[str] = None,
               purpose: Purpose = "diff", references: Sequence = (None, None)) -> tuple[Side, Side]:
    """Load both sides concurrently (the xlsx parser releases the GIL).
    ``references``: per side, an eager trace that attributes that trace's CUDA-graph replays."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="kernelscope-load") as pool:
        fa, fb = [pool.submit(load_side, x, categories=categories, phase=phase, purpose=purpose, reference=ref)
                  for x, ref in zip((a, b), references)]
        sa, sb = fa.result(), fb.result()
    # both sides read one categories CSV: say once that it lacks a reserved name
    if any(w.code == WarningCode.reserved_category_missing for w in sa.warnings):
        sb.warnings = [w for w in sb.warnings if w.code != WarningCode.reserved_category_missing]
    return sa, sb


def filter_phase(side: Side, phase: str) -> Side:
    _check_phase(phase)
    if side.kernels is None:
        side.warnings.append(Warning_(code=WarningCode.phase_ignored, message=(
            f"{side.path}: phase '{phase}' not applied: the 'GPU Kernels' table has no phase")))
        return side
    k = side.kernels
    if "phase" not in k or not len(k):
        return side
    present = set(k["phase"].astype(str))
    if phase not in present:
        if present <= {""}:
            side.warnings.append(Warning_(code=WarningCode.phase_unknown, message=(
                f"{side.path}: the kernels carry no phase; phase '{phase}' not applied")))
            return side
        if present <= {"", "graph"}:  # graph replays with no evidence of their phase (traces: phase 'graph')
            side.warnings.append(Warning_(code=WarningCode.phase_unknown, message=(
                f"{side.path}: the kernels carry no phase (graph replays with no phase marker and no reference "
                f"that tells it); phase '{phase}' not applied: pass a reference trace (an eager step or the graph "
                "capture) to give the replays a phase")))
            return side
        raise InputError(f"no {phase} kernels (phases present: {', '.join(sorted(x for x in present if x)) or 'none'})",
                         path=side.path, hint="pick the phase the run holds, or leave phase out")
    side.kernels = k[k["phase"].astype(str) == phase].reset_index(drop=True)
    return side


def distinct_labels(a: Side, b: Side, labels: Optional[list[str]] | Optional[tuple[str, str]]) -> None:
    """Apply user labels (two strings) or make default labels distinct."""
    if labels:
        if len(labels) != 2 or not all(str(x).strip() for x in labels):
            raise InputError(f"labels must be two non-empty strings, got {labels!r}")
        a.label, b.label = str(labels[0]), str(labels[1])
    elif a.label == b.label:
        a.label, b.label = f"{a.label} (A)", f"{b.label} (B)"
    for m in a.mismatches:
        m.side = a.label
    for m in b.mismatches:
        m.side = b.label


def count_steps(df: Optional[pd.DataFrame]) -> Optional[int]:
    """Steps a kernel table holds: CUDA-graph replays (distinct launch correlations of replayed
    kernels) plus eager forward calls (distinct root module instances of the other attributed
    kernels). None when the table lacks the columns (upstream reports) or holds nothing."""
    if df is None or not len(df) or "module_path" not in df:
        return None
    graph = df["graph"].astype(bool) if "graph" in df else pd.Series(False, index=df.index)
    n = 0
    if graph.any() and "correlation" in df:
        corr = pd.to_numeric(df.loc[graph, "correlation"], errors="coerce")
        n += int(corr[corr >= 0].nunique())
    eager = df.loc[~graph, "module_path"].astype(str)
    eager = eager[eager != ""]
    n += int(eager.str.split("/").str[0].nunique())
    return n or None


#: column of a per-step kernel table: what one launch counts (1 / steps)
STEP_WEIGHT = "step_weight"

#: per-step kernel counts of two sides "agree" when they differ by less than this share
STEP_AGREE = 0.10


def resolve_per_step(sa: Side, sb: Side, per_step: Optional[bool], warnings: list[Warning_]) -> bool:
    """Fill ``steps`` of both sides; warn when they differ; decide whether totals go per step.

    ``per_step`` None: automatic, on when the step counts differ and the kernels per step agree
    (within 10 %); True / False force it (True needs both counts)."""
    for s in (sa, sb):
        s.steps = count_steps(s.kernels)
    na, nb = sa.steps, sb.steps
    if per_step is False:
        if na and nb and na != nb:
            warnings.append(Warning_(code=WarningCode.step_count_differs, message=(
                f"{sa.label} holds {na} step(s) and {sb.label} {nb}: totals and gaps compare unequal amounts of "
                f"work (per_step=false keeps them whole)")))
        return False
    if not (na and nb):
        if per_step:
            warnings.append(Warning_(code=WarningCode.per_step, message=(
                "per_step ignored: the step count is unknown on "
                f"{', '.join(s.label for s in (sa, sb) if not s.steps)} (reports without the full kernel table)")))
        return False
    assert sa.kernels is not None and sb.kernels is not None  # count_steps returned a number
    ka, kb = len(sa.kernels) / na, len(sb.kernels) / nb
    agree = abs(ka - kb) <= STEP_AGREE * max(ka, kb)
    on = bool(per_step) or (na != nb and agree)
    if na != nb:
        warnings.append(Warning_(code=WarningCode.step_count_differs, message=(
            f"{sa.label} holds {na} step(s) and {sb.label} {nb} ({ka:.0f} vs {kb:.0f} kernels per step): "
            + ("totals below are per step (each side divided by its step count)" if on else
               "the per-step kernel sequences differ, so totals stay whole and compare unequal work; "
               "pass per_step=true to divide anyway, or profile the same number of steps"))))
    if on:
        for s, n in ((sa, na), (sb, nb)):
            assert s.kernels is not None  # count_steps found steps in it
            k = s.kernels.copy()
            k["dur_us"] = k["dur_us"] / n
            k[STEP_WEIGHT] = 1.0 / n  # a launch counts 1/n: launch counts per step too
            s.kernels = k
        warnings.append(Warning_(code=WarningCode.per_step, message=(
            f"per step: {sa.label}'s times and launch counts divided by {na}, {sb.label}'s by {nb}")))
    return on
