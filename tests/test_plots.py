"""The plots read: roofline labels do not overlap (bmm_hbm and elementwise sat on each other at ~90 % memory),
the Gantt legend sits outside the bars it covered, and its y ticks are block numbers (they read 5.1, 16.1)."""
from __future__ import annotations

from pathlib import Path

from conftest import FIXTURES

from mcp_server.ncu.classify import classify_bottleneck
from mcp_server.reports import place_labels, pyplot

NCU = FIXTURES / "ncu" / "targets_none.ncu-rep.xz"
TL = FIXTURES / "timeline"
EVENTS = ["load", "compute", "reduce", "store", "done"]


def test_speed_of_light_labels_of_touching_points_do_not_overlap():
    c = classify_bottleneck(str(NCU))
    pts = [(k.metrics["memory_throughput_pct"], k.metrics["sm_throughput_pct"], f"{k.nvtx} ({k.bottleneck.class_})")
           for k in sorted(c.kernels, key=lambda k: -k.time_share)]
    near = {p[2].split()[0] for p in pts if 85 < p[0] < 95 and p[1] < 10}
    assert near == {"bmm_hbm", "elementwise"}  # the two kernels at the same spot on the H200
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    try:
        ax.set_xlim(0, 105)
        ax.set_ylim(0, 105)
        fig.tight_layout()
        anns = place_labels(ax, pts)
        r = fig.canvas.get_renderer()
        boxes = [a.get_window_extent(r) for a in anns]
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                assert not boxes[i].overlaps(boxes[j]), (anns[i].get_text(), anns[j].get_text())
    finally:
        plt.close(fig)


def test_select_writes_the_roofline_png(tmp_path):
    from mcp_server.ncu.select import select_candidate

    out = tmp_path / "roofline.png"
    sel = select_candidate(str(NCU), png_path=str(out))
    assert sel.png_path == str(out) and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gantt_ticks_are_blocks_and_the_legend_is_outside_the_bars(tmp_path, monkeypatch):
    from mcp_server.timeline import analyze_timeline, export
    from mcp_server.timeline.decode import decode_buffer

    seen = {}
    save = export._save

    def keep(fig, path):
        r = fig.canvas.get_renderer()
        ax = fig.axes[0]
        seen["legend"] = ax.get_legend().get_window_extent(r)
        seen["plot"] = ax.get_window_extent(r)
        seen["ticks"] = [t.get_text() for t in ax.get_yticklabels()]
        seen["red"] = [t.get_text() for t in ax.get_yticklabels() if t.get_color() == "red"]
        return save(fig, path)

    monkeypatch.setattr(export, "_save", keep)
    res = analyze_timeline(str(TL / "imbalanced_probe.bin"), EVENTS, png_path=str(tmp_path / "g.png"))
    assert Path(res.outputs["png"]).read_bytes()[:4] == b"\x89PNG"
    assert not seen["legend"].overlaps(seen["plot"])  # above the bars, not over the last ones
    assert all(t.isdigit() for t in seen["ticks"]) and "5" in seen["ticks"]  # block numbers, not 5.1
    assert seen["red"] == ["5", "37", "90"]  # the outlier blocks the title names
    dec = decode_buffer(str(TL / "imbalanced_probe.bin"))
    ticks, out = export.block_ticks(sorted({int(x) for x in dec.lane.tolist()}), dec.ngroups, {5, 37, 90})
    blocks = [b for _row, b in ticks]
    assert out == {5, 37, 90} and blocks[:3] == [0, 5, 10] and len(blocks) <= 24 + 3 and 40 not in blocks
