"""FLOPs of GEMM and attention launches from their cpu op's Input Dims (record_shapes=True).

``launch_flops(cpu_op, input_dims)`` answers (formula, FLOP) or None when the op is not a
GEMM / attention op or its dims do not allow it. The formulas are the usual dense ones:
``2*M*K*N`` for matmul-like ops (leading dims folded into M, batch dims into B for bmm) and
``2*B*H*Sq*Skv*(Dqk+Dv)`` for attention (no causal halving: the same count upstream reports use).
"""
from __future__ import annotations

import json
import math
from typing import Optional

Shape = list[int]

#: attention ops whose tensors are laid out [B, S, H, D] (the others: [B, H, S, D])
_BSHD = ("aten::_flash_attention_forward", "aten::_efficient_attention_forward", "flash_attn", "flashinfer")
_ATTN = ("scaled_dot_product", "_flash_attention_forward", "_efficient_attention_forward", "_cudnn_attention",
         "flash_attn", "sdpa")


def parse_dims(text: str) -> Optional[list]:
    if not text:
        return None
    try:
        v = json.loads(text)
    except (ValueError, TypeError):
        return None
    return v if isinstance(v, list) else None


def _shape(x) -> Optional[Shape]:
    if isinstance(x, list) and x and all(isinstance(d, int) and d >= 0 for d in x):
        return x
    return None


def _mm(a: Shape, b: Shape) -> Optional[int]:
    """2*M*K*N for a @ b with numpy broadcasting of batch dims."""
    if len(b) == 1:  # matrix-vector
        return 2 * math.prod(a)
    k = a[-1]
    if b[-2] != k:
        return None
    n = b[-1]
    m = a[-2] if len(a) >= 2 else 1
    batch = max(math.prod(a[:-2]), math.prod(b[:-2]))
    return 2 * batch * m * k * n


def launch_flops(cpu_op: str, input_dims: str) -> Optional[tuple[str, float]]:
    op = (cpu_op or "").strip()
    dims = parse_dims(input_dims)
    if not op or not dims:
        return None
    shapes = [_shape(d) for d in dims]
    try:
        if op in ("aten::mm", "aten::matmul", "aten::bmm") and len(shapes) >= 2 and shapes[0] and shapes[1]:
            f = _mm(shapes[0], shapes[1])
            return ("2*B*M*K*N" if op == "aten::bmm" else "2*M*K*N", float(f)) if f else None
        if op in ("aten::addmm", "aten::baddbmm") and len(shapes) >= 3 and shapes[1] and shapes[2]:
            f = _mm(shapes[1], shapes[2])
            return ("2*B*M*K*N" if op == "aten::baddbmm" else "2*M*K*N", float(f)) if f else None
        if op == "aten::linear" and len(shapes) >= 2 and shapes[0] and shapes[1] and len(shapes[1]) == 2:
            x, w = shapes[0], shapes[1]
            if x[-1] != w[1]:
                return None
            return "2*M*K*N", float(2 * math.prod(x[:-1]) * w[1] * w[0])
        qkv = [s for s in shapes[:3] if s is not None and len(s) == 4]
        if any(t in op for t in _ATTN) and len(qkv) == 3:
            q, k, v = qkv
            if any(t in op for t in _BSHD):
                b, sq, h, d = q
                skv, dv = k[1], v[3]
            else:
                b, h, sq, d = q
                skv, dv = k[2], v[3]
            return "2*B*H*Sq*Skv*(Dqk+Dv)", float(2 * b * h * sq * skv * (d + dv))
    except (IndexError, TypeError):
        return None
    return None
