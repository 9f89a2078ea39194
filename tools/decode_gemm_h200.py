"""The H200 run of issue 26 (one command): precompile every variant in parallel (workers fill
Triton's cache), then correctness on quantized real-valued weights and a cold timed sweep of the
split-K INT4 / FP8 variants on the decode-GEMM shapes (K x N = 4096x4096, 8192x8192, 7168x2048,
2048x7168; M = 1 and 16, M = 8 with the M = 16 winners) and on the 8-layer MLA BMMs, beside cuBLAS
BF16, tinygemm and the kernels as they were; then the summary with both timing methods (CUDA-graph
wall, CUPTI kernel time) and an ncu profile of the key kernels for kernelscope's classifier.

    PYTHONUNBUFFERED=1 python3 tools/decode_gemm_h200.py --out $OUT --budget-s 420
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

T0 = time.time()
SMS = 132


def left(budget):
    return budget - (time.time() - T0)


def _splits(K, blk, tiles, targets):
    ok = [s for s in range(1, 65) if K % (s * blk) == 0]
    return sorted({min(ok, key=lambda s, t=t: abs(tiles * s - t)) for t in targets})


def int4_candidates(M, K, N):
    """Second round (after the first sweep: bench/results/decode_sweep_h200_r1.json): at M = 1 the
    CUDA-core GEMV around its winners, at M = 8..16 the split-K tensor-core tiles (wgmma with 4
    warps, mma.sync with 1-2 warps); SPLIT picked so that programs come near a few per SM."""
    out = []
    if M == 1:
        for bn, nw, sub in ((64, 4, 2), (64, 4, 1), (64, 8, 2), (128, 8, 2), (128, 4, 1), (32, 4, 2)):
            if N % bn or K % (128 * sub):
                continue
            for s in _splits(K, 128 * sub, N // bn, (3 * SMS, 6 * SMS, 12 * SMS)):
                out.append({"variant": "gemv", "BLOCK_N": bn, "SPLIT": s, "SUB": sub, "num_warps": nw,
                            "num_stages": 1})
    for bn, nw, ns, sub in ((64, 4, 2, 2), (32, 1, 1, 2), (64, 2, 1, 2)):
        if N % bn or K % (128 * sub):
            continue
        per_sm = 2 if nw == 4 else 6
        for s in _splits(K, 128 * sub, N // bn, (per_sm * SMS // 2, per_sm * SMS, 2 * per_sm * SMS)):
            out.append({"variant": "splitk", "BLOCK_N": bn, "SPLIT": s, "SUB": sub, "num_warps": nw, "num_stages": ns})
    return out


def fp8_candidates(M, K, N):
    out = []
    if M == 1:      # the FP8 CUDA-core GEMV, written after the third sweep
        for bn, sub in ((128, 1), (64, 1), (128, 2)):
            if N % bn or K % (64 * sub):
                continue
            for s in _splits(K, 64 * sub, N // bn, (3 * SMS, 7 * SMS, 14 * SMS)):
                out.append({"variant": "gemv", "BLOCK_N": bn, "SUB": sub, "SPLIT": s, "num_warps": 4,
                            "num_stages": 1})
    for bn, nw, ns, sub in ((128, 4, 1, 2), (128, 4, 2, 2), (128, 4, 1, 1), (64, 4, 1, 4), (256, 8, 1, 2)):
        if N % bn or K % (64 * sub):
            continue
        for s in _splits(K, 64 * sub, N // bn, (SMS, 2 * SMS, 4 * SMS)):
            out.append({"variant": "asm", "BLOCK_N": bn, "SUB": sub, "SPLIT": s, "num_warps": nw, "num_stages": ns})
    return out


def mla_int4_candidates(M, K, N):
    if M > 16:
        return []
    if K == 128:
        return [{"variant": "dot", "BLOCK_N": bn, "num_warps": nw, "num_stages": 1, "DEP": True}
                for bn, nw in ((128, 4), (256, 8))]
    return [{"variant": "dot", "BLOCK_N": bn, "num_warps": nw, "num_stages": ns, "PF": True}
            for bn, nw, ns in ((64, 2, 3), (64, 2, 4), (32, 1, 4), (32, 1, 2), (64, 2, 2))]


def mla_fp8_candidates(M, K, N):
    if M > 16:
        return []
    if K == 128:
        return [{"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 1},
                {"variant": "asm", "BLOCK_N": 64, "SUB": 2, "num_warps": 2, "num_stages": 1}]
    return [{"variant": "asm", "BLOCK_N": bn, "SUB": sub, "num_warps": nw, "num_stages": ns}
            for bn, nw, sub, ns in ((32, 1, 2, 3), (32, 1, 2, 4), (64, 2, 2, 4), (32, 1, 1, 4), (64, 2, 1, 3))]


DECODE = ((4096, 4096), (8192, 8192), (7168, 2048), (2048, 7168))


def jobs():
    from mcp_server.kernels import tuning

    js = []
    for K, N in DECODE:
        for M in (1, 16):
            js.append(("int4", 1, M, K, N, tuning.config_for("int4", M, K, N)))
            js.append(("fp8", 1, M, K, N, tuning.config_for("fp8", M, K, N)))
            js += [("int4", 1, M, K, N, c) for c in int4_candidates(M, K, N)]
            js += [("fp8", 1, M, K, N, c) for c in fp8_candidates(M, K, N)]
    for K, N in ((512, 128), (128, 512)):
        for M in (1, 8, 64):
            js += [("int4", 1024, M, K, N, c) for c in mla_int4_candidates(M, K, N)]
            js += [("fp8", 1024, M, K, N, c) for c in mla_fp8_candidates(M, K, N)]
    return js


def _compile(job):
    import torch

    from mcp_server.kernels import quant
    from mcp_server.kernels.w4a16 import w4a16_launch
    from mcp_server.kernels.w8a16 import w8a16_launch

    kind, H, M, K, N, cfg = job
    try:
        x = torch.randn(H, M, K, device="cuda").to(torch.bfloat16)
        if kind == "int4":
            w4a16_launch(x, quant.random_int4(H, K, N), None, cfg)
        else:
            w8a16_launch(x, quant.random_fp8(H, K, N), None, cfg)
        torch.cuda.synchronize()
        return None
    except Exception as exc:  # noqa: BLE001
        return f"{job}: {exc!r}"[-400:]


def precompile(res):
    js = jobs()
    ctx = mp.get_context("spawn")
    with ctx.Pool(min(14, os.cpu_count() or 4)) as pool:
        errs = [e for e in pool.map(_compile, js, chunksize=1) if e]
    res["precompile"] = {"jobs": len(js), "errors": errs, "s": round(time.time() - T0, 1)}
    print("precompiled", len(js), "jobs, errors:", len(errs), round(time.time() - T0, 1), "s", flush=True)


def rel(a, b):
    return float((a.float() - b).norm() / b.norm())


def sweep(res, budget):
    import torch

    from mcp_server.kernels import bench, decode, quant, tuning
    from mcp_server.kernels.w4a16 import w4a16_launch
    from mcp_server.kernels.w8a16 import w8a16_launch

    rows = res.setdefault("sweep", [])
    win = res.setdefault("winners", {})

    def real(H, M, K, N):
        g = torch.Generator(device="cuda")
        g.manual_seed(1)
        w = (torch.randn(H, K, N, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
        x = torch.randn(H, M, K, device="cuda", generator=g).to(torch.bfloat16)
        qi, qf = quant.quantize_int4(w), quant.quantize_fp8(w)
        return x, qi, qf, x.float() @ quant.dequantize_int4(qi), x.float() @ quant.dequantize_fp8(qf)

    def run_family(tag, H, M, K, N, cands4, cands8, buf, fmt_bufs):
        x, qi, qf, ri, rf = real(min(H, 128), M, K, N)
        base = bench.time_launches(buf.fns("bf16") if isinstance(buf, decode.DecodeBuffers) else buf.bf16_fns())
        rows.append({"tag": tag, "M": M, "K": K, "N": N, "H": H, "kind": "bf16", "us": base})
        if isinstance(buf, decode.DecodeBuffers) and buf.tiny:
            t = bench.time_launches(buf.fns("tinygemm"))
            rows.append({"tag": tag, "M": M, "K": K, "N": N, "H": H, "kind": "tinygemm", "us": t,
                         "speedup": base / t})
        for kind, cands in (("int4", cands4), ("fp8", cands8)):
            best = None
            for i, cfg in enumerate(cands):
                if left(budget) < 0.55 * budget:
                    res["errors"].append(f"sweep cut at {tag} M={M}")
                    return
                r = {"tag": tag, "M": M, "K": K, "N": N, "H": H, "kind": kind, "cfg": cfg, "before": i == 0}
                try:
                    out = torch.full((x.shape[0], M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                    if kind == "int4":
                        kern = w4a16_launch(x, qi, out, cfg)[0]
                        r["err"] = rel(out, ri)
                    else:
                        kern = w8a16_launch(x, qf, out, cfg)[0]
                        r["err"] = rel(out, rf)
                    r["nan"] = bool(out.isnan().any())
                    fns = fmt_bufs(kind, cfg)
                    us = bench.time_launches(fns)
                    r.update(us=us, speedup=base / us, n_regs=kern.n_regs, n_spills=kern.n_spills)
                    if r["err"] < 0.01 and not r["nan"] and (best is None or us < best[0]):
                        best = (us, cfg)
                except Exception as exc:  # noqa: BLE001
                    r["error"] = repr(exc)[-500:]
                rows.append(r)
                print(f"{tag:14s} M{M:3d} {kind:4s} {str(cfg):110s} {r.get('us', float('nan')):8.2f}us "
                      f"x{r.get('speedup', 0):.2f} err={r.get('err', -1):.2e} regs={r.get('n_regs')}", flush=True)
            if best:
                win[f"{kind}|{M}|{K}|{N}"] = best[1]

    for K, N in DECODE:
        for M in (1, 16, 8):
            buf = decode.DecodeBuffers(M, K, N)

            def fb(kind, cfg, buf=buf):
                return buf.fns(kind, cfg)
            if M == 8:
                c4 = [tuning.config_for("int4", M, K, N)] + ([win[f"int4|16|{K}|{N}"]] if f"int4|16|{K}|{N}" in win else [])
                c8 = [tuning.config_for("fp8", M, K, N)] + ([win[f"fp8|16|{K}|{N}"]] if f"fp8|16|{K}|{N}" in win else [])
            else:
                c4 = [tuning.config_for("int4", M, K, N)] + int4_candidates(M, K, N)
                c8 = [tuning.config_for("fp8", M, K, N)] + fp8_candidates(M, K, N)
            run_family(f"gemm{K}x{N}", 1, M, K, N, c4, c8, buf, fb)
            del buf
            torch.cuda.empty_cache()
    for K, N in ((512, 128), (128, 512)):
        for M in (1, 8, 64):
            buf = bench.ShapeBuffers(1024, M, K, N, "cold")

            def fb(kind, cfg, buf=buf):
                return buf.int4_fns(cfg) if kind == "int4" else buf.fp8_fns(cfg)
            run_family(f"mla8L_{K}x{N}", 1024, M, K, N,
                       [tuning.config_for("int4", M, K, N)] + mla_int4_candidates(M, K, N),
                       [tuning.config_for("fp8", M, K, N)] + mla_fp8_candidates(M, K, N), buf, fb)
            del buf
            torch.cuda.empty_cache()


def summary(res):
    """Both timing methods for before (tuning as it was) and after (the sweep's winners)."""
    import torch

    from mcp_server.kernels import bench, decode, tuning

    win = res.get("winners", {})
    out = res.setdefault("summary", [])
    for K, N in DECODE:
        for M in (1, 8, 16):
            buf = decode.DecodeBuffers(M, K, N)
            row = {"M": M, "K": K, "N": N}
            entries = [("bf16", None), ("tinygemm", None), ("int4_before", tuning.config_for("int4", M, K, N)),
                       ("fp8_before", tuning.config_for("fp8", M, K, N))]
            for kind in ("int4", "fp8"):
                if f"{kind}|{M}|{K}|{N}" in win:
                    entries.append((f"{kind}_after", win[f"{kind}|{M}|{K}|{N}"]))
            for name, cfg in entries:
                fmt = name.split("_")[0]
                if fmt == "tinygemm" and not buf.tiny:
                    continue
                try:
                    fns = buf.fns(fmt, cfg)
                    g = bench.time_launches(fns)
                    c = decode.cupti_us(fns)
                    row[f"{name}_us"] = round(g, 2)
                    row[f"{name}_cupti_us"] = round(c, 2)
                    row[f"{name}_cupti_tbps"] = round(buf.tbps(fmt, c), 3)
                except Exception as exc:  # noqa: BLE001
                    row[f"{name}_error"] = repr(exc)[-300:]
            out.append(row)
            print("SUM", json.dumps(row), flush=True)
            del buf
            torch.cuda.empty_cache()


def make_pick(win):
    from mcp_server.kernels import tuning

    def pick(kind, M, K, N):
        b = 1 if M == 1 else 8 if M <= 8 else 16 if M <= 16 else 64
        cfg = win.get(f"{kind}|{b}|{K}|{N}")
        return dict(cfg) if cfg else tuning.config_for(kind, M, K, N)
    return pick


def final(res, out, budget):
    """The decode-GEMM bench and the MLA bench (8/16/32 stacked layers and one layer, warm and
    cold, both timing methods) with the sweep's winners."""
    import time as _t

    from mcp_server.kernels import bench, decode

    pick = make_pick(res.get("winners", {}))
    d = decode.run_decode_bench(configs=pick)
    (out / "decode_h200.json").write_text(json.dumps(d, indent=1))
    for r in d["rows"]:
        print("DEC", decode.fmt_row(r), flush=True)
    print("DECCHECK", json.dumps(d["checks"]), flush=True)
    m = bench.run_mla_bench("deepseek-v3", (1, 8, 64), (1, 8, 16, 32), configs=pick, cupti=True,
                            deadline=_t.monotonic() + max(30.0, left(budget) - 60))
    m["configs"] = res.get("winners", {})
    (out / "mla_h200_full.json").write_text(json.dumps(m, indent=1))
    for r in m["rows"]:
        print(f"MLA {r['weight']:5s} L{r['layers']:<3d} M={r['M']:<3d} {r['cache']:4s} bf16 {r['bf16_us']:7.2f} "
              f"int4 {r['int4_us']:7.2f} x{r['int4_speedup']:.2f} {r['int4_tbps']:.2f}TB/s fp8 {r['fp8_us']:7.2f} "
              f"x{r['fp8_speedup']:.2f} | cupti x{r.get('int4_cupti_speedup')} x{r.get('fp8_cupti_speedup')}", flush=True)
    print("MLACHECK", json.dumps(m["checks"]), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=420)
    ap.add_argument("--skip-ncu", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"errors": [], "step_s": {}}

    def dump():
        (out / "decode_sweep.json").write_text(json.dumps(res, indent=1, default=str))

    t = time.time()
    try:
        precompile(res)
    except Exception:  # noqa: BLE001
        res["errors"].append("precompile: " + traceback.format_exc()[-2000:])
    res["step_s"]["precompile"] = round(time.time() - t, 1)
    from mcp_server.kernels import bench, decode

    res["device"] = bench.device_info()
    res["copy_tbps"] = bench.copy_tbps()
    res["read_tbps"] = bench.read_tbps()
    res["tinygemm"] = decode.tinygemm_available()
    print("copy", res["copy_tbps"], "read", res["read_tbps"], "tinygemm", res["tinygemm"], flush=True)
    for name, fn in (("sweep", lambda: sweep(res, a.budget_s)), ("summary", lambda: summary(res)),
                     ("final", lambda: final(res, out, a.budget_s))):
        t = time.time()
        try:
            fn()
        except Exception:  # noqa: BLE001
            res["errors"].append(name + ": " + traceback.format_exc()[-3000:])
        res["step_s"][name] = round(time.time() - t, 1)
        dump()
        print(name, "done", round(time.time() - T0, 1), flush=True)
    (out / "winners.json").write_text(json.dumps(res.get("winners", {}), indent=1))
    if not a.skip_ncu and left(a.budget_s) > 25:
        t = time.time()
        try:
            cmd = ["ncu", "--clock-control", "none", "--cache-control", "all", "--profile-from-start", "off",
                   "--section", "SpeedOfLight", "--section", "MemoryWorkloadAnalysis", "--section", "Occupancy",
                   "--section", "LaunchStats", "--section", "ComputeWorkloadAnalysis",
                   "--section", "WarpStateStats", "--section", "SchedulerStats",
                   "--csv", "--page", "details", sys.executable, str(HERE / "decode_ncu_target.py"),
                   "--configs", str(out / "winners.json")]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(30, left(a.budget_s)))
            (out / "decode_ncu.csv").write_text(p.stdout + "\n#STDERR\n" + p.stderr[-4000:])
        except Exception:  # noqa: BLE001
            res["errors"].append("ncu: " + traceback.format_exc()[-2000:])
        res["step_s"]["ncu"] = round(time.time() - t, 1)
    dump()
    print("winners", json.dumps(res.get("winners", {})))
    print("errors:", json.dumps(res["errors"])[:3000])
    print("total", round(time.time() - T0, 1), "s")


if __name__ == "__main__":
    main()
