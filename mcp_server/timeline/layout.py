"""The probe-buffer layout, in plain Python: the one statement of it the decoder, the
Triton helper, the tests and the hand-built buffers share.

Slot 0 is the header (low 32 bits nblocks, high 32 bits ngroups; bit 63 = overflow mark set by
kernelscope's bounds guard). Writer (block, group) is lane ``block * ngroups + group``; its k-th
record sits at slot ``1 + lane + k * nblocks * ngroups``. A record is ``timer_lo << 32 | tag``.
"""
from __future__ import annotations

from typing import Literal

BEGIN, END, INSTANT = 0, 1, 2
EVENT_SHIFT = 2
EVENT_MASK = 0x3FF
BLOCK_SHIFT = 12
SM_SHIFT = 24
OVERFLOW_BIT = 1 << 63

#: "legacy": ``block_group << 12 | event << 2 | type`` (block_group = block * ngroups + group);
#: "sm": ``sm_id << 24 | block << 12 | event << 2 | type`` (12-bit block field).
TagLayout = Literal["legacy", "sm"]
TAG_LAYOUTS: tuple[str, ...] = ("legacy", "sm")


def buffer_slots(nblocks: int, ngroups: int, records_per_writer: int) -> int:
    """Slots (uint64) a buffer needs: header plus ``records_per_writer`` rounds of every lane."""
    return 1 + nblocks * ngroups * records_per_writer


def header_word(nblocks: int, ngroups: int) -> int:
    return (nblocks & 0xFFFFFFFF) | ((ngroups & 0xFFFFFFFF) << 32)


def slot_of(block: int, group: int, record: int, nblocks: int, ngroups: int) -> int:
    """Slot of the ``record``-th record of writer (block, group)."""
    return 1 + block * ngroups + group + record * nblocks * ngroups


def encode_tag(event: int, kind: int, *, block: int, group: int = 0, ngroups: int = 1,
               sm_id: int = 0, layout: TagLayout = "sm") -> int:
    """The 32-bit tag a probe writes."""
    low = ((event & EVENT_MASK) << EVENT_SHIFT) | (kind & 0x3)
    if layout == "legacy":
        return ((((block * ngroups + group) & 0xFFFFF) << BLOCK_SHIFT) | low) & 0xFFFFFFFF
    return (((sm_id & 0xFF) << SM_SHIFT) | ((block & 0xFFF) << BLOCK_SHIFT) | low) & 0xFFFFFFFF


def encode_record(tag: int, timer_lo: int) -> int:
    return ((timer_lo & 0xFFFFFFFF) << 32) | (tag & 0xFFFFFFFF)
