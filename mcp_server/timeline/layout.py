"""The probe-buffer layout, in plain Python: the one statement of it the decoder, the
Triton helper, the tests and the hand-built buffers share.

Slot 0 is the header (low 32 bits nblocks, high 32 bits ngroups; bit 63 = overflow mark set by
kernelscope's bounds guard). Writer (block, group) is lane ``block * ngroups + group``; its k-th
record sits at slot ``1 + lane + k * nblocks * ngroups``. A record is ``timer_lo << 32 | tag``.
"""
from __future__ import annotations

from typing import Literal

BEGIN, END, INSTANT = 0, 1, 2
#: tag bits 0-1: the record type (BEGIN / END / INSTANT; 3 is no type)
TYPE_MASK = 0x3
#: tag bits 2-11: the event id
EVENT_SHIFT = 2
EVENT_MASK = 0x3FF
N_EVENTS = EVENT_MASK + 1
#: tag bits 12-31 ("legacy": the 20-bit lane) or 12-23 ("sm": the 12-bit block, then the 8-bit SM id)
BLOCK_SHIFT = 12
LEGACY_LANE_MASK = 0xFFFFF
SM_BLOCK_MASK = 0xFFF
SM_SHIFT = 24
SM_MASK = 0xFF
#: a record is ``timer_lo << TIMER_SHIFT | tag``
TIMER_SHIFT = 32
WORD_MASK = 0xFFFFFFFF
#: header: nblocks in bits 0-31, ngroups in bits 32-62, bit 63 the overflow mark
NGROUPS_SHIFT = 32
NGROUPS_MASK = 0x7FFFFFFF
OVERFLOW_BIT = 1 << 63

#: "legacy": ``block_group << 12 | event << 2 | type`` (block_group = block * ngroups + group);
#: "sm": ``sm_id << 24 | block << 12 | event << 2 | type`` (12-bit block field).
TagLayout = Literal["legacy", "sm"]
TAG_LAYOUTS: tuple[str, ...] = ("legacy", "sm")


def buffer_slots(nblocks: int, ngroups: int, records_per_writer: int) -> int:
    """Slots (uint64) a buffer needs: header plus ``records_per_writer`` rounds of every lane."""
    return 1 + nblocks * ngroups * records_per_writer


def header_word(nblocks: int, ngroups: int) -> int:
    return (nblocks & WORD_MASK) | ((ngroups & WORD_MASK) << NGROUPS_SHIFT)


def split_header(word: int) -> tuple[int, int, bool]:
    """(nblocks, ngroups, overflow) from the header slot."""
    return word & WORD_MASK, (word >> NGROUPS_SHIFT) & NGROUPS_MASK, bool(word & OVERFLOW_BIT)


def slot_of(block: int, group: int, record: int, nblocks: int, ngroups: int) -> int:
    """Slot of the ``record``-th record of writer (block, group)."""
    return 1 + block * ngroups + group + record * nblocks * ngroups


def encode_tag(event: int, kind: int, *, block: int, group: int = 0, ngroups: int = 1,
               sm_id: int = 0, layout: TagLayout = "sm") -> int:
    """The 32-bit tag a probe writes."""
    low = ((event & EVENT_MASK) << EVENT_SHIFT) | (kind & TYPE_MASK)
    if layout == "legacy":
        return ((((block * ngroups + group) & LEGACY_LANE_MASK) << BLOCK_SHIFT) | low) & WORD_MASK
    return (((sm_id & SM_MASK) << SM_SHIFT) | ((block & SM_BLOCK_MASK) << BLOCK_SHIFT) | low) & WORD_MASK


def encode_record(tag: int, timer_lo: int) -> int:
    return ((timer_lo & WORD_MASK) << TIMER_SHIFT) | (tag & WORD_MASK)
