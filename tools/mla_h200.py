"""The H200 run of issue 11 (one command): GPU correctness of every variant, a config sweep at the key
(8 stacked layers, 128 MiB BF16, cold) shapes that picks the winners, then with those winners
the full MLA bench (bench/results/mla_h200.json), the L2 sweep (JSON + PNG) and an ncu profile
of BF16 / INT4 / FP8 on the key shapes.

    PYTHONUNBUFFERED=1 python3 tools/mla_h200.py --out $OUT --budget-s 420
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import mla_probe  # noqa: E402
import torch  # noqa: E402

from mcp_server.kernels import bench, l2sweep, quant, tuning  # noqa: E402
from mcp_server.kernels.w4a16 import w4a16_launch  # noqa: E402
from mcp_server.kernels.w8a16 import act_quant_fp8, w8a8_launch, w8a16_launch  # noqa: E402

T0 = time.time()
RES: dict = {"errors": [], "step_s": {}}
WIN: dict = {}


def left(budget):
    return budget - (time.time() - T0)


def bandwidth():
    """The two ceilings: copy (events; graph-captured copy_ is a slower memcpy node, recorded too)
    and read-only (amax)."""
    out = {"copy_events_4g": bench.copy_tbps(4 * 2**30), "read_amax_4g": bench.read_tbps(4 * 2**30)}
    a = torch.randn(2**30, device="cuda")
    b = torch.empty_like(a)
    out["copy_graph_4g"] = 2 * 4 * 2**30 / (bench.time_launches([lambda a=a, b=b: b.copy_(a)], 10, 10) * 1e-6) / 1e12
    del a, b
    torch.cuda.empty_cache()
    RES["bandwidth"] = out


def correctness():
    torch.manual_seed(2)
    rows = []
    for (K, N) in ((128, 512), (512, 128)):
        w = (torch.randn(128, K, N, device="cuda") * 0.02).to(torch.bfloat16)
        for M in (1, 64, 200):
            x = torch.randn(128, M, K, device="cuda").to(torch.bfloat16)
            ref_bf16 = torch.bmm(x.float(), w.float())
            cases = []
            for zp, g in ((False, 128), (True, 128), (False, 64)):
                qw = quant.quantize_int4(w, group=g, zero_point=zp)
                ref = x.float() @ quant.dequantize_int4(qw)
                vars_ = ("dot", "persistent") + (("gemv",) if M == 1 and not zp else ())
                for var in vars_:
                    cases.append((f"int4_{var}_g{g}{'_zp' if zp else ''}", ref,
                                  lambda out, qw=qw, var=var: w4a16_launch(
                                      x, qw, out, {"BLOCK_N": 64, "num_warps": 4, "num_stages": 2,  # noqa: B023
                                                   "CTAS_PER_SM": 1}, var)))
            for g in (0, 128):
                for lay in ("shuffled",):
                    fw = quant.quantize_fp8(w, group=g, layout=lay)
                    ref = x.float() @ quant.dequantize_fp8(fw)
                    for var in ("asm", "pers"):
                        cfg = {"BLOCK_N": 64, "BLOCK_K": 128, "SUB": 2, "variant": "asm", "persistent": var == "pers",
                               "CTAS_PER_SM": 1}
                        cases.append((f"fp8_{lay}_{var}_g{g}", ref,
                                      lambda out, fw=fw, cfg=cfg: w8a16_launch(x, fw, out, cfg)))  # noqa: B023
            fw = quant.quantize_fp8(w, layout="natural")
            x8, xs = act_quant_fp8(x)
            ref = (x8.float() * xs[..., None]) @ quant.dequantize_fp8(fw)
            cases.append(("w8a8", ref, lambda out, fw=fw, x8=x8, xs=xs: w8a8_launch(
                x8, xs, fw, out, {"BLOCK_N": 64, "BLOCK_K": 128})))
            for name, ref, fn in cases:
                out = torch.full((128, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
                try:
                    fn(out)
                    torch.cuda.synchronize()
                    r = {"case": name, "K": K, "N": N, "M": M, "err_vs_dequant": mla_probe.rel(out, ref),
                         "quant_err_vs_bf16": mla_probe.rel(out, ref_bf16), "nan": bool(out.isnan().any())}
                except Exception as exc:  # noqa: BLE001
                    r = {"case": name, "K": K, "N": N, "M": M, "error": repr(exc)[-700:]}
                rows.append(r)
            x8r, xsr = quant.quantize_act_fp8(x)
            rows.append({"case": "act_quant", "M": M, "K": K,
                         "x8_mismatch": float((x8.float() != x8r.float()).float().mean()),
                         "xs_err": float((xs - xsr).abs().max())})
    RES["correctness"] = rows
    bad = [r for r in rows if r.get("error") or r.get("nan") or r.get("err_vs_dequant", 0) > 0.02]
    RES["correctness_bad"] = bad


def grid(budget):
    rows = []
    RES["grid"] = rows
    for (M, K, N) in ((1, 128, 512), (1, 512, 128), (8, 128, 512), (8, 512, 128), (64, 128, 512), (64, 512, 128)):
        if True:
            if left(budget) < 0.45 * budget:
                RES["errors"].append(f"grid cut at K={K} M={M}")
                return
            buf = bench.ShapeBuffers(1024, M, K, N, "cold")
            base = bench.time_launches(buf.bf16_fns())
            rows.append({"K": K, "N": N, "M": M, "kind": "bf16", "us": base, "tbps": buf.tbps("bf16", base)})
            todo = []

            def i4(bn, nw=4, ns=2, **kw):
                todo.append(("int4", {"variant": "dot", "BLOCK_N": bn, "num_warps": nw, "num_stages": ns, **kw}))  # noqa: B023
            if K == 128:
                for dep in (False, True):
                    i4(128, DEP=dep)
                    i4(256, 4 if M <= 16 else 8, DEP=dep)
                i4(128, 8, DEP=True)
            else:
                for pf in (False, True):
                    i4(64, PF=pf)
                    i4(128, 4, 3, PF=pf)
                i4(64, 4, 3, PF=True)
                i4(128, 8, 2, PF=True)
            if M <= 16 and K == 128:
                todo.append(("int4", {"variant": "persistent", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3,
                                      "CTAS_PER_SM": 5}))
            if M == 1:
                todo.append(("int4", {"variant": "gemv", "BLOCK_N": 128 if K == 128 else 64, "num_warps": 4,
                                      "num_stages": 2}))
            f8 = [(128, 2, 4, 3), (128, 1, 4, 2)] + ([(256, 2, 4, 3)] if N >= 256 and M <= 16 else [])
            for bn, sub, nw, ns in f8:
                todo.append(("fp8", {"variant": "asm", "BLOCK_N": bn, "SUB": sub, "num_warps": nw, "num_stages": ns}))
            for kind, cfg in todo:
                try:
                    fns = {"int4": lambda: buf.int4_fns(cfg), "fp8": lambda: buf.fp8_fns(cfg),  # noqa: B023
                           "w8a8": lambda: buf.w8a8_fns(cfg)}[kind]()  # noqa: B023
                    kern = fns[0]()[0]
                    us = bench.time_launches(fns)
                    r = {"K": K, "N": N, "M": M, "kind": kind, "cfg": cfg, "us": us, "speedup": base / us,
                         "tbps": buf.tbps("int4" if kind == "int4" else "fp8", us),
                         "n_regs": kern.n_regs, "n_spills": kern.n_spills}
                    if cfg.get("BLOCK_N") == 128 and cfg.get("num_warps") == 4 and M in (1, 64) \
                            and cfg.get("num_stages") in (2, 3) and kind != "w8a8" and cfg.get("CTAS_PER_SM", 2) == 2:
                        pers = "_pers" if cfg.get("persistent") else ""
                        tag = f"{kind}_{cfg.get('variant')}{pers}_s{cfg.get('num_stages')}_K{K}_M{M}"
                        r["sass"] = mla_probe.sass_mix(kern, tag)
                except Exception as exc:  # noqa: BLE001
                    r = {"K": K, "N": N, "M": M, "kind": kind, "cfg": cfg, "error": repr(exc)[-700:]}
                rows.append(r)
                print(f"{K:4d} {M:3d} {kind:5s} {str(cfg):90s} {r.get('us', float('nan')):8.2f}us "
                      f"x{r.get('speedup', 0):.2f} regs={r.get('n_regs')} spills={r.get('n_spills')}", flush=True)
            for kind in ("int4", "fp8"):
                ok = [r for r in rows if r["kind"] == kind and r["K"] == K and r["M"] == M and "us" in r]
                if ok:
                    best = min(ok, key=lambda r: r["us"])
                    WIN[f"{kind}|{M}|{K}|{N}"] = best["cfg"]
            del buf
            torch.cuda.empty_cache()
    RES["winners"] = WIN


def pick(kind, M, K, N):
    b = 1 if M == 1 else (8 if M <= 16 else 64)
    cfg = WIN.get(f"{kind}|{b}|{K}|{N}")
    if cfg is None:
        return tuning.config_for(kind, M, K, N)
    cfg = dict(cfg)
    if cfg.get("variant") == "gemv" and M != 1:
        cfg["variant"] = "dot"
    return cfg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget-s", type=float, default=420)
    ap.add_argument("--skip-l2", action="store_true", help="skip the L2 sweep")
    ap.add_argument("--skip-correctness", action="store_true",
                    help="skip the variant x shape correctness sweep (tests/test_kernels_gpu.py covers the kernels)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    mla_probe.OUT = out
    RES["device"] = bench.device_info()

    def dump():
        (out / "probe2.json").write_text(json.dumps(RES, indent=1, default=str))

    steps = [("bandwidth", bandwidth)] + ([] if a.skip_correctness else [("correctness", correctness)]) + [
        ("grid", lambda: grid(a.budget_s))]
    for name, fn in steps:
        t = time.time()
        try:
            fn()
        except Exception:  # noqa: BLE001
            RES["errors"].append(name + ": " + traceback.format_exc()[-3000:])
        RES["step_s"][name] = round(time.time() - t, 1)
        dump()
        print(name, "done", round(time.time() - T0, 1), flush=True)
    (out / "winners.json").write_text(json.dumps(WIN, indent=1))
    # the bench with the winners
    t = time.time()
    try:
        res = bench.run_mla_bench("deepseek-v3", (1, 8, 64), (1, 8, 32), configs=pick)
        res["configs"] = WIN
        (out / "mla_h200_full.json").write_text(json.dumps(res, indent=1))
        (out / "mla_h200.json").write_text(json.dumps(
            [{k: r[k] for k in bench.ROW_KEYS} for r in res["rows"]], indent=1) + "\n")
        for r in res["rows"]:
            print(f"{r['weight']:5s} L{r['layers']:<3d} M={r['M']:<4d} {r['cache']:4s} bf16 {r['bf16_us']:8.2f} "
                  f"int4 {r['int4_us']:8.2f} (x{r['int4_speedup']:.2f}, {r['int4_tbps']:.2f} TB/s) "
                  f"fp8 {r['fp8_us']:8.2f} (x{r['fp8_speedup']:.2f})", flush=True)
    except Exception:  # noqa: BLE001
        RES["errors"].append("bench: " + traceback.format_exc()[-3000:])
    RES["step_s"]["bench"] = round(time.time() - t, 1)
    dump()
    # ncu on the key shapes
    t = time.time()
    if left(a.budget_s) > 20:
        try:
            cmd = ["ncu", "--clock-control", "none", "--cache-control", "all", "--profile-from-start", "off",
                   "--section", "SpeedOfLight", "--section", "MemoryWorkloadAnalysis", "--section", "Occupancy",
                   "--section", "LaunchStats", "--section", "ComputeWorkloadAnalysis",
                   "--section", "WarpStateStats", "--section", "SchedulerStats",
                   "--csv", "--page", "details", sys.executable, str(HERE / "mla_ncu_target.py"),
                   "--configs", str(out / "winners.json")]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(60, left(a.budget_s)))
            (out / "ncu.csv").write_text(p.stdout + "\n#STDERR\n" + p.stderr[-4000:])
        except Exception:  # noqa: BLE001
            RES["errors"].append("ncu: " + traceback.format_exc()[-2000:])
    RES["step_s"]["ncu"] = round(time.time() - t, 1)
    dump()
    # the L2 sweep
    t = time.time()
    try:
        if a.skip_l2:
            raise SystemExit
        heads = l2sweep.DEFAULT_HEADS if left(a.budget_s) > 70 else l2sweep.DEFAULT_HEADS[::2]
        sw = l2sweep.run_l2_sweep(heads, configs=pick)
        (out / "l2_sweep_h200.json").write_text(json.dumps(sw, indent=1))
        l2sweep.plot(sw, str(out / "l2_sweep_h200.png"))
        print("L2:", {k: sw[k] for k in ("effective_l2_mb", "int4_crossover_mb", "fp8_crossover_mb", "l2_mb")})
    except SystemExit:
        pass
    except Exception:  # noqa: BLE001
        RES["errors"].append("l2: " + traceback.format_exc()[-3000:])
    RES["step_s"]["l2"] = round(time.time() - t, 1)
    dump()
    sass = out / "sass"
    if sass.exists():
        with tarfile.open(out / "sass2.tgz", "w:gz") as tf:
            tf.add(sass, arcname="sass")
        subprocess.run(["rm", "-rf", str(sass)])
    print("bandwidth", RES.get("bandwidth"))
    print("winners", json.dumps(WIN))
    print("bad correctness:", json.dumps(RES.get("correctness_bad", []))[:1500])
    print("errors:", json.dumps(RES["errors"])[:3000])
    print("total", round(time.time() - T0, 1), "s")


if __name__ == "__main__":
    main()
