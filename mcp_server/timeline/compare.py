"""Before/after comparison of two probe buffers of the same kernel."""
from __future__ import annotations

from typing import Callable

from mcp_server.core.operation import engine
from mcp_server.core.vocab import ProgressFn
from mcp_server.timeline.analysis import _fmt_ns, analyze_path
from mcp_server.timeline.export import write_gantt_compare_png, write_perfetto_compare
from mcp_server.timeline.models import Phase, PhaseDelta, PhaseSide, TimelineAnalysis, TimelineComparison
from mcp_server.timeline.requests import CompareTimelinesRequest


def _side(p: Phase) -> PhaseSide:
    k = len(p.occurrences)
    return PhaseSide(
        occurrences=k, wall_ns=p.total_wall_ns, slowest_ns=p.total_slowest_ns, mean_ns=p.total_mean_ns,
        imbalance=p.imbalance, skew_ns=p.total_skew_ns, wait_ns=round(p.wait_after_mean_ns * k, 1),
        critical_ns=p.critical_ns, last_blocks=p.last_blocks)


#: a phase whose critical-path time changed by less than this share of the longer span did not move...
NOISE_SPAN_SHARE = 0.01
#: ...nor by less than this share of its own critical-path time
NOISE_PHASE_SHARE = 0.02
#: verdict kinds that say something is still to fix
_OPEN_KINDS = ("imbalance", "fixed_straggler", "moving_straggler", "start_skew", "barrier_wait")


def noise_ns(before: TimelineAnalysis, after: TimelineAnalysis, phase_critical_ns: float = 0.0) -> float:
    """Changes below this are noise: 1 % of the longer span, 2 % of the phase's own critical time, or the
    run-to-run spread the overhead files measured (``noise_pct``), whichever is largest."""
    span = max(before.span_ns, after.span_ns, 1)
    pct = max((po.noise_pct or 0.0 for po in (before.probe_overhead, after.probe_overhead) if po is not None),
              default=0.0)
    return max(NOISE_SPAN_SHARE * span, NOISE_PHASE_SHARE * phase_critical_ns, pct / 100.0 * span)


def compare_analyses(before: TimelineAnalysis, after: TimelineAnalysis) -> TimelineComparison:
    b = {p.name: p for p in before.phases}
    a = {p.name: p for p in after.phases}
    order = [p.name for p in before.phases] + [p.name for p in after.phases if p.name not in b]
    rows = [_delta(name, b.get(name), a.get(name)) for name in order]
    d_span = after.span_ns - before.span_ns
    findings: list[tuple[float, str]] = [(abs(d_span) + 1e18, (
        f"span {_fmt_ns(before.span_ns)} -> {_fmt_ns(after.span_ns)} ({_fmt_ns(d_span)}, "
        f"{100 * d_span / before.span_ns:+.1f}%)" if before.span_ns else f"span {_fmt_ns(after.span_ns)}"))]

    def moved(r: PhaseDelta) -> bool:
        crit = max(r.before.critical_ns if r.before else 0, r.after.critical_ns if r.after else 0)
        return r.d_critical_ns is not None and abs(r.d_critical_ns) >= noise_ns(before, after, crit)

    cheaper = [r for r in rows if moved(r) and (r.d_critical_ns or 0) < 0]
    dearer = [r for r in rows if moved(r) and (r.d_critical_ns or 0) > 0]
    findings += _phase_findings(rows, moved)
    quiet = [r.name for r in rows if r.before and r.after and not moved(r)]
    if quiet:
        findings.append((0.5, f"within noise (under {_fmt_ns(noise_ns(before, after))} on the critical path): "
                              f"{', '.join(quiet)}"))
    if cheaper and dearer:
        g = sum(-(r.d_critical_ns or 0) for r in cheaper)
        l = sum(r.d_critical_ns or 0 for r in dearer)
        findings.append((min(g, l) + 1e17, (
            f"cost moved between phases: {', '.join(r.name for r in cheaper)} dropped by {_fmt_ns(g)} while "
            f"{', '.join(r.name for r in dearer)} grew by {_fmt_ns(l)} on the critical path")))
    findings.sort(key=lambda t: -t[0])
    remaining = [v for v in after.verdicts if v.kind in _OPEN_KINDS]
    for v in remaining:
        findings.append((0.25, f"still after the change: [{v.kind}] {v.message}"))
    if not remaining:
        findings.append((0.25, "after the change no imbalance, straggler, skew or wait verdict remains"))
    po_b, po_a = before.probe_overhead, after.probe_overhead
    if po_b or po_a:
        findings.append((0, "both runs carry probes: confirm the change with an unprofiled A/B benchmark before "
                            "accepting it"))
    return TimelineComparison(
        before=before.source, after=after.source, span_before_ns=before.span_ns, span_after_ns=after.span_ns,
        d_span_ns=d_span, phases=rows, findings=[f for _, f in findings],
        warnings=[w.model_copy(update={"message": f"before: {w.message}"}) for w in before.warnings]
        + [w.model_copy(update={"message": f"after: {w.message}"}) for w in after.warnings],
        probe_overhead_before=po_b, probe_overhead_after=po_a)


def _delta(name: str, pb: Phase | None, pa: Phase | None) -> PhaseDelta:
    """One phase before and after; the differences (after - before) when it is on both sides."""
    sb, sa = (_side(pb) if pb else None), (_side(pa) if pa else None)
    d = PhaseDelta(name=name, before=sb, after=sa)
    if sb and sa:
        for f, digits in (("wall_ns", None), ("slowest_ns", None), ("mean_ns", 1), ("imbalance", 4),
                          ("skew_ns", None), ("wait_ns", 1), ("critical_ns", None)):
            v = getattr(sa, f) - getattr(sb, f)
            setattr(d, f"d_{f}", v if digits is None else round(v, digits))
    return d


def _phase_findings(rows: list[PhaseDelta], moved: Callable[[PhaseDelta], bool]) -> list[tuple[float, str]]:
    """Per phase (rank, text): new or gone, occurrences that differ, and what moved (or its imbalance)."""
    findings: list[tuple[float, str]] = []
    for r in rows:
        rb, ra = r.before, r.after
        if rb is None or ra is None:  # a phase on one side only (compare_analyses gives at least one)
            if ra is not None:
                findings.append((ra.critical_ns, f"{r.name}: new in after ({_fmt_ns(ra.critical_ns)} on the "
                                                 "critical path)"))
            elif rb is not None:
                findings.append((rb.critical_ns, f"{r.name}: gone in after (was {_fmt_ns(rb.critical_ns)} on "
                                                 "the critical path)"))
            continue
        # both sides present: _delta set every d_* field
        if rb.occurrences != ra.occurrences:
            findings.append((abs(r.d_critical_ns or 0), f"{r.name}: occurrences {rb.occurrences} -> "
                                                        f"{ra.occurrences}: totals are not like for like"))
        if moved(r) or abs(r.d_imbalance or 0) >= 0.1:
            dc = r.d_critical_ns or 0
            how = f"{'dropped' if dc < 0 else 'grew'} by {_fmt_ns(abs(dc))}" if moved(r) else "unchanged within noise"
            findings.append((abs(dc), (
                f"{r.name}: critical {_fmt_ns(rb.critical_ns)} -> {_fmt_ns(ra.critical_ns)} "
                f"({how}); wall {_fmt_ns(r.d_wall_ns or 0)}, "
                f"slowest {_fmt_ns(r.d_slowest_ns or 0)}, mean {_fmt_ns(r.d_mean_ns or 0)}; "
                f"imbalance {rb.imbalance:.2f}x -> {ra.imbalance:.2f}x; "
                f"skew {_fmt_ns(r.d_skew_ns or 0)}; waits {_fmt_ns(r.d_wait_ns or 0)}")))
    return findings


@engine(CompareTimelinesRequest)
def compare_timelines(req: CompareTimelinesRequest, progress: ProgressFn | None = None) -> TimelineComparison:
    """Analyse two buffers (same event names unless ``after_event_names`` is given) and compare phases.

    ``overhead_path`` / ``after_overhead_path``: probe-timing files of each run (default
    ``<buffer stem>.overhead.json`` beside each buffer). ``png_path``: one Gantt chart, before above
    after on one time axis; ``perfetto_path``: one Perfetto JSON holding both runs as two process groups.
    """
    if progress:
        progress(0, 2, "before")
    dec_b, before = analyze_path(req.before_path, req.event_names, tag_layout=req.tag_layout,
                                 overhead_path=req.overhead_path)
    if progress:
        progress(1, 2, "after")
    after_names = req.after_event_names if req.after_event_names is not None else req.event_names
    dec_a, after = analyze_path(req.after_path, after_names, tag_layout=req.tag_layout,
                                overhead_path=req.after_overhead_path)
    res = compare_analyses(before, after)
    runs = [(dec_b, before, "before"), (dec_a, after, "after")]
    if req.png_path is not None:
        res.outputs["png"] = str(write_gantt_compare_png(runs, req.png_path))
    if req.perfetto_path is not None:
        res.outputs["perfetto"] = str(write_perfetto_compare(runs, req.perfetto_path))
    if progress:
        progress(2, 2, "done")
    return res
