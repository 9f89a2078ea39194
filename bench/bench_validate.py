#!/usr/bin/env python3
"""Calibration of validate_candidate's decision (a benchmark, not a timed test).

Targets (issue 10): 100 A/A decisions accept at most 1 %; a candidate 3 % slower is never
accepted and one 3 % faster is accepted at least 95 % of the time; one decision on a
microsecond kernel costs at most about 2 s of GPU time.

The kernels scale the work, never sleep: a memory-bound column sum ``x[:m].sum(0)`` over a
row-major matrix whose rows past ``m0`` are zero, so every variant returns the same sums:
baseline reads M rows, "3 % slower" reads 1.03 M, "3 % faster" reads 0.97 M (= m0)
(bench/validate_kernels.py).
Decisions run the harness's own timing code (``child.Harness.timing``: warm-up, CUDA graphs
or a launch loop, rotated input copies for the cold cache, interleaved randomised rounds,
device-wide sync, adaptive stop) in this process, so 300 decisions do not pay 300 torch
imports; the decision is the parent's (``stats.ratio_of_medians_ci`` on the raw samples,
``decide`` with ``--min-gain``). One full end-to-end ``validate_candidate`` run (fresh child,
correctness included) is timed at the end.

    python3 bench/bench_validate.py --device cuda --out DIR          # the H200 calibration
    .venv/bin/python bench/bench_validate.py --device cpu --aa 20 --slower 10 --faster 10
"""
from __future__ import annotations

import argparse
import io
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp_server.validate import stats  # noqa: E402
from mcp_server.validate.child import Harness  # noqa: E402

KERNELS = ROOT / "bench" / "validate_kernels.py"


def make_harness(device: str, *, budget_s: float, cache: str, seed: int, batch_s: float | None) -> Harness:
    cfg = {"device": device, "dtype": "bfloat16" if device.startswith("cuda") else "float32",
           "seed": seed, "cache": cache, "time_budget_s": budget_s, "confidence": 0.95, "ci_half_width": 0.01,
           "min_rounds": 20, "max_rounds": 2000, "graphs": "auto", "other_cache": False,
           "shapes": [], "threads": 1, "batch_s": batch_s}
    h = Harness(cfg, io.StringIO())
    h.setup_torch()
    h._modules_by_path = {}
    return h


def decision(h: Harness, make_inputs, fa, fb, shape: dict, seed: int, min_gain: float) -> dict:
    h.cfg["shapes"] = [shape]
    h.cfg["seed"] = seed
    h.result["timing"] = None
    h.result["warnings"] = []
    h.make_inputs, h.baseline, h.candidate, h.cand_who = make_inputs, fa, fb, "candidate"
    t0 = time.perf_counter()
    h.timing()
    wall = time.perf_counter() - t0
    t = h.result["timing"]
    iv = stats.ratio_of_medians_ci(t["baseline_s"], t["candidate_s"], seed=seed)
    return {"accepted": stats.decide(iv, min_gain), "median": iv.median, "ci_low": iv.ci_low,
            "ci_high": iv.ci_high, "rounds": t["rounds"], "stop": t["stop"], "timing_s": t["elapsed_s"],
            "wall_s": wall, "method": t["method"], "base_us": statistics.median(t["baseline_s"]) * 1e6,
            "cand_us": statistics.median(t["candidate_s"]) * 1e6}


DEADLINE = [float("inf"), float("inf")]  # (unused, seconds per decision allotted)


def series(label: str, n: int, h: Harness, mk, fa, fb, shape, min_gain, seed0, log) -> list[dict]:
    """``n`` decisions; with --deadline each series gets a share of it in proportion to ``n``."""
    out = []
    stop = time.monotonic() + DEADLINE[1] * n if math.isfinite(DEADLINE[1]) else float("inf")
    for i in range(n):
        if time.monotonic() > stop:
            print(f"{label}: deadline reached after {i} of {n} decisions", flush=True)
            break
        d = decision(h, mk, fa, fb, shape, seed0 + i, min_gain)
        out.append(d)
        log.write(json.dumps({"series": label, "i": i, **d}) + "\n")
    acc = sum(d["accepted"] for d in out)
    med = statistics.median(d["median"] for d in out) if out else float("nan")
    n = len(out)
    print(f"{label:<22} {n:>4} decisions  accepted {acc:>3} ({acc / max(n, 1):.1%})  median speedup "
          f"{med:.4f}  rounds med {statistics.median(d['rounds'] for d in out) if out else 0:.0f}  "
          f"wall/decision med {statistics.median(d['wall_s'] for d in out) if out else 0:.3f} s "
          f"max {max((d['wall_s'] for d in out), default=0):.3f} s  method {out[0]['method'] if out else '-'}",
          flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--aa", type=int, default=100)
    ap.add_argument("--slower", type=int, default=100)
    ap.add_argument("--faster", type=int, default=100)
    ap.add_argument("--min-gain", type=float, default=0.01)
    ap.add_argument("--budget", type=float, default=None, help="time budget per decision (s)")
    ap.add_argument("--cache", default="cold")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-e2e", action="store_true")
    ap.add_argument("--aa-scaled", type=int, default=None, help="A/A decisions on the scaled kernel")
    ap.add_argument("--aa-eager", type=int, default=0, help="A/A on the scaled kernel with graphs off")
    ap.add_argument("--deadline", type=float, default=None, help="stop starting decisions after this many s")
    args = ap.parse_args()
    if args.deadline:
        n_scaled = args.aa_scaled if args.aa_scaled is not None else max(10, args.aa // 5)
        total = args.aa + args.slower + args.faster + n_scaled + 2 * args.aa_eager
        DEADLINE[1] = args.deadline / total
    cuda = args.device.startswith("cuda")
    budget = args.budget if args.budget is not None else (1.5 if cuda else 2.0)
    out_dir = Path(args.out) if args.out else Path(".")
    out_dir.mkdir(parents=True, exist_ok=True)
    log = (out_dir / f"bench_validate_{'cuda' if cuda else 'cpu'}.jsonl").open("w")

    sys.path.insert(0, str(KERNELS.parent))
    import validate_kernels as K  # noqa: E402

    h = make_harness(args.device, budget_s=budget, cache=args.cache, seed=0, batch_s=None)
    dev = h.result["device"]
    print(f"device: {dev.get('name')}  torch {dev.get('torch')}  L2 {dev.get('l2_bytes', 0) / 1e6:.0f} MB  "
          f"budget/decision {budget} s  min_gain {args.min_gain}  cache {args.cache}", flush=True)
    # microsecond kernel (GPU: 1.6 MB of bf16, a few us) and the +-3 % kernel (GPU: 66 MB per call)
    micro = K.scaled_shape(200, 4096) if cuda else K.scaled_shape(100, 1024)
    big = K.scaled_shape(8000, 4096) if cuda else K.scaled_shape(1000, 2048)
    res = {"device": dev, "budget_s": budget, "min_gain": args.min_gain, "cache": args.cache,
           "micro_shape": micro, "scaled_shape": big}
    res["aa_micro"] = series("A/A microsecond", args.aa, h, K.make_inputs, K.colsum, K.colsum, micro,
                             args.min_gain, 1000, log)
    res["slower"] = series("3 % slower (1.03 M)", args.slower, h, K.make_inputs, K.colsum, K.colsum_slower,
                           big, args.min_gain, 3000, log)
    res["faster"] = series("3 % faster (0.97 M)", args.faster, h, K.make_inputs, K.colsum, K.colsum_faster,
                           big, args.min_gain, 5000, log)
    n_scaled = args.aa_scaled if args.aa_scaled is not None else max(10, args.aa // 5)
    res["aa_scaled"] = series("A/A scaled kernel", n_scaled, h, K.make_inputs, K.colsum, K.colsum,
                              big, args.min_gain, 7000, log)
    if args.aa_eager:
        h.cfg["graphs"] = "off"
        res["aa_eager"] = series("A/A scaled, no graphs", args.aa_eager, h, K.make_inputs, K.colsum, K.colsum,
                                 big, args.min_gain, 9000, log)
        res["faster_eager"] = series("3 % faster, no graphs", args.aa_eager, h, K.make_inputs, K.colsum,
                                     K.colsum_faster, big, args.min_gain, 9500, log)
        h.cfg["graphs"] = "auto"
    summary = {
        "aa_micro_accept_rate": sum(d["accepted"] for d in res["aa_micro"]) / max(1, len(res["aa_micro"])),
        "slower_accept_rate": sum(d["accepted"] for d in res["slower"]) / max(1, len(res["slower"])),
        "faster_accept_rate": sum(d["accepted"] for d in res["faster"]) / max(1, len(res["faster"])),
        "aa_scaled_accept_rate": sum(d["accepted"] for d in res["aa_scaled"]) / max(1, len(res["aa_scaled"])),
        "aa_eager_accept_rate": (sum(d["accepted"] for d in res["aa_eager"]) / max(1, len(res["aa_eager"]))
                                 if res.get("aa_eager") else None),
        "faster_eager_accept_rate": (sum(d["accepted"] for d in res["faster_eager"]) /
                                     max(1, len(res["faster_eager"])) if res.get("faster_eager") else None),
        "micro_kernel_us": statistics.median(d["base_us"] for d in res["aa_micro"]) if res["aa_micro"] else None,
        "micro_decision_wall_s_median": (statistics.median(d["wall_s"] for d in res["aa_micro"])
                                         if res["aa_micro"] else None),
        "micro_decision_wall_s_max": max((d["wall_s"] for d in res["aa_micro"]), default=None),
        "scaled_kernel_us": statistics.median(d["base_us"] for d in res["faster"]) if res["faster"] else None,
        "slower_median_speedup": statistics.median(d["median"] for d in res["slower"]) if res["slower"] else None,
        "faster_median_speedup": statistics.median(d["median"] for d in res["faster"]) if res["faster"] else None,
    }
    if not args.no_e2e:
        from mcp_server.validate.engine import validate_candidate

        t0 = time.perf_counter()
        r = validate_candidate(baseline=f"{KERNELS}:colsum", candidate=f"{KERNELS}:colsum_faster",
                               inputs=f"{KERNELS}:make_inputs", shapes=[micro],
                               dtype="bfloat16" if cuda else "float32", device=args.device, seed=1,
                               time_budget_s=budget, min_gain=args.min_gain, timeout_s=300)
        summary["e2e_wall_s"] = time.perf_counter() - t0
        summary["e2e_verdict"] = r.verdict
        summary["e2e_wall_breakdown_s"] = r.wall_s
        summary["e2e_speedup"] = r.speedup.model_dump() if r.speedup else None
        summary["e2e_method"] = r.timing.method if r.timing else None
        summary["e2e_rounds"] = r.timing.rounds if r.timing else None
        summary["e2e_reasons"] = r.reasons
        print(f"end-to-end validate_candidate (micro, 3 % less work): {r.verdict} in {summary['e2e_wall_s']:.2f} s "
              f"wall {r.wall_s}", flush=True)
    res["summary"] = summary
    (out_dir / f"bench_validate_{'cuda' if cuda else 'cpu'}.json").write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps(summary, indent=1, default=str))


if __name__ == "__main__":
    main()
