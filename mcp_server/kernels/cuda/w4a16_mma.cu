// kernelscope: INT4 W4A16 and FP8 W8A16 BMM (mma.sync, swap A/B), compiled at run time by NVRTC from
// mcp_server/kernels/w4a16_cuda.py, which documents the design and passes the -D parameters:
// NT MT KB KWARP WARPS SPLIT PF MINB GROUP ZP FP8 STREAM STAGES PADW EVF DYN XONE XCA SWZ STAG PROBE PCAP MHI SXC
// ERL CG.
// No headers (but the timeline probes' at PROBE = 3): NVRTC's built-in types only.
typedef unsigned int u32;
typedef unsigned short u16;
#if PROBE == 3
// measurement only: the streaming form records its units' phases in the timeline probe format (w4a16_cuda passes
// the include path, the buffer as ws and its length as PCAP); `kernelscope timeline analyze` decodes it
#define KERNELSCOPE_PROBE 1
#include "kernelscope_probe.cuh"
#else
#define KS_PROBE_INIT(buf, slots, ngroups, group, is_writer)
#define KS_PROBE_BEGIN(event)
#define KS_PROBE_END(event)
#endif

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
// two codes (low nibbles of each half) -> bf16x2 128 + q: exact
__device__ __forceinline__ u32 dq128(u32 v) {
    u32 t;
    asm("lop3.b32 %0, %1, 0x000F000F, 0x43004300, 0xea;" : "=r"(t) : "r"(v));
    return t;
}
// two codes -> bf16x2 (128 + q) - (128 + z) = q - z: exact
__device__ __forceinline__ u32 dq(u32 v, u32 off) {
    u32 r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(dq128(v)), "r"(0x3F803F80u), "r"(off));
    return r;
}
// v >> sh (sh a multiple of 4, known at compile time). The unpack's prmt, shifts and lop3 all issue to the ALU pipe;
// MHI: the shift as mul.hi.u32 by 2^(32 - sh), an IMAD on the FMA-heavy pipe (measured 0-18 % slower: RESULTS.md,
// "sixth round"). zr is 0, from a kernel argument ptxas cannot see, so it keeps the multiply a multiply.
__device__ __forceinline__ u32 nib(u32 v, int sh, u32 zr) {
#if MHI
    if (sh == 0) return v;
    u32 r;
    asm("mul.hi.u32 %0, %1, %2;" : "=r"(r) : "r"(v), "r"((1u << (32 - sh)) | zr));
    return r;
#else
    return v >> sh;
#endif
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
// bf16x2 -> f16x2 (the FP8 form multiplies in f16, as the Triton W8A16 kernel)
__device__ __forceinline__ u32 bf16x2_to_f16(u32 v) {
    const float lo = __uint_as_float(v << 16), hi = __uint_as_float(v & 0xFFFF0000u);
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ uint4 bf16x8_to_f16(uint4 v) {
    return make_uint4(bf16x2_to_f16(v.x), bf16x2_to_f16(v.y), bf16x2_to_f16(v.z), bf16x2_to_f16(v.w));
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
#if XONE
#define SK KC                // the activations of a streamed unit in one copy (rows unpadded)
#else
#define SK (KC + 8)
#endif
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

// the warp's accumulators (or partial sums) to 0
template <int T>
__device__ __forceinline__ void zero(float (&c)[T][MT][4]) {
#pragma unroll
    for (int nt = 0; nt < T; ++nt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) c[nt][mt][i] = 0.f;
}

// each m-tile's right operands (x in shared memory, rows of SK) for 16-k chunks j and j + 1 of the block at k0
__device__ __forceinline__ void ldsm_x(u32 (&b)[MT][4], u32 xs_base, int k0, int j, int q, int r8) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int col = k0 + 16 * (j + (q >> 1)) + 8 * (q & 1);
        ldsm4(b[mt], xs_base + 2u * (u32)((mt * 8 + r8) * SK + col));
#if FP8 && STREAM
#pragma unroll
        for (int i = 0; i < 4; ++i) b[mt][i] = bf16x2_to_f16(b[mt][i]);    // the FP8 form's slot holds x as bf16
#endif
    }
}

#if FP8
// the FP8 form: per 64-k block, chunk j (16 k) is byte j of words 2t, 2t+1, 2t+8, 2t+9 of rows g and g + 8;
// f16 MMAs accumulate over the warp's K, one scale per output channel after the last block
__device__ __forceinline__ void tile_mma_fp8(float (&acc)[NT][MT][4], const u32 (&w)[KB][NT][8], u32 xs_base,
                                             const float* sc, int h, int n0, int kofs, int N, int lane) {
    const int g = lane >> 2, q = lane >> 3, r8 = lane & 7;
    zero(acc);
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
#pragma unroll
        for (int jp = 0; jp < 4; jp += 2) {
            u32 b[MT][4];
            ldsm_x(b, xs_base, kofs + kb * 64, jp, q, r8);
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

#if SXC
typedef float OFS;          // 128 + z
#else
typedef u32 OFS;            // bf16x2 -(128 + z)
#endif
// the scales and zero-point offsets of rows si and si + 8 (si = (h * NG + gi) * N + row: a tile's row g, group gi)
__device__ __forceinline__ void scales_of(float& s0, float& s1, OFS& o0, OFS& o1, const u16* sc, const u16* zp,
                                          size_t si) {
    s0 = bf2f(sc[si]);
    s1 = bf2f(sc[si + 8]);
#if SXC && ZP
    o0 = 128.f + bf2f(zp[si]);
    o1 = 128.f + bf2f(zp[si + 8]);
#elif SXC
    o0 = o1 = 136.f;
#elif ZP
    o0 = zoff(zp[si]);
    o1 = zoff(zp[si + 8]);
#else
    o0 = o1 = 0xC308C308u;     // -136 = -(128 + 8)
#endif
}

// ERL (the streaming form, groups of 128+): what tile_mma reads besides the words, read out of the slot into
// registers first (side_load), so the slot is freed before the multiply; without ERL tile_mma reads shared memory
struct Side {
#if ERL
    u32 xb[KB][4][MT][4];           // x's right operands, chunks 2p and 2p + 1 of block kb
    float s[KB][STEPS][NT][2];
    OFS o[KB][STEPS][NT][2];
#endif
};

#if ERL
__device__ __forceinline__ void side_load(Side& d, u32 xs_base, const u16* sc, const u16* zp, int n0, int NG, int N,
                                          int lane) {
    const int g = lane >> 2, q = lane >> 3, r8 = lane & 7;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
#pragma unroll
        for (int p = 0; p < 4; ++p) ldsm_x(d.xb[kb][p], xs_base, kb * 128, 2 * p, q, r8);
#pragma unroll
        for (int st = 0; st < STEPS; ++st)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
                scales_of(d.s[kb][st][nt][0], d.s[kb][st][nt][1], d.o[kb][st][nt][0], d.o[kb][st][nt][1], sc, zp,
                          (size_t)((kb * 128 + st * GS) / GROUP) * N + n0 + nt * 16 + g);
    }
}
#endif

// the warp's tiles times x (in shared memory) over its KB blocks, scaled per group, into acc.
// SXC: the weights enter the MMA as 128 + q (lop3 alone, no fma.rn.bf16x2 on the FMA pipes) and each group's
// (128 + z) * sum(x) is taken off the fp32 partial sums: one more MMA a 16-k chunk and m-tile (all-ones left
// operand: every row of its result is the chunk's column sums of x). (128 + q) * x is exact in fp32.
__device__ __forceinline__ void tile_mma(float (&acc)[NT][MT][4], const u32 (&w)[KB][NT][8], u32 xs_base,
                                         const u16* sc, const u16* zp, int h, int n0, int kg, int kofs, int NG,
                                         int N, int lane, u32 zr, const Side& side) {
    const int g = lane >> 2, q = lane >> 3, r8 = lane & 7;
    zero(acc);
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
            float s0[NT], s1[NT];
            OFS o0[NT], o1[NT];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#if ERL
                s0[nt] = side.s[kb][st][nt][0]; s1[nt] = side.s[kb][st][nt][1];
                o0[nt] = side.o[kb][st][nt][0]; o1[nt] = side.o[kb][st][nt][1];
#else
                scales_of(s0[nt], s1[nt], o0[nt], o1[nt], sc, zp,
                          ((size_t)h * NG + (kg + kb * 128 + st * GS) / GROUP) * N + n0 + nt * 16 + g);
#endif
            }
            float part[NT][MT][4];
            zero(part);
#if SXC
            float sx[1][MT][4];                     // column sums of x over the group (m = 2t, 2t + 1)
            zero(sx);
            const u32 ones[4] = {0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u};
#endif
#pragma unroll
            for (int jp = 0; jp < CH; jp += 2) {
                const int j = st * CH + jp;
                u32 b[MT][4];       // chunk j (k lo, k hi), chunk j + 1 (k lo, k hi)
#if ERL
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int i = 0; i < 4; ++i) b[mt][i] = side.xb[kb][j / 2][mt][i];
#else
                ldsm_x(b, xs_base, kofs + kb * 128, j, q, r8);
#endif
#if SXC
#pragma unroll
                for (int jj = 0; jj < 2; ++jj)
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) mma(sx[0][mt], ones, b[mt][2 * jj], b[mt][2 * jj + 1]);
#endif
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                    for (int jj = 0; jj < 2; ++jj) {
                        const int jn = j + jj, sh = 4 * (jn & 3);
                        u32 a[4];
#pragma unroll
                        for (int p = 0; p < 4; ++p) {
                            const u32 v = nib(jn < 4 ? lo[nt][p] : hi[nt][p], sh, zr);
#if SXC
                            a[p] = dq128(v);
#else
                            a[p] = dq(v, (p & 1) ? o1[nt] : o0[nt]);
#endif
                        }
#pragma unroll
                        for (int mt = 0; mt < MT; ++mt) mma(part[nt][mt], a, b[mt][2 * jj], b[mt][2 * jj + 1]);
                    }
                }
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
#if SXC
                    acc[nt][mt][0] += s0[nt] * (part[nt][mt][0] - o0[nt] * sx[0][mt][0]);
                    acc[nt][mt][1] += s0[nt] * (part[nt][mt][1] - o0[nt] * sx[0][mt][1]);
                    acc[nt][mt][2] += s1[nt] * (part[nt][mt][2] - o1[nt] * sx[0][mt][0]);
                    acc[nt][mt][3] += s1[nt] * (part[nt][mt][3] - o1[nt] * sx[0][mt][1]);
#else
                    acc[nt][mt][0] += s0[nt] * part[nt][mt][0];
                    acc[nt][mt][1] += s0[nt] * part[nt][mt][1];
                    acc[nt][mt][2] += s1[nt] * part[nt][mt][2];
                    acc[nt][mt][3] += s1[nt] * part[nt][mt][3];
#endif
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

#if STREAM
// ---- the streaming form (STREAM = 1, INT4): a persistent grid, one producer warp per program copying each
// work unit (one head's rows r0 .. r0 + R, all of K: packed words, group scales, zero points, activations) into
// a ring of STAGES shared-memory slots with cp.async.bulk, completion counted on the slot's mbarrier; WARPS
// consumer warps (NT tiles of 16 rows each, all KB blocks) read their words out of the slot, multiply, free
// the slot and store. The weight stream never waits for the multiplies of the unit before it.
#define R (16 * NT * WARPS)                     // rows of a unit
#define KW (KB * 16)                            // packed words per row
#define RS (KW + PADW)                          // words per row in the slot (PADW > 0: one copy per row)
#define A128(b) (((b) + 127) / 128 * 128)
#define W_BYTES A128(R * RS * 4)
#if FP8
#define NGS 1                                   // per-channel fp32 scales: R floats
#define S_BYTES A128(R * 4)
#define S_ROW (R * 4)
#else
#define NGS (KB * 128 / GROUP)                  // groups along K
#define S_BYTES A128(NGS * R * 2)
#define S_ROW (R * 2)
#endif
#define X_OFF (W_BYTES + S_BYTES * (1 + ZP))
#define SLOT (X_OFF + A128(8 * MT * SK * 2))
#define BARS A128(16 * STAGES)

__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bar_init(u32 b, u32 n) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(b), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_expect(u32 b, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_arrive(u32 b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b) : "memory");
}
__device__ __forceinline__ void bar_wait(u32 b, u32 parity) {
    u32 ok;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(ok) : "r"(b), "r"(parity) : "memory");
    } while (!ok);
}
// bytes from global to shared, counted on mbarrier b (EVF: the weights marked evict-first in L2, read once)
__device__ __forceinline__ void bulk(u32 dst, const void* src, u32 bytes, u32 b, unsigned long long pol) {
#if EVF
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(b), "l"(pol) : "memory");
#else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(b) : "memory");
#endif
}

#if XCA
// 16 bytes global -> shared by the generic async copy (L2 only); the thread's copies so far arrive on mbarrier b
// when they land (noinc: b's expected count includes the 32 producer lanes)
__device__ __forceinline__ void cp16(u32 dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_arrive(u32 b) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(b) : "memory");
}
#endif

// CG consumer groups of WARPS warps (0: one), group g taking the units of slots g, g + CG, ...: with CG = STAGES each
// slot has its own warps, so units that land together are multiplied together (the last ones too), not in turn
#if CG > 1
#define NCG CG
#else
#define NCG 1
#endif
#define CW (WARPS * NCG)                        // consumer warps; the producer is warp CW
#if ERL
// two programs per SM (CPS 2): up to 204 registers for the words, x's fragments and scales held at once
#define SBOUNDS __launch_bounds__((CW + 1) * 32, 2)
#elif SXC
// one program per SM, stated: ptxas then fits NT = 8's registers in 127 without the 8-byte spill its default
// allocation (128) made
#define SBOUNDS __launch_bounds__((CW + 1) * 32, 1)
#else
#define SBOUNDS __launch_bounds__((CW + 1) * 32)
#endif
extern "C" __global__ void SBOUNDS
w4a16_mma(const u32* __restrict__ qw, const u16* __restrict__ sc, const u16* __restrict__ zp,
          const u16* __restrict__ x, u16* __restrict__ out, float* __restrict__ ws, int* __restrict__ cnt,
          int M, int K, int N, int H)
{
    extern __shared__ __align__(128) unsigned char smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u32 bars = smem_u32(smem), slots = bars + BARS;     // full[s] at bars + 8 s, empty[s] at + 8 STAGES
    const int nsplit = N / R, units = H * nsplit;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            bar_init(bars + 8 * s, XCA ? 33 : 1);     // XCA: the 32 lanes' copies of x arrive too
            bar_init(bars + 8 * (STAGES + s), WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
#if PROBE == 1
    return;                 // measurement only: the launch of this grid and shared memory, nothing copied
#endif
    // PROBE = 3: two writers a program, the first consumer warp (group 0: events 0 wait for a unit's bytes,
    // 1 multiply, 2 store) and the producer (group 1: 3 wait for a free slot, 4 issue the copies)
    KS_PROBE_INIT((unsigned long long*)ws, PCAP, 2, warp == CW ? 1 : 0, lane == 0 && (warp == 0 || warp == CW));
    // the unit in each slot (units or more: no more work); DYN: units past the first wave are claimed from a
    // counter (cnt[0]), so a program that streams faster takes more of them; the last program to finish resets it
    __shared__ int uid[STAGES];
    if (warp == CW) {           // the producer
        unsigned long long pol = 0;
#if EVF
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#endif
        const u32 tx = R * KW * 4 + NGS * S_ROW * (1 + ZP) + (XCA ? 0 : M * K * 2);
        int u = blockIdx.x;
#if NCG > 1
        int ends = 0;
#endif
        for (int i = 0;; ++i) {
            const int s = i % STAGES;
            const u32 full = bars + 8 * s, dst = slots + s * SLOT;
            int next = 0;
#if DYN
            if (lane == 0 && u < units) next = gridDim.x + atomicAdd(cnt, 1);    // in flight during the wait
#endif
            if (i >= STAGES) {
                KS_PROBE_BEGIN(3);
                bar_wait(bars + 8 * (STAGES + s), ((i / STAGES) & 1) ^ 1);
                KS_PROBE_END(3);
            }
#if STAG
            // staggered start: the second unit is copied once the first has landed, so a program's slots do not
            // fill (and, at the end, land) together with their multiplies then run back to back
            else if (i == 1) bar_wait(bars, 0);
#endif
            if (lane == 0) uid[s] = u;
            if (u >= units) {
                if (lane == 0) bar_arrive(full);
#if XCA
                bar_arrive(full);       // the arrivals each lane's copies of x would have made
#endif
#if NCG > 1
                if (++ends < NCG) continue;     // the next consumer group's slot gets the end mark too
#endif
                break;
            }
            const int h = u / nsplit, r0 = (u % nsplit) * R;
            KS_PROBE_BEGIN(4);
            if (lane == 0) bar_expect(full, tx);
            __syncwarp();
            const u32* src = qw + ((size_t)h * N + r0) * KW;
#if PADW
            for (int r = lane; r < R; r += 32) bulk(dst + r * RS * 4, src + (size_t)r * KW, KW * 4, full, pol);
#else
            if (lane == 0) bulk(dst, src, R * KW * 4, full, pol);
#endif
#if FP8
            if (lane == 0) bulk(dst + W_BYTES, (const float*)sc + (size_t)h * N + r0, R * 4, full, pol);
#else
            if (nsplit == 1) {      // the head's scales (and zero points) in one piece
                if (lane == 0) bulk(dst + W_BYTES, sc + (size_t)h * NGS * N, NGS * R * 2, full, pol);
#if ZP
                if (lane == 1) bulk(dst + W_BYTES + S_BYTES, zp + (size_t)h * NGS * N, NGS * R * 2, full, pol);
#endif
            } else {
                for (int gi = lane; gi < NGS; gi += 32) {
                    bulk(dst + W_BYTES + gi * R * 2, sc + ((size_t)h * NGS + gi) * N + r0, R * 2, full, pol);
#if ZP
                    bulk(dst + W_BYTES + S_BYTES + gi * R * 2, zp + ((size_t)h * NGS + gi) * N + r0, R * 2, full, pol);
#endif
                }
            }
#endif
#if XCA
            // x in 16-byte pieces from all lanes into the padded rows: one bulk copy per row costs the copy
            // engine more than the row's bytes at M = 64 (PADW's lesson)
            for (int j = lane; j < M * (K / 8); j += 32) {
                const int m = j / (K / 8), c = j % (K / 8);
                cp16(dst + X_OFF + (u32)(m * SK + c * 8) * 2, x + ((size_t)h * M + m) * K + c * 8);
            }
            cp_arrive(full);
#elif XONE
            if (lane == 2) bulk(dst + X_OFF, x + (size_t)h * M * K, M * K * 2, full, 0);
#else
            for (int m = lane; m < M; m += 32)
                bulk(dst + X_OFF + m * SK * 2, x + ((size_t)h * M + m) * K, K * 2, full, 0);
#endif
            KS_PROBE_END(4);
#if DYN
            u = __shfl_sync(0xffffffffu, next, 0);
#else
            u += gridDim.x;
#endif
        }
#if DYN
        __threadfence();        // this program's claims come before its count of finished programs
        if (lane == 0 && atomicAdd(cnt + 1, 1) == (int)gridDim.x - 1) {
            atomicExch(cnt, 0);
            atomicExch(cnt + 1, 0);
        }
#endif
        return;
    }
#if NCG > 1
    const int g = lane >> 2, t = lane & 3, n0 = (warp % WARPS) * NT * 16;
    for (int i = warp / WARPS;; i += NCG) {
#else
    const int g = lane >> 2, t = lane & 3, n0 = warp * NT * 16;
    for (int i = 0;; ++i) {
#endif
        const int s = i % STAGES;
        KS_PROBE_BEGIN(0);
        bar_wait(bars + 8 * s, (i / STAGES) & 1);
        KS_PROBE_END(0);
        const int u = uid[s];
        if (u >= units) break;
#if PROBE == 2
        __syncwarp();           // measurement only: every byte copied, nothing multiplied or stored
        if (lane == 0) bar_arrive(bars + 8 * (STAGES + s));
        continue;
#endif
        const int h = u / nsplit, r0 = (u % nsplit) * R;
        KS_PROBE_BEGIN(1);
        const unsigned char* slot = smem + BARS + s * SLOT;
        const u32* wsm = (const u32*)slot;
        u32 w[KB][NT][8];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const u32* p0 = wsm + (n0 + nt * 16 + g) * RS + 2 * t;
            const u32* p1 = p0 + 8 * RS;
            // a row's 8-byte pieces c = 2 kb + half sit 8 c words in. Rows of a multiple of 32 words (16) put
            // every row's piece c in the same banks, so the 4 rows a half-warp reads conflict 4-way (2-way);
            // SWZ: lane g loads piece j ^ sw in step j, so the half-warp's rows hit 4 distinct bank groups,
            // then two selp stages put piece c back in slot c (sw is one or two bits)
            const int sw = (SWZ && RS % 32 == 0 && KB >= 2) ? (g & 3) : (SWZ && RS % 32 == 16) ? ((g >> 1) & 1) : 0;
            uint2 r0[2 * KB], r1[2 * KB];
#pragma unroll
            for (int j = 0; j < 2 * KB; ++j) {
                r0[j] = *(const uint2*)(p0 + 8 * (j ^ sw));
                r1[j] = *(const uint2*)(p1 + 8 * (j ^ sw));
            }
#if SWZ
#pragma unroll
            for (int b = 1; b <= 2 && b < 2 * KB; b <<= 1)
#pragma unroll
                for (int j = 0; j < 2 * KB; ++j)
                    if (!(j & b)) {
                        const bool f = sw & b;
                        const uint2 a0 = r0[j], a1 = r0[j | b], c0 = r1[j], c1 = r1[j | b];
                        r0[j] = f ? a1 : a0; r0[j | b] = f ? a0 : a1;
                        r1[j] = f ? c1 : c0; r1[j | b] = f ? c0 : c1;
                    }
#endif
#pragma unroll
            for (int kb = 0; kb < KB; ++kb) {
                const uint2 a = r0[2 * kb], b = r0[2 * kb + 1], c = r1[2 * kb], d = r1[2 * kb + 1];
                w[kb][nt][0] = a.x; w[kb][nt][1] = a.y; w[kb][nt][2] = b.x; w[kb][nt][3] = b.y;
                w[kb][nt][4] = c.x; w[kb][nt][5] = c.y; w[kb][nt][6] = d.x; w[kb][nt][7] = d.y;
            }
        }
        Side side;
#if ERL
        // early release: x's fragments, the scales and zero points in registers too, and the slot is the producer's
        // again before the multiply (the mbarrier arrive orders these shared-memory reads before its next copy)
        side_load(side, smem_u32(slot + X_OFF), (const u16*)(slot + W_BYTES), (const u16*)(slot + W_BYTES + S_BYTES),
                  n0, NGS, R, lane);
        __syncwarp();
        if (lane == 0) bar_arrive(bars + 8 * (STAGES + s));
#endif
        float acc[NT][MT][4];
#if FP8
        tile_mma_fp8(acc, w, smem_u32(slot + X_OFF), (const float*)(slot + W_BYTES), 0, n0, 0, R, lane);
#else
        tile_mma(acc, w, smem_u32(slot + X_OFF), (const u16*)(slot + W_BYTES), (const u16*)(slot + W_BYTES + S_BYTES),
                 0, n0, 0, 0, NGS, R, lane, (u32)K >> 31, side);
#endif
        __syncwarp();
        KS_PROBE_END(1);
#if !ERL
        if (lane == 0) bar_arrive(bars + 8 * (STAGES + s));
#endif
        KS_PROBE_BEGIN(2);
        store_out(acc, out, h, r0 + n0, 0, M, N, lane);
        KS_PROBE_END(2);
    }
}
#else
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
        tile_mma(acc, w, xs_base, sc, zp, h, n0, kbeg + kofs, kofs, NG, N, lane, (u32)K >> 31, Side());
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
#endif
