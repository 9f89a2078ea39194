"""Tensor comparisons of the harness: per-element tolerance, bitwise equality, the metadata of an output.

Each takes the torch module (or imports it inside), so importing this module never imports torch.
"""
from __future__ import annotations

import math
from typing import Any

_INT_VIEW = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def shape_str(shape: dict) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in shape.items()) + "}"


def tensors(args: Any) -> list[Any]:
    import torch

    return [a for a in args if isinstance(a, torch.Tensor)]


def meta(o: Any) -> dict:
    import torch

    return {"shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", ""), "device": str(o.device),
            "layout": str(o.layout).replace("torch.", ""), "contiguous": bool(o.is_contiguous()),
            "strides": list(o.stride()) if o.layout == torch.strided else None,
            "type": "Tensor" if type(o) is torch.Tensor else type(o).__name__}


def copy_into(t: Any, dst: Any, src: Any) -> bool:
    """Copy ``src``'s tensors into ``dst``'s (same addresses, new values); False when their shapes differ."""
    if len(dst) != len(src):
        return False
    for d, s in zip(dst, src):
        if isinstance(d, t.Tensor) != isinstance(s, t.Tensor):
            return False
        if isinstance(d, t.Tensor) and (d.shape != s.shape or d.dtype != s.dtype):
            return False
    for d, s in zip(dst, src):
        if isinstance(d, t.Tensor):
            with t.no_grad():
                d.copy_(s)
    return True


def bitwise_equal(t: Any, a: Any, b: Any) -> bool:
    if not isinstance(a, t.Tensor) or not isinstance(b, t.Tensor):
        return a is b or a == b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    a = a.detach().contiguous()
    b = b.detach().contiguous()
    if a.is_complex() or a.element_size() not in _INT_VIEW:
        return bool(t.equal(a, b))
    iv = getattr(t, _INT_VIEW[a.element_size()])
    try:
        return bool(t.equal(a.view(iv), b.view(iv)))
    except RuntimeError:
        return bool(t.equal(a, b))


def compare(t: Any, c: Any, r: Any, rtol: float, atol: float) -> dict:
    """Per-element ``|c - r| <= atol + rtol*|r|``; NaN/Inf where ``r`` is finite always fails."""
    c = c.detach()
    r = r.detach()
    if r.device != c.device:
        r = r.to(c.device)
    numel = c.numel()
    if not (c.is_floating_point() or c.is_complex()) and not r.is_floating_point():
        return _compare_exact(c, r, numel)
    cd = c.to(t.float64)
    rd = r.to(t.float64)
    fin_r = t.isfinite(rd)
    fin_c = t.isfinite(cd)
    nonfinite = int((fin_r & ~fin_c).sum())
    diff = (cd - rd).abs()
    tol = atol + rtol * rd.abs()
    within = diff <= tol
    special_ok = (~fin_r) & ((cd == rd) | (t.isnan(cd) & t.isnan(rd)))
    bad = (fin_r & ~within) | ((~fin_r) & ~special_ok)
    nb = int(bad.sum())
    both = fin_r & fin_c
    max_abs = float(diff[both].max()) if bool(both.any()) else 0.0
    relmask = both & (rd.abs() > max(atol, 1e-30))
    max_rel = float((diff[relmask] / rd.abs()[relmask]).max()) if bool(relmask.any()) else 0.0
    worst = []
    if nb:
        score = t.where(bad, t.nan_to_num(diff / tol, nan=math.inf, posinf=math.inf), t.zeros_like(diff))
        k = min(5, nb)
        vals, idx = t.topk(score.reshape(-1), k)
        for v, i in zip(vals.tolist(), idx.tolist()):
            worst.append({"index": unravel(i, c.shape), "candidate": float(cd.reshape(-1)[i]),
                          "reference": float(rd.reshape(-1)[i]),
                          "abs_err": float(diff.reshape(-1)[i]) if math.isfinite(float(diff.reshape(-1)[i]))
                          else None, "score": v})
    return {"bad": nb, "nonfinite": nonfinite, "max_abs": max_abs, "max_rel": max_rel, "numel": numel,
            "worst": worst}


def _compare_exact(c: Any, r: Any, numel: int) -> dict:
    """Integer and boolean outputs: every element equal."""
    bad = c != r
    nb = int(bad.sum())
    worst = []
    if nb:
        idx = bad.reshape(-1).nonzero()[:5].reshape(-1).tolist()
        for i in idx:
            worst.append({"index": unravel(i, c.shape), "candidate": float(c.reshape(-1)[i]),
                          "reference": float(r.reshape(-1)[i]), "abs_err": None, "score": math.inf})
    return {"bad": nb, "nonfinite": 0, "max_abs": 0.0, "max_rel": 0.0, "numel": numel, "worst": worst}


def unravel(i: int, shape: Any) -> list[int]:
    out = []
    for d in reversed(list(shape)):
        out.append(i % d if d else 0)
        i = i // d if d else 0
    return list(reversed(out))
