"""Probe helpers for Triton kernels, writing kernelscope's probe-buffer format.

The buffer is the one ``mcp_server/timeline/include/kernelscope_probe.cuh`` writes and
:func:`mcp_server.timeline.decode.decode_buffer` reads: slot 0 the header (nblocks, ngroups),
then one record per slot, ``1 + program + k * nprograms`` for the k-th record of a program
(one writer per program, ngroups = 1), record = ``timer_lo << 32 | tag`` with
``tag = sm_id << 24 | (program & 0xFFF) << 12 | event << 2 | type``. The timer is
``%globaltimer_lo`` read through inline PTX, which needs a real NVIDIA GPU (the Triton
interpreter cannot run inline assembly).

Usage inside a kernel (``buf`` an int64 tensor from :func:`alloc_probe_buffer`)::

    tag = probe_init(buf)
    rec = probe_counter()
    rec = probe_begin(buf, tag, rec, cap, 0)
    ...phase 0...
    rec = probe_end(buf, tag, rec, cap, 0)

``rec`` is the writer's record counter (begin and end advance it, an instant does not);
``cap`` is the buffer's length in slots (0 switches the bounds guard off). Past the end the
guard drops the record and sets bit 63 of the header, which the decoder reports.

Importing this module needs Triton; the layout arithmetic the helpers use lives in
:mod:`mcp_server.timeline.layout` (plain Python, testable anywhere).
"""
from __future__ import annotations

import triton
import triton.language as tl

from mcp_server.timeline.layout import buffer_slots, header_word

__all__ = [
    "alloc_probe_buffer", "probe_counter", "probe_init", "probe_begin", "probe_end", "probe_instant",
    "timer_lo", "sm_id",
]


@triton.jit
def timer_lo():
    """Low 32 bits of the global nanosecond timer (%globaltimer_lo), as int32."""
    return tl.inline_asm_elementwise("mov.u32 $0, %globaltimer_lo;", "=r", [], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def sm_id():
    """The multiprocessor this program runs on (%smid), as int32."""
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32,
                                     is_pure=True, pack=1)


@triton.jit
def _program_and_count():
    nx = tl.num_programs(0)
    ny = tl.num_programs(1)
    nz = tl.num_programs(2)
    pid = (tl.program_id(2) * ny + tl.program_id(1)) * nx + tl.program_id(0)
    return pid.to(tl.int64), (nx * ny * nz).to(tl.int64)


@triton.jit
def probe_counter():
    """A zero int32 record counter (a tensor, so it can be carried through loops)."""
    return tl.program_id(0) * 0


@triton.jit
def probe_init(buf):
    """Write the header (program 0) and return this program's tag base (sm and block bits)."""
    pid, nprog = _program_and_count()
    if pid == 0:
        tl.store(buf, nprog | (1 << 32))  # ngroups = 1
    smid = sm_id().to(tl.int64) & 0xFF
    return (smid << 24) | ((pid & 0xFFF) << 12)


@triton.jit
def _probe_put(buf, tag_base, rec, cap, event: tl.constexpr, kind: tl.constexpr):
    pid, nprog = _program_and_count()
    slot = 1 + pid + rec.to(tl.int64) * nprog
    t = timer_lo().to(tl.int64) & 0xFFFFFFFF
    word = (t << 32) | tag_base | (event << 2) | kind
    ok = (cap == 0) | (slot < cap)
    tl.store(buf + slot, word, mask=ok)
    overflow = tl.full([], 1, tl.int64) << 63
    tl.atomic_or(buf, overflow, mask=ok == 0)


@triton.jit
def probe_begin(buf, tag_base, rec, cap, event: tl.constexpr):
    """Record the begin of ``event``; returns the advanced record counter."""
    _probe_put(buf, tag_base, rec, cap, event, 0)
    return rec + 1


@triton.jit
def probe_end(buf, tag_base, rec, cap, event: tl.constexpr):
    """Record the end of ``event``; returns the advanced record counter."""
    _probe_put(buf, tag_base, rec, cap, event, 1)
    return rec + 1


@triton.jit
def probe_instant(buf, tag_base, rec, cap, event: tl.constexpr):
    """Record an instant; it does not advance the counter (the next record overwrites it)."""
    _probe_put(buf, tag_base, rec, cap, event, 2)
    return rec


def alloc_probe_buffer(nprograms: int, records_per_program: int, device: str = "cuda"):
    """A zeroed int64 torch tensor sized for the given grid, header written. Returns (buf, cap)."""
    import torch

    slots = buffer_slots(nprograms, 1, records_per_program)
    buf = torch.zeros(slots, dtype=torch.int64, device=device)
    hdr = header_word(nprograms, 1)
    buf[0] = hdr - (1 << 64) if hdr >= (1 << 63) else hdr
    return buf, slots
