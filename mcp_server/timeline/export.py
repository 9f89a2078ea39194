"""Exports of a decoded timeline: Perfetto / Chrome trace JSON and a Gantt PNG.

Perfetto: one track (thread) per writer, named ``block B group G``; tracks grouped into one
process per SM when the tags carry SM ids, else one process ``blocks``. Complete events
(``ph: X``) for intervals, thread-scoped instants (``ph: i``) for instants; timestamps in us
from the buffer's earliest record. Open it at https://ui.perfetto.dev or chrome://tracing.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Union

import numpy as np

from mcp_server.core.atomic import atomic_target, atomic_write_bytes
from mcp_server.core.models import Warning_
from mcp_server.core.vocab import WarningCode
from mcp_server.timeline.decode import Decoded
from mcp_server.timeline.models import IMBALANCE_RATIO, Phase, TimelineAnalysis


def _names(res: TimelineAnalysis) -> dict[int, str]:
    m = {p.event_id: p.name for p in res.phases}
    m.update({i.event_id: i.name for i in res.instants})
    return m


MAX_PERFETTO_INTERVALS = 2_000_000  # the Perfetto UI struggles well before this; a JSON of ~250 MB


def perfetto_events(dec: Decoded, res: TimelineAnalysis, keep: "np.ndarray | None" = None) -> list[dict]:
    """Chrome/Perfetto trace events; ``keep``: indices of the intervals to write (default all)."""
    names = _names(res)
    ng = dec.ngroups
    lanes_used = np.unique(np.concatenate([dec.lane, dec.instant_lane]).astype(np.int64))
    ev: list[dict] = []
    pids: dict[int, str] = {}
    lane_pid = {}
    for lane in lanes_used.tolist():
        sm = int(dec.lane_sm[lane])  # -1: unknown
        pid = lane_pid[lane] = sm + 1 if sm >= 0 else 0
        pids.setdefault(pid, f"SM {sm}" if sm >= 0 else "blocks")
        b, g = divmod(lane, ng)
        ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": lane,
                   "args": {"name": f"block {b}" + (f" group {g}" if ng > 1 else "")}})
        ev.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": lane, "args": {"sort_index": lane}})
    for pid, pname in pids.items():
        ev.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": pname}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}})
    sel = slice(None) if keep is None else keep
    for e, lane, occ, b, en in zip(dec.event[sel].tolist(), dec.lane[sel].tolist(), dec.occurrence[sel].tolist(),
                                   dec.begin[sel].tolist(), dec.end[sel].tolist()):
        ev.append({"ph": "X", "name": names.get(e, f"event{e}"), "cat": "phase", "pid": lane_pid[lane],
                   "tid": lane, "ts": b / 1000.0, "dur": (en - b) / 1000.0,
                   "args": {"occurrence": occ, "block": lane // ng, "group": lane % ng}})
    for e, lane, t in zip(dec.instant_event.tolist(), dec.instant_lane.tolist(), dec.instant_ts.tolist()):
        ev.append({"ph": "i", "s": "t", "name": names.get(e, f"event{e}"), "cat": "instant",
                   "pid": lane_pid[lane], "tid": lane, "ts": t / 1000.0})
    return ev


def write_perfetto(dec: Decoded, res: TimelineAnalysis, path: Union[str, os.PathLike], *,
                   max_intervals: int = MAX_PERFETTO_INTERVALS) -> Path:
    """Write the Perfetto JSON. Past ``max_intervals`` only the earliest intervals are written and
    a ``perfetto_capped`` warning is added to ``res``."""
    total = int(dec.event.size)
    keep = None
    if total > max_intervals:
        keep = np.sort(np.argsort(dec.begin, kind="stable")[:max_intervals])
        res.warnings.append(Warning_(code=WarningCode.perfetto_capped, count=total - max_intervals, message=(
            f"Perfetto export holds the earliest {max_intervals:,} of {total:,} intervals (the viewer does "
            "not cope with more); the analysis used all of them")))
    doc = {
        "traceEvents": perfetto_events(dec, res, keep),
        "displayTimeUnit": "ns",
        "otherData": {"source": res.source, "nblocks": res.nblocks, "ngroups": res.ngroups,
                      "tag_layout": res.tag_layout, "producer": "kernelscope timeline",
                      "intervals_total": total, "intervals_written": total if keep is None else int(keep.size)},
    }
    return atomic_write_bytes(path, json.dumps(doc, separators=(",", ":")).encode(), what="Perfetto trace")


def outlier_blocks(phase: Phase) -> list[int]:
    """Blocks of ``phase`` whose mean duration is at least the imbalance threshold times the block mean."""
    floor = IMBALANCE_RATIO * phase.block_mean_ns
    return [b for b, v in zip(phase.slowest_blocks, phase.slowest_block_mean_ns) if phase.block_mean_ns > 0 and
            v >= floor]


def gantt_title(res: TimelineAnalysis, shown_note: str = "") -> str:
    """The chart title: layout and span, then the most imbalanced phase with its outlier blocks only
    (blocks at or beyond the imbalance threshold; none named when no block is)."""
    title = (f"{Path(res.source).name}: {res.nblocks} blocks x {res.ngroups} groups, span "
             f"{res.span_ns / 1000:.1f} us{shown_note}")
    worst = _imbalanced(res)
    if worst is not None:
        out = outlier_blocks(worst)
        title += f"; {worst.name} imbalance {worst.imbalance:.2f}x"
        if out:
            more = f" +{len(out) - 5} more" if len(out) > 5 else ""
            title += f" (outlier blocks {', '.join(map(str, out[:5]))}{more})"
    return title


def _draw_gantt(ax, dec: Decoded, res: TimelineAnalysis, colour: dict, max_lanes: int, label: str = "") -> None:
    lanes = np.unique(dec.lane)
    shown_note = ""
    if lanes.size > max_lanes:
        shown_note = f" (first {max_lanes} of {lanes.size} writers shown)"
        lanes = lanes[:max_lanes]
    row = {int(l): i for i, l in enumerate(lanes.tolist())}
    sel = np.isin(dec.lane, lanes)
    ys = np.array([row[int(l)] for l in dec.lane[sel].tolist()])
    x0 = dec.begin[sel] / 1000.0
    w = (dec.end[sel] - dec.begin[sel]) / 1000.0
    cols = [colour[int(e)] for e in dec.event[sel].tolist()]
    ax.barh(ys, w, left=x0, height=0.85, color=cols, linewidth=0)
    if dec.instant_event.size:
        isel = np.isin(dec.instant_lane, lanes)
        iy = [row[int(l)] for l in dec.instant_lane[isel].tolist()]
        ax.scatter(dec.instant_ts[isel] / 1000.0, iy, marker="|", s=12, color="black", linewidths=0.8)
    ng = dec.ngroups
    ax.set_ylim(len(row) - 0.5, -0.5)
    ax.set_xlabel("time (us from the first record)")
    ax.set_ylabel("block" + (f" ({ng} rows each: groups 0-{ng - 1})" if ng > 1 else ""))
    worst = _imbalanced(res)
    ticks, outliers = block_ticks([int(x) for x in lanes.tolist()], ng, set(outlier_blocks(worst)) if worst else set())
    ax.set_yticks([t for t, _b in ticks])
    ax.set_yticklabels([str(b) for _t, b in ticks], fontsize=7)
    for lab, (_t, b) in zip(ax.get_yticklabels(), ticks):
        if b in outliers:  # the blocks the title names, marked where they are
            lab.set_color("red")
            lab.set_fontweight("bold")
    ax.set_title((f"{label}: " if label else "") + gantt_title(res, shown_note), fontsize=9, loc="left")
    ax.grid(axis="x", alpha=0.3)


def _imbalanced(res: TimelineAnalysis) -> Phase | None:
    """The most imbalanced phase when it is at or beyond the imbalance threshold."""
    worst = max(res.phases, key=lambda p: p.imbalance, default=None)
    return worst if worst is not None and worst.imbalance >= IMBALANCE_RATIO else None


def block_ticks(lanes: list[int], ngroups: int, outliers: set[int] = frozenset(),  # type: ignore[assignment]
                most: int = 24) -> tuple[list[tuple[int, int]], set[int]]:
    """Y ticks of a Gantt chart whose rows are writers (block * ngroups + group): (row, block) at the first row
    of every k-th block, k a round step (1, 2, 5, 10, 20, 50, ...) giving at most ``most`` ticks, plus the
    outlier blocks (a regular tick too close to one is dropped). Block numbers, never ``block.group``."""
    first: dict[int, int] = {}
    for i, lane in enumerate(lanes):
        first.setdefault(lane // ngroups, i)
    blocks = sorted(first)
    step = next((s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000) if len(blocks) / s <= most), 5000)
    shown = {b for b in outliers if b in first}
    regular = [b for b in blocks if b % step == 0 and all(abs(b - o) * 2 >= step for o in shown)]
    return sorted((first[b], b) for b in set(regular) | shown), shown


def _colours(plt, runs) -> tuple[dict, dict]:
    events = sorted({int(e) for dec, _res, _l in runs for e in dec.event.tolist()})
    cmap = plt.get_cmap("tab10" if len(events) <= 10 else "tab20")
    names: dict[int, str] = {}
    for _dec, res, _l in runs:
        for k, v in _names(res).items():
            names.setdefault(k, v)
    return {e: cmap(i % cmap.N) for i, e in enumerate(events)}, {e: names.get(e, f"event{e}") for e in events}


def _save(fig, path) -> Path:
    """Write the figure (tests/test_plots.py looks at the drawn figure here, before it is written)."""
    with atomic_target(path, what="Gantt PNG", suffix=".png") as tmp:
        fig.savefig(tmp, format="png")
    return Path(path)


def write_gantt_png(dec: Decoded, res: TimelineAnalysis, path: Union[str, os.PathLike], *,
                    max_lanes: int = 512) -> Path:
    """Gantt chart: one row per writer (block/group), bars coloured by phase, instants as ticks."""
    return write_gantt_compare_png([(dec, res, "")], path, max_lanes=max_lanes)


def write_gantt_compare_png(runs, path: Union[str, os.PathLike], *, max_lanes: int = 512) -> Path:
    """One Gantt panel per (decoded, analysis, label), stacked on a shared time axis."""
    from mcp_server.reports import pyplot

    plt = pyplot()
    from matplotlib.patches import Patch

    colour, names = _colours(plt, runs)
    heights = [max(3.0, min(14.0, 0.035 * min(np.unique(d.lane).size, max_lanes) + 1.5)) for d, _r, _l in runs]
    fig, axes = plt.subplots(len(runs), 1, figsize=(13, sum(heights)), dpi=110, sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    try:
        for ax, (dec, res, label) in zip(axes[:, 0], runs):
            _draw_gantt(ax, dec, res, colour, max_lanes, label)
        # above the chart, right of the title: inside the axes it covered the last bars
        axes[0, 0].legend(handles=[Patch(color=colour[e], label=names[e]) for e in colour],
                          loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=7, ncol=min(len(colour), 6),
                          frameon=False, borderaxespad=0.2)
        fig.tight_layout()
        return _save(fig, path)
    finally:
        plt.close(fig)


def write_perfetto_compare(runs, path: Union[str, os.PathLike]) -> Path:
    """One Perfetto JSON with each (decoded, analysis, label) as its own process group (pids offset)."""
    ev: list[dict] = []
    for k, (dec, res, label) in enumerate(runs):
        off = (k + 1) * 100_000
        for e in perfetto_events(dec, res):  # fresh dicts: changed in place
            e["pid"] = e["pid"] + off
            if e.get("name") == "process_name":
                e["args"] = {"name": f"{label} {e['args']['name']}"}
            if e.get("name") == "process_sort_index":
                e["args"] = {"sort_index": e["pid"]}
            ev.append(e)
    doc = {"traceEvents": ev, "displayTimeUnit": "ns",
           "otherData": {"producer": "kernelscope timeline compare",
                         "runs": [{"label": l, "source": r.source} for _d, r, l in runs]}}
    return atomic_write_bytes(path, json.dumps(doc, separators=(",", ":")).encode(), what="Perfetto trace")
