"""Candidate for a replayed decode-attention ``aten::bmm`` with one query row (M = 1): a Triton GEMV.

At decode the eager attention multiplies one query row per (batch, head) by the whole (repeated) key or
value cache: ``bmm([B, 1, K], [B, K, N])``, a matrix-vector product per batch entry, bound by reading
``B x K x N`` bf16 values once. This kernel streams that operand with one program per (batch entry,
block of N) and, when that grid cannot fill the GPU (few N blocks, long K: the P.V product), splits K
across programs and adds the fp32 partial sums atomically. Same signature as the baseline
(``repro.py:opN`` of an ``aten::bmm``); any other shape or dtype falls back to ``torch.bmm``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

_SMS = 132  # H200; read from the device at the first call


@triton.jit
def _bmm_m1(a_ptr, b_ptr, c_ptr, K, N, k_per_split, sab, sak, sbb, sbk, sbn, scb, scn,
            BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, ATOMIC: tl.constexpr):
    pid_b = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < N
    k_lo = pid_k * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    a_base = a_ptr + pid_b.to(tl.int64) * sab
    b_base = b_ptr + pid_b.to(tl.int64) * sbb
    for k0 in range(0, k_per_split, BLOCK_K):  # the last split stops at K (mask)
        offs_k = k_lo + k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < k_hi
        a = tl.load(a_base + offs_k * sak, mask=k_ok, other=0.0).to(tl.float32)
        b = tl.load(b_base + offs_k[:, None] * sbk + offs_n[None, :] * sbn, mask=k_ok[:, None] & n_ok[None, :],
                    other=0.0).to(tl.float32)
        acc += tl.sum(a[:, None] * b, axis=0)
    c = c_ptr + pid_b.to(tl.int64) * scb + offs_n * scn
    if ATOMIC:
        tl.atomic_add(c, acc, mask=n_ok)
    else:
        tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=n_ok)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.bmm(a, b)`` for ``a`` of shape [B, 1, K] (bf16/fp16 on CUDA); other cases go to torch.bmm."""
    global _SMS
    if (a.device.type != "cuda" or a.dim() != 3 or b.dim() != 3 or a.shape[1] != 1 or a.dtype != b.dtype
            or a.dtype not in (torch.bfloat16, torch.float16) or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]):
        return torch.bmm(a, b)
    batch, _, k = a.shape
    n = b.shape[2]
    if _SMS == 132:
        _SMS = torch.cuda.get_device_properties(a.device).multi_processor_count
    block_n = 64 if n >= 64 else triton.next_power_of_2(max(n, 16))
    n_blocks = triton.cdiv(n, block_n)
    # the contiguous dimension of b decides the tile: rows of K (QK^T: b is K^T) or rows of N (P.V)
    block_k = 64 if b.stride(1) == 1 else 128
    splits = 1
    if batch * n_blocks < 4 * _SMS:  # too few programs to keep enough loads in flight: split K
        splits = min(triton.cdiv(4 * _SMS, batch * n_blocks), triton.cdiv(k, block_k))
    k_per_split = triton.cdiv(triton.cdiv(k, splits), block_k) * block_k
    splits = triton.cdiv(k, k_per_split)
    if splits > 1:
        c32 = torch.zeros((batch, 1, n), device=a.device, dtype=torch.float32)
        _bmm_m1[(batch, n_blocks, splits)](a, b, c32, k, n, k_per_split, a.stride(0), a.stride(2), b.stride(0),
                                           b.stride(1), b.stride(2), c32.stride(0), c32.stride(2),
                                           BLOCK_K=block_k, BLOCK_N=block_n, ATOMIC=True, num_warps=4)
        return c32.to(a.dtype)
    c = torch.empty((batch, 1, n), device=a.device, dtype=a.dtype)
    _bmm_m1[(batch, n_blocks, 1)](a, b, c, k, n, k_per_split, a.stride(0), a.stride(2), b.stride(0), b.stride(1),
                                  b.stride(2), c.stride(0), c.stride(2), BLOCK_K=block_k, BLOCK_N=block_n,
                                  ATOMIC=False, num_warps=4)
    return c
