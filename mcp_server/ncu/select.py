"""Pick the kernel worth work: time share x headroom to its roof; a Markdown report and a roofline PNG.

``headroom`` is ``1 - max(SM throughput, memory throughput) / 100``: the distance to the
nearer speed-of-light roof (ncu's own position of a kernel). Kernels under ``min_share`` of
the profile's kernel time are skipped; kernels classed ``unknown`` cannot be ranked. The
answer names the candidate, its diagnosis, the kinds of change that fit its class and those
that do not (no weight quantization for an L2-resident or compute-bound kernel), and why
each other kernel lost.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from mcp_server.core.operation import engine
from mcp_server.ncu.classify import classify_bottleneck
from mcp_server.ncu.models import Classification, ClassifiedKernel, Ranked, Selection
from mcp_server.ncu.raw import warn
from mcp_server.ncu.requests import SelectRequest

QUANT = "weight quantization (fewer bytes per weight)"


def headroom(k: ClassifiedKernel) -> Optional[float]:
    sm, mem = k.metrics.get("sm_throughput_pct"), k.metrics.get("memory_throughput_pct")
    if sm is None or mem is None:
        return None
    return max(0.0, 1.0 - max(sm, mem) / 100.0)


def change_kinds(k: ClassifiedKernel) -> tuple[list[str], list[str]]:
    """Kinds of change that fit the kernel's class, and those that do not (with why)."""
    b = k.bottleneck
    cls, lim = b.class_, b.limiter
    fits: list[str] = []
    nope: list[str] = []
    if cls == "compute_bound":
        if lim == "tensor":
            fits += ["lower-precision matrix math (FP8) where accuracy allows",
                     "remove wasted tensor work (padded rows, tiles at M=1)", "fuse the epilogue"]
            nope += [f"{QUANT}: the kernel is compute-bound on the tensor pipe, not on bytes",
                     "memory-access tuning: memory is not the roof"]
        else:
            fits += ["move the math onto tensor cores (tl.dot / mma)",
                     "fewer instructions per element (vectorise, unpack several values per instruction)"]
            nope += [f"{QUANT}: the kernel is bound on the {lim or 'compute'} pipe, extra unpacking makes it worse"]
    elif cls == "memory_bound":
        if lim == "dram" and not b.l2_resident:
            fits += [QUANT, "fuse producer/consumer to skip an HBM round trip",
                     "more loads in flight (deeper pipelining)"]
            nope += ["math optimisation: the pipes are not the roof"]
        else:
            fits += ["better reuse in shared memory / registers (larger tiles, swizzled block order)",
                     "fusion with neighbouring kernels"]
            nope += [f"{QUANT}: the bytes come from {lim or 'cache'}, not DRAM"]
    elif cls == "latency_bound":
        if lim == "small_grid":
            fits += ["fuse with neighbouring kernels", "batch more work per launch", "split-K / stream-K",
                     "CUDA graphs to cut launch overhead"]
        elif lim == "occupancy":
            fits += [f"raise occupancy (limited by {k.occupancy_limiter or 'launch limits'})",
                     "more independent work per warp"]
        else:
            fits += ["more independent work per warp / prefetching", "fusion with neighbouring kernels"]
        nope += ["math optimisation: no pipe is busy"]
        if b.l2_resident:
            nope += [f"{QUANT}: the weights are L2-resident, DRAM bytes are not the bottleneck"]
        elif b.l2_resident is None:
            nope += [f"{QUANT}: not before a warm (--cache-control none) profile says the bytes come from DRAM"]
    elif cls == "balanced":
        fits += ["fusion (less work on both sides)", "lower precision end to end"]
    return fits, nope


def rank(c: Classification, min_share: float) -> tuple[Optional[ClassifiedKernel], list[Ranked]]:
    rows: list[Ranked] = []
    scored: list[tuple[float, ClassifiedKernel]] = []
    for k in c.kernels:
        h = headroom(k)
        score = (k.time_share * h) if h is not None else 0.0
        why = None
        if k.bottleneck.class_ == "unknown" or h is None:
            why = "cannot rank: speed-of-light metrics missing (class unknown)"
        elif k.time_share < min_share:
            why = f"time share {k.time_share:.1%} is under the {min_share:.0%} threshold"
        else:
            scored.append((score, k))
        rows.append(Ranked(id=k.id, short_name=k.short_name, nvtx=k.nvtx, time_share=k.time_share, headroom=h or 0.0,
                           score=score, bottleneck_class=k.bottleneck.class_, limiter=k.bottleneck.limiter,
                           why_not=why))
    scored.sort(key=lambda t: -t[0])
    best = scored[0][1] if scored else None
    for r in rows:
        if r.why_not is None and best is not None and r.id != best.id:
            r.why_not = (f"score {r.score:.3f} (share {r.time_share:.1%} x headroom {r.headroom:.0%}) below the "
                         f"candidate's {scored[0][0]:.3f}")
    rows.sort(key=lambda r: -r.score)
    return best, rows


@engine(SelectRequest)
def select_candidate(req: SelectRequest) -> Selection:
    """Classify the kernels of a profile and pick the one worth work."""
    min_share, md_path, png_path = req.min_share, req.md_path, req.png_path
    c = classify_bottleneck(req.path, gpu=req.gpu, cache_control=req.cache_control)
    best, rows = rank(c, min_share)
    warnings = list(c.warnings)
    fits, nope = change_kinds(best) if best is not None else ([], [])
    if best is None:
        warnings.append(warn("no_candidate", f"no kernel reaches {min_share:.0%} of kernel time with a known class"))
    sel = Selection(source=c.source, gpu=c.gpu, candidate=best, fits=fits, does_not_fit=nope, ranking=rows,
                    min_share=min_share, warnings=warnings)
    if md_path:
        from mcp_server.ncu.render import write_markdown

        sel.md_path = str(write_markdown(sel, md_path))
    if png_path:
        sel.png_path = str(write_roofline(c, png_path, highlight=best.id if best else None))
    return sel


def write_roofline(c: Classification, out: str, highlight: Optional[int] = None) -> Path:
    """Two panels: the classic roofline (kernels with FLOPs and DRAM bytes) and the speed-of-light plane."""
    from mcp_server.core.atomic import atomic_write_bytes, check_output_path

    target = check_output_path(out, "roofline PNG")
    import io

    from mcp_server.reports import place_labels, pyplot

    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.5))
    # one colour per kernel in both panels (the default cycle, in the classification's order)
    colour = {k.id: f"C{i % 10}" for i, k in enumerate(c.kernels)}
    pts = _roofline_panel(ax1, c, colour, highlight)
    sol = _speed_of_light_panel(plt, ax2, c, colour, highlight)
    fig.tight_layout()
    # labels last, with the layout fixed: each beside its point where it overlaps no other label (kernels
    # at the same spot, e.g. two DRAM-bound ones at ~90 % memory, used to print on top of each other)
    by_share = sorted(c.kernels, key=lambda k: -k.time_share)
    order = {k.id: i for i, k in enumerate(by_share)}
    place_labels(ax1, [(x, y, k.nvtx or k.short_name[:24], colour[k.id])
                       for k, x, y in sorted(pts, key=lambda p: order[p[0].id])])
    place_labels(ax2, [(mem, sm, f"{k.nvtx or k.short_name[:24]} ({k.bottleneck.class_})", colour[k.id])
                       for k, mem, sm in sorted(sol, key=lambda p: order[p[0].id])])
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return atomic_write_bytes(target, buf.getvalue(), "roofline PNG")


def _roofline_panel(ax: Any, c: Classification, colour: dict[int, str],
                    highlight: Optional[int]) -> list[tuple[ClassifiedKernel, float, float]]:
    """The classic roofline: achieved FLOP/s against arithmetic intensity under the GPU's roofs; the points."""
    spec = c.gpu_spec or {}

    def val(key: str) -> Optional[float]:
        v = spec.get(key)
        return None if v is None else v.value

    bw = (val("hbm_tb_s") or 0) * 1e12
    peaks: list[tuple[str, float]] = []
    bf16, fp32 = val("bf16_tflops"), val("fp32_tflops")
    if bf16:
        peaks.append((f"bf16 matrix {bf16:.0f} TFLOP/s", bf16 * 1e12))
    if fp32:
        peaks.append((f"fp32 {fp32:.0f} TFLOP/s", fp32 * 1e12))
    pts = []
    for k in c.kernels:
        if k.flops and k.dram_bytes and k.duration_ns.mean:
            pts.append((k, k.flops / k.dram_bytes, k.flops / (k.duration_ns.mean * 1e-9)))
    xs = [p[1] for p in pts] or [1.0]
    lo, hi = min(xs + [0.01]) / 4, max(xs + [1000.0]) * 4
    if bw:
        import numpy as np

        grid = np.logspace(np.log10(lo), np.log10(hi), 200)
        for label, peak in peaks:
            ax.plot(grid, np.minimum(peak, grid * bw), label=f"{label}, HBM {bw / 1e12:.1f} TB/s")
    for k, x, y in pts:
        ax.scatter([x], [y], s=60 if k.id == highlight else 30, zorder=3, color=colour[k.id],
                   edgecolors="red" if k.id == highlight else "none")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / DRAM byte)")
    ax.set_ylabel("achieved FLOP/s")
    src = spec["hbm_tb_s"].source if "hbm_tb_s" in spec else "none"
    ax.set_title(f"roofline ({c.gpu or 'unknown GPU'}, memory roof: {src})"
                 + ("" if pts else "\nno kernel has FLOP and DRAM-byte counters"), fontsize=9)
    if peaks and bw:
        ax.legend(fontsize=7, loc="upper left")
    return pts


def _speed_of_light_panel(plt: Any, ax: Any, c: Classification, colour: dict[int, str],
                          highlight: Optional[int]) -> list[tuple[ClassifiedKernel, float, float]]:
    """SM throughput against memory throughput (% of peak), point size the time share; the points."""
    sol = []
    for k in c.kernels:
        sm, mem = k.metrics.get("sm_throughput_pct"), k.metrics.get("memory_throughput_pct")
        if sm is None or mem is None:
            continue
        ax.scatter([mem], [sm], s=20 + 400 * k.time_share, alpha=0.7, color=colour[k.id],
                   edgecolors="red" if k.id == highlight else "none")
        sol.append((k, mem, sm))
    ax.axvline(80, color="grey", ls="--", lw=0.8)
    ax.axhline(80, color="grey", ls="--", lw=0.8)
    ax.add_patch(plt.Rectangle((0, 0), 60, 60, color="orange", alpha=0.08))
    ax.text(2, 55, "latency-bound (both < 60%)", fontsize=7)
    ax.set_xlim(0, 105)
    ax.set_ylim(0, 105)
    ax.set_xlabel("memory throughput, % of peak (max of DRAM/L2/L1)")
    ax.set_ylabel("SM throughput, % of peak")
    ax.set_title("speed of light (point size: time share; dashed: 80% roof)", fontsize=9)
    return sol
