"""Kernels for bench/bench_validate.py: the same column sums for 0.97x, 1x and 1.03x the work.

``x`` is MSLOW x C (MSLOW = 1.03 M, row-major) with random values in the first M0 = 0.97 M rows
and zeros after them, so summing the first M0, M or MSLOW rows gives the same C sums (zeros add
exactly) while reading 3 % fewer or more bytes through the same kernel (a contiguous prefix of
rows each time). M must be a multiple of 100.
"""
import torch


def scaled_shape(m: int, c: int) -> dict:
    assert m % 100 == 0
    return {"M": m, "C": c}


def _m(rows: int) -> int:
    return round(rows / 1.03)


def make_inputs(shape, dtype, device, seed):
    m = shape["M"]
    mslow, m0 = m + 3 * m // 100, m - 3 * m // 100
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.zeros(mslow, shape["C"])
    x[:m0] = torch.randn(m0, shape["C"], generator=g)
    return (x.to(device=device, dtype=dtype),)


def colsum(x):
    return x[:_m(x.shape[0])].sum(0)


def colsum_slower(x):
    return x.sum(0)


def colsum_faster(x):
    m = _m(x.shape[0])
    return x[:m - 3 * m // 100].sum(0)
