"""Baseline, candidate and inputs of the worked example, for validate_candidate.

The inputs hold the same weights in both forms: ``w`` bf16 (what the baseline multiplies) and
its INT4 W4A16 packing (``qweight``, ``scales``; group 128, symmetric, power-of-two scales), with
``w`` exactly the dequantized packing, so both functions compute the same product and the candidate pays no
quantization at call time (the weights are quantized once, offline, as a serving engine would).
"""
from __future__ import annotations

KV_LORA = 512       # DeepSeek-V3 kv_lora_rank: the BMM's K
V_HEAD = 128        # v_head_dim: the BMM's N
HEADS = 128         # num_attention_heads
GROUP = 128


def heads(layers: int) -> int:
    return HEADS * layers


def make_inputs(shape: dict, dtype, device: str, seed: int):
    import torch

    from mcp_server.kernels.quant import dequantize_int4, random_int4

    g = torch.Generator(device=device).manual_seed(seed)
    H, M = heads(int(shape["layers"])), int(shape["M"])
    q = random_int4(H, KV_LORA, V_HEAD, group=GROUP, device=device, generator=g)
    # power-of-two group scales: (code - 8) * scale is then exact in bf16, so the bf16 weights are
    # *exactly* the INT4 weights and the two functions differ only in summation order
    exps = torch.randint(-9, -4, q.scales.shape, device=device, generator=g).float()
    q.scales = torch.exp2(exps).to(torch.bfloat16)
    w = dequantize_int4(q, dtype=dtype)                              # [H, K, N], exact in bf16
    x = torch.randn(H, M, KV_LORA, device=device, dtype=dtype, generator=g)
    return x, w, q.qweight, q.scales


def bf16_bmm(x, w, qweight, scales):
    import torch

    return torch.bmm(x, w)


def int4_bmm(x, w, qweight, scales):
    from mcp_server.kernels.quant import Int4Weights
    from mcp_server.kernels.w4a16 import w4a16_bmm

    return w4a16_bmm(x, Int4Weights(qweight, scales, None, GROUP, KV_LORA, V_HEAD))
