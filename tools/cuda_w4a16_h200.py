"""One H200 run for the CUDA INT4 W4A16 kernel (``mcp_server/kernels/w4a16_cuda.py``, issue 26).

1. Correctness of every candidate config and of the group / zero-point / split-K forms: quantized
   real-valued weights (output poisoned with NaN first) against x @ the dequantized weights, the
   Triton kernel's error beside, and the same bits on two runs.
2. The MLA BMMs (8 stacked layers, cold, M = 1, 8, 64; W_UK 128x512 and W_UV 512x128): cuBLAS BF16,
   the recorded Triton config (``tuning.config_for``) and every CUDA candidate, CUDA-graph timed in
   one run; then the winners at 16 and 32 layers and at one layer (warm and cold).
3. The decode GEMMs (H = 1; 4096x4096, 8192x8192, 7168x2048, 2048x7168; M = 1, 8, 16): BF16,
   tinygemm, the recorded Triton config and CUDA split-K candidates.

    PYTHONUNBUFFERED=1 python3 tools/cuda_w4a16_h200.py --out $OUT --budget-s 420

Writes ``cuda_sweep.json`` under --out after every family (a cut run keeps what it measured).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

T0 = time.time()


ROUND = 1


def mla_cands(M: int, K: int, N: int) -> list[dict]:
    """The INT4 MLA candidates of --round (each round's set from its first round on; 8 is FP8 only)."""
    for first, cands in ((15, group_cands), (14, release_cands), (13, unpack_cands), (12, mla_cands12), (11, mla_cands11), (10, mla_cands10), (9, mla_cands9), (7, mla_cands7), (6, mla_cands6), (5, mla_cands5), (4, mla_cands4),
                         (3, mla_cands3), (2, mla_cands2)):
        if ROUND >= first:
            return cands(M, K, N)
    mts = (8, 4) if M > 16 else (None,)
    kbs = ((1, 1),) if K == 128 else ((4, 1), (2, 2)) if M > 16 else ((4, 1), (2, 2), (1, 4))
    if M > 16:
        nw = ((1, 4), (2, 4), (1, 8), (2, 8), (4, 4)) if K == 128 else ((1, 4), (1, 8), (2, 4), (1, 2))
    else:
        nw = ((1, 4), (2, 4), (4, 4), (2, 8), (1, 8), (2, 2), (4, 2)) if K == 128 else \
            ((1, 4), (2, 4), (1, 8), (1, 2), (2, 2), (1, 1))
    out = []
    for mt in mts:
        for kb, sp in kbs:
            for nt, w in nw:
                if N % (16 * nt * w) or (mt and mt * nt * kb > 16):
                    continue
                c = {"variant": "cuda", "NT": nt, "KB": kb, "SPLIT": sp, "WARPS": w}
                if mt:
                    c["MT"] = mt
                out.append(c)
    return out


def _cfg(nt: int, w: int, kb: int, kw: int, K: int, bk: int = 128, progs: int = 0) -> dict:
    """A CUDA-kernel candidate: K split over programs as whatever KB * KWARP blocks of ``bk`` leave."""
    c = {"variant": "cuda", "NT": nt, "KB": kb, "SPLIT": K // (bk * kb * kw), "WARPS": w, "KWARP": kw}
    if progs:
        c["PROGS"] = progs
    return c


def mla_cands2(M: int, K: int, N: int) -> list[dict]:
    """Round 2: warps that split K inside a program (KWARP), and more rows per warp."""
    if K == 128:
        sets = ((4, 2, 1, 1), (4, 4, 1, 1), (2, 4, 1, 1), (8, 1, 1, 1), (8, 2, 1, 1), (4, 1, 1, 1), (2, 2, 1, 1))
    else:
        sets = ((4, 2, 1, 4), (2, 4, 1, 4), (4, 2, 2, 2), (2, 4, 2, 2), (2, 2, 1, 4), (4, 1, 1, 4), (2, 2, 2, 2),
                (1, 4, 1, 4), (2, 1, 1, 4), (4, 1, 2, 2), (8, 1, 1, 4), (2, 4, 4, 1), (1, 8, 4, 1))
    return [_cfg(nt, w, kb, kw, K) for nt, w, kb, kw in sets if N % (16 * nt * w) == 0]


def _stream(nt: int, w: int, kb: int, stages: int, padw: int = 0, evf: int = 0, cps: int = 1, mt: int = 0,
            dyn: int = 0, xone: int = 0) -> dict:
    c = {"variant": "cuda", "NT": nt, "WARPS": w, "KB": kb, "STAGES": stages}
    for k, v in (("PADW", padw), ("EVF", evf), ("CPS", cps if cps > 1 else 0), ("MT", mt), ("DYN", dyn),
                 ("XONE", xone)):
        if v:
            c[k] = v
    return c


#: Round 10 (M = 64): the streaming form with all 64 rows of x in a slot (MT = 8), (NT, WARPS, KB, STAGES, CPS) per
#: (format, K); the sets that fit the registers (no spills but NT 1 x 8 warps: 12-44 bytes, NVRTC offline) and
#: 226 KiB of shared memory.
_M64 = {("int4", 128): ((1, 4, 1, 3, 2), (1, 4, 1, 2, 3), (1, 8, 1, 2, 2), (1, 8, 1, 3, 2), (2, 4, 1, 2, 1),
                        (2, 4, 1, 3, 1), (2, 4, 1, 4, 1), (1, 16, 1, 2, 1), (1, 16, 1, 3, 1)),
        ("int4", 512): ((1, 8, 4, 2, 1), (1, 4, 4, 2, 1), (1, 2, 4, 2, 1)),
        ("fp8", 128): ((1, 8, 2, 2, 2), (1, 8, 2, 3, 2), (1, 4, 2, 3, 2), (2, 4, 2, 2, 1), (2, 4, 2, 3, 1),
                       (1, 16, 2, 2, 1)),
        ("fp8", 512): ((1, 4, 8, 2, 1), (1, 2, 8, 2, 1))}


def m64_cands(fmt: str, M: int, K: int, N: int) -> list[dict]:
    """Each set with x copied by ``cp.async`` from all producer lanes (``XCA``); the first also by one bulk copy
    per row, as at M <= 8."""
    if M <= 8:
        return []
    sets = _M64[(fmt, K)]
    return [_stream(*sets[0][:4], 0, 1, sets[0][4], 0, 1)] + [
        dict(_stream(nt, w, kb, st, 0, 1, cps, 0, 1), XCA=1) for nt, w, kb, st, cps in sets]


def stage3_cands(fmt: str, M: int, K: int, N: int) -> list[dict]:
    """Round 11: W_UK at M <= 8, the recorded streaming config (two slots, two programs per SM) beside three slots
    (the only family where three fit at two programs per SM), after round 10's probe: the multiplies add ~2.1 us
    to the copies' fixed cost where one unit's multiply takes ~0.7 us."""
    if M > 8 or K != 128:
        return []
    nt, kb = (8, 1) if fmt == "int4" else (4, 2)
    return [dict(_stream(nt, 4, kb, st), EVF=1, CPS=2, DYN=1) for st in (2, 3)]


def recorded_stream(fmt: str, M: int, K: int, N: int) -> dict:
    """The stacked family's recorded config (``tuning.STACKED``) without its Triton fallback."""
    from mcp_server.kernels import tuning

    return {k: v for k, v in tuning.STACKED[(fmt, M, K, N)].items() if k != "fallback"}


def stag_cands(fmt: str, M: int, K: int, N: int) -> list[dict]:
    """Round 12: the recorded streaming config of each M <= 8 family with and without ``STAG`` (a program's second
    unit copied once its first has landed)."""
    if M > 8:
        return []
    cfg = recorded_stream(fmt, 1 if M == 1 else 8, K, N)
    if not cfg.get("STAGES"):        # INT4 W_UK at M = 8 keeps the mma.sync grid: the streaming config beside
        cfg = recorded_stream(fmt, 1, K, N)
    return [dict(cfg), dict(cfg, STAG=1)]


#: Round 13: the unpack's two options, off and on (``MHI``: shifts as IMADs; ``SXC``: 128 + z taken off after the MMA).
_UNPACK = ({}, {"MHI": 1}, {"SXC": 1}, {"MHI": 1, "SXC": 1})


def unpack_cands(M: int, K: int, N: int) -> list[dict]:
    """Round 13: the recorded config of each INT4 M <= 8 family (INT4 W_UK at M = 8: its mma.sync grid and the
    streaming config beside) with and without ``MHI`` and ``SXC``, after round 10's timeline: the consumer warps,
    not the copies, set the pace, and their unpack issues 2 ALU instructions per MMA register (prmt, shift, lop3)
    on a pipe of 16 lanes."""
    return [] if M > 8 else [dict(c, **o) for c in plain_streams(M, K, N) for o in _UNPACK]


def plain_streams(M: int, K: int, N: int) -> list[dict]:
    """The INT4 family's recorded config less the options rounds 13-15 try (``MHI``, ``SXC``, ``ERL``, ``CG``); W_UK
    at M = 8 keeps its mma.sync grid, so the M = 1 streaming config follows it: the last entry is a streaming one."""
    def plain(c: dict) -> dict:
        return {k: v for k, v in c.items() if k not in ("MHI", "SXC", "ERL", "CG")}

    out = [plain(recorded_stream("int4", 1 if M == 1 else 8, K, N))]
    if not out[0].get("STAGES"):
        out.append(plain(recorded_stream("int4", 1, K, N)))
    return out


def release_cands(M: int, K: int, N: int) -> list[dict]:
    """Round 14: each INT4 M <= 8 family's streaming config (its recorded one less ``ERL``, ``SXC`` and ``MHI``; W_UK
    at M = 8 the M = 1 one beside its mma.sync grid) as it was, with ``ERL`` (the slot freed once a consumer warp
    holds x's fragments and the scales, before its multiply) and with ``ERL`` and ``SXC``, after round 13: 20 %
    fewer consumer instructions (``SXC``) took 0-3.4 % off, so the multiplies' cost is the slot they hold."""
    if M > 8:
        return []
    out = plain_streams(M, K, N)
    return out + [dict(out[-1], ERL=1), dict(out[-1], ERL=1, SXC=1)]


def group_cands(M: int, K: int, N: int) -> list[dict]:
    """Round 15: each INT4 M <= 8 family's streaming config (as round 14: W_UK at M = 8 beside its mma.sync grid)
    with one consumer group per slot (``CG`` 2), with and without ``SXC``, after round 14's timeline: the last units
    of a program land 7-12 us into the launch and its two slots' units are multiplied in turn, so a program's
    tail is up to two units' multiplies."""
    if M > 8:
        return []
    out = plain_streams(M, K, N)
    return out + [dict(out[-1], CG=2), dict(out[-1], CG=2, SXC=1)]


def mla_cands12(M: int, K: int, N: int) -> list[dict]:
    return stag_cands("int4", M, K, N)


def mla_cands11(M: int, K: int, N: int) -> list[dict]:
    return stage3_cands("int4", M, K, N)


def mla_cands10(M: int, K: int, N: int) -> list[dict]:
    """Round 10: the streaming form at M = 64 (``_M64``); M <= 8 keeps its recorded configs."""
    return m64_cands("int4", M, K, N)


def mla_cands9(M: int, K: int, N: int) -> list[dict]:
    """Round 9: the recorded streaming configs with and without ``SWZ`` (each lane of a half-warp reads its
    row's 8-byte pieces in a rotated order, so rows of a multiple of 16 words stop sharing banks); W_UK at M = 8
    with it beside the persistent mma.sync grid."""
    if M > 8:
        return []
    ring = {"STAGES": 2, "EVF": 1, "CPS": 2, "DYN": 1}
    if K == 128:
        out = [dict(_stream(8, 4, 1, 2), **ring, SWZ=z) for z in (0, 1)]
        if M > 1:
            out += [dict(_stream(4, 8, 1, 3), EVF=1, SWZ=z) for z in (0, 1)]
    else:
        out = [dict(_stream(2, 4, 4, 2), **ring, SWZ=z) for z in (0, 1)]
        out += [dict(_stream(1, 8, 4, 2), **ring, SWZ=1)]
    return out


def mla_cands7(M: int, K: int, N: int) -> list[dict]:
    """Round 7: the activations in one copy (``XONE``), three and four programs per SM; round 6's winners."""
    if M > 8:
        return []
    if K == 128:
        sets = [(8, 4, 1, 2, 2, 1, 0), (8, 4, 1, 2, 2, 1, 1), (8, 4, 1, 2, 3, 1, 1), (4, 4, 1, 2, 4, 1, 1),
                (4, 4, 1, 3, 3, 1, 1), (4, 8, 1, 3, 1, 0, 0), (4, 8, 1, 3, 1, 0, 1), (8, 4, 1, 3, 1, 1, 1),
                (4, 8, 1, 2, 2, 1, 1), (8, 4, 1, 1, 4, 1, 1)]
    else:
        sets = [(2, 4, 4, 2, 2, 1, 0), (2, 4, 4, 2, 2, 1, 1), (1, 8, 4, 2, 2, 1, 1), (1, 4, 4, 2, 3, 1, 1),
                (1, 4, 4, 3, 3, 1, 1), (1, 8, 4, 4, 1, 1, 1), (2, 4, 4, 1, 4, 1, 1), (1, 4, 4, 2, 4, 1, 1)]
    return [_stream(nt, w, kb, st, 0, 1, cps, 0, d, xo) for nt, w, kb, st, cps, d, xo in sets]


def mla_cands6(M: int, K: int, N: int) -> list[dict]:
    """Round 6: the streaming form with units claimed from a counter (``DYN``), two programs per SM, fewer
    slots; round 5's winners beside."""
    if M > 8:
        return []
    if K == 128:
        sets = [(4, 8, 1, 3, 1, 1, d) for d in (0, 1)] + [(4, 4, 1, 3, 0, 2, d) for d in (0, 1)]
        sets += [(4, 4, 1, 2, 0, 2, 1), (4, 8, 1, 3, 1, 2, 1), (4, 8, 1, 2, 1, 1, 1), (8, 4, 1, 3, 1, 1, 1),
                 (8, 4, 1, 2, 1, 2, 1), (4, 8, 1, 4, 1, 1, 1), (8, 2, 1, 3, 0, 2, 1)]
    else:
        sets = [(1, 8, 4, 3, 1, 1, d) for d in (0, 1)] + [(1, 8, 4, 2, 1, 2, d) for d in (0, 1)]
        sets += [(1, 8, 4, 2, 1, 1, 1), (2, 4, 4, 3, 1, 1, 1), (2, 4, 4, 2, 1, 2, 1), (1, 4, 4, 3, 1, 1, 1),
                 (1, 4, 4, 4, 1, 2, 1), (1, 8, 4, 4, 1, 1, 1)]
    return [_stream(nt, w, kb, st, 0, e, cps, 0, d) for nt, w, kb, st, e, cps, d in sets]


def mla_cands5(M: int, K: int, N: int) -> list[dict]:
    """Round 5: the streaming form (``STAGES``): a persistent grid, a producer warp filling a ring of
    shared-memory slots by ``cp.async.bulk`` and consumer warps multiplying out of it; the recorded
    config of round 3 beside (the comparison the tables make)."""
    if M > 8:
        return []
    if K == 128:
        sets = [(4, 8, 1, s, p, e) for s in (3, 4, 6) for p in (0, 8) for e in (0, 1)]
        sets += [(2, 8, 1, s, 0, e) for s in (4, 6, 10) for e in (0, 1)]
        sets += [(1, 8, 1, 8, 0, 0), (2, 4, 1, 8, 0, 0), (4, 4, 1, 6, 0, 0)]
        out = [_stream(*c) for c in sets] + [_stream(2, 4, 1, 6, 0, 0, 2), _stream(4, 4, 1, 3, 0, 0, 2)]
        out.append({"variant": "cuda", "NT": 4, "KB": 1, "SPLIT": 1, "WARPS": 2, "KWARP": 1})
    else:
        sets = [(1, 8, 4, s, p, e) for s in (3, 4) for p in (0, 8) for e in (0, 1)]
        sets += [(1, 4, 4, s, p, 0) for s in (4, 6, 8) for p in (0, 8)]
        sets += [(2, 4, 4, 4, 8, 0), (1, 2, 4, 8, 8, 0)]
        out = [_stream(*c) for c in sets] + [_stream(1, 4, 4, 4, 8, 0, 2), _stream(1, 2, 4, 6, 8, 0, 2)]
        out.append({"variant": "cuda", "NT": 1, "KB": 4, "SPLIT": 1, "WARPS": 8, "KWARP": 1})
    return out


def mla_cands4(M: int, K: int, N: int) -> list[dict]:
    """Round 4: the recorded M = 1 configs with a register cap (``MINB``: minimum programs per SM for
    ``__launch_bounds__``), as the kernels' ncu profile showed register-limited occupancy (78-79 registers)."""
    if K == 128:
        base, minbs = {"NT": 4, "WARPS": 2, "KB": 1, "KWARP": 1, "SPLIT": 1}, (0, 14, 16)
    else:
        base, minbs = {"NT": 1, "WARPS": 8, "KB": 4, "KWARP": 1, "SPLIT": 1}, (0, 4)
    return [{"variant": "cuda", **base, **({"MINB": b} if b else {})} for b in minbs]


def mla_cands3(M: int, K: int, N: int) -> list[dict]:
    """Round 3: the persistent grid over heads (PROGS programs per SM), each program prefetching its next
    head's weights while it multiplies the current one's; the round-2 winners beside."""
    if K == 128:
        base = ((4, 2, 1, 1), (2, 4, 1, 1))
        pf = (((4, 2, 1, 1), (3, 4, 6)), ((2, 4, 1, 1), (2, 3, 4)), ((2, 2, 1, 1), (4, 6, 8)), ((1, 4, 1, 1), (4, 8)),
              ((2, 1, 1, 1), (8, 12, 16)))
    else:
        base = ((1, 8, 4, 1), (2, 4, 4, 1), (4, 2, 2, 2))
        pf = (((1, 4, 4, 1), (2, 3)), ((1, 8, 4, 1), (1,)), ((1, 2, 4, 1), (4, 6)), ((2, 2, 2, 2), (2, 3, 4)),
              ((1, 4, 2, 2), (2, 3)), ((2, 4, 1, 4), (1, 2)), ((4, 2, 1, 4), (1,)))
    return [_cfg(nt, w, kb, kw, K, progs=p) for (nt, w, kb, kw), progs in [(b, (0,)) for b in base] + list(pf)
            for p in progs]


def fp8_cands(M: int, K: int, N: int) -> list[dict]:
    """The e4m3 form (64-k blocks): whole K per warp or split over KWARP warps, and the persistent grid; from
    round 8 its streaming form (64 KiB units of a whole head, or 32 KiB halves at two programs per SM)."""
    if ROUND >= 12:
        return stag_cands("fp8", M, K, N)
    if ROUND >= 11:
        return stage3_cands("fp8", M, K, N)
    if ROUND >= 10:
        return m64_cands("fp8", M, K, N)
    if ROUND >= 9:         # the recorded streaming configs with and without SWZ
        if M > 8:
            return []
        nt, kb = (4, 2) if K == 128 else (1, 8)
        return [dict(_stream(nt, 4, kb, 2), EVF=1, CPS=2, DYN=1, SWZ=z) for z in (0, 1)]
    if ROUND >= 8:
        if M > 8:
            return []
        if K == 128:
            sets = ((8, 4, 2, 2, 1, 1), (4, 4, 2, 2, 2, 1), (4, 8, 2, 2, 1, 1), (4, 4, 2, 3, 1, 1), (2, 8, 2, 2, 2, 1),
                    (4, 4, 2, 2, 2, 0), (8, 4, 2, 3, 1, 1), (2, 4, 2, 4, 2, 1))
        else:
            sets = ((2, 4, 8, 2, 1, 1), (1, 4, 8, 2, 2, 1), (1, 8, 8, 2, 1, 1), (1, 4, 8, 3, 1, 1), (1, 2, 8, 4, 2, 1),
                    (2, 4, 8, 3, 1, 1), (1, 8, 8, 3, 1, 1))
        return [_stream(nt, w, kb, st, 0, 1, cps, 0, d) for nt, w, kb, st, cps, d in sets]
    if K == 128:
        sets = ((4, 2, 2, 1, 0), (2, 4, 2, 1, 0), (4, 1, 2, 1, 0), (2, 2, 2, 1, 0), (1, 4, 2, 1, 0), (8, 1, 2, 1, 0),
                (4, 2, 2, 1, 6), (2, 4, 2, 1, 4), (2, 2, 2, 1, 8))
    else:
        sets = ((1, 8, 8, 1, 0), (2, 4, 8, 1, 0), (2, 2, 4, 2, 0), (1, 4, 4, 2, 0), (4, 1, 4, 2, 0), (2, 2, 2, 4, 0),
                (4, 2, 2, 4, 0), (1, 4, 4, 2, 3), (2, 2, 4, 2, 3), (2, 2, 2, 4, 2))
    return [_cfg(nt, w, kb, kw, K, 64, p) for nt, w, kb, kw, p in sets if N % (16 * nt * w) == 0]


def check_fp8(cfg, H, M, K, N) -> dict:
    import torch

    from mcp_server.kernels import quant, tuning
    from mcp_server.kernels.w8a16 import w8a16_bmm

    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    w = (torch.randn(H, K, N, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    fw = quant.quantize_fp8(w)
    x = torch.randn(H, M, K, device="cuda", generator=g).to(torch.bfloat16)
    ref = x.float() @ quant.dequantize_fp8(fw)
    tri = w8a16_bmm(x, fw, config=tuning.config_for("fp8", M, K, N, H))
    return {"fmt": "fp8", "H": H, "M": M, "K": K, "N": N, "group": 0, "cfg": cfg,
            **judge(lambda out: w8a16_bmm(x, fw, out=out, config=dict(cfg)), ref, (H, M, N)),
            "triton_err": rel(tri, ref)}


def fp8_part(res, save, deadline, batches):
    for M in ((40, 64) if ROUND == 10 else (1, 3, 8)):
        for K, N in ((128, 512), (512, 128)):
            for c in fp8_cands(M, K, N):
                try:
                    res["checks"].append(check_fp8(c, 512, M, K, N))
                except Exception as exc:  # noqa: BLE001
                    res["checks"].append({"fmt": "fp8", "M": M, "K": K, "N": N, "cfg": c, "error": repr(exc)[:400]})
    bad = [c for c in res["checks"] if c.get("fmt") == "fp8" and ("error" in c or not (c["err"] < 4e-3 and c["same_bits"]))]
    print(f"[{time.time() - T0:.0f}s] fp8 checks bad {len(bad)}", flush=True)
    for b in bad[:8]:
        print("  BAD", b, flush=True)
    save()
    wins = {}
    for M in batches:
        for K, N in ((128, 512), (512, 128)):
            if time.time() < deadline:
                r = mla_family(res, 1024, M, K, N, "cold", fp8_cands(M, K, N), save, "W_UK" if K == 128 else "W_UV",
                               "fp8")
                if "best" in r:
                    wins[(M, K, N)] = r["best"]["cfg"]
    for (M, K, N), c in wins.items():
        for H, cache in ((2048, "cold"), (4096, "cold"), (128, "warm"), (128, "cold")):
            if time.time() < deadline:
                mla_family(res, H, M, K, N, cache, [c], save, "W_UK" if K == 128 else "W_UV", "fp8")


def probe_part(res, save, deadline):
    """Round 10: what the streaming kernels' time is made of, at 1 to 32 stacked layers (M = 1, cold): the
    recorded config (``full``), the same grid copying every unit and multiplying nothing (``PROBE`` 2, ``copy``),
    and launching and returning (``PROBE`` 1, ``empty``), cuBLAS BF16 beside; graph and CUPTI times."""
    from mcp_server.kernels import bench

    for fmt, K, N in (("int4", 128, 512), ("int4", 512, 128), ("fp8", 128, 512)):
        cfg = recorded_stream(fmt, 1, K, N)
        for H in (128, 512, 1024, 2048, 4096):
            if time.time() > deadline:
                return
            buf = bench.ShapeBuffers(H, 1, K, N, "cold")
            fns = buf.int4_fns if fmt == "int4" else buf.fp8_fns
            row = {"fmt": fmt, "H": H, "M": 1, "K": K, "N": N, "cfg": cfg}
            for name, f in (("bf16", buf.bf16_fns()), ("full", fns(dict(cfg))), ("copy", fns(dict(cfg, PROBE=2))),
                            ("empty", fns(dict(cfg, PROBE=1)))):
                row[f"{name}_us"] = bench.time_launches(f)
                row[f"{name}_cupti_us"] = bench.cupti_us(f)
            print(f"[{time.time() - T0:.0f}s] probe {fmt} {K}x{N} H={H}: " + " ".join(
                f"{n} {row[n + '_cupti_us']:.2f}" for n in ("bf16", "full", "copy", "empty")), flush=True)
            res["probe"].append(row)
            del buf
            save()


def decode_cands(M: int, K: int, N: int) -> list[dict]:
    if ROUND == 13:     # the recorded CUDA config (none where Triton's is recorded) with the unpack's options
        from mcp_server.kernels import tuning

        rec = {k: v for k, v in tuning.config_for("int4", M, K, N, 1).items() if k != "fallback"}
        return [dict(rec, **o) for o in _UNPACK] if rec.get("variant") == "cuda" else []
    blocks = K // 128
    out = []
    for kb in (1, 2, 4, 8):
        if blocks % kb or blocks // kb > 64:
            continue
        for nt, w in ((1, 4), (1, 2), (2, 4)):
            if N % (16 * nt * w):
                continue
            out.append({"variant": "cuda", "NT": nt, "KB": kb, "SPLIT": blocks // kb, "WARPS": w})
    if ROUND >= 2:      # warps splitting K inside the program: fewer programs per tile to fix up
        for kb, kw, w in ((1, 4, 2), (2, 2, 2), (1, 4, 1), (2, 4, 1), (1, 8, 1)):
            if blocks % (kb * kw) == 0 and N % (16 * w) == 0 and blocks // (kb * kw) <= 64:
                out.append({"variant": "cuda", "NT": 1, "KB": kb, "KWARP": kw, "SPLIT": blocks // (kb * kw),
                            "WARPS": w})
    return out


def rel(a, b):
    return float((a.float() - b).norm() / b.norm())


def judge(run, ref, shape) -> dict:
    """``run(out)`` twice into an output poisoned with NaN: relative and max relative error against ``ref``
    (NaN when any output is not finite) and whether the second run gave the same bits."""
    import torch

    out = torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    run(out)
    a = out.clone()
    run(out)
    torch.cuda.synchronize()
    err = rel(a, ref) if torch.isfinite(a.float()).all() else float("nan")
    mx = float(((a.float() - ref).abs().max() / ref.abs().max())) if err == err else float("nan")
    return {"err": err, "max_rel": mx, "same_bits": bool(torch.equal(a, out))}


def real_weights(H, K, N, group=128, zero_point=False, seed=0):
    import torch

    from mcp_server.kernels import quant

    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    w = (torch.randn(H, K, N, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    return quant.quantize_int4(w, group=group, zero_point=zero_point), g


def check(cfg, H, M, K, N, group=128, zero_point=False, xpos=False) -> dict:
    import torch

    from mcp_server.kernels import quant, tuning
    from mcp_server.kernels.w4a16 import w4a16_bmm

    qw, g = real_weights(H, K, N, group, zero_point)
    x = torch.randn(H, M, K, device="cuda", generator=g)
    x = (x.abs() + 2 if xpos else x).to(torch.bfloat16)         # xpos: all positive (SXC's offset is then largest)
    ref = x.float() @ quant.dequantize_int4(qw)
    tri = w4a16_bmm(x, qw, config=tuning.heuristic("int4", M, K, N, H) if group != 128 or zero_point
                    else tuning.config_for("int4", M, K, N, H))
    return {"H": H, "M": M, "K": K, "N": N, "group": group, "zero_point": zero_point, "cfg": cfg, "xpos": xpos,
            **judge(lambda out: w4a16_bmm(x, qw, out=out, config=dict(cfg)), ref, (H, M, N)),
            "triton_err": rel(tri, ref)}


def checks(res, save):
    hc = 512 if ROUND >= 3 else 16      # round 3: enough heads that the persistent programs loop
    ms = (40, 64) if ROUND == 10 else (1, 3, 8) if ROUND >= 2 else (1, 3, 8, 64)
    fams = [(hc, M, K, N) for M in ms for K, N in ((128, 512), (512, 128))]
    if ROUND < 5 or ROUND == 13:
        fams += [(1, M, K, N) for M in (1, 8, 16) for K, N in ((4096, 4096), (7168, 2048), (2048, 7168))]
    for H, M, K, N in fams:
        cands = mla_cands(M, K, N) if H > 1 else decode_cands(M, K, N)
        for c in cands:
            for xpos in (False, True) if c.get("SXC") or c.get("ERL") else (False,):
                try:
                    res["checks"].append(check(c, H, M, K, N, xpos=xpos))
                except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
                    res["checks"].append({"H": H, "M": M, "K": K, "N": N, "cfg": c, "error": repr(exc)[:400]})
    base = dict(recorded_stream("int4", 8, 512, 128), CG=2, SXC=1) if ROUND >= 15 else \
        dict(recorded_stream("int4", 8, 512, 128), ERL=1, SXC=1) if ROUND >= 14 else \
        dict(recorded_stream("int4", 8, 512, 128), MHI=1, SXC=1) if ROUND >= 13 else \
        dict(_stream(1, 8, 4, 2, 0, 1, 1, 0, 1), XCA=1) if ROUND >= 10 else dict(_stream(2, 4, 4, 2, 0, 1, 2, 0, 1), SWZ=1) if ROUND >= 9 else _stream(2, 4, 4, 2, 0, 1, 2, 0, 1, 1) if ROUND >= 7 else _stream(1, 4, 4, 4, 8) if ROUND >= 5 else \
        {"variant": "cuda", "NT": 2, "KB": 1, "SPLIT": 1, "WARPS": 2, "KWARP": 4, "PROGS": 2} if ROUND >= 3 else \
        {"variant": "cuda", "NT": 2, "KB": 1, "SPLIT": 1, "WARPS": 2, "KWARP": 4} if ROUND >= 2 else \
        {"variant": "cuda", "NT": 1, "KB": 4, "SPLIT": 1, "WARPS": 4}
    for group, zp in ((32, False), (64, True), (128, True), (256, False), (512, True)):
        for M in ((33, 64) if ROUND >= 10 else (1, 5, 8) if ROUND >= 5 else (1, 8, 64)):
            try:
                res["checks"].append(check(base, 512 if ROUND >= 3 else 16, M, 512, 128, group, zp, ROUND >= 13))
            except Exception as exc:  # noqa: BLE001
                res["checks"].append({"M": M, "group": group, "zero_point": zp, "cfg": base, "error": repr(exc)[:400]})
    bad = [c for c in res["checks"] if "error" in c or not (c["err"] < 4e-3 and c["same_bits"])]
    print(f"[{time.time() - T0:.0f}s] checks: {len(res['checks'])}, bad {len(bad)}", flush=True)
    for b in bad[:12]:
        print("  BAD", b, flush=True)
    save()


def time_candidates(row: dict, cands, fns) -> dict | None:
    """Graph-time every candidate config (``fns(cfg)`` -> launches) into ``row["cuda"]`` (an error is recorded
    and the sweep goes on); the fastest becomes ``row["best"]`` and is returned."""
    from mcp_server.kernels import bench

    row["cuda"] = []
    for c in cands:
        try:
            row["cuda"].append({"cfg": c, "us": bench.time_launches(fns(dict(c)))})
        except Exception as exc:  # noqa: BLE001
            row["cuda"].append({"cfg": c, "error": repr(exc)[:300]})
    ok = [r for r in row["cuda"] if "us" in r]
    if not ok:
        return None
    row["best"] = min(ok, key=lambda r: r["us"])
    return row["best"]


def mla_family(res, H, M, K, N, cache, cands, save, label, fmt="int4"):
    """One MLA shape: BF16, the recorded config of ``fmt`` (int4 or fp8) and every CUDA candidate, graph-timed in
    one run; the best candidate also by CUPTI."""
    from mcp_server.kernels import bench, tuning

    buf = bench.ShapeBuffers(H, M, K, N, cache)
    fns = buf.int4_fns if fmt == "int4" else buf.fp8_fns
    row = {"family": label, "H": H, "M": M, "K": K, "N": N, "cache": cache,
           "bf16_us": bench.time_launches(buf.bf16_fns())}
    if fmt != "int4":
        row["fmt"] = fmt
    tri = tuning.config_for(fmt, M, K, N, H)
    row["triton_cfg"] = tri
    row["triton_us"] = bench.time_launches(fns(tri))
    best = time_candidates(row, cands, fns)
    if best:
        row["best_cupti_us"] = bench.cupti_us(fns(dict(best["cfg"])))
        row["bf16_cupti_us"] = bench.cupti_us(buf.bf16_fns())
        row[f"{fmt}_tbps"] = buf.tbps(fmt, best["us"])
        print(f"[{time.time() - T0:.0f}s] {fmt} {label} H={H} M={M} {cache}: bf16 {row['bf16_us']:.2f} recorded "
              f"{row['triton_us']:.2f} cuda {best['us']:.2f} {best['cfg']} -> x{row['bf16_us'] / best['us']:.2f} "
              f"(recorded x{row['bf16_us'] / row['triton_us']:.2f}) {row[f'{fmt}_tbps']:.2f} TB/s", flush=True)
    res["mla"].append(row)
    del buf
    save()
    return row


def decode_family(res, M, K, N, save):
    import torch

    from mcp_server.kernels import bench, decode, tuning

    buf = decode.DecodeBuffers(M, K, N, formats=("bf16", "tinygemm", "int4"))
    row = {"M": M, "K": K, "N": N, "bf16_us": bench.time_launches(buf.fns("bf16"))}
    if buf.tiny:
        row["tinygemm_us"] = bench.time_launches(buf.fns("tinygemm"))
    tri = tuning.config_for("int4", M, K, N, 1)
    row["triton_cfg"] = tri
    row["triton_us"] = bench.time_launches(buf.fns("int4", tri))
    best = time_candidates(row, decode_cands(M, K, N), lambda cfg, b=buf: b.fns("int4", cfg))
    if best:
        print(f"[{time.time() - T0:.0f}s] decode {K}x{N} M={M}: bf16 {row['bf16_us']:.2f} tiny "
              f"{row.get('tinygemm_us', 0):.2f} triton {row['triton_us']:.2f} cuda {best['us']:.2f} {best['cfg']}",
              flush=True)
    res["decode"].append(row)
    del buf
    torch.cuda.empty_cache()
    save()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=420)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: probe,fp8,checks,mla,stacks,decode")
    ap.add_argument("--round", type=int, default=1, help="candidate set: 1 first sweep, 2 KWARP and wider warps")
    ap.add_argument("--batches", default="1,8,64")
    a = ap.parse_args()
    global ROUND
    ROUND = a.round
    from mcp_server.kernels import bench

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"device": bench.device_info(), "copy_tbps": bench.copy_tbps(), "checks": [], "mla": [],
                 "decode": [], "probe": []}

    def save():
        (out / "cuda_sweep.json").write_text(json.dumps(res, indent=1, default=str))

    skip = set(a.skip.split(","))
    deadline = T0 + a.budget_s
    try:
        if ROUND == 10 and "probe" not in skip:
            probe_part(res, save, deadline)
        if "fp8" not in skip:
            fp8_part(res, save, deadline, [int(v) for v in a.batches.split(",")])
        if "checks" not in skip:
            checks(res, save)
        wins = {}
        if "mla" not in skip:
            for M in [int(v) for v in a.batches.split(",")]:
                for K, N in ((128, 512), (512, 128)):
                    if time.time() > deadline:
                        break
                    lab = "W_UK" if K == 128 else "W_UV"
                    r = mla_family(res, 1024, M, K, N, "cold", mla_cands(M, K, N), save, lab)
                    if "best" in r:
                        wins[(M, K, N)] = r["best"]["cfg"]
        if "stacks" not in skip:
            for (M, K, N), c in wins.items():
                lab = "W_UK" if K == 128 else "W_UV"
                for H, cache in ((2048, "cold"), (4096, "cold"), (128, "warm"), (128, "cold")):
                    if time.time() > deadline:
                        break
                    # round 13: every candidate at every depth (the options change the fixed cost and the slope)
                    mla_family(res, H, M, K, N, cache, mla_cands(M, K, N) if ROUND >= 13 else [c], save, lab)
        if "decode" not in skip:
            for K, N in ((4096, 4096), (8192, 8192), (7168, 2048), (2048, 7168)):
                for M in (1, 8, 16):
                    if time.time() > deadline:
                        break
                    decode_family(res, M, K, N, save)
    except Exception:  # noqa: BLE001 - keep what was measured
        res["error"] = traceback.format_exc()
        print(res["error"], flush=True)
    res["wall_s"] = time.time() - T0
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
