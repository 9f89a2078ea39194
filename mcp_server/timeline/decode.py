"""Decode a probe buffer into matched intervals (vectorised with numpy).

The layout is described in :mod:`mcp_server.timeline.layout`. Positions, not tags, decide a
record's lane, block and group (exact for every tag layout and any ngroups); the tag is only a
cross-check, and the source of the SM id when the ``sm`` layout carries one. Nothing is
guessed silently: every oddity is counted in :class:`DecodeStats` and becomes a warning.

Here: reading the buffer (a file, an array or a tensor), its header, the [rounds, lanes] grid of
records, the timers and the tags; the begin and end records are matched into intervals in
:mod:`mcp_server.timeline.pairing`. Also the event names a caller gives (``event_name_list``).

Speed: one pass over a [rounds, lanes] view of the buffer, a radix sort on the 16-bit event id,
and a handful of vector ops; no Python loop over records.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from mcp_server.core.errors import BufferFormatError, FileMissingError, InputError
from mcp_server.core.limits import human, limit, over
from mcp_server.timeline import layout as L
from mcp_server.timeline.layout import INSTANT, N_EVENTS, TAG_LAYOUTS
from mcp_server.timeline.pairing import match_intervals

MAX_BLOCKS = 1 << 24   # a header past these is not a probe header
MAX_GROUPS = 1 << 12
_U32 = np.int64(L.WORD_MASK)

BufferLike = Union[str, os.PathLike, np.ndarray, Any]


@dataclass
class DecodeStats:
    slots: int = 0                 # record slots in the buffer (excluding the header)
    rounds: int = 0                # slots / lanes, rounded up
    records: int = 0               # non-zero record slots decoded
    zero_slots: int = 0            # zero slots inside a lane (before its last record): holes
    unused_slots: int = 0          # zero slots after a lane's last record (spare capacity)
    unmatched_begins: int = 0
    unmatched_ends: int = 0
    bad_type: int = 0              # records of type 3 (no such type)
    tag_mismatches: int = 0        # tag names another block/lane than the slot position
    truncated_lanes: int = 0       # lanes with a record in the last round (may have run out of room)
    timer_wraps: int = 0           # lanes whose 32-bit timer wrapped (unwrapped)
    non_monotonic: int = 0         # consecutive records of a lane > 2**31 ns apart after unwrap (out of order)
    overflow: bool = False         # header bit 63: the bounds guard dropped records
    partial_round: bool = False    # buffer length is not header + whole rounds


@dataclass
class Decoded:
    """Decoded buffer: intervals (matched begin/end pairs) and instants as numpy columns."""

    source: str
    nblocks: int
    ngroups: int
    tag_layout: str
    layout_auto: bool
    stats: DecodeStats
    # intervals (one row per matched begin/end pair; row order unspecified)
    event: np.ndarray      # int16
    lane: np.ndarray       # int32
    occurrence: np.ndarray # int32: k-th matched begin of this (lane, event)
    begin: np.ndarray      # int64 ns, relative to the earliest record
    end: np.ndarray        # int64 ns
    depth: np.ndarray      # int16: nesting level of this event in its lane (1 = outermost)
    sm: np.ndarray         # int16: SM id from the begin tag (-1 unknown)
    # instants (the surviving last instant of a lane at each position)
    instant_event: np.ndarray
    instant_lane: np.ndarray
    instant_ts: np.ndarray
    lane_sm: np.ndarray    # int16 per lane: SM id (-1 unknown)
    event_ids: list[int] = field(default_factory=list)

    @property
    def nlanes(self) -> int:
        return self.nblocks * self.ngroups

    @property
    def block(self) -> np.ndarray:
        return self.lane // self.ngroups

    @property
    def group(self) -> np.ndarray:
        return self.lane % self.ngroups


def load_buffer(buf: BufferLike) -> tuple[np.ndarray, str]:
    """Raw little-endian uint64 slots from a .bin/.npy path, a numpy array or a torch tensor."""
    if isinstance(buf, (str, os.PathLike)):
        path = Path(buf)
        if not path.exists():
            raise FileMissingError("probe buffer not found", path=path)
        if path.is_dir():
            raise FileMissingError("is a directory, expected a probe buffer file (.bin or .npy)", path=path)
        size = path.stat().st_size
        if size == 0:
            raise BufferFormatError("probe buffer is empty (0 bytes)", path=path,
                                    hint="copy the device buffer to the host after the kernel finished")
        if size > limit("BUFFER_BYTES"):  # decoding and analysis hold about 16 x the buffer (bench/RESULTS.md)
            raise over("BUFFER_BYTES", f"the probe buffer ({human(size)})", path=path, unit="bytes")
        # memory-mapped, read-only: pages are read as the decoder touches them, and a .npy header that claims
        # more data than the file holds fails here instead of allocating what it claims
        if path.suffix.lower() == ".npy":
            try:
                arr = np.load(path, allow_pickle=False, mmap_mode="r")
            except Exception as exc:
                raise BufferFormatError(f"not a readable .npy file ({type(exc).__name__}: {exc})", path=path) from None
            return _as_u64(arr, str(path)), str(path)
        if size % 8:
            raise BufferFormatError(
                f"size {size} bytes is not a multiple of 8: not a uint64 probe buffer", path=path,
                hint="write the buffer's raw bytes (tensor.cpu().numpy().tofile(path))")
        try:
            return np.memmap(path, dtype="<u8", mode="r"), str(path)
        except (OSError, ValueError) as exc:
            raise BufferFormatError(f"cannot read the probe buffer ({exc})", path=path) from None
    if hasattr(buf, "detach") and hasattr(buf, "cpu"):  # torch tensor, without importing torch
        arr = buf.detach().cpu().contiguous().numpy()
        return _as_u64(arr, "<tensor>"), "<tensor>"
    if isinstance(buf, np.ndarray):
        return _as_u64(buf, "<array>"), "<array>"
    raise BufferFormatError(f"cannot read a probe buffer from {type(buf).__name__}",
                            hint="pass a .bin/.npy path, a numpy array or a torch tensor")


def _as_u64(arr: np.ndarray, where: str) -> np.ndarray:
    a = np.ascontiguousarray(arr).reshape(-1)
    if a.size == 0:
        raise BufferFormatError("probe buffer is empty", path=where)
    if a.dtype.kind in "iu" and a.dtype.itemsize == 8:
        return a.view("<u8") if a.dtype.byteorder != ">" else a.astype("<u8")
    if a.dtype.kind in "iuV":  # other integer widths (uint8 bytes included) and raw void records
        nbytes = a.nbytes
        if nbytes % 8:
            raise BufferFormatError(f"{nbytes} bytes is not a multiple of 8: not a uint64 probe buffer", path=where)
        return a.view(np.uint8).view("<u8")
    raise BufferFormatError(f"dtype {a.dtype} is not an integer buffer; expected uint64/int64 slots", path=where)


def parse_header(raw: np.ndarray, where: str) -> tuple[int, int, bool]:
    h = int(raw[0])
    nblocks, ngroups, overflow = L.split_header(h)
    if h == 0 or nblocks == 0 or ngroups == 0:
        raise BufferFormatError(
            f"header (slot 0) is 0x{h:016x}: nblocks={nblocks}, ngroups={ngroups}; a probe buffer's "
            "slot 0 holds nblocks (low 32 bits) and ngroups (high 32 bits)", path=where,
            hint="the kernel never initialised the buffer, or this is not a probe buffer")
    if nblocks > MAX_BLOCKS or ngroups > MAX_GROUPS:
        raise BufferFormatError(
            f"header (slot 0) 0x{h:016x} is absurd: nblocks={nblocks}, ngroups={ngroups} "
            f"(limits {MAX_BLOCKS} blocks, {MAX_GROUPS} groups)", path=where,
            hint="not a probe buffer, or the wrong byte order")
    nlanes = nblocks * ngroups
    if nlanes > raw.size - 1:
        raise BufferFormatError(
            f"header says {nblocks} blocks x {ngroups} groups = {nlanes} writers, but the buffer has only "
            f"{raw.size - 1} record slots: not even one record per writer fits", path=where,
            hint="wrong header, or a truncated copy of the buffer")
    return nblocks, ngroups, overflow


def _circular_min(v: np.ndarray) -> int:
    """The start of the shortest arc (mod 2**32) holding every value: the earliest timestamp."""
    u = np.unique(v)
    if u.size == 1:
        return int(u[0])
    gaps = np.diff(np.concatenate([u, u[:1] + (1 << 32)]))
    i = int(np.argmax(gaps))
    return int(u[(i + 1) % u.size])


def decode_buffer(buf: BufferLike, tag_layout: Optional[str] = None) -> Decoded:
    """Decode a probe buffer. ``tag_layout``: None (auto), "legacy" or "sm"."""
    raw, where = load_buffer(buf)
    if tag_layout is not None and tag_layout not in TAG_LAYOUTS:
        raise BufferFormatError(f"unknown tag layout {tag_layout!r}; use one of {', '.join(TAG_LAYOUTS)} or leave it "
                                "out")
    nblocks, ngroups, overflow = parse_header(raw, where)
    nlanes = nblocks * ngroups
    st = DecodeStats(overflow=overflow)
    nz, tag, ts32 = _grid(raw[1:], nlanes, st)
    rounds = st.rounds
    first, has = _lane_extents(nz, st, where)
    lanes_idx = np.arange(nlanes, dtype=np.int64)
    ts = _unwrap_timers(ts32, nz, first, has, st)
    del ts32
    layout_auto = tag_layout is None
    tag_layout, lane_sm = _check_tags(tag, nz, first, has, ngroups, tag_layout, st)
    kind, event = _split_tags(tag, nz, st)
    del tag
    is_inst = kind == INSTANT
    lanes2d = np.broadcast_to(lanes_idx.astype(np.int32)[None, :], (rounds, nlanes))
    i_event, i_ts, i_lane = event[is_inst], ts[is_inst], lanes2d[is_inst]
    iv, st.unmatched_begins, st.unmatched_ends = match_intervals(kind, event, ts, lanes2d, lane_sm)
    present = np.bincount(iv[0], minlength=N_EVENTS) + np.bincount(i_event, minlength=N_EVENTS)
    event_ids = np.flatnonzero(present).tolist()
    return Decoded(
        source=where, nblocks=nblocks, ngroups=ngroups, tag_layout=tag_layout, layout_auto=layout_auto,
        stats=st, event=iv[0], lane=iv[1], occurrence=iv[2], begin=iv[3], end=iv[4], depth=iv[5], sm=iv[6],
        instant_event=i_event, instant_lane=i_lane, instant_ts=i_ts, lane_sm=lane_sm, event_ids=event_ids,
    )


def _grid(body: np.ndarray, nlanes: int, st: DecodeStats) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Round-major [rounds, lanes] views of the record slots (row = round, column = writer; no
    transposed copy): non-zero mask, tags and 32-bit timer values. A partial last round is padded."""
    st.slots = int(body.size)
    rounds = -(-body.size // nlanes)
    st.rounds = rounds
    if body.size != rounds * nlanes:
        st.partial_round = True
        body = np.concatenate([body, np.zeros(rounds * nlanes - body.size, dtype=body.dtype)])
    grid = body.reshape(rounds, nlanes)
    halves = body.view("<u4").reshape(rounds, nlanes, 2)  # little-endian: word 0 the tag, word 1 timer_lo
    tag = np.ascontiguousarray(halves[:, :, 0])
    ts32 = np.ascontiguousarray(halves[:, :, 1])
    return grid != 0, tag, ts32


def _lane_extents(nz: np.ndarray, st: DecodeStats, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Per writer the round of its first record and whether it has any; counts holes, spare and
    possibly truncated writers in ``st``. Raises when no writer recorded anything."""
    rounds, nlanes = nz.shape
    counts = np.count_nonzero(nz, axis=0)
    has = counts > 0
    row = np.arange(rounds, dtype=np.int32)[:, None]
    if np.array_equal(nz, row < counts[None, :]):
        # the usual case: each writer's records are contiguous from round 0
        first = np.zeros(nlanes, dtype=np.int64)
        last = counts.astype(np.int64) - 1
    else:
        first = np.where(has, np.min(np.where(nz, row, rounds), axis=0), 0).astype(np.int64)
        last = np.max(np.where(nz, row, -1), axis=0).astype(np.int64)
    # holes = zeros before a writer's last record; unused = zeros after it (padding excluded)
    st.zero_slots = int((last + 1).sum() - counts.sum())
    st.unused_slots = int(nlanes * rounds - (last + 1).sum() - (nlanes * rounds - st.slots))
    st.truncated_lanes = int((last == rounds - 1).sum())
    st.records = int(counts.sum())
    if st.records == 0:
        raise BufferFormatError("probe buffer holds a header but no records (every record slot is zero)",
                                path=where, hint="the probes were compiled out, or the buffer was copied before the "
                                                 "kernel ran")
    return first, has


def _unwrap_timers(ts32: np.ndarray, nz: np.ndarray, first: np.ndarray, has: np.ndarray,
                   st: DecodeStats) -> np.ndarray:
    """int64 ns per slot relative to the earliest record: per writer, differences of consecutive
    records mod 2**32 (uint32 arithmetic) accumulated; counts timer wraps and out-of-order steps."""
    rounds, nlanes = ts32.shape
    lanes_idx = np.arange(nlanes, dtype=np.int64)
    ts_first = ts32[first, lanes_idx].astype(np.int64)
    if st.zero_slots == 0:
        filled = ts32          # no holes: a lane's records are contiguous from round 0
    else:
        src = np.where(nz, np.arange(rounds)[:, None], -1)
        np.maximum.accumulate(src, axis=0, out=src)
        filled = np.where(src >= 0, np.take_along_axis(ts32, np.maximum(src, 0), axis=0),
                          ts_first.astype(np.uint32)[None, :])
        del src
    valid_step = nz[1:]
    st.timer_wraps = int(((filled[1:] < filled[:-1]) & valid_step).any(axis=0).sum())
    d = np.diff(filled, axis=0)  # uint32: wraps mod 2**32 by itself
    st.non_monotonic = int(np.count_nonzero((d > np.uint32(1 << 31)) & valid_step))
    if nlanes >= 256:  # accumulate row by row: contiguous vector adds
        ts = np.empty((rounds, nlanes), dtype=np.int64)
        ts[0] = 0
        for r in range(1, rounds):
            np.add(ts[r - 1], d[r - 1], out=ts[r])
    else:              # few writers, many rounds: accumulate along contiguous lane-major rows
        ts_t = np.zeros((nlanes, rounds), dtype=np.int64)
        np.cumsum(np.ascontiguousarray(d.T), axis=1, dtype=np.int64, out=ts_t[:, 1:])
        ts = ts_t.T
    del d, filled, valid_step
    base = _circular_min(ts_first[has])
    ts += ((ts_first - base) & _U32)[None, :]
    return ts


def _check_tags(tag: np.ndarray, nz: np.ndarray, first: np.ndarray, has: np.ndarray, ngroups: int,
                tag_layout: Optional[str], st: DecodeStats) -> tuple[str, np.ndarray]:
    """Cross-check tags against slot positions (``st.tag_mismatches``), pick the tag layout when
    ``tag_layout`` is None, and read each writer's SM id when the layout carries one."""
    nlanes = tag.shape[1]
    lanes_idx = np.arange(nlanes, dtype=np.int64)
    lane_u = lanes_idx.astype(np.uint32)[None, :]
    block_u = lane_u // np.uint32(ngroups)
    upper = tag >> np.uint32(L.BLOCK_SHIFT)
    layout_auto = tag_layout is None
    legacy_ok = sm_ok = None
    if tag_layout in (None, "legacy"):
        legacy_ok = upper == lane_u
    if tag_layout == "sm" or (layout_auto and np.count_nonzero(legacy_ok & nz) < st.records):
        bmask = np.uint32(L.SM_BLOCK_MASK)
        low12 = upper & bmask
        sm_ok = low12 == (block_u & bmask)
        if ngroups > 1:
            sm_ok |= low12 == (lane_u & bmask)
        del low12
    if layout_auto:
        n_leg = int(np.count_nonzero(legacy_ok & nz))
        n_sm = int(np.count_nonzero(sm_ok & nz)) if sm_ok is not None else -1
        tag_layout = "legacy" if n_leg >= n_sm else "sm"
    ok = legacy_ok if tag_layout == "legacy" else sm_ok
    st.tag_mismatches = int(st.records - np.count_nonzero(ok & nz))
    del upper, legacy_ok, sm_ok, ok
    lane_sm = np.full(nlanes, -1, dtype=np.int16)
    if tag_layout == "sm":
        lane_sm = ((tag[first, lanes_idx] >> np.uint32(L.SM_SHIFT)) & np.uint32(L.SM_MASK)).astype(np.int16)
        lane_sm[~has] = -1
    assert tag_layout is not None
    return tag_layout, lane_sm


def _split_tags(tag: np.ndarray, nz: np.ndarray, st: DecodeStats) -> tuple[np.ndarray, np.ndarray]:
    """Record type (-1 for an empty slot) and event id per slot; counts records of no type."""
    kind = (tag & np.uint32(L.TYPE_MASK)).astype(np.int8)
    kind[~nz] = -1                                    # empty slot
    event = ((tag >> np.uint32(L.EVENT_SHIFT)) & np.uint32(L.EVENT_MASK)).astype(np.int16)
    st.bad_type = int(np.count_nonzero(kind == 3))
    return kind, event


def event_name_list(event_names: Union[None, str, os.PathLike, Sequence[str]]) -> list[str]:
    """Event names from a list, a comma-separated string, or a file (one per line or comma-separated).

    A names file is read up to ``KERNELSCOPE_MAX_TEXT_FILE_BYTES``; each name is at most
    ``KERNELSCOPE_MAX_EVENT_NAME`` characters (a longer one is an ``InputError``)."""
    if event_names is None:
        return []
    if isinstance(event_names, (list, tuple)):
        return _bounded_names([str(x).strip() for x in event_names])
    text = str(event_names)
    p = Path(text)
    try:  # a text too long for a file name (ENAMETOOLONG) or with a NUL byte is not a file
        is_file = ("," not in text or bool(p.suffix)) and p.exists() and p.is_file()
        exists = is_file or p.exists()
    except (OSError, ValueError):
        is_file = exists = False
    if is_file:
        cap = limit("TEXT_FILE_BYTES")
        if p.stat().st_size > cap:
            raise over("TEXT_FILE_BYTES", "the event names file", human(p.stat().st_size), path=p, unit="bytes")
        try:
            body = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError) as exc:
            raise InputError(f"event names file cannot be read as UTF-8 text ({type(exc).__name__})",
                             path=p) from None
        names: list[str] = []
        for lno, line in enumerate(body.splitlines(), start=1):
            for x in (x.strip() for x in line.split(",")):
                if not x or x.startswith("#"):
                    continue
                if not _NAME_OK.fullmatch(x):  # a file that is not a names file: its lines are never echoed
                    raise InputError(f"line {lno} is not an event name (letters, digits, spaces and _ . - + ( ) [ ] "
                                     "< > only)", path=p, hint="a names file holds one event name per line")
                names.append(x)
        return _bounded_names(names, p)
    if text.endswith((".txt", ".events", ".csv")) and not exists:
        raise FileMissingError("event names file not found", path=p if len(text) <= 4096 else None)
    return _bounded_names([x.strip() for x in text.split(",") if x.strip()])


_NAME_OK = re.compile(r"[\w .+()\[\]<>-]+")


def _bounded_names(names: list[str], source: Optional[Path] = None) -> list[str]:
    cap = limit("EVENT_NAME")
    for i, n in enumerate(names):
        if len(n) > cap:
            raise InputError(f"event name {i} is {len(n):,} characters long, over the limit of "
                             f"{cap}", path=source,
                             hint="pass the names as a list, 'N1,N2,...' or a names file, one short name each; "
                                  "KERNELSCOPE_MAX_EVENT_NAME raises the limit")
    return names
