"""One H200 run for the TMA-fed and no-split variants of the quantized kernels (issue 26, round 4).

Precompiles every candidate in parallel (worker processes fill Triton's cache), then, per family:
correctness on quantized real-valued weights (output poisoned with NaN first) against x @ the
dequantized weights, and the cold CUDA-graph time beside cuBLAS BF16 (and tinygemm on the decode
GEMMs). Families: the decode GEMMs at M = 1 (INT4 and FP8 ``rows``: whole K per program, no
split-K; FP8 ``gemv``, split-K on the CUDA cores) and the 8-layer MLA BMMs at M = 1, 8, 64 (INT4
and FP8 ``tma``: persistent, weights through a tensor descriptor, the tile loop pipelined NS deep);
one-layer warm rows of the MLA winners (the worked example's L2 case). Then the decode-GEMM bench
and the MLA bench with the winners (both timing methods), and ncu on the key kernels
(tools/quant_ncu_target.py) for kernelscope's classifier.

    PYTHONUNBUFFERED=1 python3 tools/quant_tma_h200.py --out $OUT --budget-s 480
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
DECODE = ((4096, 4096), (8192, 8192), (7168, 2048), (2048, 7168))
MLA = ((128, 512), (512, 128))


def _p2(v: int) -> int:
    return 1 << (v - 1).bit_length()


def _rows_candidates(kind: str, K: int, N: int) -> list[dict]:
    """(BLOCK_N, warps) with 8..64 words of the row tile per thread."""
    kwp = _p2(K // (8 if kind == "int4" else 4))
    out = []
    for bn, nw in ((1, 1), (2, 1), (2, 2), (4, 2), (4, 4), (2, 4), (8, 4), (8, 8), (16, 8)):
        per = bn * kwp // (32 * nw)
        if N % bn == 0 and 8 <= per <= 64:
            out.append({"variant": "rows", "BLOCK_N": bn, "num_warps": nw, "num_stages": 1})
    return out


def fp8_gemv_candidates(K: int, N: int) -> list[dict]:
    if ROUND >= 2:
        return []
    out = []
    for bn, sub in ((128, 1), (64, 1), (128, 2)):
        blocks = K // (64 * sub)
        for target in (3 * 132, 7 * 132):
            ok = [s for s in range(1, 65) if blocks % s == 0]
            s = min(ok, key=lambda v: abs(N // bn * v - target))
            c = {"variant": "gemv", "BLOCK_N": bn, "SUB": sub, "SPLIT": s, "num_warps": 4, "num_stages": 1}
            if c not in out:
                out.append(c)
    return out


def tma_candidates(kind: str, M: int, K: int, N: int) -> list[dict]:
    if ROUND == 2:
        return round2(kind, M, K, N)
    if kind == "int4":
        if M > 16:
            sets = ((128, 4, 2, 2), (128, 4, 3, 2), (256, 8, 2, 1), (256, 8, 2, 2))
        elif K == 128:
            sets = ((128, 4, 3, 2), (128, 4, 3, 4), (128, 4, 4, 3), (256, 4, 2, 2), (256, 4, 3, 2), (256, 8, 3, 2))
        else:
            sets = ((64, 4, 3, 4), (64, 4, 4, 3), (64, 4, 2, 6), (128, 4, 2, 2), (128, 4, 3, 2))
    else:
        if M > 16:
            sets = ((128, 4, 2, 2), (128, 4, 3, 2), (64, 4, 3, 4))
        elif K == 128:
            sets = ((128, 4, 3, 2), (128, 4, 3, 4), (64, 4, 3, 4), (64, 4, 4, 6), (256, 8, 3, 2))
        else:
            sets = ((64, 4, 3, 4), (64, 4, 4, 6), (128, 4, 3, 2), (128, 4, 2, 3))
    return [{"variant": "tma", "BLOCK_N": bn, "num_warps": nw, "NS": ns, "CTAS_PER_SM": c, "num_stages": 1}
            for bn, nw, ns, c in sets if N % bn == 0]


ROUND = 1


def round2(kind: str, M: int, K: int, N: int) -> list[dict]:
    """Round 2 (after bench/results/quant_sweep_h200_r1.json): register caps (``maxnreg``: more
    programs per SM) on the MLA one-block kernels and the rows kernels, more rows shapes, the FP8
    TMA winner again beside its tuned config."""
    out: list[dict] = []
    if K >= 2048:           # decode GEMMs at M = 1
        if kind == "int4":
            for bn, nw, mr in ((4, 4, None), (4, 4, 64), (4, 1, None), (8, 2, None), (8, 4, 96), (8, 8, None),
                               (8, 8, 64), (2, 4, None), (4, 2, None), (4, 2, 64), (16, 8, None), (2, 1, None)):
                if N % bn == 0:
                    out.append({"variant": "rows", "BLOCK_N": bn, "num_warps": nw, "num_stages": 1, "maxnreg": mr})
        else:
            for bn, nw, mr in ((8, 8, None), (2, 4, None), (2, 1, None), (4, 4, 64), (4, 2, None), (8, 4, 96)):
                out.append({"variant": "rows", "BLOCK_N": bn, "num_warps": nw, "num_stages": 1, "maxnreg": mr})
            out.append({"variant": "gemv", "BLOCK_N": 128, "SUB": 2, "SPLIT": 56 if K == 7168 else 16,
                        "num_warps": 4, "num_stages": 1})
        return out
    if kind == "int4":
        if M > 16 and K == 128:
            return [{"variant": "dot", "BLOCK_N": 256, "num_warps": 8, "num_stages": 2, "maxnreg": 96},
                    {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 2},
                    {"variant": "dot", "BLOCK_N": 128, "num_warps": 8, "num_stages": 2}]
        if M > 16:
            return [{"variant": "dot", "BLOCK_N": 128, "num_warps": 8, "num_stages": 3, "PF": True},
                    {"variant": "dot", "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "PF": True}]
        if K == 128:
            return [{"variant": "dot", "BLOCK_N": 256, "num_warps": 4, "num_stages": 2, "DEP": True, "maxnreg": mr}
                    for mr in (88, 80, 72)] + [
                    {"variant": "dot", "BLOCK_N": 256, "num_warps": 8, "num_stages": 2, "DEP": True},
                    {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "DEP": True}]
        return [{"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "PF": True, "maxnreg": mr}
                for mr in (104, 96, 80)] + [
                {"variant": "dot", "BLOCK_N": 64, "num_warps": 2, "num_stages": 3, "PF": True},
                {"variant": "dot", "BLOCK_N": 64, "num_warps": 2, "num_stages": 4, "PF": True},
                {"variant": "dot", "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "PF": True}]
    if M <= 16 and K == 128:
        return [{"variant": "tma", "BLOCK_N": 128, "num_warps": 4, "NS": 3, "CTAS_PER_SM": 4, "num_stages": 1},
                {"variant": "tma", "BLOCK_N": 128, "num_warps": 4, "NS": 4, "CTAS_PER_SM": 4, "num_stages": 1},
                {"variant": "tma", "BLOCK_N": 128, "num_warps": 4, "NS": 3, "CTAS_PER_SM": 5, "num_stages": 1},
                {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3, "maxnreg": 64}]
    if M <= 16:
        return [{"variant": "asm", "BLOCK_N": 32, "SUB": 2, "num_warps": 1, "num_stages": 4},
                {"variant": "asm", "BLOCK_N": 64, "SUB": 2, "num_warps": 2, "num_stages": 3}]
    return [{"variant": "asm", "BLOCK_N": 128, "SUB": 1, "num_warps": 4, "num_stages": 3},
            {"variant": "asm", "BLOCK_N": 64, "SUB": 2, "num_warps": 4, "num_stages": 3}]


def round3(kind: str, K: int, N: int) -> list[dict]:
    """Round 3 (quant_sweep_h200_r3.json) timed the rows kernels at 7168x2048 with K / 8 (K / 4)
    words split into power-of-two tiles (512 + 256 + 128, no masked lanes; 64 instead of 254
    registers at BLOCK_N 4): slower everywhere (INT4 BLOCK_N 8: 10.53 vs 7.53 us padded; FP8
    BLOCK_N 2: 7.99 vs 7.60), so the kernels keep one padded tile; the round now re-times those
    shapes of the padded kernel, and its final step runs the MLA bench through the product's
    dispatch (tuning.config_for with H)."""
    if (K, N) != (7168, 2048):
        return []
    sets = ((8, 8), (4, 4), (4, 8), (2, 2), (2, 4), (8, 4), (16, 8)) if kind == "int4" else \
        ((2, 1), (2, 2), (4, 4), (8, 8), (4, 2), (2, 4))
    return [{"variant": "rows", "BLOCK_N": bn, "num_warps": nw, "num_stages": 1} for bn, nw in sets]


def rows_candidates(kind: str, K: int, N: int) -> list[dict]:
    if ROUND == 2:
        return round2(kind, 1, K, N)
    if ROUND == 3:
        return round3(kind, K, N)
    return _rows_candidates(kind, K, N)


def jobs():
    from mcp_server.kernels import tuning

    js = []
    for K, N in DECODE:
        if ROUND == 3 and not round3("int4", K, N):
            continue
        for kind in ("int4", "fp8"):
            js.append((kind, 1, 1, K, N, tuning.config_for(kind, 1, K, N)))
            js += [(kind, 1, 1, K, N, c) for c in rows_candidates(kind, K, N)]
        js += [("fp8", 1, 1, K, N, c) for c in fp8_gemv_candidates(K, N)]
    for K, N in MLA if ROUND < 3 else ():
        for M in (1, 8, 64):
            for kind in ("int4", "fp8"):
                js.append((kind, 1024, M, K, N, tuning.config_for(kind, M, K, N, 1024)))
                js += [(kind, 1024, M, K, N, c) for c in tma_candidates(kind, M, K, N)]
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
        return f"{job}: {exc!r}"[-600:]


def precompile(res):
    js = jobs()
    ctx = mp.get_context("spawn")
    with ctx.Pool(min(15, os.cpu_count() or 4)) as pool:
        errs = [e for e in pool.map(_compile, js, chunksize=1) if e]
    res["precompile"] = {"jobs": len(js), "errors": errs, "s": round(time.time() - T0, 1)}
    print("precompiled", len(js), "jobs, errors:", len(errs), round(time.time() - T0, 1), "s", flush=True)
    for e in errs[:6]:
        print("  ", e, flush=True)


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

    def family(tag, H, M, K, N, cands, base_fns, extra, fmt_fns):
        x, qi, qf, ri, rf = real(min(H, 256), M, K, N)
        base = bench.time_launches(base_fns)
        rows.append({"tag": tag, "M": M, "K": K, "N": N, "H": H, "kind": "bf16", "us": base})
        line = f"{tag:14s} M{M:3d} bf16 {base:7.2f}"
        for name, fns in extra:
            t = bench.time_launches(fns)
            rows.append({"tag": tag, "M": M, "K": K, "N": N, "H": H, "kind": name, "us": t, "speedup": base / t})
            line += f" {name} {t:7.2f}"
        print(line, flush=True)
        for kind in ("int4", "fp8"):
            best = None
            for i, cfg in enumerate(cands[kind]):
                if time.time() - T0 > 0.5 * budget:
                    res["errors"].append(f"sweep cut at {tag} M={M}")
                    return
                r = {"tag": tag, "M": M, "K": K, "N": N, "H": H, "kind": kind, "cfg": cfg, "tuned": i == 0}
                try:
                    out = torch.full((x.shape[0], M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                    if kind == "int4":
                        kern = w4a16_launch(x, qi, out, cfg)[0]
                        r["err"] = rel(out, ri)
                    else:
                        kern = w8a16_launch(x, qf, out, cfg)[0]
                        r["err"] = rel(out, rf)
                    r["nan"] = bool(out.isnan().any())
                    fns = fmt_fns(kind, cfg)
                    us = bench.time_launches(fns)
                    r.update(us=us, speedup=base / us, n_regs=kern.n_regs, n_spills=kern.n_spills)
                    if r["err"] < 0.01 and not r["nan"] and (best is None or us < best[0]):
                        best = (us, cfg)
                except Exception as exc:  # noqa: BLE001
                    r["error"] = repr(exc)[-500:]
                rows.append(r)
                print(f"{tag:14s} M{M:3d} {kind:4s} {json.dumps(cfg):118s} {r.get('us', float('nan')):8.2f}us "
                      f"x{r.get('speedup', 0):.2f} err={r.get('err', -1):.2e} regs={r.get('n_regs')}"
                      f"{' ' + r['error'][:200] if 'error' in r else ''}", flush=True)
            if best:
                win[f"{kind}|{M}|{K}|{N}"] = best[1]

    for K, N in DECODE:
        if ROUND == 3 and not round3("int4", K, N):
            continue
        buf = decode.DecodeBuffers(1, K, N)
        cands = {"int4": [tuning.config_for("int4", 1, K, N)] + rows_candidates("int4", K, N),
                 "fp8": [tuning.config_for("fp8", 1, K, N)] + rows_candidates("fp8", K, N) + fp8_gemv_candidates(K, N)}
        family(f"gemm{K}x{N}", 1, 1, K, N, cands, buf.fns("bf16"),
               [("tinygemm", buf.fns("tinygemm"))] if buf.tiny else [], lambda k, c, b=buf: b.fns(k, c))
        del buf
        torch.cuda.empty_cache()
    if ROUND == 3:
        return
    for K, N in MLA:
        for M in (1, 8, 64):
            buf = bench.ShapeBuffers(1024, M, K, N, "cold")
            cands = {k: [tuning.config_for(k, M, K, N, 1024)] + tma_candidates(k, M, K, N) for k in ("int4", "fp8")}
            family(f"mla8L_{K}x{N}", 1024, M, K, N, cands, buf.bf16_fns(), [],
                   lambda k, c, b=buf: b.int4_fns(c) if k == "int4" else b.fp8_fns(c))
            del buf
            torch.cuda.empty_cache()
    # the one-layer warm case (the worked example's L2 story): tuned vs the 8-layer winner
    for K, N in MLA:
        for M in (1, 8):
            buf = bench.ShapeBuffers(128, M, K, N, "warm")
            r = {"tag": f"mla1L_warm_{K}x{N}", "M": M, "bf16": bench.time_launches(buf.bf16_fns())}
            for kind in ("int4", "fp8"):
                fn = buf.int4_fns if kind == "int4" else buf.fp8_fns
                r[f"{kind}_tuned"] = bench.time_launches(fn(tuning.config_for(kind, M, K, N)))
                w = win.get(f"{kind}|{M}|{K}|{N}")
                if w:
                    r[f"{kind}_winner"] = bench.time_launches(fn(w))
            rows.append(r)
            print("L1WARM", json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}),
                  flush=True)
            del buf


def make_pick(win):
    from mcp_server.kernels import tuning

    def pick(kind, M, K, N):
        b = tuning.bucket(M)
        cfg = win.get(f"{kind}|{b}|{K}|{N}") or (win.get(f"{kind}|8|{K}|{N}") if b == 16 else None)
        return dict(cfg) if cfg else tuning.config_for(kind, M, K, N)
    return pick


def final(res, out, budget):
    import time as _t

    from mcp_server.kernels import bench, decode

    pick = make_pick(res.get("winners", {}))
    d = decode.run_decode_bench(configs=pick)
    (out / "decode_h200.json").write_text(json.dumps(d, indent=1))
    for r in d["rows"]:
        print("DEC", decode.fmt_row(r), flush=True)
    print("DECCHECK", json.dumps(d["checks"]), flush=True)
    # round 3: the MLA bench through the product's dispatch (tuning.config_for with H, STACKED first)
    m = bench.run_mla_bench("deepseek-v3", (1, 8, 64), (1, 8, 16, 32), caches=("warm", "cold"),
                            configs=pick if ROUND < 3 else None,
                            cupti=True, deadline=_t.monotonic() + max(20.0, budget - (time.time() - T0) - 70))
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
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--skip-ncu", action="store_true")
    ap.add_argument("--round", type=int, default=1, help="candidate set: 1 (first sweep) or 2 (register caps)")
    a = ap.parse_args()
    global ROUND
    ROUND = a.round
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"errors": [], "step_s": {}}

    def dump():
        (out / "quant_sweep.json").write_text(json.dumps(res, indent=1, default=str))

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
    for name, fn in (("sweep", lambda: sweep(res, a.budget_s)), ("final", lambda: final(res, out, a.budget_s))):
        t = time.time()
        try:
            fn()
        except Exception:  # noqa: BLE001
            res["errors"].append(name + ": " + traceback.format_exc()[-3000:])
        res["step_s"][name] = round(time.time() - t, 1)
        dump()
        print(name, "done", round(time.time() - T0, 1), flush=True)
    (out / "winners.json").write_text(json.dumps(res.get("winners", {}), indent=1))
    left = a.budget_s - (time.time() - T0)
    if not a.skip_ncu and left > 25:
        t = time.time()
        try:
            cmd = ["ncu", "--clock-control", "none", "--cache-control", "all", "--profile-from-start", "off",
                   "--section", "SpeedOfLight", "--section", "MemoryWorkloadAnalysis", "--section", "Occupancy",
                   "--section", "LaunchStats", "--section", "ComputeWorkloadAnalysis",
                   "--section", "WarpStateStats", "--section", "SchedulerStats",
                   "--csv", "--page", "details", sys.executable, str(HERE / "quant_ncu_target.py"),
                   "--configs", str(out / "winners.json")]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(20, left - 5))
            (out / "quant_ncu.csv").write_text(p.stdout + "\n#STDERR\n" + p.stderr[-4000:])
        except Exception:  # noqa: BLE001
            res["errors"].append("ncu: " + traceback.format_exc()[-2000:])
        res["step_s"]["ncu"] = round(time.time() - t, 1)
    dump()
    print("winners", json.dumps(res.get("winners", {})))
    print("errors:", json.dumps(res["errors"])[:3000])
    print("total", round(time.time() - T0, 1), "s")


if __name__ == "__main__":
    main()
