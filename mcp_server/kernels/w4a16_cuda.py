"""INT4 W4A16 (and FP8 W8A16) BMM in CUDA C++, compiled at run time by NVRTC: ``variant="cuda"`` of
``w4a16_launch`` and ``w8a16_launch``.

Why a second implementation of the same product (docs/kernels.md, "the CUDA kernel"): the Triton kernels
load the packed words straight into the register layout of the dot (4-byte loads in the wgmma tiles) and
run at register-limited occupancy; on the stacked MLA BMMs they stream the packed weights at 2.0-2.8 TB/s.
Here every thread issues 8-byte loads for all of its weights at once, before anything else, and the
unpacked words feed ``mma.sync`` directly as the left operand, with no shared-memory round trip:

* **Swap A/B.** ``out^T = W^T x^T`` with ``mma.sync.m16n8k16`` (bf16 in, fp32 accumulate): 16 weight
  rows (output columns n) are the MMA's M side, the decode batch (8 per m-tile) its N side.
* **The packed layout is already the MMA's.** In ``quant.pack_int4``'s layout, nibble j of word i of a
  128-k block holds k = 16 j + i, and the A fragment of thread (g = lane / 4, t = lane % 4) holds rows
  g and g + 8 at k = 2t, 2t + 1, 2t + 8, 2t + 9 of a 16-k chunk: words 2t, 2t + 1, 2t + 8, 2t + 9 of the
  row, nibble j for chunk j. Two 8-byte loads per row and block give a thread its operands for all
  eight chunks of the block.
* **Unpack** as the Triton kernel's inline asm: ``prmt`` pairs two words' halves, then per chunk one
  shift, one ``lop3`` (two codes into the mantissas of bf16 128 + q) and one ``fma.rn.bf16x2``
  (subtract 128 + z: exact, so zero points cost nothing per weight).
* **Scales** multiply the fp32 partial sums once per group (exact weights, as the reference).
* **Activations** are staged in shared memory once per program (16-byte rows padded so ``ldmatrix`` is
  conflict-free) while the weight loads are in flight.
* **Split-K** (``SPLIT`` > 1, for an ordinary Linear layer whose N alone cannot fill the GPU): the
  programs of a tile store fp32 partials to the workspace shared with the Triton split-K kernels and
  the last to arrive sums them in a fixed order (deterministic), as ``splitk.py`` describes.
* **Persistent grid** (``PROGS`` programs per SM, no split-K): each program loops over heads and loads
  the next head's weights and activations into registers while it multiplies the current one's.
* **FP8 form** (``Fp8Weights``, shuffled layout, per-channel scales): 64-k blocks of 16 words, byte j of
  words 2t, 2t + 1, 2t + 8, 2t + 9 is chunk j; ``cvt.rn.f16x2.e4m3x2`` and f16 MMAs, the activations
  converted to f16 when staged, as the Triton W8A16 kernel does.

Config keys (``tuning``): ``NT`` 16-row tiles per warp, ``MT`` 8-row m-tiles per program (from M when
absent), ``KB`` K blocks per warp (128 k for INT4, 64 for FP8; K = KB * block * KWARP * SPLIT),
``WARPS``, ``KWARP`` (warps that split a program's K slice, summed through shared memory in a fixed
order), ``SPLIT``, ``PROGS``, ``MINB`` (``__launch_bounds__`` minimum programs per SM; 0 = none). INT4
groups 32, 64 and multiples of 128, FP8 per-channel scales; anything else, or a torch without NVRTC
kernel compilation, raises ``CudaKernelUnavailable``, and the launchers run the config's Triton
``fallback`` (``try_launch``).
"""
from __future__ import annotations

import os

from mcp_server.kernels.quant import PACK_K, Int4Weights

SOURCE = r"""
typedef unsigned int u32;
typedef unsigned short u16;

__device__ __forceinline__ void ldw2(const u32* p, u32& a, u32& b) {
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(a), "=r"(b) : "l"(p));
}
__device__ __forceinline__ float bf2f(u16 v) { return __uint_as_float(((u32)v) << 16); }
__device__ __forceinline__ u16 f2bf(float f) {
    u16 r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f)); return r;
}
__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
    u32 r; asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel)); return r;
}
// two codes (low nibbles of each half) -> bf16x2 (128 + q) - (128 + z) = q - z: exact
__device__ __forceinline__ u32 dq(u32 v, u32 off) {
    u32 t, r;
    asm("lop3.b32 %0, %1, 0x000F000F, 0x43004300, 0xea;" : "=r"(t) : "r"(v));
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(t), "r"(0x3F803F80u), "r"(off));
    return r;
}
__device__ __forceinline__ void mma(float* c, const u32* a, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void ldsm4(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void mma_f16(float* c, const u32* a, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// byte j of two words (e4m3) -> f16x2, word a in the low half: exact
__device__ __forceinline__ u32 e4m3x2(u32 wa, u32 wb, u32 sel) {
    u32 r, t = prmt(wa, wb, sel);
    asm("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, %1; cvt.rn.f16x2.e4m3x2 %0, lo; }" : "=r"(r) : "r"(t));
    return r;
}
// eight bf16 -> eight f16 (the FP8 form multiplies in f16, as the Triton W8A16 kernel)
__device__ __forceinline__ uint4 bf16x8_to_f16(uint4 v) {
    u32* p = (u32*)&v;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float lo = __uint_as_float(p[i] << 16), hi = __uint_as_float(p[i] & 0xFFFF0000u);
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(p[i]) : "f"(hi), "f"(lo));
    }
    return v;
}
__device__ __forceinline__ float ldcg(const float* p) {
    float v; asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p)); return v;
}
// bf16x2 of -(128 + z) for a zero point z (an integer 0..15 stored as bf16): exact
__device__ __forceinline__ u32 zoff(u16 z) {
    u32 b = __float_as_uint(-(128.0f + bf2f(z))) >> 16;
    return b | (b << 16);
}

#if FP8
#define BK 64               // k per block of 16 words (four e4m3 codes a word)
#define WPK 4
#else
#define BK 128              // eight 4-bit codes a word
#define WPK 8
#endif
#define KC (KB * BK * KWARP)
#define SK (KC + 8)
#define GS (GROUP < 128 ? GROUP : 128)
#define STEPS (128 / GS)
#define CH (GS / 16)
#if MINB > 0
#define BOUNDS __launch_bounds__(WARPS * KWARP * 32, MINB)
#else
#define BOUNDS __launch_bounds__(WARPS * KWARP * 32)
#endif

#define NTHR (WARPS * KWARP * 32)
#define XV ((8 * MT * (KC / 8) + NTHR - 1) / NTHR)     // 16-byte activation slots per thread

// every packed word of the warp's tiles of head h, in flight together
__device__ __forceinline__ void load_words(u32 (&w)[KB][NT][8], const u32* qw, int h, int n0, int kofs, int K,
                                           int N, int g, int t) {
    const int KW = K / WPK;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const u32* r0 = qw + ((size_t)h * N + n0 + nt * 16 + g) * KW + kofs / WPK + 2 * t;
        const u32* r1 = r0 + 8 * (size_t)KW;
#pragma unroll
        for (int kb = 0; kb < KB; ++kb) {
            ldw2(r0 + kb * 16, w[kb][nt][0], w[kb][nt][1]);
            ldw2(r0 + kb * 16 + 8, w[kb][nt][2], w[kb][nt][3]);
            ldw2(r1 + kb * 16, w[kb][nt][4], w[kb][nt][5]);
            ldw2(r1 + kb * 16 + 8, w[kb][nt][6], w[kb][nt][7]);
        }
    }
}

// this thread's 16-byte slots of x[h, m0 : m0 + rows, kbeg : kbeg + KC]. Rows past M are never read: column
// m of the MMA's right operand reaches only column m of its result, and columns past M are never stored.
__device__ __forceinline__ void load_x(uint4 (&v)[XV], const u16* x, int h, int m0, int rows, int kbeg, int M,
                                       int K) {
#pragma unroll
    for (int j = 0; j < XV; ++j) {
        const int i = threadIdx.x + j * NTHR, row = i / (KC / 8), c = i % (KC / 8);
        if (row < rows) v[j] = *(const uint4*)(x + ((size_t)h * M + m0 + row) * K + kbeg + c * 8);
    }
}

__device__ __forceinline__ void store_x(const uint4 (&v)[XV], u16* xs, int rows) {
#pragma unroll
    for (int j = 0; j < XV; ++j) {
        const int i = threadIdx.x + j * NTHR, row = i / (KC / 8), c = i % (KC / 8);
#if FP8
        if (row < rows) *(uint4*)(xs + row * SK + c * 8) = bf16x8_to_f16(v[j]);
#else
        if (row < rows) *(uint4*)(xs + row * SK + c * 8) = v[j];
#endif
    }
}

#if FP8
// the FP8 form: per 64-k block, chunk j (16 k) is byte j of words 2t, 2t+1, 2t+8, 2t+9 of rows g and g + 8;
// f16 MMAs accumulate over the warp's K, one scale per output channel after the last block
__device__ __forceinline__ void tile_mma_fp8(float (&acc)[NT][MT][4], const u32 (&w)[KB][NT][8], u32 xs_base,
                                             const float* sc, int h, int n0, int kofs, int N, int lane) {
    const int g = lane >> 2, q = lane >> 3, r8 = lane & 7;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[nt][mt][i] = 0.f;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
#pragma unroll
        for (int jp = 0; jp < 4; jp += 2) {
            u32 b[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int col = kofs + kb * 64 + 16 * (jp + (q >> 1)) + 8 * (q & 1);
                ldsm4(b[mt], xs_base + 2u * (u32)((mt * 8 + r8) * SK + col));
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const u32* v = w[kb][nt];
#pragma unroll
                for (int jj = 0; jj < 2; ++jj) {
                    const u32 sel = 0x0040u + 0x11u * (u32)(jp + jj);
                    u32 a[4] = {e4m3x2(v[0], v[1], sel), e4m3x2(v[4], v[5], sel), e4m3x2(v[2], v[3], sel),
                                e4m3x2(v[6], v[7], sel)};
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) mma_f16(acc[nt][mt], a, b[mt][2 * jj], b[mt][2 * jj + 1]);
                }
            }
        }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const float s0 = sc[(size_t)h * N + n0 + nt * 16 + g], s1 = sc[(size_t)h * N + n0 + nt * 16 + g + 8];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            acc[nt][mt][0] *= s0; acc[nt][mt][1] *= s0; acc[nt][mt][2] *= s1; acc[nt][mt][3] *= s1;
        }
    }
}
#endif

// the warp's tiles times x (in shared memory) over its KB blocks, scaled per group, into acc
__device__ __forceinline__ void tile_mma(float (&acc)[NT][MT][4], const u32 (&w)[KB][NT][8], u32 xs_base,
                                         const u16* sc, const u16* zp, int h, int n0, int kg, int kofs, int NG,
                                         int N, int lane) {
    const int g = lane >> 2, q = lane >> 3, r8 = lane & 7;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[nt][mt][i] = 0.f;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
        // pairs: 0 (row g, k 2t..), 1 (row g+8, k 2t..), 2 (row g, k 2t+8..), 3 (row g+8, k 2t+8..)
        u32 lo[NT][4], hi[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int ia[4] = {0, 4, 2, 6};
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                lo[nt][p] = prmt(w[kb][nt][ia[p]], w[kb][nt][ia[p] + 1], 0x5410);
                hi[nt][p] = prmt(w[kb][nt][ia[p]], w[kb][nt][ia[p] + 1], 0x7632);
            }
        }
#pragma unroll
        for (int st = 0; st < STEPS; ++st) {
            const int gi = (kg + kb * 128 + st * GS) / GROUP;
            float s0[NT], s1[NT];
            u32 o0[NT], o1[NT];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const size_t si = ((size_t)h * NG + gi) * N + n0 + nt * 16 + g;
                s0[nt] = bf2f(sc[si]);
                s1[nt] = bf2f(sc[si + 8]);
#if ZP
                o0[nt] = zoff(zp[si]);
                o1[nt] = zoff(zp[si + 8]);
#else
                o0[nt] = o1[nt] = 0xC308C308u;     // -136 = -(128 + 8)
#endif
            }
            float part[NT][MT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) part[nt][mt][i] = 0.f;
#pragma unroll
            for (int jp = 0; jp < CH; jp += 2) {
                const int j = st * CH + jp;
                u32 b[MT][4];       // chunk j (k lo, k hi), chunk j + 1 (k lo, k hi)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const int col = kofs + kb * 128 + 16 * (j + (q >> 1)) + 8 * (q & 1);
                    ldsm4(b[mt], xs_base + 2u * (u32)((mt * 8 + r8) * SK + col));
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                    for (int jj = 0; jj < 2; ++jj) {
                        const int jn = j + jj, sh = 4 * (jn & 3);
                        u32 a[4];
#pragma unroll
                        for (int p = 0; p < 4; ++p)
                            a[p] = dq((jn < 4 ? lo[nt][p] : hi[nt][p]) >> sh, (p & 1) ? o1[nt] : o0[nt]);
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) mma(part[nt][mt], a, b[mt][2 * jj], b[mt][2 * jj + 1]);
                    }
                }
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    acc[nt][mt][0] += s0[nt] * part[nt][mt][0];
                    acc[nt][mt][1] += s0[nt] * part[nt][mt][1];
                    acc[nt][mt][2] += s1[nt] * part[nt][mt][2];
                    acc[nt][mt][3] += s1[nt] * part[nt][mt][3];
                }
        }
    }
}

// c0, c1 = (n = g, m = 2t, 2t + 1), c2, c3 = (n = g + 8, same m) of each tile -> out[h, m, n] (bf16)
__device__ __forceinline__ void store_out(const float (&acc)[NT][MT][4], u16* out, int h, int n0, int m0, int M,
                                          int N, int lane) {
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int n = n0 + nt * 16 + g, m = m0 + mt * 8 + 2 * t;
            u16* o = out + ((size_t)h * M + m) * N + n;
            if (m < M) { o[0] = f2bf(acc[nt][mt][0]); o[8] = f2bf(acc[nt][mt][2]); }
            if (m + 1 < M) { o[N] = f2bf(acc[nt][mt][1]); o[N + 8] = f2bf(acc[nt][mt][3]); }
        }
}

// Heads h = blockIdx.y, + gridDim.y, ...: one pass when the grid holds every head; with fewer programs
// (PF = 1) each loads the next head's weights and activations while it multiplies the current one's.
extern "C" __global__ void BOUNDS
w4a16_mma(const u32* __restrict__ qw, const u16* __restrict__ sc, const u16* __restrict__ zp,
          const u16* __restrict__ x, u16* __restrict__ out, float* __restrict__ ws, int* __restrict__ cnt,
          int M, int K, int N, int H)
{
    extern __shared__ __align__(16) u16 xs[];
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) % WARPS, wk = (threadIdx.x >> 5) / WARPS;
    const int nblocks = N / (16 * NT * WARPS);
    const int nb = blockIdx.x % nblocks, mb = blockIdx.x / nblocks;
    const int z = blockIdx.z;
    const int n0 = (nb * WARPS + warp) * (NT * 16);
    const int m0 = mb * (8 * MT);
    const int kbeg = z * KC, kofs = wk * KB * BK;    // the program's K slice; this warp's part of it
#if !FP8
    const int NG = K / GROUP;
#endif
    const int rows = min(8 * MT, M - m0);
    const u32 xs_base = (u32)__cvta_generic_to_shared(xs);
    const bool writer = wk == 0;

    u32 w[KB][NT][8];
#if PF
    uint4 xv[XV];
    load_words(w, qw, blockIdx.y, n0, kbeg + kofs, K, N, lane >> 2, lane & 3);
    load_x(xv, x, blockIdx.y, m0, rows, kbeg, M, K);
    for (int h = blockIdx.y; h < H; h += gridDim.y) {
        store_x(xv, xs, rows);
#else
    {
        const int h = blockIdx.y;
        load_words(w, qw, h, n0, kbeg + kofs, K, N, lane >> 2, lane & 3);
        for (int i = threadIdx.x; i < rows * (KC / 8); i += NTHR) {
            const int row = i / (KC / 8), c = i % (KC / 8);
            const uint4 v = *(const uint4*)(x + ((size_t)h * M + m0 + row) * K + kbeg + c * 8);
#if FP8
            *(uint4*)(xs + row * SK + c * 8) = bf16x8_to_f16(v);
#else
            *(uint4*)(xs + row * SK + c * 8) = v;
#endif
        }
#endif
        __syncthreads();
#if PF
        u32 wn[KB][NT][8];
        uint4 xn[XV];
        if (h + gridDim.y < H) {
            load_words(wn, qw, h + gridDim.y, n0, kbeg + kofs, K, N, lane >> 2, lane & 3);
            load_x(xn, x, h + gridDim.y, m0, rows, kbeg, M, K);
        }
#endif
        float acc[NT][MT][4];
#if FP8
        tile_mma_fp8(acc, w, xs_base, (const float*)sc, h, n0, kofs, N, lane);
#else
        tile_mma(acc, w, xs_base, sc, zp, h, n0, kbeg + kofs, kofs, NG, N, lane);
#endif
#if KWARP > 1
        // the KWARP warps of a tile sum their parts of K through shared memory, in a fixed order
        float* red = (float*)(xs + 8 * MT * SK);        // [KWARP - 1][WARPS][NT * MT * 4][32]
        if (wk > 0) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int i = 0; i < 4; ++i)
                        red[(((wk - 1) * WARPS + warp) * (NT * MT * 4) + (nt * MT + mt) * 4 + i) * 32 + lane] =
                            acc[nt][mt][i];
        }
        __syncthreads();
        if (writer) {
            for (int k2 = 0; k2 < KWARP - 1; ++k2)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                        for (int i = 0; i < 4; ++i)
                            acc[nt][mt][i] +=
                                red[((k2 * WARPS + warp) * (NT * MT * 4) + (nt * MT + mt) * 4 + i) * 32 + lane];
        }
#endif
#if SPLIT == 1
        if (writer) store_out(acc, out, h, n0, m0, M, N, lane);
#else
        // split-K (the grid holds every head: one pass): fp32 partials, the last program of the tile sums them
        const int g = lane >> 2, t = lane & 3;
        const size_t MN = (size_t)M * N;
        float* wsh = ws + (size_t)h * SPLIT * MN;
#pragma unroll
        for (int nt = 0; nt < (writer ? NT : 0); ++nt)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int n = n0 + nt * 16 + g, m = m0 + mt * 8 + 2 * t;
                float* p = wsh + z * MN + (size_t)m * N + n;
                if (m < M) { p[0] = acc[nt][mt][0]; p[8] = acc[nt][mt][2]; }
                if (m + 1 < M) { p[N] = acc[nt][mt][1]; p[N + 8] = acc[nt][mt][3]; }
            }
        __threadfence();
        __syncthreads();
        __shared__ int last;
        const int tile = h * gridDim.x + blockIdx.x;
        if (threadIdx.x == 0) last = atomicAdd(cnt + tile, 1) == SPLIT - 1;
        __syncthreads();
        if (!last || !writer) return;
        __threadfence();
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int n = n0 + nt * 16 + g, m = m0 + mt * 8 + 2 * t;
                float* a = acc[nt][mt];
                a[0] = a[1] = a[2] = a[3] = 0.f;
                for (int s = 0; s < SPLIT; ++s) {
                    const float* p = wsh + s * MN + (size_t)m * N + n;
                    if (m < M) { a[0] += ldcg(p); a[2] += ldcg(p + 8); }
                    if (m + 1 < M) { a[1] += ldcg(p + N); a[3] += ldcg(p + N + 8); }
                }
            }
        store_out(acc, out, h, n0, m0, M, N, lane);
        if (threadIdx.x == 0) cnt[tile] = 0;
#endif
#if PF
        __syncthreads();        // xs (and the reduction buffer) are rewritten by the next head
#pragma unroll
        for (int kb = 0; kb < KB; ++kb)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int i = 0; i < 8; ++i) w[kb][nt][i] = wn[kb][nt][i];
#pragma unroll
        for (int j = 0; j < XV; ++j) xv[j] = xn[j];
#endif
    }
}
"""

def supports_group(group: int) -> bool:
    """Whether the INT4 form handles this group (a scale step is 2+ chunks of 16 k and divides the 128-k block)."""
    return group in (32, 64) or (group >= PACK_K and group % PACK_K == 0)


class CudaKernelUnavailable(RuntimeError):
    """The CUDA kernel cannot run here (no NVRTC kernel compilation in this torch, or a shape or group
    it does not handle): the caller runs the Triton fallback."""


def macros(cfg: dict, M: int, group: int, zero_point: bool, fp8: bool = False) -> dict[str, int]:
    """The compile-time parameters of one config (MT from M when the config leaves it out). The FP8 form
    has per-channel scales; GROUP is then a placeholder the INT4 code path needs to parse."""
    mt = int(cfg.get("MT") or min(8, -(-M // 8)))
    return {"NT": int(cfg.get("NT", 1)), "MT": mt, "KB": int(cfg.get("KB", 1)), "GROUP": PACK_K if fp8 else group,
            "ZP": int(zero_point), "WARPS": int(cfg.get("WARPS", 4)), "SPLIT": int(cfg.get("SPLIT", 1)),
            "MINB": int(cfg.get("MINB", 0)), "KWARP": int(cfg.get("KWARP", 1)), "PF": int(bool(cfg.get("PROGS"))),
            "FP8": int(fp8)}


def plan(cfg: dict, H: int, M: int, K: int, N: int, group: int, zero_point: bool,
         sms: int = 132, fp8: bool = False) -> tuple[dict, tuple, int, int]:
    """(macros, grid, threads, shared bytes) of a launch, or ``CudaKernelUnavailable`` naming why not.
    ``PROGS`` (programs per SM) makes the grid persistent over heads, each program prefetching its next head.
    ``fp8``: the e4m3 form (shuffled layout, 64-k blocks, per-channel scales: ``group`` 0)."""
    mc = macros(cfg, M, group, zero_point, fp8)
    if fp8 and group:
        raise CudaKernelUnavailable(f"group={group}: the CUDA FP8 form handles per-channel scales (group 0)")
    if not fp8 and not supports_group(group):
        raise CudaKernelUnavailable(f"group={group}: the CUDA kernel handles 32, 64 and multiples of 128")
    rows = 16 * mc["NT"] * mc["WARPS"]
    if N % rows:
        raise CudaKernelUnavailable(f"N={N} is not a multiple of 16*NT*WARPS={rows}")
    bk = 64 if fp8 else PACK_K
    kc = bk * mc["KB"] * mc["KWARP"]
    if K != kc * mc["SPLIT"]:
        raise CudaKernelUnavailable(f"K={K} != KB*{bk}*KWARP*SPLIT={kc * mc['SPLIT']}")
    m_progs = -(-M // (8 * mc["MT"]))
    heads = H
    if mc["PF"]:
        if mc["SPLIT"] > 1:
            raise CudaKernelUnavailable("PROGS (a persistent grid) and SPLIT > 1 do not combine")
        heads = min(H, max(1, int(cfg["PROGS"]) * sms // ((N // rows) * m_progs)))
    grid = ((N // rows) * m_progs, heads, mc["SPLIT"])
    warps = mc["WARPS"] * mc["KWARP"]
    red = (mc["KWARP"] - 1) * mc["WARPS"] * mc["NT"] * mc["MT"] * 4 * 32 * 4
    return mc, grid, 32 * warps, 8 * mc["MT"] * (kc + 8) * 2 + red


_KERNELS: dict = {}


def compiled(mc: dict):
    """The NVRTC-compiled kernel for these macros, on the current device (a loaded module belongs to one
    device's context: cached per process and device)."""
    import torch

    cap = torch.cuda.get_device_capability()
    key = (torch.cuda.current_device(), tuple(sorted(mc.items())))
    if key not in _KERNELS:
        compile_kernel = getattr(torch.cuda, "_compile_kernel", None)
        if compile_kernel is None or cap < (8, 0):
            raise CudaKernelUnavailable(
                "this torch cannot compile CUDA kernels at run time (torch.cuda._compile_kernel, NVRTC)"
                if compile_kernel is None else f"compute capability {cap} < 8.0 (no bf16 mma.sync)")
        opts = [f"-D{k}={v}" for k, v in sorted(mc.items())] + ["-std=c++17"]
        try:
            _KERNELS[key] = compile_kernel(SOURCE, "w4a16_mma", nvcc_options=opts)
        except (RuntimeError, OSError) as exc:      # no NVRTC library, no CUDA include path
            raise CudaKernelUnavailable(f"NVRTC could not build the kernel: {str(exc)[:400]}") from exc
    return _KERNELS[key]


def launch(x, w, out, cfg: dict):
    """Run the CUDA kernel: ``x[H, M, K]`` bf16 (contiguous) times ``w`` (``Int4Weights``, or ``Fp8Weights`` in
    the shuffled layout) into ``out[H, M, N]``. Returns (kernel, out); ``CudaKernelUnavailable`` when it cannot
    run this shape here."""
    from mcp_server.kernels.launch import sm_count
    from mcp_server.kernels.splitk import workspace

    H, M, K = x.shape
    fp8 = not isinstance(w, Int4Weights)
    if fp8:
        if w.layout != "shuffled":
            raise CudaKernelUnavailable("the CUDA FP8 form reads the shuffled layout")
        words, scales, zeros = w.weight.view(_torch().int32), w.scales, w.scales
    else:
        words, scales = w.qweight, w.scales
        zeros = w.zeros if w.zeros is not None else w.scales
    if x.data_ptr() % 16 or words.data_ptr() % 16:
        raise CudaKernelUnavailable("x and the packed weights must be 16-byte aligned")
    mc, grid, threads, smem = plan(cfg, H, M, K, w.N, w.group, not fp8 and w.zeros is not None,
                                   sm_count(x.device), fp8)
    if (x.device.index or 0) != _torch().cuda.current_device():     # the module and stream are the current device's
        raise CudaKernelUnavailable(f"x is on {x.device}, not the current CUDA device")
    kernel = compiled(mc)
    if smem >= 48 * 1024:
        kernel.set_shared_memory_config(smem)
    ws, cnt = workspace(x.device, H * mc["SPLIT"] * M * w.N if mc["SPLIT"] > 1 else 1, H * grid[0])
    kernel(grid=grid, block=(threads, 1, 1), args=[words, scales, zeros, x, out, ws, cnt, M, K, w.N, H],
           shared_mem=smem)
    return kernel, out


def _torch():
    import torch

    return torch


def try_launch(x, w, out, cfg: dict):
    """``launch`` where it can run; else, when ``cfg`` names a ``fallback`` config, None after a warning (once
    per reason), and the caller runs the fallback; without one the ``CudaKernelUnavailable`` propagates."""
    try:
        if x.device.type != "cuda" or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
            raise CudaKernelUnavailable("not on a CUDA device")
        return launch(x, w, out, cfg)
    except CudaKernelUnavailable as exc:
        if not cfg.get("fallback"):
            raise
        warn_fallback(exc)
        return None


_WARNED: set = set()


def warn_fallback(exc: Exception) -> None:
    """Once per reason: the CUDA kernel could not run and the Triton fallback config ran instead."""
    why = str(exc)
    if why not in _WARNED:
        _WARNED.add(why)
        import warnings

        warnings.warn(f"kernelscope INT4/FP8 BMM: the CUDA kernel cannot run ({why}); running its Triton "
                      "fallback config", RuntimeWarning, stacklevel=3)


_USABLE: dict = {}


def usable(fp8: bool = False) -> bool:
    """Whether the CUDA kernel (its FP8 form with ``fp8``: ``cvt.rn.f16x2.e4m3x2`` needs sm_89) builds on the
    current device (capability 8.0+, NVRTC through torch); the answer of one trial build, cached per device."""
    import torch

    if not torch.cuda.is_available():
        return False
    key = (torch.cuda.current_device(), fp8)
    if key not in _USABLE:
        try:
            compiled(macros({}, 1, 0 if fp8 else PACK_K, False, fp8))
            _USABLE[key] = True
        except CudaKernelUnavailable:
            _USABLE[key] = False
    return _USABLE[key]


def resolve(cfg: dict, fp8: bool = False) -> dict:
    """The config that will run: ``cfg``, or its Triton fallback where the CUDA kernel does not build here."""
    if cfg.get("variant") == "cuda" and cfg.get("fallback") and not usable(fp8):
        return dict(cfg["fallback"])
    return cfg
