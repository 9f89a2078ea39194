"""Split-K for the quantized kernels: each of SPLIT programs of an output tile reduces one slice of
K, stores its fp32 partial to a workspace and bumps the tile's counter; the program that arrives
last sums the SPLIT partials in a fixed order (deterministic) and writes the bf16 output, then
resets the counter to 0 for the next launch. One launch, no memset, CUDA-graph safe once the
workspace exists (it is allocated on the first call, so warm up before capturing).

The workspace and counters are shared per device: two launches running at the same time on
different streams of one device must not both use split-K (a serving engine's decode step runs on
one stream; pass ``SPLIT = 1`` through the config otherwise).

Imports triton at the top (kernel code); the package imports it lazily.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def splitk_store(acc, out_ptr, ws_ptr, cnt_ptr, b, pid_k, tile, offs_m, offs_n, M, N,
                 SPLIT: tl.constexpr):
    """Store the [BLOCK_N, BLOCK_M] fp32 tile ``acc`` of head ``b`` (bf16, ``out[H, M, N]``);
    with SPLIT > 1 through the workspace ``ws[H, SPLIT, M, N]`` fp32 and counter ``cnt[tile]``."""
    m_mask = offs_m[None, :] < M
    out = out_ptr + b * M * N + offs_m[None, :] * N + offs_n[:, None]
    if SPLIT == 1:
        tl.store(out, acc.to(tl.bfloat16), mask=m_mask)
    else:
        base = ws_ptr + b * SPLIT * M * N + offs_m[None, :] * N + offs_n[:, None]
        tl.store(base + pid_k * M * N, acc, mask=m_mask)
        tl.debug_barrier()      # every thread's partial is stored before the counter moves
        old = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if old == SPLIT - 1:
            tot = tl.zeros_like(acc)
            for s in tl.static_range(SPLIT):
                tot += tl.load(base + s * M * N, mask=m_mask, other=0.0, cache_modifier=".cg")
            tl.store(out, tot.to(tl.bfloat16), mask=m_mask)
            tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")


_WS: dict = {}


def workspace(device, ws_elems: int, tiles: int):
    """(fp32 workspace of at least ``ws_elems``, int32 zero counters of at least ``tiles``) for
    ``device``; grown (never shrunk) on demand. Counters return to 0 after every launch."""
    import torch

    key = (device.type, device.index)
    ws, cnt = _WS.get(key, (None, None))
    if ws is None or ws.numel() < ws_elems:
        ws = torch.empty(max(ws_elems, 1 << 16), dtype=torch.float32, device=device)
    if cnt is None or cnt.numel() < tiles:
        cnt = torch.zeros(max(tiles, 4096), dtype=torch.int32, device=device)
    _WS[key] = (ws, cnt)
    return ws, cnt
