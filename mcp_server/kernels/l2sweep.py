"""The L2 barrier sweep: BF16 vs INT4 vs FP8 latency against weight bytes, across the L2 size.

Shape: the DeepSeek W_UK head matrix (K = 128, N = 512, 128 KiB BF16 per head) at decode
M = 1, with the BMM batch H chosen so the BF16 weights span a few MB to ~512 MB. Every
format is timed *warm* (one weight set, re-read by every launch: L2-resident while it fits);
BF16 is also timed *cold* (rotated sets). The effective L2 residency boundary is where warm
BF16 stops beating cold BF16: the largest size at which warm is still at least
``RESIDENT_GAIN`` faster, interpolated between the two sizes that straddle it. The crossover
is the smallest size from which each quantized format stays faster than BF16 (warm).
Pydantic-free; ``engine.l2_sweep`` (the ``sweep_l2`` tool) wraps it.
"""
from __future__ import annotations

#: BMM batch sizes (heads of 128 KiB BF16): 4 MB .. 537 MB, dense around the 60 MB L2.
DEFAULT_HEADS = (32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448, 512,
                 640, 768, 1024, 1536, 2048, 3072, 4096)
K, N = 128, 512
RESIDENT_GAIN = 0.15


def run_l2_sweep(heads=DEFAULT_HEADS, M: int = 1, configs=None, progress=None,
                 deadline: float | None = None) -> dict:
    import time

    from mcp_server.kernels import bench, tuning

    pts = []
    timed_out = False
    for i, H in enumerate(heads):
        if deadline is not None and time.monotonic() > deadline:
            timed_out = True
            break
        def pick(kind, M, K, N, H=H):
            return configs(kind, M, K, N) if configs else tuning.config_for(kind, M, K, N, H)
        warm = bench.ShapeBuffers(H, M, K, N, "warm")
        bf = bench.time_launches(warm.bf16_fns())
        i4 = bench.time_launches(warm.int4_fns(pick("int4", M, K, N)))
        f8 = bench.time_launches(warm.fp8_fns(pick("fp8", M, K, N)))
        del warm
        cold = bench.ShapeBuffers(H, M, K, N, "cold")
        bc = bench.time_launches(cold.bf16_fns())
        del cold
        mb = 2 * H * K * N / 1e6
        pts.append({"H": H, "weight_mb": round(mb, 3), "bf16_us": round(bf, 3), "int4_us": round(i4, 3),
                    "fp8_us": round(f8, 3), "bf16_cold_us": round(bc, 3),
                    "int4_speedup": round(bf / i4, 3), "fp8_speedup": round(bf / f8, 3),
                    "warm_over_cold": round(bf / bc, 3)})
        if progress:
            progress(i + 1, len(heads), f"{mb:.1f} MB")
    info = bench.device_info()
    return {"shape": {"K": K, "N": N, "M": M}, "device": info, "points": pts, "timed_out": timed_out,
            "l2_mb": info["l2_bytes"] / 1e6, **analyse(pts)}


def analyse(pts: list[dict]) -> dict:
    """Effective L2 boundary (MB) and the INT4 / FP8 crossovers (MB) of a sweep's points."""
    boundary = None
    lim = 1.0 - RESIDENT_GAIN
    resident = [p for p in pts if p["warm_over_cold"] <= lim]
    if resident:
        last = max(resident, key=lambda p: p["weight_mb"])
        after = [p for p in pts if p["weight_mb"] > last["weight_mb"]]
        if after:
            nxt = min(after, key=lambda p: p["weight_mb"])
            r0, r1 = last["warm_over_cold"], nxt["warm_over_cold"]
            t = (lim - r0) / (r1 - r0) if r1 != r0 else 0.0
            boundary = last["weight_mb"] + max(0.0, min(1.0, t)) * (nxt["weight_mb"] - last["weight_mb"])
        else:
            boundary = last["weight_mb"]

    def crossover(key: str):
        for i, p in enumerate(pts):
            if all(q[key] > 1.0 for q in pts[i:]):
                return p["weight_mb"]
        return None

    return {"effective_l2_mb": None if boundary is None else round(boundary, 1),
            "int4_crossover_mb": crossover("int4_speedup"), "fp8_crossover_mb": crossover("fp8_speedup")}


def plot(result: dict, path: str) -> str:
    """PNG: latency (log-log) and speedup against weight MB, L2 size and boundary marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = result["points"]
    mb = [p["weight_mb"] for p in pts]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    a1.plot(mb, [p["bf16_us"] for p in pts], "o-", label="BF16 cuBLAS (warm)")
    a1.plot(mb, [p["bf16_cold_us"] for p in pts], "o--", label="BF16 cuBLAS (cold)", alpha=0.6)
    a1.plot(mb, [p["int4_us"] for p in pts], "s-", label="INT4 W4A16 (warm)")
    a1.plot(mb, [p["fp8_us"] for p in pts], "^-", label="FP8 W8A16 (warm)")
    a1.set_xscale("log")
    a1.set_yscale("log")
    a1.set_xlabel("weight size, BF16 (MB)")
    a1.set_ylabel("latency (µs)")
    a2.plot(mb, [p["int4_speedup"] for p in pts], "s-", label="INT4 / BF16")
    a2.plot(mb, [p["fp8_speedup"] for p in pts], "^-", label="FP8 / BF16")
    a2.axhline(1.0, color="grey", lw=0.8)
    a2.set_xscale("log")
    a2.set_xlabel("weight size, BF16 (MB)")
    a2.set_ylabel("speedup over BF16 (warm)")
    for ax in (a1, a2):
        ax.axvline(result["l2_mb"], color="k", ls=":", label=f"L2 {result['l2_mb']:.0f} MB")
        if result.get("effective_l2_mb"):
            ax.axvline(result["effective_l2_mb"], color="r", ls="--",
                       label=f"effective L2 {result['effective_l2_mb']:.0f} MB")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    s = result["shape"]
    dev = result.get("device", {}).get("name", "")
    fig.suptitle(f"MLA W_UK heads (K={s['K']}, N={s['N']}, M={s['M']}) on {dev}: L2 residency")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
