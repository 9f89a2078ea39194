"""Small GPU targets whose bottleneck is known by construction, for the ncu fixtures.

Run under Nsight Compute with ``--profile-from-start off``: each target is set up
(allocation, random fill, Triton compile, warm-up) outside the profiled region,
then launched ``--reps`` times between ``cudaProfilerStart`` / ``cudaProfilerStop``
inside an NVTX push/pop range named after the target.

    python3 tools/ncu_targets.py [--reps 3] [--chatty] TARGET [TARGET ...]

Targets (what they are built to be bound by):

gemm_bf16     torch.mm 8192x8192x8192 bf16: tensor pipe (compute-bound)
fma_chain     Triton kernel, 4 independent fp32 FMA chains of 2048 steps per element over
              132*64*256 elements (8448 programs of 256 elements, 128 threads each): FMA pipe
elementwise   torch.add of two 64 Mi-element fp32 tensors (768 MiB moved): DRAM
bmm_hbm       MLA-like torch.bmm [128,1,4096] x [128,4096,512] bf16 (512 MiB of weights): DRAM
bmm_l2        the same BMM at [128,1,128] x [128,128,512] (16 MiB of weights, fits the 60 MB L2):
              DRAM when caches are flushed (--cache-control all), L2 when warm (none)
tiny_add      torch.add on 1024 fp32 elements: one block, launch/latency-bound (small grid)

``--chatty`` prints lines on stdout between launches (to make a ``--csv`` stdout capture
where the application's output is mixed into ncu's).
"""
from __future__ import annotations

import argparse
import sys

TARGETS = ("gemm_bf16", "fma_chain", "elementwise", "bmm_hbm", "bmm_l2", "tiny_add")


def _fma_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def fma_chain_kernel(x_ptr, out_ptr, a, b, ITERS: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        y0 = x
        y1 = x + 1.0
        y2 = x + 2.0
        y3 = x + 3.0
        for _ in range(ITERS):
            y0 = y0 * a + b
            y1 = y1 * a + b
            y2 = y2 * a + b
            y3 = y3 * a + b
        tl.store(out_ptr + offs, y0 + y1 + y2 + y3)

    return fma_chain_kernel


def build(name: str):
    """Allocate inputs and return a zero-argument launcher for target ``name``."""
    import torch

    dev = "cuda"
    g = torch.Generator(device=dev)
    g.manual_seed(0)
    if name == "gemm_bf16":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=g)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=g)
        return lambda: torch.mm(a, b)
    if name == "fma_chain":
        kern = _fma_kernel()
        block = 256
        n = 132 * 64 * block
        x = torch.rand(n, device=dev, dtype=torch.float32, generator=g)
        out = torch.empty_like(x)
        grid = (n // block,)
        return lambda: kern[grid](x, out, 0.999, 0.001, ITERS=2048, BLOCK=block)
    if name == "elementwise":
        x = torch.randn(64 << 20, device=dev, dtype=torch.float32, generator=g)
        y = torch.randn(64 << 20, device=dev, dtype=torch.float32, generator=g)
        return lambda: torch.add(x, y)
    if name in ("bmm_hbm", "bmm_l2"):
        k = 4096 if name == "bmm_hbm" else 128
        q = torch.randn(128, 1, k, device=dev, dtype=torch.bfloat16, generator=g)
        w = torch.randn(128, k, 512, device=dev, dtype=torch.bfloat16, generator=g)
        return lambda: torch.bmm(q, w)
    if name == "tiny_add":
        x = torch.randn(1024, device=dev, dtype=torch.float32, generator=g)
        y = torch.randn(1024, device=dev, dtype=torch.float32, generator=g)
        return lambda: torch.add(x, y)
    raise SystemExit(f"unknown target {name!r}; choose from {', '.join(TARGETS)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="+", choices=TARGETS)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--chatty", action="store_true")
    args = ap.parse_args(argv)

    import torch

    launchers = {}
    for name in args.targets:
        fn = build(name)
        fn()  # warm-up: cuBLAS heuristics, Triton compile
        launchers[name] = fn
    torch.cuda.synchronize()
    cudart = torch.cuda.cudart()
    cudart.cudaProfilerStart()
    for name, fn in launchers.items():
        torch.cuda.nvtx.range_push(name)
        for i in range(args.reps):
            if args.chatty:
                print(f"target {name}: launch {i + 1} of {args.reps}, shapes fixed, seed 0", flush=True)
            fn()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    cudart.cudaProfilerStop()
    if args.chatty:
        print("targets done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
