"""The MLA bench: cuBLAS BF16 ``torch.bmm`` vs the INT4 W4A16 and FP8 W8A16 kernels.

Pydantic-free (plain dicts), so it also runs where only torch and triton are installed
(``python3 -m mcp_server.kernels.bench``); ``engine.mla_bench`` (the ``bench_mla`` tool) wraps it in the typed result.

Method: each timing is the median over replays of one CUDA graph holding many launches,
divided by the launches. *Warm*: every launch uses the same weight set (L2-resident when it
fits). *Cold*: the launches rotate through enough distinct weight sets (at least
``COLD_BYTES`` per format) that each launch streams its weights from HBM. Inputs are random
(never zeros); activations are shared by the launches (in decode they come from the kernel
before, L2-resident); the three formats are timed in the same run, so the speedups compare
like with like.
"""
from __future__ import annotations

import math
import statistics
from typing import Callable

from mcp_server.kernels import quant, tuning

COLD_BYTES = 512 * 2**20      # rotation footprint per format for "cold" (>8x the 60 MB L2)
MIN_LAUNCHES = 48             # launches per captured graph
REPLAYS = 15


def cupti_us(fns, cycles: int | None = None) -> float:
    """Mean device time per launch (µs) of ``fns``, from the profiler's CUDA kernel records
    (``cycles`` passes over ``fns``; default: at least 30 launches)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cycles = cycles or max(3, -(-30 // len(fns)))
    for f in fns:
        f()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(cycles):
            for f in fns:
                f()
        torch.cuda.synchronize()
    tot = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == DeviceType.CUDA)
    return tot / (cycles * len(fns))


def device_info() -> dict:
    import torch
    import triton

    p = torch.cuda.get_device_properties(0)
    return {
        "name": p.name, "sm_count": p.multi_processor_count,
        "l2_bytes": int(getattr(p, "L2_cache_size", 0)), "total_memory": int(p.total_memory),
        "capability": f"{p.major}.{p.minor}", "torch": torch.__version__, "triton": triton.__version__,
        "cuda": torch.version.cuda,
    }


def time_launches(fns: list[Callable[[], object]], replays: int = REPLAYS,
                  min_launches: int = MIN_LAUNCHES) -> float:
    """Median µs per launch of ``fns`` (cycled to at least ``min_launches``), CUDA-graph timed."""
    import torch

    cycles = max(1, math.ceil(min_launches / len(fns)))
    seq = fns * cycles
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for f in fns:           # compile, warm up, allocate outside the capture
            f()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for f in seq:
            f()
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / len(seq))
    del graph
    return statistics.median(times)


def copy_tbps(nbytes: int = 4 * 2**30) -> float:
    """Device-to-device copy bandwidth, TB/s counting bytes read plus bytes written.

    Timed with events around plain launches, not in a CUDA graph: captured, ``copy_`` becomes a
    graph memcpy node, which measured 2.77 TB/s on the H200 against 4.27 TB/s for the copy
    kernel (the same 4 GiB, same run).
    """
    import torch

    a = torch.randn(nbytes // 4, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        b.copy_(a)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end) / 10
    del a, b
    torch.cuda.empty_cache()
    return 2 * nbytes / (ms * 1e-3) / 1e12


def read_tbps(nbytes: int = 4 * 2**30) -> float:
    """Read-only bandwidth (an ``amax`` reduction over ``nbytes``), TB/s."""
    import torch

    a = torch.randn(nbytes // 4, device="cuda")
    us = time_launches([a.amax], replays=10, min_launches=10)
    del a
    torch.cuda.empty_cache()
    return nbytes / (us * 1e-6) / 1e12


def n_sets(set_bytes: int, cache: str) -> int:
    return 1 if cache == "warm" else max(2, math.ceil(COLD_BYTES / set_bytes))


class ShapeBuffers:
    """Random weights of one shape in the three formats, ``n_sets`` copies each, and activations."""

    def __init__(self, H: int, M: int, K: int, N: int, cache: str, group: int = 128, seed: int = 0,
                 fp8_group: int = 0):
        import torch

        g = torch.Generator(device="cuda")
        g.manual_seed(seed)
        self.H, self.M, self.K, self.N, self.cache = H, M, K, N, cache
        self.x = (torch.randn(H, M, K, device="cuda", generator=g) * 0.5).to(torch.bfloat16)
        nb = n_sets(2 * H * K * N, cache)
        self.bf16 = [(torch.randn(H, K, N, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
                     for _ in range(nb)]
        first = quant.random_int4(H, K, N, group=group, generator=g)
        ni = n_sets(first.nbytes(), cache)
        self.int4 = [first] + [quant.random_int4(H, K, N, group=group, generator=g) for _ in range(ni - 1)]
        f0 = quant.random_fp8(H, K, N, group=fp8_group, generator=g)
        nf = n_sets(f0.nbytes(), cache)
        self.fp8 = [f0] + [quant.random_fp8(H, K, N, group=fp8_group, generator=g) for _ in range(nf - 1)]
        self.out = torch.empty(H, M, N, device="cuda", dtype=torch.bfloat16)
        self.act_bytes = self.x.numel() * 2 + self.out.numel() * 2

    def bf16_fns(self):
        import torch

        x, out = self.x, self.out
        return [lambda w=w: torch.bmm(x, w, out=out) for w in self.bf16]

    def int4_fns(self, config: dict | None = None, variant: str | None = None):
        from mcp_server.kernels.w4a16 import w4a16_launch

        x, out = self.x, self.out
        return [lambda w=w: w4a16_launch(x, w, out, config, variant) for w in self.int4]

    def fp8_fns(self, config: dict | None = None):
        from mcp_server.kernels.w8a16 import w8a16_launch

        x, out = self.x, self.out
        return [lambda w=w: w8a16_launch(x, w, out, config) for w in self.fp8]

    def w8a8_fns(self, config: dict | None = None):
        from mcp_server.kernels.w8a16 import act_quant_fp8, w8a8_launch

        x, out = self.x, self.out
        x8, xs = act_quant_fp8(x)

        def run(w):
            act_quant_fp8(x, x8, xs)
            return w8a8_launch(x8, xs, w, out, config)
        return [lambda w=w: run(w) for w in self.fp8]

    def tbps(self, fmt: str, us: float) -> float:
        wb = {"bf16": 2 * self.H * self.K * self.N, "int4": self.int4[0].nbytes(),
              "fp8": self.fp8[0].nbytes()}[fmt]
        return (wb + self.act_bytes) / (us * 1e-6) / 1e12


#: The committed row format of bench/results/mla_h200.json (the issue's "Done when").
ROW_KEYS = ("model", "H", "M", "K", "N", "weight_mb", "cache", "bf16_us", "int4_us", "fp8_us",
            "int4_speedup", "fp8_speedup", "int4_tbps")


def bench_row(shape, cache: str, group: int = 128, configs=None, cupti: bool = False) -> dict:
    """One row of the MLA table (the keys of bench/results/mla_h200.json, plus extras).

    ``configs``: optional ``fn(kind, M, K, N) -> config`` (default ``tuning.config_for`` with H);
    ``cupti``: also the CUPTI kernel time of each format (``decode.cupti_us``), ``*_cupti_us``.
    """

    from mcp_server.kernels.w4a16_cuda import resolve

    def pick(kind, M, K, N):
        return configs(kind, M, K, N) if configs else tuning.config_for(kind, M, K, N, shape.H)
    buf = ShapeBuffers(shape.H, shape.M, shape.K, shape.N, cache, group=group)
    cfg4, cfg8 = pick("int4", shape.M, shape.K, shape.N), pick("fp8", shape.M, shape.K, shape.N)
    fns = {"bf16": buf.bf16_fns(), "int4": buf.int4_fns(cfg4), "fp8": buf.fp8_fns(cfg8)}
    bf16 = time_launches(fns["bf16"])
    int4 = time_launches(fns["int4"])
    fp8 = time_launches(fns["fp8"])
    row = {
        "model": shape.model, "H": shape.H, "M": shape.M, "K": shape.K, "N": shape.N,
        "weight_mb": round(shape.weight_mb, 2), "cache": cache,
        "bf16_us": round(bf16, 2), "int4_us": round(int4, 2), "fp8_us": round(fp8, 2),
        "int4_speedup": round(bf16 / int4, 3), "fp8_speedup": round(bf16 / fp8, 3),
        "int4_tbps": round(buf.tbps("int4", int4), 3),
        # extras (not in the committed row format)
        "weight": shape.weight, "layers": shape.layers,
        "bf16_tbps": round(buf.tbps("bf16", bf16), 3), "fp8_tbps": round(buf.tbps("fp8", fp8), 3),
        "int4_kernel": resolve(cfg4).get("variant", "dot"), "fp8_kernel": resolve(cfg8, fp8=True).get("variant", "asm"),
    }
    if cupti:
        for fmt, f in fns.items():
            us = cupti_us(f)
            row[f"{fmt}_cupti_us"] = round(us, 2)
            row[f"{fmt}_cupti_tbps"] = round(buf.tbps(fmt, us), 3)
        for fmt in ("int4", "fp8"):
            row[f"{fmt}_cupti_speedup"] = round(row["bf16_cupti_us"] / row[f"{fmt}_cupti_us"], 3)
    del buf
    return row


def check_shape(shape, group: int = 128, seed: int = 0, configs=None) -> dict:
    """Correctness on random inputs: kernel vs dequantized reference, and the quantization error
    of each format against the BF16 product (relative Frobenius norms)."""
    import torch

    from mcp_server.kernels.w4a16 import w4a16_bmm
    from mcp_server.kernels.w8a16 import w8a16_bmm

    pick = configs or tuning.config_for
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    H = min(shape.H, 128)
    w = (torch.randn(H, shape.K, shape.N, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    x = torch.randn(H, shape.M, shape.K, device="cuda", generator=g).to(torch.bfloat16)
    ref = torch.bmm(x.float(), w.float())
    qi = quant.quantize_int4(w, group=group)
    qf = quant.quantize_fp8(w)

    def rel(a, b):
        return float((a.float() - b).norm() / b.norm())

    oi = w4a16_bmm(x, qi, config=pick("int4", shape.M, shape.K, shape.N))
    of = w8a16_bmm(x, qf, config=pick("fp8", shape.M, shape.K, shape.N))
    return {
        "int4_kernel_err": rel(oi, x.float() @ quant.dequantize_int4(qi)),
        "fp8_kernel_err": rel(of, x.float() @ quant.dequantize_fp8(qf)),
        "int4_quant_err": rel(oi, ref), "fp8_quant_err": rel(of, ref),
        "bf16_err": rel(torch.bmm(x, w), ref),
    }


def run_mla_bench(model: str = "deepseek-v3", batches=(1, 8, 64), stacks=(1, 8, 32),
                  caches=("warm", "cold"), group: int = 128, check: bool = True,
                  configs=None, progress=None, deadline: float | None = None, cupti: bool = False) -> dict:
    """Every shape x cache of the model; plain dict with rows, device facts and checks.

    ``deadline`` (``time.monotonic()`` value): no new shape starts after it; ``timed_out`` says so.
    """
    import time

    from mcp_server.kernels import configs as cfgs

    shapes = cfgs.mla_shapes(model, batches, stacks)
    total = len(shapes) * len(caches)
    rows: list[dict] = []
    checks: list[dict] = []
    res: dict = {"model": model, "device": device_info(), "copy_tbps": copy_tbps(), "read_tbps": read_tbps(),
                 "rows": rows, "checks": checks, "group": group, "method": {
               "timing": f"CUDA graph of >= {MIN_LAUNCHES} launches, median of {REPLAYS} replays",
               "cold_bytes_per_format": COLD_BYTES}}
    done = 0
    res["timed_out"] = False
    for shape in shapes:
        if deadline is not None and time.monotonic() > deadline:
            res["timed_out"] = True
            break
        if check and shape.layers == 1:
            checks.append({"shape": shape.label, "M": shape.M, **check_shape(shape, group, configs=configs)})
        for cache in caches:
            rows.append(bench_row(shape, cache, group, configs, cupti))
            done += 1
            if progress:
                progress(done, total, f"{shape.label} {cache}")
    return res


def main(argv=None) -> int:
    """``python3 -m mcp_server.kernels.bench --model deepseek-v3 --out mla.json``."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-v3")
    ap.add_argument("--batch", default="1,8,64")
    ap.add_argument("--stacks", default="1,8,32")
    ap.add_argument("--out", default="mla.json")
    a = ap.parse_args(argv)
    res = run_mla_bench(a.model, [int(v) for v in a.batch.split(",")],
                        [int(v) for v in a.stacks.split(",")])
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    for r in res["rows"]:
        print(f"{r['weight']:5s} L{r['layers']:<3d} M={r['M']:<4d} {r['cache']:4s} bf16 {r['bf16_us']:8.2f} "
              f"int4 {r['int4_us']:8.2f} (x{r['int4_speedup']:.2f}) fp8 {r['fp8_us']:8.2f} (x{r['fp8_speedup']:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
