"""Triton FP8 (e4m3) weight BMMs: W8A16 (bf16 activations) and W8A8 (per-token fp8 activations).

Imports triton at the top (it is the kernel); the package imports it lazily. Same swap-A/B
design as ``w4a16``: the weight tile [BLOCK_N, BLOCK_K] (stored ``[H, N, K]``, K contiguous,
which is also the K-major operand the fp8 tensor-core instructions need) is the left operand.

* W8A16: the e4m3 tile is converted in registers (``F16=True``, the ``CVT`` dtype: to fp16, one
  ``cvt.rn.f16x2.e4m3x2`` per two weights, activations cast to fp16, a fp16 dot; else to bf16)
  and multiplied by the bf16/fp16 activations with fp32 accumulation; scales per output
  channel (after the K loop) or per group of K (per block).
* W8A8: activations quantized per token to e4m3 by ``_act_quant_kernel`` (one program per row),
  then an fp8 x fp8 dot (no conversion of the weights at all) scaled by ``s_w[n] * s_x[m]``.
"""
from __future__ import annotations

import triton
import triton.language as tl

from mcp_server.kernels.launch import block_m, interpreting, launch_config, launch_opts, persistent_grid, split_k
from mcp_server.kernels.quant import FP8_MAX, Fp8Weights
from mcp_server.kernels.splitk import splitk_store, workspace

_FP8_MAX = tl.constexpr(FP8_MAX)


@triton.jit
def _w8a16_dot_kernel(x_ptr, w_ptr, s_ptr, out_ptr, M, N, K: tl.constexpr,
                      GROUP: tl.constexpr, CVT: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + b * N * K + offs_n[:, None] * K + offs_k[None, :]            # [BN, BK]
    x_cols = x_ptr + b * M * K + offs_m[None, :] * K + offs_k[:, None]            # [BK, BM]
    m_mask = offs_m[None, :] < M
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    if GROUP == 0:
        for k0 in range(0, K, BLOCK_K):
            w = tl.load(w_rows + k0)
            xt = tl.load(x_cols + k0, mask=m_mask, other=0.0)
            acc = tl.dot(w.to(CVT), xt.to(CVT), acc)
        s = tl.load(s_ptr + b * N + offs_n)
        acc = acc * s[:, None]
    else:
        NG = K // GROUP
        for k0 in range(0, K, BLOCK_K):
            w = tl.load(w_rows + k0)
            xt = tl.load(x_cols + k0, mask=m_mask, other=0.0)
            part = tl.dot(w.to(CVT), xt.to(CVT))
            s = tl.load(s_ptr + b * NG * N + (k0 // GROUP) * N + offs_n)
            acc += part * s[:, None]
    out = out_ptr + b * M * N + offs_m[None, :] * N + offs_n[:, None]
    tl.store(out, acc.to(tl.bfloat16), mask=m_mask)


# Two int32 words ($4, $5) of e4m3 bytes -> four f16x2 registers: register j holds byte j of
# both words (prmt gathers them, one cvt converts the pair).
_FP8_UNPACK_ASM = tl.constexpr("""
{
.reg .b32 t;
.reg .b16 lo, hi;
prmt.b32 t, $4, $5, 0x0040;
mov.b32 {lo, hi}, t;
cvt.rn.f16x2.e4m3x2 $0, lo;
prmt.b32 t, $4, $5, 0x0051;
mov.b32 {lo, hi}, t;
cvt.rn.f16x2.e4m3x2 $1, lo;
prmt.b32 t, $4, $5, 0x0062;
mov.b32 {lo, hi}, t;
cvt.rn.f16x2.e4m3x2 $2, lo;
prmt.b32 t, $4, $5, 0x0073;
mov.b32 {lo, hi}, t;
cvt.rn.f16x2.e4m3x2 $3, lo;
}
""")


@triton.jit
def _unpack4_fp8(p, UNPACK: tl.constexpr):
    # UNPACK 0: inline asm (f16); 1: plain ops (f16); 2: plain ops to fp32 (CPU interpreter)
    if UNPACK == 0:
        w0, w1, w2, w3 = tl.inline_asm_elementwise(
            _FP8_UNPACK_ASM, "=r,=r,=r,=r,r,r", [p],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=2)
    else:
        dt: tl.constexpr = tl.float16 if UNPACK == 1 else tl.float32
        w0 = (p & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(dt)
        w1 = ((p >> 8) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(dt)
        w2 = ((p >> 16) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(dt)
        w3 = ((p >> 24) & 0xFF).to(tl.uint8).to(tl.float8e4nv, bitcast=True).to(dt)
    return w0, w1, w2, w3


@triton.jit
def _load_x4(x_cols, m_mask):
    x0 = tl.load(x_cols, mask=m_mask, other=0.0)
    x1 = tl.load(x_cols + 16, mask=m_mask, other=0.0)
    x2 = tl.load(x_cols + 32, mask=m_mask, other=0.0)
    x3 = tl.load(x_cols + 48, mask=m_mask, other=0.0)
    return x0, x1, x2, x3


@triton.jit
def _fp8_block(acc, p, xs, s_row, kb, N, GROUP: tl.constexpr, UNPACK: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """One 64-k block: four K=16 dots of the unpacked word tile; per-group scale if GROUP."""
    if GROUP > 0:
        s = tl.load(s_row + (kb // GROUP) * N)
    ws = _unpack4_fp8(p, UNPACK)
    dt: tl.constexpr = tl.float32 if UNPACK == 2 else tl.float16
    if GROUP == 0:
        for j in tl.static_range(4):
            acc = tl.dot(ws[j], xs[j].to(dt), acc)
    else:
        part = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        for j in tl.static_range(4):
            part = tl.dot(ws[j], xs[j].to(dt), part)
        acc += part * s[:, None]
    return acc


@triton.jit
def _w8a16_shuf_kernel(x_ptr, w_ptr, s_ptr, out_ptr, ws_ptr, cnt_ptr, M, N, K: tl.constexpr,
                       GROUP: tl.constexpr, UNPACK: tl.constexpr, SUB: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, SPLIT: tl.constexpr = 1):
    """Shuffled-layout W8A16: [BN, 16] int32 word tiles, unpacked to four K=16 f16 dot operands.
    Program (tile, k-slice, head); SPLIT > 1 splits K (``splitk.splitk_store`` reduces)."""
    pid0 = tl.program_id(0)
    pid_k = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    n_nb = N // BLOCK_N
    offs_n = (pid0 % n_nb) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = (pid0 // n_nb) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_i = tl.arange(0, 16)
    KW = K // 4
    w_rows = w_ptr + b * N * KW + offs_n[:, None] * KW + offs_i[None, :]          # [BN, 16] words
    x_cols = x_ptr + b * M * K + offs_m[None, :] * K + offs_i[:, None]            # [16, BM]
    m_mask = offs_m[None, :] < M
    NG = K // GROUP if GROUP > 0 else 1
    s_row = s_ptr + b * NG * N + offs_n
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    if GROUP == 0:
        s_ch = tl.load(s_ptr + b * N + offs_n)
    KS: tl.constexpr = K // SPLIT
    for kk in range(0, KS, 64 * SUB):
        k0 = pid_k * KS + kk
        # every load of the step first (activations, then weight words), so latencies overlap
        xa = _load_x4(x_cols + k0, m_mask)
        if SUB >= 2:
            xb = _load_x4(x_cols + (k0 + 64), m_mask)
        if SUB >= 4:
            xc = _load_x4(x_cols + (k0 + 128), m_mask)
            xd = _load_x4(x_cols + (k0 + 192), m_mask)
        p0 = tl.load(w_rows + k0 // 4)
        if SUB >= 2:
            p1 = tl.load(w_rows + (k0 + 64) // 4)
        if SUB >= 4:
            p2 = tl.load(w_rows + (k0 + 128) // 4)
            p3 = tl.load(w_rows + (k0 + 192) // 4)
        acc = _fp8_block(acc, p0, xa, s_row, k0, N, GROUP, UNPACK, BLOCK_N, BLOCK_M)
        if SUB >= 2:
            acc = _fp8_block(acc, p1, xb, s_row, k0 + 64, N, GROUP, UNPACK, BLOCK_N, BLOCK_M)
        if SUB >= 4:
            acc = _fp8_block(acc, p2, xc, s_row, k0 + 128, N, GROUP, UNPACK, BLOCK_N, BLOCK_M)
            acc = _fp8_block(acc, p3, xd, s_row, k0 + 192, N, GROUP, UNPACK, BLOCK_N, BLOCK_M)
    if GROUP == 0:
        acc = acc * s_ch[:, None]
    splitk_store(acc, out_ptr, ws_ptr, cnt_ptr, b, pid_k, b * tl.num_programs(0) + pid0, offs_m, offs_n,
                 M, N, SPLIT)


@triton.jit
def _fp8_gemv_block(acc, p, x_row, k0, s_row, N, GROUP: tl.constexpr, UNPACK: tl.constexpr):
    """One 64-k block of the M = 1 product on the CUDA cores: four [BN, 16] f16 tiles (byte j of
    word i is k = 16 j + i) times the activations in fp32 FMAs; per-group scale if GROUP."""
    ws = _unpack4_fp8(p, UNPACK)
    part = ws[0].to(tl.float32) * tl.load(x_row + k0).to(tl.float32)[None, :]
    for j in tl.static_range(1, 4):
        part += ws[j].to(tl.float32) * tl.load(x_row + (k0 + 16 * j)).to(tl.float32)[None, :]
    if GROUP > 0:
        part = part * tl.load(s_row + (k0 // GROUP) * N)[:, None]
    return acc + part


@triton.jit
def _w8a16_gemv_kernel(x_ptr, w_ptr, s_ptr, out_ptr, ws_ptr, cnt_ptr, N, K: tl.constexpr,
                       GROUP: tl.constexpr, UNPACK: tl.constexpr, BLOCK_N: tl.constexpr,
                       SPLIT: tl.constexpr, SUB: tl.constexpr):
    """FP8 at M = 1 without tensor cores, as the INT4 GEMV: program (n-block, k-slice, head), fp32
    FMAs into a [BN, 16] accumulator reduced across the lanes, split-K through ``splitk_store``.
    Written after the H200 sweeps of issue 26 (not yet timed there): a candidate for the next one."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_i = tl.arange(0, 16)
    KW: tl.constexpr = K // 4
    w_rows = w_ptr + b * N * KW + offs_n[:, None] * KW + offs_i[None, :]          # [BN, 16] words
    x_row = x_ptr + b * K + offs_i
    NG: tl.constexpr = K // GROUP if GROUP > 0 else 1
    s_row = s_ptr + b * NG * N + offs_n
    KS: tl.constexpr = K // SPLIT
    acc = tl.zeros([BLOCK_N, 16], dtype=tl.float32)
    for kk in range(0, KS, 64 * SUB):
        k0 = pid_k * KS + kk
        p0 = tl.load(w_rows + k0 // 4)
        if SUB >= 2:
            p1 = tl.load(w_rows + (k0 + 64) // 4)
        acc = _fp8_gemv_block(acc, p0, x_row, k0, s_row, N, GROUP, UNPACK)
        if SUB >= 2:
            acc = _fp8_gemv_block(acc, p1, x_row, k0 + 64, s_row, N, GROUP, UNPACK)
    res = tl.sum(acc, axis=1, keep_dims=True)                                     # [BN, 1]
    if GROUP == 0:
        res = res * tl.load(s_ptr + b * N + offs_n)[:, None]
    splitk_store(res, out_ptr, ws_ptr, cnt_ptr, b, pid_k, b * tl.num_programs(0) + pid_n, tl.arange(0, 1),
                 offs_n, 1, N, SPLIT)


@triton.jit
def _w8a16_rows_kernel(x_ptr, w_ptr, s_ptr, out_ptr, N, K: tl.constexpr, GROUP: tl.constexpr,
                       UNPACK: tl.constexpr, BLOCK_N: tl.constexpr, KWP: tl.constexpr):
    """FP8 at M = 1 with no split of K (as ``w4a16._w4a16_rows_kernel``): program (BLOCK_N rows,
    head) loads its rows' whole K as a [BLOCK_N, KWP] word tile (16-byte loads, all in flight at
    once), byte j of word w times x[64 (w // 16) + 16 j + w % 16] in fp32, reduced and stored."""
    pid_n = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    KW: tl.constexpr = K // 4
    NG: tl.constexpr = K // GROUP if GROUP > 0 else 1
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_w = tl.arange(0, KWP)
    wmask = offs_w < KW
    p = tl.load(w_ptr + b * N * KW + offs_n[:, None] * KW + offs_w[None, :], mask=wmask[None, :], other=0)
    xk = x_ptr + b * K + (offs_w // 16) * 64 + (offs_w % 16)
    ws = _unpack4_fp8(p, UNPACK)
    acc = ws[0].to(tl.float32) * tl.load(xk, mask=wmask, other=0.0).to(tl.float32)[None, :]
    for j in tl.static_range(1, 4):
        acc += ws[j].to(tl.float32) * tl.load(xk + 16 * j, mask=wmask, other=0.0).to(tl.float32)[None, :]
    if GROUP > 0:
        grp = (offs_w // 16) * 64 // GROUP
        acc = acc * tl.load(s_ptr + b * NG * N + grp[None, :] * N + offs_n[:, None], mask=wmask[None, :], other=0.0)
    res = tl.sum(acc, axis=1)
    if GROUP == 0:
        res = res * tl.load(s_ptr + b * N + offs_n)
    tl.store(out_ptr + b * N + offs_n, res.to(tl.bfloat16))


@triton.jit
def _w8a16_tma_kernel(x_ptr, w_desc, s_ptr, out_ptr, M, N, H, K: tl.constexpr, GROUP: tl.constexpr,
                      UNPACK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, NS: tl.constexpr):
    """Persistent, TMA-fed form of ``_w8a16_shuf_kernel`` (as ``w4a16._w4a16_tma_kernel``): the
    weight words arrive through a tensor descriptor (``[H * N, K / 4]`` int32, box [BLOCK_N, 16],
    one bulk copy per 64-k block), the tile loop is software-pipelined NS deep."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_nb = N // BLOCK_N
    n_mb = tl.cdiv(M, BLOCK_M)
    per_head = n_nb * n_mb
    tiles = H * per_head
    offs_i = tl.arange(0, 16)
    NG: tl.constexpr = K // GROUP if GROUP > 0 else 1
    for t in tl.range(pid, tiles, nprog, num_stages=NS):
        b = t // per_head
        r = t % per_head
        pid_n = r % n_nb
        bl = b.to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_m = (r // n_nb) * BLOCK_M + tl.arange(0, BLOCK_M)
        x_cols = x_ptr + bl * M * K + offs_m[None, :] * K + offs_i[:, None]
        m_mask = offs_m[None, :] < M
        s_row = s_ptr + bl * NG * N + offs_n
        row0 = b * N + pid_n * BLOCK_N
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        for kb in tl.static_range(K // 64):
            p = w_desc.load([row0, kb * 16])
            xs = _load_x4(x_cols + kb * 64, m_mask)
            acc = _fp8_block(acc, p, xs, s_row, kb * 64, N, GROUP, UNPACK, BLOCK_N, BLOCK_M)
        if GROUP == 0:
            acc = acc * tl.load(s_ptr + bl * N + offs_n)[:, None]
        out = out_ptr + bl * M * N + offs_m[None, :] * N + offs_n[:, None]
        tl.store(out, acc.to(tl.bfloat16), mask=m_mask)


@triton.jit
def _w8a16_persistent_kernel(x_ptr, w_ptr, s_ptr, out_ptr, M, N, H, K: tl.constexpr,
                             GROUP: tl.constexpr, UNPACK: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """Persistent form of ``_w8a16_shuf_kernel`` (tile loop pipelined, K loop unrolled)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_nb = N // BLOCK_N
    n_mb = tl.cdiv(M, BLOCK_M)
    per_head = n_nb * n_mb
    tiles = H * per_head
    offs_i = tl.arange(0, 16)
    KW: tl.constexpr = K // 4
    NG: tl.constexpr = K // GROUP if GROUP > 0 else 1
    # per-channel scales prefetched one tile ahead (a plain load in the loop stalls it)
    if GROUP == 0:
        n0 = (pid % per_head % n_nb) * BLOCK_N + tl.arange(0, BLOCK_N)
        s_next = tl.load(s_ptr + (pid // per_head).to(tl.int64) * N + n0, mask=pid < tiles, other=0.0)
    for t in range(pid, tiles, nprog):
        if GROUP == 0:
            s_ch = s_next
            t2 = t + nprog
            n2 = (t2 % per_head % n_nb) * BLOCK_N + tl.arange(0, BLOCK_N)
            s_next = tl.load(s_ptr + (t2 // per_head).to(tl.int64) * N + n2, mask=t2 < tiles, other=0.0)
        b = (t // per_head).to(tl.int64)
        r = t % per_head
        offs_n = (r % n_nb) * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_m = (r // n_nb) * BLOCK_M + tl.arange(0, BLOCK_M)
        w_rows = w_ptr + b * N * KW + offs_n[:, None] * KW + offs_i[None, :]
        x_cols = x_ptr + b * M * K + offs_m[None, :] * K + offs_i[:, None]
        m_mask = offs_m[None, :] < M
        s_row = s_ptr + b * NG * N + offs_n
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        for kb in tl.static_range(0, K, 64):
            xs = _load_x4(x_cols + kb, m_mask)
            p = tl.load(w_rows + kb // 4)
            acc = _fp8_block(acc, p, xs, s_row, kb, N, GROUP, UNPACK, BLOCK_N, BLOCK_M)
        if GROUP == 0:
            acc = acc * s_ch[:, None]
        out = out_ptr + b * M * N + offs_m[None, :] * N + offs_n[:, None]
        tl.store(out, acc.to(tl.bfloat16), mask=m_mask)


@triton.jit
def _act_quant_kernel(x_ptr, x8_ptr, xs_ptr, K, BLOCK_K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_K)
    mask = offs < K
    x = tl.load(x_ptr + row * K + offs, mask=mask, other=0.0).to(tl.float32)
    s = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-12) / _FP8_MAX
    tl.store(x8_ptr + row * K + offs, (x / s).to(tl.float8e4nv), mask=mask)
    tl.store(xs_ptr + row, s)


@triton.jit
def _w8a8_dot_kernel(x8_ptr, xs_ptr, w_ptr, s_ptr, out_ptr, M, N, K: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_n = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + b * N * K + offs_n[:, None] * K + offs_k[None, :]
    x_cols = x8_ptr + b * M * K + offs_m[None, :] * K + offs_k[:, None]
    m_mask = offs_m[None, :] < M
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        w = tl.load(w_rows + k0)
        xt = tl.load(x_cols + k0, mask=m_mask, other=0.0)
        acc = tl.dot(w, xt, acc)
    sw = tl.load(s_ptr + b * N + offs_n)
    sx = tl.load(xs_ptr + b * M + offs_m, mask=offs_m < M, other=0.0)
    acc = acc * sw[:, None] * sx[None, :]
    out = out_ptr + b * M * N + offs_m[None, :] * N + offs_n[:, None]
    tl.store(out, acc.to(tl.bfloat16), mask=m_mask)


def _cvt_dtype(cfg: dict):
    if interpreting():
        return tl.float32   # the interpreter's bf16 dots are wrong (triton 3.6)
    return tl.float16 if cfg.get("F16", True) else tl.bfloat16


def _check(x, w: Fp8Weights, cfg: dict):
    H, M, K = x.shape
    if K != w.K or H != w.H:
        raise ValueError(f"x {tuple(x.shape)} does not match weights H={w.H} K={w.K}")
    bn, bk = cfg.get("BLOCK_N", 64), cfg.get("BLOCK_K", 128)
    if w.N % bn or K % bk:
        raise ValueError(f"N={w.N} / K={K} not multiples of BLOCK_N={bn} / BLOCK_K={bk}")
    if w.group and w.group % bk:
        raise ValueError(f"group={w.group} must be a multiple of BLOCK_K={bk}")
    return H, M, K, bn, bk


def w8a16_launch(x, w: Fp8Weights, out=None, config: dict | None = None):
    """``x[H, M, K]`` bf16 times FP8 weights -> ``[H, M, N]`` bf16; (compiled kernel, out).

    Shuffled weights run the word-tile kernel (``variant`` "asm" default, or "plain"; ``SPLIT``
    splits K, ``SUB`` 64-k blocks per step) or, at M = 1, ``variant`` "gemv" (CUDA cores, split-K), or
    "cuda" (the e4m3 form of ``w4a16_cuda``'s kernel, per-channel scales; its ``fallback`` config elsewhere);
    natural-layout weights the plain tile kernel (fp8 tile through shared memory).
    """
    import torch

    cfg = launch_config("fp8", x, w.N, config, warn=w.layout == "shuffled")
    if cfg.get("variant") == "cuda":          # the CUDA kernel's e4m3 form (w4a16_cuda), else its fallback
        from mcp_server.kernels.w4a16_cuda import try_launch

        if out is None:
            out = torch.empty((x.shape[0], x.shape[1], w.N), dtype=torch.bfloat16, device=x.device)
        ran = try_launch(x.contiguous(), w, out, cfg)
        if ran is not None:
            return ran
        cfg = dict(cfg["fallback"])
    if w.layout == "shuffled":
        return _launch_shuffled(x, w, out, cfg)
    H, M, K, bn, bk = _check(x, w, cfg)
    x = x.contiguous()
    if out is None:
        out = torch.empty((H, M, w.N), dtype=torch.bfloat16, device=x.device)
    bm = block_m(cfg, M)
    k = _w8a16_dot_kernel[(triton.cdiv(M, bm), w.N // bn, H)](
        x, w.weight, w.scales, out, M, w.N, K, GROUP=w.group, CVT=_cvt_dtype(cfg),
        BLOCK_N=bn, BLOCK_M=bm, BLOCK_K=bk, **launch_opts(cfg, 3))
    return k, out


def _launch_shuffled(x, w: Fp8Weights, out, cfg: dict):
    """The shuffled-layout kernels (32-bit words of four fp8): rows or gemv at M = 1, TMA-fed, persistent, or the
    split-K word-tile kernel."""
    import torch

    H, M, K = x.shape
    if K != w.K or H != w.H:
        raise ValueError(f"x {tuple(x.shape)} does not match weights H={w.H} K={w.K}")
    bn, sub = cfg.get("BLOCK_N", 128), cfg.get("SUB", 1)
    if w.N % bn or K % (64 * sub):
        raise ValueError(f"N={w.N} / K={K} not multiples of BLOCK_N={bn} / 64*SUB={64 * sub}")
    if w.group and w.group % 64:
        raise ValueError(f"group={w.group} must be a multiple of 64")
    x = x.contiguous()
    if out is None:
        out = torch.empty((H, M, w.N), dtype=torch.bfloat16, device=x.device)
    bm = block_m(cfg, M)
    unpack = 2 if interpreting() else (1 if cfg.get("variant") == "plain" else 0)
    words, variant = w.weight.view(torch.int32), cfg.get("variant")
    if variant in ("rows", "gemv") and M != 1:
        raise ValueError(f"the fp8 {variant} variant handles M = 1 only")
    if variant == "rows":
        bn = cfg.get("BLOCK_N", 2)
        if w.N % bn:
            raise ValueError(f"N={w.N} is not a multiple of BLOCK_N={bn}")
        return _w8a16_rows_kernel[(w.N // bn, H)](
            x, words, w.scales, out, w.N, K, GROUP=w.group, UNPACK=unpack, BLOCK_N=bn,
            KWP=triton.next_power_of_2(K // 4), **launch_opts(cfg, 1)), out
    if variant == "gemv":
        split, sub = split_k(cfg, K, 64, max_sub=2)
        ws, cnt = workspace(x.device, H * split * w.N if split > 1 else 1, H * (w.N // bn))
        return _w8a16_gemv_kernel[(w.N // bn, split, H)](
            x, words, w.scales, out, ws, cnt, w.N, K, GROUP=w.group, UNPACK=unpack, BLOCK_N=bn, SPLIT=split,
            SUB=sub, **launch_opts(cfg, 1)), out
    if variant == "tma":
        from triton.tools.tensor_descriptor import TensorDescriptor

        desc = TensorDescriptor(words.view(H * w.N, K // 4), [H * w.N, K // 4], [K // 4, 1], [bn, 16])
        return _w8a16_tma_kernel[persistent_grid(cfg, H, M, w.N, bn, bm, x.device)](
            x, desc, w.scales, out, M, w.N, H, K, GROUP=w.group, UNPACK=unpack, BLOCK_N=bn, BLOCK_M=bm,
            NS=cfg.get("NS", 3), **launch_opts(cfg, 1)), out
    if cfg.get("persistent"):
        return _w8a16_persistent_kernel[persistent_grid(cfg, H, M, w.N, bn, bm, x.device)](
            x, words, w.scales, out, M, w.N, H, K, GROUP=w.group, UNPACK=unpack, BLOCK_N=bn, BLOCK_M=bm,
            **launch_opts(cfg, 3)), out
    split, sub = split_k(cfg, K, 64)
    grid0 = triton.cdiv(M, bm) * (w.N // bn)
    ws, cnt = workspace(x.device, H * split * M * w.N if split > 1 else 1, H * grid0)
    return _w8a16_shuf_kernel[(grid0, split, H)](
        x, words, w.scales, out, ws, cnt, M, w.N, K, GROUP=w.group, UNPACK=unpack, SUB=sub, BLOCK_N=bn,
        BLOCK_M=bm, SPLIT=split, **launch_opts(cfg, 2)), out


def w8a16_bmm(x, w: Fp8Weights, out=None, config: dict | None = None):
    return w8a16_launch(x, w, out, config)[1]


def act_quant_fp8(x, x8=None, xs=None):
    """Per-token e4m3 quantization of ``x[H, M, K]`` on the GPU: (x8, scales[H, M] fp32)."""
    import torch

    H, M, K = x.shape
    x = x.contiguous()
    if x8 is None:
        x8 = torch.empty((H, M, K), dtype=torch.float8_e4m3fn, device=x.device)
    if xs is None:
        xs = torch.empty((H, M), dtype=torch.float32, device=x.device)
    _act_quant_kernel[(H * M,)](x, x8, xs, K, BLOCK_K=triton.next_power_of_2(K), num_warps=1)
    return x8, xs


def w8a8_launch(x8, xs, w: Fp8Weights, out=None, config: dict | None = None):
    """Per-token fp8 activations (``act_quant_fp8``) times per-channel FP8 weights."""
    import torch

    from mcp_server.kernels import tuning

    if w.group:
        raise ValueError("the W8A8 path takes per-channel weight scales (group=0)")
    cfg = dict(config or tuning.config_for("w8a8", x8.shape[1], x8.shape[2], w.N))
    H, M, K, bn, bk = _check(x8, w, cfg)
    if out is None:
        out = torch.empty((H, M, w.N), dtype=torch.bfloat16, device=x8.device)
    bm = block_m(cfg, M)
    k = _w8a8_dot_kernel[(triton.cdiv(M, bm), w.N // bn, H)](
        x8, xs, w.weight, w.scales, out, M, w.N, K, BLOCK_N=bn, BLOCK_M=bm, BLOCK_K=bk, **launch_opts(cfg, 3))
    return k, out


def w8a8_bmm(x, w: Fp8Weights, out=None, config: dict | None = None):
    """bf16 ``x`` in: quantizes per token, then the fp8 x fp8 product."""
    x8, xs = act_quant_fp8(x)
    return w8a8_launch(x8, xs, w, out, config)[1]
