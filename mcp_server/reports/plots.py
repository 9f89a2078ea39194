"""Where plotting starts: matplotlib's pyplot with a file-only backend, chosen once per process.

Engines draw figures only to files (PNG, SVG). The first call selects the non-interactive
``Agg`` backend, unless the host process already imported pyplot (a notebook, a script that
plots): its backend is left alone, since saving figures works with any backend.
"""
from __future__ import annotations

import sys
import threading
from typing import Any

_lock = threading.Lock()
_started = False


def pyplot() -> Any:
    """``matplotlib.pyplot``, imported on first use with the backend chosen as the module says."""
    global _started
    with _lock:
        if not _started:
            import matplotlib

            if "matplotlib.pyplot" not in sys.modules:
                matplotlib.use("Agg")
            _started = True
    import matplotlib.pyplot as plt

    return plt


#: where a point's label may go, in points from the point (tried in order): right, above, below, left, further out
_OFFSETS = [(5, 4), (5, -11), (-5, 4), (-5, -11), (5, 14), (5, -21), (-5, 14), (-5, -21), (5, 26), (5, -33),
            (-5, 26), (-5, -33), (5, 38), (5, -45)]


def place_labels(ax: Any, points: list[tuple], *, fontsize: float = 7, color: str = "black") -> list[Any]:
    """Annotate each (x, y, text[, colour]) of ``ax`` beside its point where the label overlaps no label placed before
    it and stays inside the axes (points given first are placed first: pass the important ones first).
    Labels that find no free spot take the least crowded one and get a thin leader line."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    taken: list[Any] = []
    box = ax.get_window_extent(renderer)
    out = []
    for x, y, text, *rest in points:
        tint = rest[0] if rest else color  # the point's colour: which label is whose, where points touch
        best = None
        for dx, dy in _OFFSETS:
            ann = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                              color=tint, ha="left" if dx >= 0 else "right", va="bottom" if dy >= 0 else "top")
            bb = ann.get_window_extent(renderer).expanded(1.04, 1.15)
            hits = sum(bb.overlaps(t) for t in taken)
            inside = box.contains(bb.x0, bb.y0) and box.contains(bb.x1, bb.y1)
            score = hits * 10 + (0 if inside else 5) + (abs(dy) > 14)
            if best is None or score < best[0]:
                if best is not None:
                    best[1].remove()
                best = (score, ann, bb, (dx, dy))
            else:
                ann.remove()
            if score == 0:
                break
        assert best is not None
        score, ann, bb, (dx, dy) = best
        if abs(dy) > 14 or score:
            ann.remove()
            ann = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                              color=tint, ha="left" if dx >= 0 else "right", va="bottom" if dy >= 0 else "top",
                              arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "grey", "shrinkA": 0, "shrinkB": 3})
        taken.append(bb)
        out.append(ann)
    return out
