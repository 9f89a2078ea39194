"""Cutting the decompressed text of a trace into event chunks and decoding them as the blocks arrive.

The text arrives in ``BLOCK``-sized blocks from the read-ahead thread (``_reader.blocks``). The head (up to
the ``"traceEvents": [`` key, looked for within ``_HEAD_MAX``) is decoded as the metadata object; after it,
``_Body`` holds the events not decoded yet, preceded by one byte set to ``[``: a chunk is decoded in place
by writing ``]`` after its last event (one of the last three ``}, {`` boundaries of the text held), so a
block is never copied. The text after the array is the trailing metadata. A layout this cannot cut
(a document that is not ``{... "traceEvents": [...] ...}`` or a bare event array, an event over 8 blocks)
raises ``FallBack``: the loader then decodes the whole document at once.

``_cut_loop`` is the one loop that does this, for both processes of a split decode (``split``): this
process up to the first event boundary at or after the split point, the helper (``decode_rest``, run by
``split_child``) from there to the end.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Optional

import msgspec

from mcp_server.traces import _reader
from mcp_server.traces._reader import AHEAD, BlockReader
from mcp_server.traces._reader import blocks as read_blocks
from mcp_server.traces.collector import Collector, decode_chunk
from mcp_server.traces.events import any_dec
from mcp_server.traces.split import Split, split_point

BLOCK = _reader.BLOCK  # text per block (tests shrink it to cut a small trace many times)
_HEAD_MAX = 8 * BLOCK  # the events array must start within this much text
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


class FallBack(Exception):
    """The text cannot be cut into event chunks: decode the whole document instead."""


class _Body:
    """The events not decoded yet: ``buf[0]`` is '[' (or the byte before the first event, set to '['),
    ``off`` the offset of ``buf[0]`` in the text."""

    def __init__(self, events: bytes | memoryview, off: int) -> None:
        self.buf = bytearray(b"[")
        self.buf += events
        self.off = off

    @property
    def end(self) -> int:
        """Text offset just past the text held."""
        return self.off + len(self.buf)

    def grow(self, block: bytes) -> None:
        try:
            self.buf += block
        except BufferError:  # a decoded object still points into buf: copy it
            self.buf = bytearray(self.buf) + block

    def decode_through(self, cut: int, coll: Collector) -> bool:
        """Decode the events before ``buf[cut]`` (just past an event's '}') in place and drop them; False
        (nothing dropped) when that text is not a list of events."""
        buf = self.buf
        saved = buf[cut]
        buf[cut] = 0x5D  # ']'
        ok = False
        with memoryview(buf) as mv:
            sub = mv[: cut + 1]
            try:
                ok = decode_chunk(sub, coll)
            finally:
                try:
                    sub.release()
                except BufferError:  # a decoded object still points into buf: detach
                    buf = bytearray(buf)
        buf[cut] = saved
        if ok:
            nxt = buf.index(b"{", cut)
            buf[nxt - 1] = 0x5B  # '['
            try:
                del buf[: nxt - 1]
            except BufferError:
                buf = bytearray(buf[nxt - 1:])
            self.off += nxt - 1
        self.buf = buf
        return ok

    def decode_ready(self, coll: Collector) -> bool:
        """Decode the complete events held, cut at one of the last three event boundaries."""
        buf = self.buf
        cuts: list[int] = []
        q = len(buf)
        while len(cuts) < 3 and q > 0:
            q = buf.rfind(b"}", 0, q)
            if q < 0:
                break
            if _BOUNDARY.match(buf, q):
                cuts.append(q + 1)
        return any(self.decode_through(cut, coll) for cut in cuts)

    def tail(self, coll: Collector, bare: bool) -> dict[str, Any]:
        """Decode the last events and return the metadata after the array (FallBack when that fails)."""
        meta = finish_tail(bytes(self.buf[1:]), coll, bare)
        if meta is None:
            raise FallBack()
        return meta


def finish_tail(data: bytes, coll: Collector, bare: bool = False) -> Optional[dict[str, Any]]:
    """Decode the events of ``data`` (the end of the text: the last events, ``]`` and the rest of the top
    object) into ``coll``; the metadata after the array, or None when ``data`` does not read so."""
    q = len(data)
    for _ in range(64):
        q = data.rfind(b"]", 0, q)
        if q < 0:
            return None
        trailer = data[q + 1:]
        if bare:
            if trailer.strip():
                return None
            trailer = b"}"
        try:
            tail = any_dec.decode(b'{"__ks":0' + trailer)
        except msgspec.DecodeError:
            continue
        if not isinstance(tail, dict):
            continue
        body = data[:q].strip()
        if body and not decode_chunk(b"[" + body + b"]", coll):
            return None
        tail.pop("__ks", None)
        return tail
    return None


def _join_helper(body: _Body, split: Split, coll: Collector) -> tuple[Optional[bool], Optional[tuple]]:
    """At the helper's start: decode up to the first event boundary at or after the split point and take
    the helper's answer. (None, None): the boundary is not held yet; (ok, got): ``ok`` whether the text
    before the boundary decoded, ``got`` the helper's (tail metadata, collector state) or None; the helper
    is then closed."""
    sm = _BOUNDARY.search(body.buf, split.at - body.off)
    if sm is None:
        return None, None
    boundary = body.off + sm.start()
    ok = body.decode_through(sm.start() + 1, coll)
    got = split.result(boundary) if ok else None
    split.close()
    return ok, got


def _cut_loop(body: _Body, blocks: BlockReader, coll: Collector, bare: bool, eof: bool = False,
              split: Optional[Split] = None, progress: Optional[Callable[[int], None]] = None,
              done_bytes: int = 0) -> dict[str, Any]:
    """Decode the events of ``body`` and of the blocks still to come; the trailing metadata.

    ``split``: a started helper that decodes the text after its split point; once the text held reaches
    it, this decodes up to the helper's boundary and takes the helper's part and tail as its own.
    """
    while True:
        block = next(blocks) if not eof else b""
        if not block:
            if split is not None:  # the text ended before the split point
                split.close()
            return body.tail(coll, bare)
        done_bytes += len(block)
        if progress:
            progress(done_bytes if split is None else int(done_bytes * split.scale))
        body.grow(block)
        if split is not None and body.end > split.at:
            ok, got = _join_helper(body, split, coll)
            if ok is None:  # the boundary is not held yet
                if body.end - split.at > 8 * BLOCK:  # and far past the split point: decode on alone
                    split.close()
                    split = None
                continue
            split = None
            if got is not None:  # the helper decoded the rest, tail included
                coll.absorb(got[1])
                return got[0]
            if ok:
                continue
            # the text before the boundary is not a list of events: decode on alone
        if not body.decode_ready(coll) and len(body.buf) > 8 * BLOCK:  # no event is this large
            raise FallBack()


def _read_head(blocks: BlockReader) -> tuple[bytes, bool]:
    """The first block(s): until the events array starts or ``_HEAD_MAX``; and whether the text ended."""
    head = next(blocks)
    eof = not head
    # the events array may start past the first block (large metadata first): look up to _HEAD_MAX
    while not eof and len(head) < _HEAD_MAX and not _EVENTS_KEY.search(head):
        more = next(blocks)
        eof = not more
        head += more
    return head, eof


def _parse_head(head: bytes) -> tuple[dict[str, Any], int, bool]:
    """(metadata before the events, offset of the first event's text in ``head``, a bare event array)."""
    m = _EVENTS_KEY.search(head)
    if m is None:
        if head.lstrip()[:1] == b"[":  # a bare event array: [ {...}, {...} ]
            return {}, head.index(b"[") + 1, True
        raise FallBack()
    try:
        meta = any_dec.decode(head[: m.start()] + b'"__ks":0}')
    except msgspec.DecodeError:
        raise FallBack() from None
    if not isinstance(meta, dict):
        raise FallBack()
    meta.pop("__ks", None)
    return meta, m.end(), False


def stream(p: Path, coll: Collector, progress: Optional[Callable[[int], None]],
           blocks: Optional[BlockReader] = None) -> dict[str, Any]:
    """Streaming decode; raises FallBack when the layout is not the usual ``{..."traceEvents": [...]...}``.

    A large trace on a machine with two or more cores is decoded in two parts (``split``): a helper
    process decodes the text after a split point while this one decodes the text before it.
    """
    if blocks is None:  # a split decode needs little read-ahead (the helper reads its part itself)
        blocks = read_blocks(p, BLOCK, ahead=3 if split_point(p, 0) is not None else AHEAD)
    helper: Optional[Split] = None
    try:
        head, eof = _read_head(blocks)
        meta, start, bare = _parse_head(head)
        at = None if eof else split_point(p, len(head))
        if at is not None:
            helper = Split.start(p, at, bare)
            if helper is not None:
                blocks.pause_at(at + 2 * BLOCK)  # the rest is the helper's: read only past the split point
        body = _Body(memoryview(head)[start:], start - 1)
        meta.update(_cut_loop(body, blocks, coll, bare, eof, helper, progress, len(head)))
        return meta
    finally:
        if helper is not None:
            helper.close()
        blocks.close()


def decode_rest(p: Path, at: int, bare: bool) -> tuple:
    """The helper's part of a split decode: ``("ok", boundary, tail metadata, collector state)`` for the
    events after the first event boundary at or after text offset ``at``; ``("no",)`` when there is none or
    the text does not cut (this process then decodes that text itself)."""
    blocks = read_blocks(p, BLOCK, start=at, ahead=2)  # little text waiting: both processes share the RSS
    try:
        buf = bytearray()
        while True:
            b = next(blocks)
            if not b:
                return ("no",)
            buf += b
            m = _BOUNDARY.search(buf)
            if m is not None:
                break
            if len(buf) > 8 * BLOCK:
                return ("no",)
        if blocks.skipped != at:
            return ("no",)
        coll = Collector()
        body = _Body(memoryview(buf)[m.end() - 1:], at + m.end() - 2)
        del buf
        try:
            tail = _cut_loop(body, blocks, coll, bare)
        except FallBack:
            return ("no",)
        return ("ok", at + m.start(), tail, coll.state())
    finally:
        blocks.close()
