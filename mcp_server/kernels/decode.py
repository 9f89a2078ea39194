"""The decode-GEMM bench: ordinary Linear layers at decode (one weight matrix, H = 1), cuBLAS BF16
``F.linear`` vs PyTorch's own W4A16 kernel (``torch.ops.aten._weight_int4pack_mm``, "tinygemm",
where the installed torch has it) vs kernelscope's INT4 W4A16 and FP8 W8A16 kernels.

Pydantic-free (plain dicts), so it also runs where only torch and triton are installed
(``python3 -m mcp_server.kernels.decode``); ``engine.decode_gemm`` (the ``bench_decode_gemm`` tool) wraps it in
the typed result.

Method: cold only (a serving engine reads each layer's weights once per step): every format
rotates through at least ``bench.COLD_BYTES`` of distinct weight sets. Two timings per format,
same run: the CUDA-graph wall time per launch (``bench.time_launches``, as in the MLA bench) and
the CUPTI kernel time (``torch.profiler`` device durations, eager launches, summed per launch).
The share of the DRAM roof is the bytes moved (weights, scales, activations, output) over the
kernel time, against the device copy bandwidth measured in the same run.
"""
from __future__ import annotations

from mcp_server.kernels import bench, quant, tuning
from mcp_server.kernels.bench import cupti_us

#: The issue's Linear shapes, (K, N): x[M, K] @ W[K, N].
DECODE_SHAPES = ((4096, 4096), (8192, 8192), (7168, 2048), (2048, 7168))
DECODE_BATCHES = (1, 8, 16)
TINYGEMM_INNER_K_TILES = 8


def tinygemm_available() -> bool:
    """Whether this torch has ``_weight_int4pack_mm`` and ``_convert_weight_to_int4pack`` for CUDA."""
    try:
        import torch
    except ImportError:
        return False
    ops = torch.ops.aten
    return hasattr(ops, "_weight_int4pack_mm") and hasattr(ops, "_convert_weight_to_int4pack")


class DecodeBuffers:
    """Cold weight sets of one Linear shape in every format, and the activations."""

    def __init__(self, M: int, K: int, N: int, group: int = 128, seed: int = 0, formats=None):
        import torch

        g = torch.Generator(device="cuda")
        g.manual_seed(seed)
        self.M, self.K, self.N, self.group = M, K, N, group
        fm = set(formats or ("bf16", "tinygemm", "int4", "fp8"))
        self.x = (torch.randn(1, M, K, device="cuda", generator=g) * 0.5).to(torch.bfloat16)
        self.out = torch.empty(1, M, N, device="cuda", dtype=torch.bfloat16)
        self.act_bytes = M * K * 2 + M * N * 2
        self.bytes = {"bf16": 2 * K * N, "int4": K * N // 2 + (K // group) * N * 2, "fp8": K * N + N * 4,
                      "tinygemm": K * N // 2 + (K // group) * N * 4}

        def sets(fmt):
            return bench.n_sets(self.bytes[fmt], "cold") if fmt in fm else 0

        self.bf16 = [(torch.randn(N, K, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
                     for _ in range(sets("bf16"))]
        self.int4 = [quant.random_int4(1, K, N, group=group, generator=g) for _ in range(sets("int4"))]
        self.fp8 = [quant.random_fp8(1, K, N, generator=g) for _ in range(sets("fp8"))]
        self.tiny: list = []
        if "tinygemm" in fm and tinygemm_available():
            for _ in range(sets("tinygemm")):
                q = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device="cuda", generator=g)
                packed = torch.ops.aten._convert_weight_to_int4pack(q, TINYGEMM_INNER_K_TILES)
                sz = torch.empty(K // group, N, 2, device="cuda", dtype=torch.bfloat16)
                sz[..., 0] = (torch.rand(K // group, N, device="cuda", generator=g) * 0.02 + 0.001)
                sz[..., 1] = (torch.rand(K // group, N, device="cuda", generator=g) - 0.5) * 0.01
                self.tiny.append((packed, sz))

    def fns(self, fmt: str, config: dict | None = None) -> list:
        import torch
        import torch.nn.functional as F

        x, out = self.x, self.out
        x2 = x[0]
        if fmt == "bf16":
            return [lambda w=w: F.linear(x2, w) for w in self.bf16]
        if fmt == "tinygemm":
            return [lambda p=p, sz=sz: torch.ops.aten._weight_int4pack_mm(x2, p, self.group, sz)
                    for p, sz in self.tiny]
        if fmt == "int4":
            from mcp_server.kernels.w4a16 import w4a16_launch

            return [lambda w=w: w4a16_launch(x, w, out, config) for w in self.int4]
        from mcp_server.kernels.w8a16 import w8a16_launch

        return [lambda w=w: w8a16_launch(x, w, out, config) for w in self.fp8]

    def tbps(self, fmt: str, us: float) -> float:
        return (self.bytes[fmt] + self.act_bytes) / (us * 1e-6) / 1e12


def check_decode(M: int, K: int, N: int, group: int = 128, seed: int = 0, configs=None) -> dict:
    """Correctness on quantized real-valued weights (a bf16 matrix quantized, not random codes):
    relative Frobenius and max errors of each kernel against x @ dequantized W (fp32)."""
    import torch

    from mcp_server.kernels.w4a16 import w4a16_bmm
    from mcp_server.kernels.w8a16 import w8a16_bmm

    pick = configs or tuning.config_for
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    w = (torch.randn(1, K, N, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    x = torch.randn(1, M, K, device="cuda", generator=g).to(torch.bfloat16)
    res: dict = {"M": M, "K": K, "N": N}
    qi, qf = quant.quantize_int4(w, group=group), quant.quantize_fp8(w)
    for fmt, ref in (("int4", x.float() @ quant.dequantize_int4(qi)), ("fp8", x.float() @ quant.dequantize_fp8(qf))):
        outs = []
        for _ in range(2):     # twice: a split-K reduction must give the same bits
            o = torch.full((1, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            if fmt == "int4":
                w4a16_bmm(x, qi, out=o, config=pick(fmt, M, K, N))
            else:
                w8a16_bmm(x, qf, out=o, config=pick(fmt, M, K, N))
            outs.append(o)
        o = outs[0]
        res[f"{fmt}_rel_err"] = float((o.float() - ref).norm() / ref.norm())
        res[f"{fmt}_max_rel_err"] = float((o.float() - ref).abs().max() / ref.abs().max())
        res[f"{fmt}_nan"] = bool(o.isnan().any())
        res[f"{fmt}_repeatable"] = bool(torch.equal(outs[0], outs[1]))
    ref = x.float() @ w.float()
    res["bf16_rel_err"] = float((torch.bmm(x, w).float() - ref).norm() / ref.norm())
    return res


def bench_decode_row(M: int, K: int, N: int, group: int = 128, configs=None, cupti: bool = True) -> dict:
    """One (M, K, N): graph and CUPTI µs for BF16, tinygemm (when present), INT4 and FP8."""
    from mcp_server.kernels.w4a16_cuda import resolve

    pick = configs or tuning.config_for
    buf = DecodeBuffers(M, K, N, group)
    row: dict = {"M": M, "K": K, "N": N, "bf16_mb": round(2 * K * N / 1e6, 2)}
    for fmt in ("bf16", "tinygemm", "int4", "fp8"):
        if fmt == "tinygemm" and not buf.tiny:
            row["tinygemm_us"] = None
            continue
        fns = buf.fns(fmt, pick(fmt, M, K, N) if fmt in ("int4", "fp8") else None)
        us = bench.time_launches(fns)
        row[f"{fmt}_us"] = round(us, 2)
        row[f"{fmt}_tbps"] = round(buf.tbps(fmt, us), 3)
        if cupti:
            cu = cupti_us(fns)
            row[f"{fmt}_cupti_us"] = round(cu, 2)
            row[f"{fmt}_cupti_tbps"] = round(buf.tbps(fmt, cu), 3)
    row["int4_config"], row["fp8_config"] = resolve(pick("int4", M, K, N)), resolve(pick("fp8", M, K, N), fp8=True)
    row["tuned"] = tuning.is_tuned("int4", M, K, N) and tuning.is_tuned("fp8", M, K, N)
    for fmt in ("tinygemm", "int4", "fp8"):
        if row.get(f"{fmt}_us"):
            row[f"{fmt}_speedup"] = round(row["bf16_us"] / row[f"{fmt}_us"], 3)
            if cupti:
                row[f"{fmt}_cupti_speedup"] = round(row["bf16_cupti_us"] / row[f"{fmt}_cupti_us"], 3)
    floor = max(row["bf16_us"], row["tinygemm_us"] or 0.0)
    row["int4_below_floor"] = row["int4_us"] > floor * 1.02
    del buf
    return row


def run_decode_bench(shapes=DECODE_SHAPES, batches=DECODE_BATCHES, group: int = 128, check: bool = True,
                     configs=None, cupti: bool = True, progress=None, deadline: float | None = None) -> dict:
    """Every (K, N) x M: rows, checks, the copy bandwidth of the same run; plain dict."""
    import time

    res: dict = {"device": bench.device_info(), "copy_tbps": bench.copy_tbps(), "tinygemm": tinygemm_available(),
                 "group": group, "rows": [], "checks": [], "timed_out": False, "method": {
                     "graph": f"CUDA graph of >= {bench.MIN_LAUNCHES} launches, median of {bench.REPLAYS} replays",
                     "cupti": "torch.profiler CUDA kernel durations, eager launches (>= 30), mean per launch",
                     "cold_bytes_per_format": bench.COLD_BYTES}}
    total = len(shapes) * len(batches)
    done = 0
    for K, N in shapes:
        for M in batches:
            if deadline is not None and time.monotonic() > deadline:
                res["timed_out"] = True
                return res
            if check:
                res["checks"].append(check_decode(M, K, N, group, configs=configs))
            res["rows"].append(bench_decode_row(M, K, N, group, configs, cupti))
            done += 1
            if progress:
                progress(done, total, f"{K}x{N} M={M}")
    return res


def fmt_row(r: dict) -> str:
    def f(v):
        return "   -   " if v is None else f"{v:7.2f}"
    return (f"K{r['K']:5d} N{r['N']:5d} M{r['M']:3d} bf16 {f(r['bf16_us'])} tiny {f(r.get('tinygemm_us'))} "
            f"int4 {f(r['int4_us'])} fp8 {f(r['fp8_us'])} | cupti bf16 {f(r.get('bf16_cupti_us'))} "
            f"tiny {f(r.get('tinygemm_cupti_us'))} int4 {f(r.get('int4_cupti_us'))} fp8 {f(r.get('fp8_cupti_us'))}")


def main(argv=None) -> int:
    """``python3 -m mcp_server.kernels.decode --out decode.json``."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(f"{k}x{n}" for k, n in DECODE_SHAPES), help="KxN,KxN,...")
    ap.add_argument("--batch", default="1,8,16")
    ap.add_argument("--out", default="decode.json")
    a = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in a.shapes.split(",")]
    res = run_decode_bench(shapes, batches=[int(v) for v in a.batch.split(",")])
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    for r in res["rows"]:
        print(fmt_row(r) + ("" if r["tuned"] else "  (untuned)") + ("  BELOW FLOOR" if r["int4_below_floor"] else ""))
    for c in res["checks"]:
        print({k: (round(v, 5) if isinstance(v, float) else v) for k, v in c.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
