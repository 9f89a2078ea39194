"""Triton INT4 W4A16 BMM: ``out[H, M, N] = x[H, M, K] @ dequant(W)[H, K, N]`` (bf16 in/out).

This module imports triton at the top: it *is* the kernel. The rest of the package imports it
only inside functions, so ``mcp_server.kernels`` imports without torch or triton.

Design (see docs/kernels.md for the measurements behind it):

* **Swap A/B.** The product is computed as ``out^T = W^T x^T``: the weight tile [BLOCK_N, 16]
  is the *left* operand of ``tl.dot`` and the activations [16, BLOCK_M] the right one. The
  tensor-core M dimension (64 rows a warpgroup) is then filled by weight columns, and the
  decode batch M only pads the narrow N side (BLOCK_M = 16 for M <= 16), so no tensor-core
  rows are wasted at M = 1 and the left operand can stay in registers (no shared-memory round
  trip for the dequantized weights).
* **Pre-shuffled packing** (``quant.pack_int4``): nibble j of the 16 words of a 128-k block
  holds k = 16 j + i, so unpacking nibble j of a [BLOCK_N, 16] word tile gives a dot operand
  of 16 consecutive k with no reshape. Eight dots of K = 16 per block.
* **Cheap unpack.** ``USE_ASM``: one ``prmt`` pairs two words' halves, then per nibble one
  shift and one ``lop3`` put two codes into the mantissas of two bf16 numbers 128 + q, and one
  ``fma.rn.bf16x2`` subtracts 136: about 1.5 instructions per weight, exact. Without it (the
  interpreter, or for comparison) plain shifts, masks and an int -> bf16 conversion.
* Scales (bf16, per group along K) multiply the fp32 partial sums once per group, after the
  dots; zero points enter as ``s * (8 - z) * sum_k x`` (no per-weight work).
"""
from __future__ import annotations

import triton
import triton.language as tl

from mcp_server.kernels.launch import block_m, interpreting, launch_config, launch_opts, persistent_grid, split_k
from mcp_server.kernels.quant import PACK_K, Int4Weights
from mcp_server.kernels.splitk import splitk_store, workspace

# Two int32 words in ($8, $9) -> eight bf16x2 registers ($0..$7): register j holds nibble j of
# both words (j < 4 from the low halves, j >= 4 from the high halves), as bf16 q - 8.
_UNPACK_ASM = tl.constexpr("""
{
.reg .b32 c0, c1, t, one, off;
mov.b32 one, 0x3F803F80;
mov.b32 off, 0xC308C308;
prmt.b32 c0, $8, $9, 0x5410;
prmt.b32 c1, $8, $9, 0x7632;
lop3.b32 t, c0, 0x000F000F, 0x43004300, 0xea;
fma.rn.bf16x2 $0, t, one, off;
shr.u32 t, c0, 4;
lop3.b32 t, t, 0x000F000F, 0x43004300, 0xea;
fma.rn.bf16x2 $1, t, one, off;
shr.u32 t, c0, 8;
lop3.b32 t, t, 0x000F000F, 0x43004300, 0xea;
fma.rn.bf16x2 $2, t, one, off;
shr.u32 t, c0, 12;
lop3.b32 t, t, 0x000F000F, 0x43004300, 0xea;
fma.rn.bf16x2 $3, t, one, off;
lop3.b32 t, c1, 0x000F000F, 0x43004300, 0xea;
fma.rn.bf16x2 $4, t, one, off;
shr.u32 t, c1, 4;
lop3.b32 t, t, 0x000F000F, 0x43004300, 0xea;
fma.rn.bf16x2 $5, t, one, off;
shr.u32 t, c1, 8;
lop3.b32 t, t, 0x000F000F, 0x43004300, 0xea;
fma.rn.bf16x2 $6, t, one, off;
shr.u32 t, c1, 12;
lop3.b32 t, t, 0x000F000F, 0x43004300, 0xea;
fma.rn.bf16x2 $7, t, one, off;
}
""")


@triton.jit
def _unpack8(p, UNPACK: tl.constexpr):
    # UNPACK 0: inline asm (bf16); 1: plain ops (bf16); 2: plain ops to fp32 (the CPU
    # interpreter, whose bf16 conversions and bf16 dots are wrong in triton 3.6)
    if UNPACK == 0:
        w0, w1, w2, w3, w4, w5, w6, w7 = tl.inline_asm_elementwise(
            _UNPACK_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r,r", [p],
            dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16,
                   tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16),
            is_pure=True, pack=2)
    else:
        dt: tl.constexpr = tl.bfloat16 if UNPACK == 1 else tl.float32
        w0 = ((p & 0xF) - 8).to(dt)
        w1 = (((p >> 4) & 0xF) - 8).to(dt)
        w2 = (((p >> 8) & 0xF) - 8).to(dt)
        w3 = (((p >> 12) & 0xF) - 8).to(dt)
        w4 = (((p >> 16) & 0xF) - 8).to(dt)
        w5 = (((p >> 20) & 0xF) - 8).to(dt)
        w6 = (((p >> 24) & 0xF) - 8).to(dt)
        w7 = (((p >> 28) & 0xF) - 8).to(dt)
    return w0, w1, w2, w3, w4, w5, w6, w7


@triton.jit
def _load_x8(x_cols, m_mask):
    """Eight [16, BM] activation chunks (k = 16 j .. 16 j + 15) of one 128-k block."""
    x0 = tl.load(x_cols, mask=m_mask, other=0.0)
    x1 = tl.load(x_cols + 16, mask=m_mask, other=0.0)
    x2 = tl.load(x_cols + 32, mask=m_mask, other=0.0)
    x3 = tl.load(x_cols + 48, mask=m_mask, other=0.0)
    x4 = tl.load(x_cols + 64, mask=m_mask, other=0.0)
    x5 = tl.load(x_cols + 80, mask=m_mask, other=0.0)
    x6 = tl.load(x_cols + 96, mask=m_mask, other=0.0)
    x7 = tl.load(x_cols + 112, mask=m_mask, other=0.0)
    return x0, x1, x2, x3, x4, x5, x6, x7


@triton.jit
def _opaque_zero(v):
    """int32 zeros that depend on ``v`` (inline asm: the compiler cannot fold the dependency)."""
    return tl.inline_asm_elementwise("mov.b32 $0, 0;", "=r,r", [v], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _after(xs, dep):
    """The eight activation chunks, made to depend on ``dep`` ([1, BM] int16 zeros)."""
    x0, x1, x2, x3, x4, x5, x6, x7 = xs
    x0 = (x0.to(tl.int16, bitcast=True) | dep).to(tl.bfloat16, bitcast=True)
    x1 = (x1.to(tl.int16, bitcast=True) | dep).to(tl.bfloat16, bitcast=True)
    x2 = (x2.to(tl.int16, bitcast=True) | dep).to(tl.bfloat16, bitcast=True)
    x3 = (x3.to(tl.int16, bitcast=True) | dep).to(tl.bfloat16, bitcast=True)
    x4 = (x4.to(tl.int16, bitcast=True) | dep).to(tl.bfloat16, bitcast=True)
    x5 = (x5.to(tl.int16, bitcast=True) | dep).to(tl.bfloat16, bitcast=True)
    x6 = (x6.to(tl.int16, bitcast=True) | dep).to(tl.bfloat16, bitcast=True)
    x7 = (x7.to(tl.int16, bitcast=True) | dep).to(tl.bfloat16, bitcast=True)
    return x0, x1, x2, x3, x4, x5, x6, x7


@triton.jit
def _mma_block(acc, ws, xs, s_blk, z_blk, k0, s_row, z_row, N, GROUP: tl.constexpr, HAS_ZERO: tl.constexpr,
               UNPACK: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, NO_SCALE: tl.constexpr = False):
    """One 128-k block: eight K=16 dots of the unpacked words, scaled per group (unless NO_SCALE:
    the caller applies the one scale of the block itself)."""
    CH: tl.constexpr = (GROUP if GROUP < 128 else 128) // 16      # 16-k chunks per scale step
    for g in tl.static_range(8 // CH):
        part = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        xsum = tl.zeros([BLOCK_M], dtype=tl.float32)
        for jj in tl.static_range(CH):
            xj = xs[g * CH + jj]
            if UNPACK == 2:
                part = tl.dot(ws[g * CH + jj], xj.to(tl.float32), part)
            else:
                part = tl.dot(ws[g * CH + jj], xj, part)
            if HAS_ZERO:
                xsum += tl.sum(xj.to(tl.float32), axis=0)
        if NO_SCALE:
            acc += part
        else:
            if CH == 8:
                s = s_blk
                if HAS_ZERO:
                    z = z_blk
            else:
                grp = (k0 + g * CH * 16) // GROUP
                s = tl.load(s_row + grp * N).to(tl.float32)
                if HAS_ZERO:
                    z = tl.load(z_row + grp * N).to(tl.float32)
            if HAS_ZERO:
                part += (8.0 - z)[:, None] * xsum[None, :]
            acc += part * s[:, None]
    return acc


@triton.jit
def _w4a16_dot_kernel(x_ptr, qw_ptr, s_ptr, z_ptr, out_ptr, M, N, K: tl.constexpr,
                      GROUP: tl.constexpr, HAS_ZERO: tl.constexpr, UNPACK: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, DEP: tl.constexpr, PF: tl.constexpr):
    pid_n = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_i = tl.arange(0, 16)
    KW = K // 8
    qw_rows = qw_ptr + b * N * KW + offs_n[:, None] * KW + offs_i[None, :]        # [BN, 16]
    x_cols = x_ptr + b * M * K + offs_m[None, :] * K + offs_i[:, None]            # [16, BM]
    m_mask = offs_m[None, :] < M
    NG = K // GROUP
    s_row = s_ptr + b * NG * N + offs_n
    z_row = z_ptr + b * NG * N + offs_n
    CH: tl.constexpr = (GROUP if GROUP < 128 else 128) // 16
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    if K == 128:
        # one block per program (W_UK). Issue order: scales, activations, weight words. The
        # compiler stores each dot operand to shared memory right after its load, and that store
        # waits for the data: without DEP the activations' store (L2 latency) came before the
        # weight load was even issued, so the two latencies added up. With DEP the activation
        # chunks are made to depend on a word of this program's weights (same line as the tile,
        # inline-asm zero the compiler cannot fold), so their store waits for the weights and
        # the weight load is issued first: the activations' L2 latency hides under the HBM one.
        LATE_S: tl.constexpr = CH == 8 and not HAS_ZERO and DEP
        if LATE_S:
            # the scale as a [BN, BM] tile shaped like the output: it is applied after the
            # accumulator is converted for the store, so its load needs no early conversion
            s_out = tl.load(s_ptr + b * NG * N + offs_n[:, None] + offs_m[None, :] * 0)
            s_blk = None
            z_blk = None
        else:
            s_blk, z_blk = _blk_scales(s_row, z_row, 0, N, GROUP, HAS_ZERO)
        xs = _load_x8(x_cols, m_mask)
        p = tl.load(qw_rows)
        if DEP and UNPACK == 0:
            w_first = qw_ptr + b * N * KW + pid_n * BLOCK_N * KW       # this tile's first word
            dep_m = _opaque_zero(tl.load(w_first + offs_m[None, :] * 0)).to(tl.int16)     # [1, BM]
            xs = _after(xs, dep_m)
        ws = _unpack8(p, UNPACK)
        acc = _mma_block(acc, ws, xs, s_blk, z_blk, 0, s_row, z_row, N, GROUP, HAS_ZERO, UNPACK,
                         BLOCK_N, BLOCK_M, LATE_S)
        if LATE_S:
            acc = acc * s_out.to(tl.float32)
    else:
        # a K loop (W_UV), software-pipelined by num_stages; with PF the group scales are
        # prefetched one block ahead in registers (a plain load in the loop would wait on HBM)
        if CH == 8 and PF:
            s_nxt = tl.load(s_row)
            if HAS_ZERO:
                z_nxt = tl.load(z_row)
        for k0 in range(0, K, 128):
            xs = _load_x8(x_cols + k0, m_mask)
            if CH == 8 and PF:
                s_blk = s_nxt.to(tl.float32)
                nxt = (k0 + 128) // GROUP
                s_nxt = tl.load(s_row + nxt * N, mask=(k0 + 128 < K) & (offs_n < N), other=0.0)
                if HAS_ZERO:
                    z_blk = z_nxt.to(tl.float32)
                    z_nxt = tl.load(z_row + nxt * N, mask=(k0 + 128 < K) & (offs_n < N), other=0.0)
                else:
                    z_blk = s_blk
            else:
                s_blk, z_blk = _blk_scales(s_row, z_row, k0, N, GROUP, HAS_ZERO)
            p = tl.load(qw_rows + k0 // 8)
            ws = _unpack8(p, UNPACK)
            acc = _mma_block(acc, ws, xs, s_blk, z_blk, k0, s_row, z_row, N, GROUP, HAS_ZERO, UNPACK,
                             BLOCK_N, BLOCK_M)
    out = out_ptr + b * M * N + offs_m[None, :] * N + offs_n[:, None]            # [BN, BM]
    tl.store(out, acc.to(tl.bfloat16), mask=m_mask)


@triton.jit
def _blk_scales(s_row, z_row, k0, N, GROUP: tl.constexpr, HAS_ZERO: tl.constexpr):
    """The one scale (and zero) row of a 128-k block when a group spans whole blocks."""
    CH: tl.constexpr = (GROUP if GROUP < 128 else 128) // 16
    if CH == 8:
        s = tl.load(s_row + (k0 // GROUP) * N).to(tl.float32)
        if HAS_ZERO:
            z = tl.load(z_row + (k0 // GROUP) * N).to(tl.float32)
        else:
            z = s
    else:                        # per-chunk scales: _mma_block loads them, these stay unused
        s = tl.zeros(s_row.shape, tl.float32)
        z = s
    return s, z


@triton.jit
def _w4a16_splitk_kernel(x_ptr, qw_ptr, s_ptr, z_ptr, out_ptr, ws_ptr, cnt_ptr, M, N, K: tl.constexpr,
                         GROUP: tl.constexpr, HAS_ZERO: tl.constexpr, UNPACK: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, SPLIT: tl.constexpr,
                         SUB: tl.constexpr):
    """The decode-GEMM form: program (tile, k-slice, head). Each step issues the weight words of
    SUB 128-k blocks first (HBM), then their activations and scales, then unpacks and multiplies,
    so SUB x BLOCK_N x 64 bytes of weights are in flight per program; SPLIT programs share a tile
    along K (``splitk.splitk_store`` reduces them), so a small N still fills the SMs."""
    pid0 = tl.program_id(0)
    pid_k = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    n_nb = N // BLOCK_N
    pid_n = pid0 % n_nb
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = (pid0 // n_nb) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_i = tl.arange(0, 16)
    KW: tl.constexpr = K // 8
    qw_rows = qw_ptr + b * N * KW + offs_n[:, None] * KW + offs_i[None, :]        # [BN, 16]
    x_cols = x_ptr + b * M * K + offs_m[None, :] * K + offs_i[:, None]            # [16, BM]
    m_mask = offs_m[None, :] < M
    NG: tl.constexpr = K // GROUP
    s_row = s_ptr + b * NG * N + offs_n
    z_row = z_ptr + b * NG * N + offs_n
    KS: tl.constexpr = K // SPLIT
    k_lo = pid_k * KS
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for kk in range(0, KS, 128 * SUB):
        k0 = k_lo + kk
        p0 = tl.load(qw_rows + k0 // 8)
        if SUB >= 2:
            p1 = tl.load(qw_rows + (k0 + 128) // 8)
        if SUB >= 4:
            p2 = tl.load(qw_rows + (k0 + 256) // 8)
            p3 = tl.load(qw_rows + (k0 + 384) // 8)
        xs0 = _load_x8(x_cols + k0, m_mask)
        s0, z0 = _blk_scales(s_row, z_row, k0, N, GROUP, HAS_ZERO)
        if SUB >= 2:
            xs1 = _load_x8(x_cols + (k0 + 128), m_mask)
            s1, z1 = _blk_scales(s_row, z_row, k0 + 128, N, GROUP, HAS_ZERO)
        if SUB >= 4:
            xs2 = _load_x8(x_cols + (k0 + 256), m_mask)
            s2, z2 = _blk_scales(s_row, z_row, k0 + 256, N, GROUP, HAS_ZERO)
            xs3 = _load_x8(x_cols + (k0 + 384), m_mask)
            s3, z3 = _blk_scales(s_row, z_row, k0 + 384, N, GROUP, HAS_ZERO)
        acc = _mma_block(acc, _unpack8(p0, UNPACK), xs0, s0, z0, k0, s_row, z_row, N, GROUP, HAS_ZERO,
                         UNPACK, BLOCK_N, BLOCK_M)
        if SUB >= 2:
            acc = _mma_block(acc, _unpack8(p1, UNPACK), xs1, s1, z1, k0 + 128, s_row, z_row, N, GROUP,
                             HAS_ZERO, UNPACK, BLOCK_N, BLOCK_M)
        if SUB >= 4:
            acc = _mma_block(acc, _unpack8(p2, UNPACK), xs2, s2, z2, k0 + 256, s_row, z_row, N, GROUP,
                             HAS_ZERO, UNPACK, BLOCK_N, BLOCK_M)
            acc = _mma_block(acc, _unpack8(p3, UNPACK), xs3, s3, z3, k0 + 384, s_row, z_row, N, GROUP,
                             HAS_ZERO, UNPACK, BLOCK_N, BLOCK_M)
    tile = b * tl.num_programs(0) + pid0
    splitk_store(acc, out_ptr, ws_ptr, cnt_ptr, b, pid_k, tile, offs_m, offs_n, M, N, SPLIT)


@triton.jit
def _w4a16_persistent_kernel(x_ptr, qw_ptr, s_ptr, z_ptr, out_ptr, M, N, H, K: tl.constexpr,
                             GROUP: tl.constexpr, HAS_ZERO: tl.constexpr, UNPACK: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr):
    """Persistent form of ``_w4a16_dot_kernel``: each program walks tiles (head, n-block,
    m-block) with a stride of the grid, so the software pipeline (``num_stages``) prefetches the
    next tiles' weight words and activations (cp.async) while this tile is unpacked and
    multiplied. The K loop is unrolled (K = 128 or 512), the tile loop is the pipelined one."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_nb = N // BLOCK_N
    n_mb = tl.cdiv(M, BLOCK_M)
    per_head = n_nb * n_mb
    tiles = H * per_head
    offs_i = tl.arange(0, 16)
    KW: tl.constexpr = K // 8
    NG: tl.constexpr = K // GROUP
    CH: tl.constexpr = (GROUP if GROUP < 128 else 128) // 16
    NB: tl.constexpr = K // 128
    offs_blk = tl.arange(0, NB)
    blk_grp = (offs_blk * 128) // GROUP
    # the scales (and zeros) of a tile are prefetched one tile ahead in registers: a plain load
    # in the loop would stall every iteration (the software pipeline only covers the dot operands)
    if CH == 8:
        n0 = (pid % per_head % n_nb) * BLOCK_N + tl.arange(0, BLOCK_N)
        sz0 = (pid // per_head).to(tl.int64) * NG * N + blk_grp[None, :] * N + n0[:, None]
        s_next = tl.load(s_ptr + sz0, mask=pid < tiles, other=0.0).to(tl.float32)       # [BN, NB]
        if HAS_ZERO:
            z_next = tl.load(z_ptr + sz0, mask=pid < tiles, other=0.0).to(tl.float32)
    for t in range(pid, tiles, nprog):
        if CH == 8:
            s_cur = s_next
            t2 = t + nprog
            n2 = (t2 % per_head % n_nb) * BLOCK_N + tl.arange(0, BLOCK_N)
            sz2 = (t2 // per_head).to(tl.int64) * NG * N + blk_grp[None, :] * N + n2[:, None]
            s_next = tl.load(s_ptr + sz2, mask=t2 < tiles, other=0.0).to(tl.float32)
            if HAS_ZERO:
                z_cur = z_next
                z_next = tl.load(z_ptr + sz2, mask=t2 < tiles, other=0.0).to(tl.float32)
        b = (t // per_head).to(tl.int64)
        r = t % per_head
        pid_n = r % n_nb
        pid_m = r // n_nb
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        qw_rows = qw_ptr + b * N * KW + offs_n[:, None] * KW + offs_i[None, :]
        x_cols = x_ptr + b * M * K + offs_m[None, :] * K + offs_i[:, None]
        m_mask = offs_m[None, :] < M
        s_row = s_ptr + b * NG * N + offs_n
        z_row = z_ptr + b * NG * N + offs_n
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        for k0 in tl.static_range(0, K, 128):
            xs = _load_x8(x_cols + k0, m_mask)
            if CH == 8:
                sel = offs_blk[None, :] == k0 // 128
                s_blk = tl.sum(tl.where(sel, s_cur, 0.0), axis=1)
                z_blk = s_blk
                if HAS_ZERO:
                    z_blk = tl.sum(tl.where(sel, z_cur, 0.0), axis=1)
            else:
                s_blk = None
                z_blk = None
            p = tl.load(qw_rows + k0 // 8)
            acc = _mma_block(acc, _unpack8(p, UNPACK), xs, s_blk, z_blk, k0, s_row, z_row, N, GROUP, HAS_ZERO,
                             UNPACK, BLOCK_N, BLOCK_M)
        out = out_ptr + b * M * N + offs_m[None, :] * N + offs_n[:, None]
        tl.store(out, acc.to(tl.bfloat16), mask=m_mask)


@triton.jit
def _gemv_block(acc, p, x_row, k0, s_row, z_row, N, GROUP: tl.constexpr, HAS_ZERO: tl.constexpr,
                UNPACK: tl.constexpr, BLOCK_N: tl.constexpr):
    """One 128-k block of the M = 1 product on the CUDA cores: unpacked weights times the
    activations in fp32 FMAs into the [BN, 16] accumulator (lane i holds k = 16 j + i)."""
    CH: tl.constexpr = (GROUP if GROUP < 128 else 128) // 16
    ws = _unpack8(p, UNPACK)
    for g in tl.static_range(8 // CH):
        part = tl.zeros([BLOCK_N, 16], dtype=tl.float32)
        xsum = tl.zeros([16], dtype=tl.float32)
        for jj in tl.static_range(CH):
            xj = tl.load(x_row + (k0 + (g * CH + jj) * 16)).to(tl.float32)
            part += ws[g * CH + jj].to(tl.float32) * xj[None, :]
            if HAS_ZERO:
                xsum += xj
        grp = (k0 + g * CH * 16) // GROUP
        s = tl.load(s_row + grp * N).to(tl.float32)
        if HAS_ZERO:
            z = tl.load(z_row + grp * N).to(tl.float32)
            part += (8.0 - z)[:, None] * xsum[None, :]
        acc += part * s[:, None]
    return acc


@triton.jit
def _w4a16_gemv_kernel(x_ptr, qw_ptr, s_ptr, z_ptr, out_ptr, ws_ptr, cnt_ptr, N, K: tl.constexpr,
                       GROUP: tl.constexpr, HAS_ZERO: tl.constexpr, UNPACK: tl.constexpr,
                       BLOCK_N: tl.constexpr, SPLIT: tl.constexpr, SUB: tl.constexpr):
    """M = 1 without tensor cores (no padded rows at all): program (n-block, k-slice, head), fp32
    FMAs into a [BN, 16] accumulator reduced across the 16 lanes at the end; SUB blocks' weight
    words issued together per step; SPLIT programs share an n-block along K (``splitk_store``)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    b = tl.program_id(2).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_i = tl.arange(0, 16)
    KW: tl.constexpr = K // 8
    qw_rows = qw_ptr + b * N * KW + offs_n[:, None] * KW + offs_i[None, :]
    x_row = x_ptr + b * K + offs_i
    NG: tl.constexpr = K // GROUP
    s_row = s_ptr + b * NG * N + offs_n
    z_row = z_ptr + b * NG * N + offs_n
    KS: tl.constexpr = K // SPLIT
    k_lo = pid_k * KS
    acc = tl.zeros([BLOCK_N, 16], dtype=tl.float32)
    for kk in range(0, KS, 128 * SUB):
        k0 = k_lo + kk
        p0 = tl.load(qw_rows + k0 // 8)
        if SUB >= 2:
            p1 = tl.load(qw_rows + (k0 + 128) // 8)
        if SUB >= 4:
            p2 = tl.load(qw_rows + (k0 + 256) // 8)
            p3 = tl.load(qw_rows + (k0 + 384) // 8)
        acc = _gemv_block(acc, p0, x_row, k0, s_row, z_row, N, GROUP, HAS_ZERO, UNPACK, BLOCK_N)
        if SUB >= 2:
            acc = _gemv_block(acc, p1, x_row, k0 + 128, s_row, z_row, N, GROUP, HAS_ZERO, UNPACK, BLOCK_N)
        if SUB >= 4:
            acc = _gemv_block(acc, p2, x_row, k0 + 256, s_row, z_row, N, GROUP, HAS_ZERO, UNPACK, BLOCK_N)
            acc = _gemv_block(acc, p3, x_row, k0 + 384, s_row, z_row, N, GROUP, HAS_ZERO, UNPACK, BLOCK_N)
    res = tl.sum(acc, axis=1, keep_dims=True)                                     # [BN, 1]
    tile = b * tl.num_programs(0) + pid_n
    splitk_store(res, out_ptr, ws_ptr, cnt_ptr, b, pid_k, tile, tl.arange(0, 1), offs_n, 1, N, SPLIT)


@triton.jit
def _w4a16_rows_kernel(x_ptr, qw_ptr, s_ptr, z_ptr, out_ptr, N, K: tl.constexpr, GROUP: tl.constexpr,
                       HAS_ZERO: tl.constexpr, UNPACK: tl.constexpr, BLOCK_N: tl.constexpr, KWP: tl.constexpr):
    """M = 1 on the CUDA cores with no split of K: program (BLOCK_N rows, head) loads its rows'
    whole packed K at once as a [BLOCK_N, KWP] word tile (KWP = K / 8 rounded up to a power of two,
    masked; 16-byte loads, every byte of the program in flight together), multiplies nibble j of
    word w by x[128 (w // 16) + 16 j + w % 16] in fp32, scales per group, reduces across the words
    and stores: one launch, no partials, no fix-up."""
    pid_n = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    KW: tl.constexpr = K // 8
    NG: tl.constexpr = K // GROUP
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_w = tl.arange(0, KWP)
    wmask = offs_w < KW
    p = tl.load(qw_ptr + b * N * KW + offs_n[:, None] * KW + offs_w[None, :], mask=wmask[None, :], other=0)
    xk = x_ptr + b * K + (offs_w // 16) * 128 + (offs_w % 16)                       # k of nibble 0
    ws = _unpack8(p, UNPACK)
    sz = b * NG * N + offs_n[:, None]
    acc = tl.zeros([BLOCK_N, KWP], dtype=tl.float32)
    xsum = tl.zeros([KWP], dtype=tl.float32)
    for j in tl.static_range(8):
        xj = tl.load(xk + 16 * j, mask=wmask, other=0.0).to(tl.float32)
        t = ws[j].to(tl.float32) * xj[None, :]
        if GROUP < 128:
            grp = ((offs_w // 16) * 128 + 16 * j) // GROUP
            sj = tl.load(s_ptr + sz + grp[None, :] * N, mask=wmask[None, :], other=0.0).to(tl.float32)
            if HAS_ZERO:      # (q - 8) - (z - 8)
                zj = tl.load(z_ptr + sz + grp[None, :] * N, mask=wmask[None, :], other=0.0).to(tl.float32)
                t = t - (zj - 8.0) * xj[None, :]
            acc += t * sj
        else:
            acc += t
            if HAS_ZERO:
                xsum += xj
    if GROUP >= 128:
        grp = (offs_w // 16) * 128 // GROUP
        s = tl.load(s_ptr + sz + grp[None, :] * N, mask=wmask[None, :], other=0.0).to(tl.float32)
        if HAS_ZERO:
            z = tl.load(z_ptr + sz + grp[None, :] * N, mask=wmask[None, :], other=0.0).to(tl.float32)
            acc = acc - (z - 8.0) * xsum[None, :]
        acc = acc * s
    res = tl.sum(acc, axis=1)
    tl.store(out_ptr + b * N + offs_n, res.to(tl.bfloat16))


@triton.jit
def _w4a16_tma_kernel(x_ptr, w_desc, s_ptr, z_ptr, out_ptr, M, N, H, K: tl.constexpr,
                      GROUP: tl.constexpr, HAS_ZERO: tl.constexpr, UNPACK: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, NS: tl.constexpr):
    """Persistent, TMA-fed form of ``_w4a16_dot_kernel``: the packed weights are read through a
    tensor descriptor (``[H * N, K / 8]`` int32, box [BLOCK_N, 16]: one bulk copy per 128-k block
    into shared memory, off the register file), and the tile loop is software-pipelined NS deep
    (``tl.range(num_stages=NS)``), so NS - 1 tiles' weights stream in while one is unpacked."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_nb = N // BLOCK_N
    n_mb = tl.cdiv(M, BLOCK_M)
    per_head = n_nb * n_mb
    tiles = H * per_head
    offs_i = tl.arange(0, 16)
    NG: tl.constexpr = K // GROUP
    for t in tl.range(pid, tiles, nprog, num_stages=NS):
        b = t // per_head
        r = t % per_head
        pid_n = r % n_nb
        pid_m = r // n_nb
        bl = b.to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        x_cols = x_ptr + bl * M * K + offs_m[None, :] * K + offs_i[:, None]
        m_mask = offs_m[None, :] < M
        s_row = s_ptr + bl * NG * N + offs_n
        z_row = z_ptr + bl * NG * N + offs_n
        row0 = b * N + pid_n * BLOCK_N
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        for kb in tl.static_range(K // 128):
            p = w_desc.load([row0, kb * 16])
            xs = _load_x8(x_cols + kb * 128, m_mask)
            s_blk, z_blk = _blk_scales(s_row, z_row, kb * 128, N, GROUP, HAS_ZERO)
            acc = _mma_block(acc, _unpack8(p, UNPACK), xs, s_blk, z_blk, kb * 128, s_row, z_row, N, GROUP,
                             HAS_ZERO, UNPACK, BLOCK_N, BLOCK_M)
        out = out_ptr + bl * M * N + offs_m[None, :] * N + offs_n[:, None]
        tl.store(out, acc.to(tl.bfloat16), mask=m_mask)


def w4a16_bmm(x, w: Int4Weights, out=None, config: dict | None = None, variant: str | None = None):
    """``x[H, M, K]`` bf16 times the INT4 weights -> ``[H, M, N]`` bf16 (see ``w4a16_launch``)."""
    return w4a16_launch(x, w, out, config, variant)[1]


def w4a16_launch(x, w: Int4Weights, out=None, config: dict | None = None, variant: str | None = None):
    """``x[H, M, K]`` bf16 times the INT4 weights -> ``[H, M, N]`` bf16.

    ``config``: variant, BLOCK_N, BLOCK_M, SPLIT, SUB, num_warps, num_stages (default: the recorded
    H200 winner for this shape family, else the shape heuristic with an ``UntunedShapeWarning``,
    ``tuning.config_for``); ``variant`` overrides the config's: "dot" (one program per output tile,
    the MLA kernel), "splitk" (K split over SPLIT programs, SUB blocks in flight per step),
    "gemv" (M = 1 on the CUDA cores, split-K), "persistent", "cuda" (the NVRTC-compiled mma.sync
    kernel of ``w4a16_cuda``; its config's ``fallback`` runs where it cannot), and "*_plain" forms
    without inline asm. Returns (compiled kernel, output tensor).
    """
    import torch

    H, M, K = x.shape
    if K != w.K or H != w.H:
        raise ValueError(f"x {tuple(x.shape)} does not match weights H={w.H} K={w.K}")
    N = w.N
    if K % PACK_K:
        raise ValueError(f"K={K} must be a multiple of {PACK_K}")
    if not x.is_contiguous():
        x = x.contiguous()
    if out is None:
        out = torch.empty((H, M, N), dtype=torch.bfloat16, device=x.device)
    cfg = launch_config("int4", x, N, config)
    recorded = cfg.pop("variant", "dot")
    variant = variant or recorded
    if recorded == "cuda" and variant != "cuda":      # a Triton variant asked of a CUDA config: its fallback's
        cfg = dict(cfg["fallback"]) if cfg.get("fallback") else {}
        cfg.pop("variant", None)
    if variant == "cuda":
        from mcp_server.kernels.w4a16_cuda import try_launch

        ran = try_launch(x, w, out, cfg)
        if ran is not None:
            return ran
        cfg = dict(cfg["fallback"])
        variant = cfg.pop("variant", "dot")
    unpack = 2 if interpreting() else (1 if variant.endswith("_plain") else 0)
    if variant in ("persistent_plain", "splitk_plain"):
        variant = variant[:-6]
    zeros = w.zeros if w.zeros is not None else w.scales
    quant = dict(GROUP=w.group, HAS_ZERO=w.zeros is not None, UNPACK=unpack)
    if variant in ("gemv", "gemv_plain", "rows"):
        if M != 1:
            raise ValueError(f"the {variant.removesuffix('_plain')} variant handles M = 1 only")
        bn = cfg.get("BLOCK_N", 4 if variant == "rows" else 32)
        if N % bn:
            raise ValueError(f"N={N} is not a multiple of BLOCK_N={bn}")
        if variant == "rows":
            return _w4a16_rows_kernel[(N // bn, H)](
                x, w.qweight, w.scales, zeros, out, N, K, **quant, BLOCK_N=bn, KWP=triton.next_power_of_2(K // 8),
                **launch_opts(cfg, 1)), out
        split, sub = split_k(cfg, K, 128)
        ws, cnt = workspace(x.device, H * split * N if split > 1 else 1, H * (N // bn))
        return _w4a16_gemv_kernel[(N // bn, split, H)](
            x, w.qweight, w.scales, zeros, out, ws, cnt, N, K, **quant, BLOCK_N=bn, SPLIT=split, SUB=sub,
            **launch_opts(cfg, 2)), out
    bn = cfg.get("BLOCK_N", 128)
    bm = block_m(cfg, M)
    if variant == "tma":
        from triton.tools.tensor_descriptor import TensorDescriptor

        desc = TensorDescriptor(w.qweight.view(H * N, K // 8), [H * N, K // 8], [K // 8, 1], [bn, 16])
        return _w4a16_tma_kernel[persistent_grid(cfg, H, M, N, bn, bm, x.device)](
            x, desc, w.scales, zeros, out, M, N, H, K, **quant, BLOCK_N=bn, BLOCK_M=bm, NS=cfg.get("NS", 3),
            **launch_opts(cfg, 1)), out
    if N % bn:
        raise ValueError(f"N={N} is not a multiple of BLOCK_N={bn}")
    if variant == "splitk":
        split, sub = split_k(cfg, K, 128)
        grid0 = triton.cdiv(M, bm) * (N // bn)
        ws, cnt = workspace(x.device, H * split * M * N if split > 1 else 1, H * grid0)
        return _w4a16_splitk_kernel[(grid0, split, H)](
            x, w.qweight, w.scales, zeros, out, ws, cnt, M, N, K, **quant, BLOCK_N=bn, BLOCK_M=bm, SPLIT=split,
            SUB=sub, **launch_opts(cfg, 2)), out
    if variant == "persistent":
        return _w4a16_persistent_kernel[persistent_grid(cfg, H, M, N, bn, bm, x.device)](
            x, w.qweight, w.scales, zeros, out, M, N, H, K, **quant, BLOCK_N=bn, BLOCK_M=bm, **launch_opts(cfg, 3)), out
    return _w4a16_dot_kernel[(triton.cdiv(M, bm), N // bn, H)](
        x, w.qweight, w.scales, zeros, out, M, N, K, **quant, BLOCK_N=bn, BLOCK_M=bm,
        DEP=bool(cfg.get("DEP", False)), PF=bool(cfg.get("PF", False)), **launch_opts(cfg, 2)), out
