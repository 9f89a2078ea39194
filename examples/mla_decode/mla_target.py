#!/usr/bin/env python3
"""The kernel-compass worked example's target: DeepSeek-V3's absorbed W_UV reconstruction BMM in decode.

``o[H, M, v_head] = o_latent[H, M, kv_lora] @ W_UV[H, kv_lora, v_head]`` with H = 128 heads x
``--layers`` (a serving engine cycles through every layer's weights, so stacking layers is what
pushes them out of L2: 1 layer = 16 MB of bf16 weights, 16 layers = 256 MB). Launches the cuBLAS
bf16 BMM ``--iters`` times on random data, for Nsight Compute to profile.

    python mla_target.py --layers 16 --batch 1 --iters 3
"""
from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    a = ap.parse_args()
    import torch
    from mla_fns import KV_LORA, V_HEAD, heads

    torch.manual_seed(0)
    H = heads(a.layers)
    # random data made on the CPU and copied over, so the only kernels the profile sees are the BMMs
    x = torch.randn(H, a.batch, KV_LORA, dtype=torch.bfloat16).to("cuda")
    w = (torch.randn(H, KV_LORA, V_HEAD) * 0.02).to(torch.bfloat16).to("cuda")
    for _ in range(a.iters):
        torch.bmm(x, w)
    torch.cuda.synchronize()
    print(f"W_UV bmm: H={H} M={a.batch} K={KV_LORA} N={V_HEAD}, {w.numel() * 2 / 2**20:.0f} MiB of bf16 weights")


if __name__ == "__main__":
    main()
