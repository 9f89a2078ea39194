"""Quantize / dequantize helpers for the W4A16 and W8A16 kernels (torch, imported lazily).

Weights arrive in the BMM's logical layout ``W[H, K, N]`` (BF16). The kernels read them
*transposed and packed* ("pre-shuffled at quantization time"):

INT4 (``Int4Weights``)
    ``qweight``: int32 ``[H, N, K // 8]``; each row n holds K 4-bit codes, eight per int32.
    Within each block of 128 consecutive k (16 words), word ``i`` holds, in nibble ``j``
    (bits ``4j..4j+3``), the code of ``k = 16 * j + i``. Unpacking nibble j of a [BN, 16] word
    tile therefore yields a [BN, 16] tile of 16 *consecutive* k: a ready dot operand, no
    reshape or interleave in the kernel. Codes are unsigned 0..15; the value is
    ``(q - z) * s``, with ``z = 8`` when there are no zero points (symmetric).
    ``scales``: bf16 ``[H, K // group, N]``; ``zeros`` (optional): bf16 ``[H, K // group, N]``
    holding integer zero points 0..15.
FP8 (``Fp8Weights``)
    ``weight``: float8_e4m3fn ``[H, N, K]`` (K contiguous); ``scales``: fp32 ``[H, 1, N]``
    (per output channel) or ``[H, K // group, N]`` (per group along K). Layout "shuffled"
    (the W8A16 kernel's): within each block of 64 k (16 int32 words), byte j of word i holds
    k = 16 j + i, the same trick as INT4; "natural" (the W8A8 kernel's): k in order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PACK_K = 128            # k per packing block (16 int32 words)
FP8_MAX = 448.0         # largest finite float8_e4m3fn


@dataclass
class Int4Weights:
    qweight: Any        # int32 [H, N, K // 8]
    scales: Any         # bf16 [H, K // group, N]
    zeros: Any | None   # bf16 [H, K // group, N] or None (symmetric, z = 8)
    group: int
    K: int
    N: int

    @property
    def H(self) -> int:
        return int(self.qweight.shape[0])

    def nbytes(self) -> int:
        n = self.qweight.numel() * 4 + self.scales.numel() * self.scales.element_size()
        if self.zeros is not None:
            n += self.zeros.numel() * self.zeros.element_size()
        return n


@dataclass
class Fp8Weights:
    weight: Any         # float8_e4m3fn [H, N, K]
    scales: Any         # fp32 [H, 1 or K // group, N]
    group: int          # 0 = per channel
    K: int
    N: int
    layout: str = "shuffled"   # "shuffled" (W8A16 kernel) or "natural" (W8A8 kernel)

    @property
    def H(self) -> int:
        return int(self.weight.shape[0])

    def nbytes(self) -> int:
        return self.weight.numel() + self.scales.numel() * 4


def _check_group(K: int, group: int) -> None:
    if group < 16 or group % 16 or (group < PACK_K and PACK_K % group) or (group >= PACK_K and group % PACK_K):
        raise ValueError(f"group={group}: must be 16, 32, 64 or a multiple of {PACK_K}")
    if K % PACK_K or K % group:
        raise ValueError(f"K={K} must be a multiple of {PACK_K} and of group={group}")


def pack_int4(codes):
    """Pack unsigned codes ``[H, K, N]`` (0..15, any int dtype) into ``qweight [H, N, K // 8]``."""
    import torch

    H, K, N = codes.shape
    c = codes.to(torch.int64).transpose(1, 2).reshape(H, N, K // PACK_K, 8, 16)  # [.., j, i]
    shifts = (torch.arange(8, device=codes.device, dtype=torch.int64) * 4).view(1, 1, 1, 8, 1)
    words = (c << shifts).sum(dim=3, dtype=torch.int64)     # disjoint bits: sum == or
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return words.reshape(H, N, K // 8).contiguous()


def unpack_int4(qweight, K: int):
    """Inverse of ``pack_int4``: codes ``[H, K, N]`` as int32 (0..15)."""
    import torch

    H, N, _ = qweight.shape
    w = qweight.reshape(H, N, K // PACK_K, 1, 16).to(torch.int64) & 0xFFFFFFFF
    shifts = (torch.arange(8, device=qweight.device, dtype=torch.int64) * 4).view(1, 1, 1, 8, 1)
    codes = ((w >> shifts) & 0xF).to(torch.int32)            # [H, N, K/128, 8, 16]
    return codes.reshape(H, N, K).transpose(1, 2).contiguous()


def quantize_int4(w, group: int = 128, zero_point: bool = False) -> Int4Weights:
    """Group-wise 4-bit quantization of ``w[H, K, N]`` along K (round to nearest)."""
    import torch

    H, K, N = w.shape
    _check_group(K, group)
    wf = w.float().reshape(H, K // group, group, N)
    if zero_point:
        lo = wf.amin(dim=2, keepdim=True)
        hi = wf.amax(dim=2, keepdim=True)
        scale = ((hi - lo) / 15.0).clamp_min(1e-8)
        zero = torch.round(-lo / scale).clamp(0, 15)
        q = torch.round(wf / scale + zero).clamp(0, 15)
    else:
        amax = wf.abs().amax(dim=2, keepdim=True)
        scale = (amax / 7.0).clamp_min(1e-8)
        zero = None
        q = torch.round(wf / scale).clamp(-8, 7) + 8
    # the kernel multiplies by the bf16 scale: quantize against the rounded value
    scale_bf = scale.to(torch.bfloat16)
    codes = q.to(torch.int32).reshape(H, K, N)
    return Int4Weights(
        qweight=pack_int4(codes),
        scales=scale_bf.reshape(H, K // group, N).contiguous(),
        zeros=None if zero is None else zero.to(torch.bfloat16).reshape(H, K // group, N).contiguous(),
        group=group, K=K, N=N)


def dequantize_int4(qw: Int4Weights, dtype=None):
    """``W[H, K, N]`` as the kernel sees it (fp32 unless ``dtype``)."""

    codes = unpack_int4(qw.qweight, qw.K).float()            # [H, K, N]
    H, K, N = codes.shape
    g = qw.group
    s = qw.scales.float().repeat_interleave(g, dim=1)        # [H, K, N]
    z = qw.zeros.float().repeat_interleave(g, dim=1) if qw.zeros is not None else 8.0
    w = (codes - z) * s
    return w if dtype is None else w.to(dtype)


FP8_BLOCK = 64


def shuffle_fp8(w8):
    """Natural ``[H, N, K]`` e4m3 -> the W8A16 kernel's layout (word i, byte j = k 16 j + i)."""
    H, N, K = w8.shape
    u = w8.view(_torch().uint8).reshape(H, N, K // FP8_BLOCK, 4, 16).transpose(-1, -2)
    return u.contiguous().reshape(H, N, K).view(w8.dtype)


def unshuffle_fp8(w8):
    H, N, K = w8.shape
    u = w8.view(_torch().uint8).reshape(H, N, K // FP8_BLOCK, 16, 4).transpose(-1, -2)
    return u.contiguous().reshape(H, N, K).view(w8.dtype)


def _torch():
    import torch

    return torch


def quantize_fp8(w, group: int = 0, layout: str = "shuffled") -> Fp8Weights:
    """FP8 e4m3 quantization of ``w[H, K, N]``; ``group=0`` per output channel, else per group of K."""
    import torch

    H, K, N = w.shape
    wf = w.float()
    if group:
        if K % group:
            raise ValueError(f"K={K} is not a multiple of group={group}")
        amax = wf.reshape(H, K // group, group, N).abs().amax(dim=2)         # [H, G, N]
        scale = (amax / FP8_MAX).clamp_min(1e-12)
        q = (wf / scale.repeat_interleave(group, dim=1)).clamp(-FP8_MAX, FP8_MAX)
    else:
        amax = wf.abs().amax(dim=1, keepdim=True)                             # [H, 1, N]
        scale = (amax / FP8_MAX).clamp_min(1e-12)
        q = (wf / scale).clamp(-FP8_MAX, FP8_MAX)
    if K % FP8_BLOCK:
        raise ValueError(f"K={K} must be a multiple of {FP8_BLOCK}")
    w8 = q.to(torch.float8_e4m3fn).transpose(1, 2).contiguous()             # [H, N, K]
    if layout == "shuffled":
        w8 = shuffle_fp8(w8)
    elif layout != "natural":
        raise ValueError(f"layout={layout!r}: 'shuffled' or 'natural'")
    return Fp8Weights(weight=w8, scales=scale.contiguous(), group=group, K=K, N=N, layout=layout)


def dequantize_fp8(qw: Fp8Weights, dtype=None):
    """``W[H, K, N]`` as the kernel sees it (fp32 unless ``dtype``)."""
    w8 = unshuffle_fp8(qw.weight) if qw.layout == "shuffled" else qw.weight
    w = w8.float().transpose(1, 2)                                            # [H, K, N]
    s = qw.scales
    if qw.group:
        s = s.repeat_interleave(qw.group, dim=1)
    out = w * s
    return out if dtype is None else out.to(dtype)


def random_int4(H: int, K: int, N: int, group: int = 128, zero_point: bool = False, device="cuda",
                generator=None) -> Int4Weights:
    """Random packed codes and scales (for timing: every bit pattern, never zeros)."""
    import torch

    _check_group(K, group)
    qweight = torch.randint(-2**31, 2**31 - 1, (H, N, K // 8), dtype=torch.int32, device=device,
                            generator=generator)
    scales = (torch.rand(H, K // group, N, device=device, generator=generator) * 0.02 + 0.001).to(torch.bfloat16)
    zeros = None
    if zero_point:
        zeros = torch.randint(0, 16, (H, K // group, N), device=device, generator=generator).to(torch.bfloat16)
    return Int4Weights(qweight, scales, zeros, group, K, N)


def random_fp8(H: int, K: int, N: int, group: int = 0, device="cuda", generator=None,
               layout: str = "shuffled") -> Fp8Weights:
    """Random e4m3 weights (finite values only) and scales, for timing."""
    import torch

    w = (torch.randn(H, N, K, device=device, generator=generator) * 64).clamp(-FP8_MAX, FP8_MAX)
    ng = K // group if group else 1
    scales = torch.rand(H, ng, N, device=device, generator=generator) * 1e-3 + 1e-5
    return Fp8Weights(w.to(torch.float8_e4m3fn), scales, group, K, N, layout)


def quantize_act_fp8(x):
    """Per-token FP8 quantization of activations ``x[H, M, K]``: (x8, scales[H, M] fp32)."""
    import torch

    amax = x.float().abs().amax(dim=2).clamp_min(1e-12)
    s = amax / FP8_MAX
    x8 = (x.float() / s[..., None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return x8, s.contiguous()
