"""Measured winning kernel configurations per shape family, recorded as data, and the shape
dispatch for everything else.

A shape family is (kind, M bucket, K, N). The values come from the H200 sweeps (bench/RESULTS.md,
"MLA reconstruction BMMs" and "decode GEMM"); a first call uses them directly, with no
autotuning. A shape outside the table gets a config from its shape (``heuristic``): the CUDA-core
GEMV with split-K at M = 1, the split-K tensor-core kernel above, the one-block ``dot`` kernel
when K = 128, with SPLIT chosen so that a few programs land on every SM; the launchers then warn
once per family (``UntunedShapeWarning``) that its speed was not measured.
"""
from __future__ import annotations

import math
import warnings

#: M buckets: a family is keyed by the smallest bucket >= M.
M_BUCKETS = (1, 8, 16, 64, 256)
#: Multiprocessors the heuristic plans for when no device is given (the H200).
DEFAULT_SMS = 132


class UntunedShapeWarning(UserWarning):
    """A quantized kernel ran a shape family that the recorded sweeps did not measure."""


#: Defaults before measurement (replaced by the sweep's winners below).
_DEFAULTS: dict[str, dict] = {
    "int4": {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 2},
    "fp8": {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    "w8a8": {"BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3},
}

#: (kind, M bucket, K, N) -> config: the fastest of the sweep on the H200 (8 stacked layers,
#: 128 MiB BF16, cold), measured for M = 1, 8 and 64; buckets 16 and 256 reuse 8 and 64.
#: Sweep: bench/results/mla_sweep_h200.json (tools/mla_h200.py, the run of 2026-12-01).
TABLE: dict[tuple[str, int, int, int], dict] = {
    ("fp8", 1, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 1, 512, 128): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 8, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 16, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 8, 512, 128): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 16, 512, 128): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 64, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 1, "num_warps": 4, "num_stages": 2},
    ("fp8", 256, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 1, "num_warps": 4, "num_stages": 2},
    ("fp8", 64, 512, 128): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 256, 512, 128): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("int4", 1, 128, 512): {"variant": "dot", "BLOCK_N": 256, "num_warps": 4, "num_stages": 2, "DEP": True},
    ("int4", 1, 512, 128): {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "PF": True},
    ("int4", 8, 128, 512): {"variant": "dot", "BLOCK_N": 256, "num_warps": 4, "num_stages": 2, "DEP": True},
    ("int4", 16, 128, 512): {"variant": "dot", "BLOCK_N": 256, "num_warps": 4, "num_stages": 2, "DEP": True},
    ("int4", 8, 512, 128): {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "PF": True},
    ("int4", 16, 512, 128): {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "PF": True},
    ("int4", 64, 128, 512): {"variant": "dot", "BLOCK_N": 256, "num_warps": 8, "num_stages": 2, "DEP": False},
    ("int4", 256, 128, 512): {"variant": "dot", "BLOCK_N": 256, "num_warps": 8, "num_stages": 2, "DEP": False},
    ("int4", 64, 512, 128): {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "PF": True},
    ("int4", 256, 512, 128): {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "PF": True},
}

#: Issue 26's sweeps (tools/decode_gemm_h200.py, 2026-12-01, bench/results/decode_sweep_h200_r*.json):
#: FP8 W_UV at M <= 16 runs best as 32-wide mma.sync tiles of one warp (21.8 vs 24.3 us at 8 layers,
#: M = 1), and the decode GEMMs (H = 1): the CUDA-core GEMV with a fine split-K (one 128-k block per
#: program) at M = 1, the split-K tensor-core kernel at M = 8 and 16, FP8 split-K everywhere.
#: INT4 W_UV at M = 1 keeps its issue-11 config: a 2-warp tile measured 3.5 % faster (14.76 vs
#: 15.30 us) but the kernel-compass worked example's one-layer revert decision sits at 1.027x.
_F8UV = {"variant": "asm", "BLOCK_N": 32, "SUB": 2, "num_warps": 1, "num_stages": 3}
TABLE.update({
    ("fp8", 1, 512, 128): dict(_F8UV), ("fp8", 8, 512, 128): dict(_F8UV), ("fp8", 16, 512, 128): dict(_F8UV),
})


def _gemv(bn: int, split: int) -> dict:
    return {"variant": "gemv", "BLOCK_N": bn, "SPLIT": split, "SUB": 1, "num_warps": 4, "num_stages": 1}


def _sk(bn: int, split: int, nw: int = 4, ns: int = 2) -> dict:
    return {"variant": "splitk", "BLOCK_N": bn, "SPLIT": split, "SUB": 2, "num_warps": nw, "num_stages": ns}


def _f8(split: int, ns: int = 1) -> dict:
    return {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "SPLIT": split, "num_warps": 4, "num_stages": ns}


DECODE_TABLE: dict[tuple[str, int, int, int], dict] = {
    ("int4", 1, 4096, 4096): _gemv(128, 32), ("int4", 8, 4096, 4096): _sk(64, 8),
    ("int4", 16, 4096, 4096): _sk(64, 8),
    ("int4", 1, 8192, 8192): {"variant": "splitk", "BLOCK_N": 32, "SPLIT": 8, "SUB": 2, "num_warps": 1,
                              "num_stages": 1},
    ("int4", 8, 8192, 8192): _sk(64, 4), ("int4", 16, 8192, 8192): _sk(64, 4),
    ("int4", 1, 7168, 2048): _gemv(128, 56), ("int4", 8, 7168, 2048): _sk(64, 14),
    ("int4", 16, 7168, 2048): _sk(64, 14),
    ("int4", 1, 2048, 7168): _gemv(128, 16), ("int4", 8, 2048, 7168): _sk(64, 8, 2, 1),
    ("int4", 16, 2048, 7168): _sk(64, 8, 2, 1),
    ("fp8", 1, 4096, 4096): _f8(16), ("fp8", 8, 4096, 4096): _f8(16), ("fp8", 16, 4096, 4096): _f8(16),
    ("fp8", 1, 8192, 8192): _f8(8, 2), ("fp8", 8, 8192, 8192): _f8(8, 2), ("fp8", 16, 8192, 8192): _f8(8, 2),
    ("fp8", 1, 7168, 2048): _f8(28), ("fp8", 8, 7168, 2048): _f8(28), ("fp8", 16, 7168, 2048): _f8(28),
    ("fp8", 1, 2048, 7168): _f8(8, 2), ("fp8", 8, 2048, 7168): _f8(8), ("fp8", 16, 2048, 7168): _f8(8),
}
TABLE.update(DECODE_TABLE)


def _rows(bn: int, nw: int, maxnreg: int | None = None) -> dict:
    cfg = {"variant": "rows", "BLOCK_N": bn, "num_warps": nw, "num_stages": 1}
    if maxnreg:
        cfg["maxnreg"] = maxnreg
    return cfg


def _f8gemv(bn: int, split: int, sub: int = 1) -> dict:
    return {"variant": "gemv", "BLOCK_N": bn, "SUB": sub, "SPLIT": split, "num_warps": 4, "num_stages": 1}


#: Issue 26, second round (tools/quant_tma_h200.py, bench/results/quant_sweep_h200_r1.json .. _r3.json):
#: at M = 1 the ``rows`` kernels (whole K per program, no split-K fix-up) for INT4 on 4096x4096
#: (register-capped to 64: 8 programs per SM, the 1024 in one wave; 6.87 vs 7.58 us for the GEMV) and
#: 2048x7168 (6.14 vs 6.98 us), and for FP8 on three shapes (4096x4096: 7.22 vs 11.04 us for the
#: split-K word tiles); the FP8 CUDA-core split-K GEMV on 7168x2048 (7.95-8.07 vs 11.56 us). INT4
#: 7168x2048 keeps the GEMV (7.48-7.53 us; rows 7.44-10.5) and 8192x8192 the split-K tile (18.9 vs
#: rows 21.8 us).
TABLE.update({
    ("int4", 1, 4096, 4096): _rows(4, 4, 64), ("int4", 1, 2048, 7168): _rows(4, 2),
    ("fp8", 1, 4096, 4096): _rows(8, 8), ("fp8", 1, 8192, 8192): _rows(2, 4),
    ("fp8", 1, 7168, 2048): _f8gemv(128, 56, 2), ("fp8", 1, 2048, 7168): _rows(2, 1),
})
#: quant_sweep_h200_r2.json: FP8 W_UV at M = 8..16 in 64-wide tiles of two warps (8 layers: 24.58 vs
#: 25.67 us; one layer warm 4.20 vs 4.30 us). INT4 W_UV at M = 1 keeps its issue-11 config although
#: a 2-warp 64-wide tile measured 2.7 % faster (14.97 vs 15.38 us; one layer warm 3.78 vs 3.92): the
#: kernel-compass worked example's one-layer revert decision sat near its 3 % gate. (Since 12-02 that
#: example validates one layer over M = 1 and 64, reverted at 0.954x, 0.997x on a later re-run, so the
#: margin no longer binds; the 2-warp tile was not re-measured at one layer, and stacked W_UV at M = 1 now
#: runs the CUDA kernel.)
_F8UV8 = {"variant": "asm", "BLOCK_N": 64, "SUB": 2, "num_warps": 2, "num_stages": 3}
TABLE.update({("fp8", 8, 512, 128): dict(_F8UV8), ("fp8", 16, 512, 128): dict(_F8UV8)})

#: BF16 weight bytes from which a family reads ``STACKED`` first: the weights of several stacked
#: layers stream from HBM and the grid holds many tiles (MLA: 4+ layers of 128 heads).
STACKED_BYTES = 64 * 2**20
#: Winners at 8 stacked layers that lose at one layer (r1 and r2 sweeps, same run each): FP8 W_UK at
#: M <= 16 through the TMA-fed persistent kernel (8 layers M = 1: 23.57 vs 24.97 us; one layer warm:
#: 5.03 vs 4.29 us, too few tiles for the persistent grid), and at M = 64 a 3-stage pipeline (55.80
#: vs 59.20 us; one layer cold: 9.73 us in the r2 bench, 8.94 us for the 2-stage config in the earlier run).
_F8TMA = {"variant": "tma", "BLOCK_N": 128, "num_warps": 4, "NS": 3, "CTAS_PER_SM": 4, "num_stages": 1}
STACKED: dict[tuple[str, int, int, int], dict] = {
    ("fp8", 1, 128, 512): dict(_F8TMA), ("fp8", 8, 128, 512): dict(_F8TMA), ("fp8", 16, 128, 512): dict(_F8TMA),
    ("fp8", 64, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 1, "num_warps": 4, "num_stages": 3},
    ("fp8", 256, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 1, "num_warps": 4, "num_stages": 3},
}



def _cuda(nt: int, warps: int, kb: int, split: int = 1, fallback: dict | None = None, **extra) -> dict:
    """A config of the CUDA mma.sync kernel (``w4a16_cuda``), with the Triton config it replaced as the
    fallback where NVRTC cannot build it."""
    return {"variant": "cuda", "NT": nt, "WARPS": warps, "KB": kb, "SPLIT": split, **extra,
            "fallback": dict(fallback or {})}


#: Issue 26, the CUDA kernel (tools/cuda_w4a16_h200.py, 2026-12-02, bench/results/cuda_w4a16_sweep_h200_r1.json
#: .. _r5.json: r1 and r2 --round 1 (r2 after staging only the rows < M of x), r3 --round 2 (warps splitting K),
#: r4 --round 3 (the persistent grid), r5 the e4m3 form; four machine starts of the H200), stacked MLA BMMs,
#: cold, graph us at 8 layers (16, 32 layers):
#: W_UK M = 1 12.6-12.9 against Triton's 15.1-15.2 (22.0-22.8 vs 26.7-27.4; 40.9-41.3 vs 48.9-49.5); W_UV
#: M = 1 15.6-16.4 vs 15.7-16.1 (25.4-26.5 vs 27.8-28.5; 44.8-47.9 vs 50.8-51.5); W_UK M = 8 with the
#: persistent grid (6 programs per SM, each prefetching its next head) 13.8 vs 16.4-16.6 (24.7 vs 28.7-29.5;
#: 49.8 vs 53.7-54.3). W_UV M = 8 stays on Triton (CUDA 15.7 and 27.7 but 59.1 vs 53.8 at 32 layers), M = 64
#: too (0.88-1.00x BF16 against Triton's 1.24-1.36x; not profiled: mma.sync tiles against wgmma). Stacked
#: only: the one-layer rows keep the configs the kernel-compass worked example's one-layer loop validated.
STACKED.update({
    ("int4", 1, 128, 512): _cuda(4, 2, 1, fallback=TABLE[("int4", 1, 128, 512)]),
    ("int4", 1, 512, 128): _cuda(1, 8, 4, fallback=TABLE[("int4", 1, 512, 128)]),
    ("int4", 8, 128, 512): _cuda(4, 2, 1, fallback=TABLE[("int4", 8, 128, 512)], PROGS=6),
})
#: The streaming form of the CUDA kernel (``STAGES``: a producer warp per program filling a ring of shared-
#: memory slots by cp.async.bulk, units claimed from a counter, ``DYN``), tools/cuda_w4a16_h200.py --round 5 .. 7
#: (bench/results/cuda_w4a16_sweep_h200_r8.json .. _r10.json, three machine starts, 2026-12-02), graph us at
#: 8 stacked layers (16, 32), the ranges spanning r9 and r10, against the mma.sync configs above in the same runs:
#: W_UK M = 1 12.60-12.93 vs 12.75-13.09 (20.93-21.34 vs 22.65-22.71; 36.45-37.49 vs 41.04-41.74); W_UV M = 1
#: 13.86-14.01 vs 15.68-16.01 (21.82-22.14 vs 26.05-26.51; 37.84-38.53 vs 47.30-47.71); W_UV M = 8 (Triton
#: before) 13.79-14.22 vs 17.36-17.66 (22.80-22.85 vs 29.47-29.95; 46.63-46.76 vs 53.10-53.29). W_UK M = 8 keeps
#: the persistent mma.sync grid (the streaming form 14.78-14.81 vs 14.35-14.38, and 52.4-52.7 vs 50.6-50.7 at
#: 32 layers). Smaller units (16 KiB), more slots, one copy per padded row (``PADW``: 3-10x slower, the copy
#: engine's issue rate), one activation copy (``XONE``), three or four programs per SM: slower or level.
#: r14 (--round 9): SWZ (rotated reads of a row's pieces, no shared-memory bank conflicts) measured slower on
#: every INT4 family (W_UK M = 1 13.53 vs 13.08 us, W_UV M = 1 14.68 vs 13.65) and FP8 within +-4 % both ways
#: in one run (W_UV M = 8 20.21 vs 21.09, M = 1 20.27 vs 19.42): left off.
#: r20, r21 (--round 13, 14; bench/results/cuda_w4a16_sweep_h200_r20.json, _r21.json), against the same configs
#: without the option over the 15 stacked rows of a run: the unpack's shifts as IMADs (``MHI``) +0.3..+17.8 %;
#: 128 + z taken off after the MMA (``SXC``) -3.4..+1.1 %; the slot freed before the multiply (``ERL``)
#: -2.1..+0.3 %, within the run-to-run spread; r23 (--round 15): one consumer group per slot (``CG`` 2)
#: +0.8..+9.0 %: none recorded.
_STREAM = {"STAGES": 2, "EVF": 1, "CPS": 2, "DYN": 1}
STACKED.update({
    ("int4", 1, 128, 512): _cuda(8, 4, 1, fallback=TABLE[("int4", 1, 128, 512)], **_STREAM),
    ("int4", 1, 512, 128): _cuda(2, 4, 4, fallback=TABLE[("int4", 1, 512, 128)], **_STREAM),
    ("int4", 8, 512, 128): _cuda(2, 4, 4, fallback=TABLE[("int4", 8, 512, 128)], **_STREAM),
})
#: r15 (--round 10, bench/results/cuda_w4a16_sweep_h200_r15.json): the streaming form at M = 64 lost to the
#: Triton configs above, 8 stacked layers: INT4 W_UK 69.16 vs 45.88 us, FP8 W_UK 71.43 vs 56.12, FP8 W_UV 69.33 vs
#: 52.04; INT4 W_UV 39.67 vs 41.69 (75.03 vs 77.52 at 16 layers, 149.61 vs 146.82 at 32): not recorded. r17 (--round
#: 11): three slots at two programs per SM, slower or level on W_UK (INT4 M = 1 13.82 vs 12.93 us). r18 (--round 12):
#: STAG slower on all eight M <= 8 streaming families, by 0.7-3.4 % (INT4 W_UK M = 1 13.67 vs 13.22 us).
#: The e4m3 form of the CUDA kernel (r5, one run): FP8 W_UK at M = 1, 8 stacked layers 22.02 us against the
#: TMA-fed Triton kernel's 23.75 (16 layers 40.80 vs 42.00, 32 layers 78.31 vs 80.03); elsewhere level or behind
#: (W_UV M = 1 22.11 vs 21.82; at 32 layers W_UK M = 8 93.0 vs 89.4).
STACKED[("fp8", 1, 128, 512)] = _cuda(1, 4, 2, fallback=STACKED[("fp8", 1, 128, 512)])
#: The e4m3 streaming form (r12, --round 8, one run; bench/results/cuda_w4a16_sweep_h200_r12.json), 8 stacked
#: layers, graph us against the recorded config in the same run (16, 32 layers): W_UK M = 1 19.85 vs 21.95 (the
#: mma.sync form above; 35.83 vs 41.07, 66.53 vs 78.85); W_UV M = 1 20.35 vs 22.06 (asm; 34.34 vs 38.04, 64.60
#: vs 69.85); W_UK M = 8 21.50 vs 26.81 (TMA-fed; 38.12 vs 46.58, 80.51 vs 87.93); W_UV M = 8 20.60 vs 24.90
#: (35.82 vs 43.39, 78.05 vs 82.76). Half-head units at two programs per SM won every family (whole 64 KiB heads
#: at one program per SM within 2-6 %). One layer keeps its configs (the streaming form 0.84-0.91x of them warm).
for _key, (_nt, _kb) in {("fp8", 1, 128, 512): (4, 2), ("fp8", 8, 128, 512): (4, 2),
                         ("fp8", 1, 512, 128): (1, 8), ("fp8", 8, 512, 128): (1, 8)}.items():
    _fb = STACKED.get(_key, TABLE[_key])
    STACKED[_key] = _cuda(_nt, 4, _kb, fallback=_fb.get("fallback", _fb), **_STREAM)
#: Decode GEMMs (H = 1), r1-r3, graph us, CUDA kernel vs the Triton config it replaces (and tinygemm):
#: 4096x4096 M = 8 8.64-8.82 vs 9.48-9.82, M = 16 10.26-10.39 vs 10.43-10.55; 8192x8192 M = 8 21.45-22.25 vs
#: 22.93-23.12; 7168x2048 M = 1 7.49-7.55 vs 7.62-7.68 (tinygemm 7.51-7.54), M = 8 8.76-8.82 vs 9.58-9.93,
#: M = 16 10.16-10.33 vs 10.82-11.19; 2048x7168 M = 8 8.33-8.35 vs 9.03-9.43. Elsewhere Triton stays ahead
#: or level (8192x8192 M = 1 within 1.3 %, M = 16 Triton by 11 %; 2048x7168 M = 1 the ``rows`` kernel 6.3 vs
#: 7.1; M = 16 level).
for _key, (_nt, _w, _kb, _sp) in {
        ("int4", 8, 4096, 4096): (1, 4, 4, 8), ("int4", 16, 4096, 4096): (1, 4, 8, 4),
        ("int4", 8, 8192, 8192): (2, 4, 4, 16), ("int4", 1, 7168, 2048): (1, 2, 4, 14),
        ("int4", 8, 7168, 2048): (1, 4, 8, 7), ("int4", 16, 7168, 2048): (1, 4, 8, 7),
        ("int4", 8, 2048, 7168): (1, 4, 4, 4)}.items():
    TABLE[_key] = _cuda(_nt, _w, _kb, _sp, fallback=TABLE[_key])

# Source of the values: H200 sweeps 2026-12-01 (bench/results/mla_sweep_h200.json; decode GEMMs and FP8 W_UV:
# bench/results/decode_sweep_h200_r*.json)


def bucket(M: int) -> int:
    for b in M_BUCKETS:
        if M <= b:
            return b
    return M_BUCKETS[-1]


def is_tuned(kind: str, M: int, K: int, N: int) -> bool:
    """Whether the family of this shape was measured (its config is in ``TABLE``)."""
    return (kind, bucket(M), K, N) in TABLE


def _split(blocks: int, tiles: int, target: int) -> int:
    """The divisor s of ``blocks`` (<= 64) with ``tiles * s`` nearest ``target`` (1 when the tiles
    alone already fill the target)."""
    if tiles >= target:
        return 1
    divs = [s for s in range(1, min(blocks, 64) + 1) if blocks % s == 0]
    return min(divs, key=lambda s: (abs(math.log(tiles * s / target)), s))


def _widest(N: int, widths=(128, 64, 32, 16)) -> int:
    for bn in widths:
        if N % bn == 0:
            return bn
    raise ValueError(f"N={N} must be a multiple of 16")


def heuristic(kind: str, M: int, K: int, N: int, H: int = 1, sms: int = DEFAULT_SMS) -> dict:
    """A config from the shape alone, following what the sweeps measured best: M = 1 runs the
    CUDA-core GEMV split along K until ~7 programs per SM (INT4: 128-k blocks, FP8: 64-k blocks);
    other INT4 shapes the split-K tensor-core kernel (K = 128: the one-block ``dot`` kernel) at ~4
    programs per SM; other FP8 shapes the split-K word-tile kernel at ~3.5 programs per SM."""
    if kind == "fp8":
        if K % 64:
            raise ValueError(f"K={K} must be a multiple of 64")
        if M == 1:      # the CUDA-core GEMV beat the tensor-core split-K on 3 of 4 decode shapes (r1 sweep)
            bn = _widest(N, (64, 32, 16))
            return _f8gemv(bn, _split(K // 64, H * (N // bn), 7 * sms))
        bn = _widest(N)
        sub = 2 if (K // 64) % 2 == 0 else 1
        bm = 16 if M <= 16 else 64
        tiles = H * -(-M // bm) * (N // bn)
        split = _split(K // (64 * sub), tiles, 7 * sms // 2)
        steps = K // split // (64 * sub)          # software pipelining pays on longer K loops (8192: 15 %)
        return {"variant": "asm", "BLOCK_N": bn, "SUB": sub, "SPLIT": split, "num_warps": 4,
                "num_stages": 2 if steps >= 4 else 1}
    if kind != "int4":
        return dict(_DEFAULTS[kind])
    if K % 128:
        raise ValueError(f"K={K} must be a multiple of 128")
    if M == 1:
        bn = _widest(N)
        return _gemv(bn, _split(K // 128, H * (N // bn), 7 * sms))
    if K == 128:
        bn = _widest(N, (256, 128, 64, 32, 16))
        return {"variant": "dot", "BLOCK_N": bn, "num_warps": 8 if M > 16 and bn >= 256 else 4, "num_stages": 2,
                "DEP": M <= 16}
    bn = _widest(N, (64, 32, 16))
    sub = 2 if (K // 128) % 2 == 0 else 1
    bm = 16 if M <= 16 else 64
    tiles = H * -(-M // bm) * (N // bn)
    return {"variant": "splitk", "BLOCK_N": bn, "SUB": sub, "SPLIT": _split(K // (128 * sub), tiles, 4 * sms),
            "num_warps": 4, "num_stages": 2}


_WARNED: set = set()


def config_for(kind: str, M: int, K: int, N: int, H: int = 1, sms: int = DEFAULT_SMS) -> dict:
    """The recorded config of this family (a copy; ``STACKED`` first when the H weight matrices
    hold >= ``STACKED_BYTES`` of BF16), else ``heuristic`` for the shape."""
    key = (kind, bucket(M), K, N)
    hit = STACKED.get(key) if 2 * H * K * N >= STACKED_BYTES else None
    hit = hit or TABLE.get(key)
    cfg = ({k: dict(v) if isinstance(v, dict) else v for k, v in hit.items()} if hit is not None
           else heuristic(kind, M, K, N, H, sms))       # a copy, its fallback config included
    if kind in ("int4", "fp8", "w8a8") and M > 16:
        cfg.setdefault("BLOCK_M", None)
    return cfg


def warn_untuned(kind: str, M: int, K: int, N: int, cfg: dict) -> None:
    """Once per family: the shape's config is the heuristic's, its speed against tinygemm / cuBLAS
    BF16 was not measured here."""
    key = (kind, bucket(M), K, N)
    if key in TABLE or key in _WARNED:
        return
    _WARNED.add(key)
    name = {"int4": "INT4 W4A16", "fp8": "FP8 W8A16"}.get(kind, kind)
    warnings.warn(UntunedShapeWarning(
        f"kernelscope {name}: M={M} K={K} N={N} is outside the measured table; running the shape "
        f"heuristic's {cfg.get('variant')} config (SPLIT={cfg.get('SPLIT', 1)}), whose speed against tinygemm "
        f"and cuBLAS BF16 is unmeasured: check it with `kernelscope decode-gemm --shapes {K}x{N} --batch {M}`"),
        stacklevel=3)
