"""Decoder edge cases on small hand-built buffers, and bad input."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from mcp_server.core.errors import BufferFormatError, FileMissingError
from mcp_server.timeline import layout as L
from mcp_server.timeline.analysis import analyze_decoded, analyze_timeline
from mcp_server.timeline.decode import decode_buffer, event_name_list

B, E, I = L.BEGIN, L.END, L.INSTANT


def build(nblocks, ngroups, lanes, *, rounds=None, layout="sm", sm=lambda b: 100 + b, header=None):
    """lanes: {(block, group): [(event, kind, ts), ...]} in write order; instants take the next slot
    without advancing (as the probes do)."""
    if rounds is None:
        rounds = max(sum(1 for r in recs if r[1] != I) + 1 for recs in lanes.values())
    buf = np.zeros(L.buffer_slots(nblocks, ngroups, rounds), dtype=np.uint64)
    buf[0] = L.header_word(nblocks, ngroups) if header is None else header
    for (b, g), recs in lanes.items():
        k = 0
        for ev, kind, ts in recs:
            tag = L.encode_tag(ev, kind, block=b, group=g, ngroups=ngroups, sm_id=sm(b), layout=layout)
            buf[L.slot_of(b, g, k, nblocks, ngroups)] = L.encode_record(tag, ts)
            if kind != I:
                k += 1
    return buf


def test_basic_pairs_and_positions_ngroups3():
    lanes = {(b, g): [(0, B, 1000 + 10 * b), (0, E, 2000 + 100 * b + g), (1, B, 3000), (1, E, 3500)]
             for b in range(2) for g in range(3)}
    d = decode_buffer(build(2, 3, lanes, layout="legacy"))
    assert (d.nblocks, d.ngroups, d.tag_layout) == (2, 3, "legacy")
    assert d.stats.tag_mismatches == 0 and d.event.size == 12
    m = (d.event == 0) & (d.lane == 5)
    assert d.block[m].tolist() == [1] and d.group[m].tolist() == [2]  # lane 5 = block 1, group 2
    assert (d.end - d.begin)[m].tolist() == [2000 + 100 + 2 - 1010]


def test_layout_auto_detection_both_layouts():
    lanes = {(b, 0): [(0, B, 10), (0, E, 20)] for b in range(4)}
    d_sm = decode_buffer(build(4, 1, lanes, layout="sm"))
    assert d_sm.tag_layout == "sm" and d_sm.lane_sm.tolist() == [100, 101, 102, 103]
    d_leg = decode_buffer(build(4, 1, lanes, layout="legacy"))
    assert d_leg.tag_layout == "legacy" and (d_leg.lane_sm == -1).all()
    lanes2 = {(b, g): [(0, B, 10), (0, E, 20)] for b in range(3) for g in range(2)}
    d2 = decode_buffer(build(3, 2, lanes2, layout="sm"))
    assert d2.tag_layout == "sm" and d2.stats.tag_mismatches == 0
    with pytest.raises(BufferFormatError, match="unknown tag layout"):
        decode_buffer(build(3, 2, lanes2), tag_layout="newer")


def test_timer_wrap_unwrapped_per_lane():
    top = (1 << 32) - 100
    lanes = {(0, 0): [(0, B, top), (0, E, 50)],            # wraps inside the interval
             (1, 0): [(0, B, 20), (0, E, 220)]}             # starts after the wrap
    d = decode_buffer(build(2, 1, lanes))
    got = {int(l): (int(b), int(e)) for l, b, e in zip(d.lane, d.begin, d.end)}
    assert got[0] == (0, 150) and got[1] == (120, 320)
    assert d.stats.timer_wraps == 1
    res = analyze_decoded(d, ["p"])
    assert any(w.code == "timer_wrap" for w in res.warnings)
    assert res.span_ns == 320


def test_unmatched_begin_and_end():
    lanes = {(0, 0): [(0, B, 10), (0, E, 20), (0, B, 30)],   # last begin never ends
             (1, 0): [(0, E, 5), (0, B, 10), (0, E, 40)]}    # stray end first
    d = decode_buffer(build(2, 1, lanes))
    assert d.stats.unmatched_begins == 1 and d.stats.unmatched_ends == 1
    assert d.event.size == 2
    res = analyze_decoded(d, ["p"])
    codes = {w.code for w in res.warnings}
    assert {"unmatched_begin", "unmatched_end"} <= codes


def test_nested_same_event():
    lanes = {(0, 0): [(3, B, 0), (3, B, 10), (3, E, 20), (3, E, 50)]}
    d = decode_buffer(build(1, 1, lanes))
    got = sorted(zip(d.depth.tolist(), (d.end - d.begin).tolist()))
    assert got == [(1, 50), (2, 10)]
    assert d.occurrence.tolist() == [0, 1]  # by begin order: outer first


def test_zero_slot_hole_truncation_and_partial_round():
    # legacy tags (FlashInfer's writers: no bounds guard), so a full last round may be a truncation
    buf = build(2, 1, {(0, 0): [(0, B, 10), (0, E, 20), (1, B, 30), (1, E, 40)],
                       (1, 0): [(0, B, 10), (0, E, 20), (1, B, 30), (1, E, 40)]}, rounds=4, layout="legacy")
    buf[L.slot_of(1, 0, 1, 2, 1)] = 0   # hole: lane 1's first end is lost
    d = decode_buffer(buf, tag_layout="legacy")
    assert d.stats.zero_slots == 1 and d.stats.unmatched_begins == 1
    assert d.stats.truncated_lanes == 2 and d.stats.unused_slots == 0
    res = analyze_decoded(d, ["a", "b"])
    assert {"zero_slots", "truncation_possible"} <= {w.code for w in res.warnings}
    d2 = decode_buffer(buf[:-1])  # a copy one slot short
    assert d2.stats.partial_round
    assert "partial_round" in {w.code for w in analyze_decoded(d2, ["a", "b"]).warnings}


def test_spare_room_is_not_truncation():
    d = decode_buffer(build(2, 1, {(b, 0): [(0, B, 1), (0, E, 9)] for b in range(2)}, rounds=5))
    assert d.stats.truncated_lanes == 0 and d.stats.unused_slots == 6 and d.stats.zero_slots == 0


def test_tag_position_disagreement_uses_positions():
    buf = build(3, 1, {(b, 0): [(0, B, 10), (0, E, 20 + b)] for b in range(3)}, layout="legacy")
    # rewrite block 2's end with a tag that names block 1
    bad = L.encode_tag(0, E, block=1, layout="legacy")
    buf[L.slot_of(2, 0, 1, 3, 1)] = L.encode_record(bad, 22)
    d = decode_buffer(buf)
    assert d.stats.tag_mismatches == 1
    assert sorted(d.lane.tolist()) == [0, 1, 2]  # still three intervals, lane from the slot
    res = analyze_decoded(d, ["p"])
    assert any(w.code == "tag_mismatch" and "positions were used" in w.message for w in res.warnings)


def test_instants_and_bad_type():
    buf = build(2, 1, {(b, 0): [(0, B, 10), (0, E, 20), (1, I, 25)] for b in range(2)}, rounds=4)
    # a type-3 record in lane 1's spare slot
    buf[L.slot_of(1, 0, 3, 2, 1)] = L.encode_record(L.encode_tag(0, 3, block=1, sm_id=101), 30)
    d = decode_buffer(buf)
    assert d.stats.bad_type == 1
    assert d.instant_event.tolist() == [1, 1] and d.instant_ts.tolist() == [15, 15]
    res = analyze_decoded(d, ["work", "mark"])
    assert [i.name for i in res.instants] == ["mark"] and res.instants[0].count == 2
    assert any(w.code == "bad_type" for w in res.warnings)


def test_instant_is_overwritten_by_the_next_record():
    # an instant takes the writer's next slot without advancing, so a following begin replaces it
    buf = build(1, 1, {(0, 0): [(0, B, 0), (2, I, 5), (0, E, 10)]})
    d = decode_buffer(buf)
    assert d.instant_event.size == 0 and d.event.size == 1


def test_names_fewer_than_event_ids_warns():
    d = decode_buffer(build(1, 1, {(0, 0): [(0, B, 0), (0, E, 5), (3, B, 6), (3, E, 9)]}))
    res = analyze_decoded(d, ["only"])
    assert [p.name for p in res.phases] == ["only", "event3"]
    w = [w for w in res.warnings if w.code == "names_missing"]
    assert w and "3" in w[0].message and "1 event name" in w[0].message


def test_event_name_sources(tmp_path: Path):
    f = tmp_path / "names.events"
    f.write_text("load\ncompute\n# comment\nreduce, store\n")
    assert event_name_list(f) == ["load", "compute", "reduce", "store"]
    assert event_name_list(str(f)) == ["load", "compute", "reduce", "store"]
    assert event_name_list("a, b ,c") == ["a", "b", "c"]
    assert event_name_list(["x", "y"]) == ["x", "y"]
    with pytest.raises(FileMissingError):
        event_name_list(str(tmp_path / "missing.events"))


# ---------------------------------------------------------------- bad input


def test_size_not_multiple_of_8(tmp_path: Path):
    p = tmp_path / "odd.bin"
    p.write_bytes(b"\x01" * 12)
    with pytest.raises(BufferFormatError, match=r"odd\.bin.*not a multiple of 8"):
        decode_buffer(p)


def test_empty_and_missing(tmp_path: Path):
    p = tmp_path / "empty.bin"
    p.write_bytes(b"")
    with pytest.raises(BufferFormatError, match="empty"):
        decode_buffer(p)
    with pytest.raises(FileMissingError, match="not found"):
        decode_buffer(tmp_path / "nope.bin")
    with pytest.raises(FileMissingError, match="directory"):
        decode_buffer(tmp_path)


def test_header_zero_and_absurd(tmp_path: Path):
    good = build(2, 1, {(b, 0): [(0, B, 1), (0, E, 2)] for b in range(2)})
    z = good.copy()
    z[0] = 0
    with pytest.raises(BufferFormatError, match="header .* is 0x0000000000000000"):
        decode_buffer(z)
    a = good.copy()
    a[0] = L.header_word(1 << 30, 1)
    with pytest.raises(BufferFormatError, match="absurd"):
        decode_buffer(a)
    c = good.copy()
    c[0] = L.header_word(50, 2)
    with pytest.raises(BufferFormatError, match="100 writers.*only 6 record slots"):
        decode_buffer(c)
    p = tmp_path / "zero_header.bin"
    z.tofile(p)
    with pytest.raises(BufferFormatError) as ei:
        decode_buffer(p)
    assert str(p) in str(ei.value)


def test_no_records(tmp_path: Path):
    buf = np.zeros(9, dtype=np.uint64)
    buf[0] = L.header_word(4, 1)
    with pytest.raises(BufferFormatError, match="no records"):
        decode_buffer(buf)


def test_npy_and_array_inputs(tmp_path: Path):
    buf = build(2, 1, {(b, 0): [(0, B, 1), (0, E, 2 + b)] for b in range(2)})
    p = tmp_path / "buf.npy"
    np.save(p, buf.view(np.int64))  # torch tensors come out as int64
    assert decode_buffer(p).event.size == 2
    assert decode_buffer(buf).event.size == 2
    f = tmp_path / "floats.npy"
    np.save(f, np.ones(4, dtype=np.float64))
    with pytest.raises(BufferFormatError, match="dtype float64"):
        decode_buffer(f)
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"not an npy file at all!!")
    with pytest.raises(BufferFormatError, match="npy"):
        decode_buffer(junk)


def test_analyze_timeline_reads_sidecars(tmp_path: Path):
    buf = build(2, 1, {(b, 0): [(0, B, 0), (0, E, 100 + 300 * b)] for b in range(2)})
    p = tmp_path / "k.bin"
    buf.tofile(p)
    (tmp_path / "k.events").write_text("phase\n")
    (tmp_path / "k.overhead.json").write_text(
        '{"with_probes_us": [10.5, 10.6, 10.4], "without_probes_us": [10.0, 10.1, 9.9]}')
    res = analyze_timeline(p)
    assert res.phases[0].name == "phase"
    assert res.probe_overhead is not None and res.probe_overhead.overhead_pct == pytest.approx(5.0, abs=0.01)
    (tmp_path / "k.overhead.json").write_text("{}")
    res2 = analyze_timeline(p)
    assert res2.probe_overhead is None and any(w.code == "overhead_unreadable" for w in res2.warnings)


# ---------------------------------------------------------------- layout consistency


def test_header_constants_match_python_layout():
    cuh = (Path(L.__file__).parent / "include" / "kernelscope_probe.cuh").read_text()
    consts = dict(re.findall(r"constexpr uint32_t (k\w+) = (0x[0-9A-Fa-f]+|\d+)u;", cuh))
    assert int(consts["kBegin"], 0) == L.BEGIN and int(consts["kEnd"], 0) == L.END
    assert int(consts["kInstant"], 0) == L.INSTANT
    assert int(consts["kEventShift"], 0) == L.EVENT_SHIFT and int(consts["kEventMask"], 0) == L.EVENT_MASK
    assert int(consts["kBlockShift"], 0) == L.BLOCK_SHIFT and int(consts["kSmShift"], 0) == L.SM_SHIFT
    assert "1ull << 63" in cuh and L.OVERFLOW_BIT == 1 << 63


def test_triton_helper_layout_on_cpu():
    """What of the Triton helper runs without a GPU: its layout arithmetic, and its source
    uses the same slot formula and header as the decoder (inline PTX cannot run in the
    Triton interpreter; the real kernel is tested in test_timeline_gpu.py)."""
    src = (Path(L.__file__).parent / "triton_probe.py").read_text()
    assert "slot = 1 + pid + rec.to(tl.int64) * nprog" in src
    assert "nprog | (1 << 32)" in src and "%globaltimer_lo" in src and "(smid << 24) | ((pid & 0xFFF) << 12)" in src
    # the same arithmetic, in Python, through the decoder
    nprog, recs = 5, 3
    buf = np.zeros(L.buffer_slots(nprog, 1, recs), dtype=np.uint64)
    buf[0] = nprog | (1 << 32)
    for pid in range(nprog):
        for rec, (kind, t) in enumerate([(B, 100), (E, 200 + pid)]):
            tag = (7 << 24) | ((pid & 0xFFF) << 12) | (0 << 2) | kind
            buf[1 + pid + rec * nprog] = (t << 32) | tag
    d = decode_buffer(buf)
    assert d.tag_layout == "sm" and d.stats.tag_mismatches == 0 and (d.lane_sm == 7).all()
    assert (d.end - d.begin).tolist() == [100 + p for p in range(nprog)]


# ---------------------------------------------------------------- fast paths agree with the general matcher


def _general(buf):
    """Decode through the general (nesting-aware) matcher only, for comparison."""
    from mcp_server.timeline import pairing

    d = decode_buffer(buf)
    raw = np.asarray(buf, dtype=np.uint64)
    nl = d.nlanes
    rounds = -(-(raw.size - 1) // nl)
    body = np.zeros(rounds * nl, dtype=np.uint64)
    body[: raw.size - 1] = raw[1:]
    grid = body.reshape(rounds, nl).T  # lane-major
    nz = grid != 0
    tag = (grid & np.uint64(0xFFFFFFFF)).astype(np.int64)[nz]
    kind = tag & 3
    keep = kind < 2
    lane = np.repeat(np.arange(nl, dtype=np.int32), nz.sum(axis=1))[keep]
    event = ((tag >> 2) & 0x3FF).astype(np.int16)[keep]
    # pairing does not look at times: compare which (event, lane, occurrence) pairs each path finds
    zeros = np.zeros(lane.size, dtype=np.int64)
    gen, unmatched_begins, unmatched_ends = pairing._pair(kind[keep].astype(np.int8), event, lane, zeros,
                                                          np.zeros(lane.size, np.int16))
    return d, gen, (unmatched_begins, unmatched_ends)


@pytest.mark.parametrize("nested", [False, True])
def test_fast_paths_match_general_matcher(nested):
    pattern = [(0, B), (1, B), (1, E), (0, E)] if nested else [(0, B), (0, E), (1, B), (1, E)]
    lanes = {(b, g): [(ev, k, 100 * i + 7 * b + g) for i, (ev, k) in enumerate(pattern * 3)]
             for b in range(5) for g in range(2)}
    buf = build(5, 2, lanes)
    d, gen, unmatched = _general(buf)
    assert unmatched == (0, 0)  # unmatched begins, ends
    fast = sorted(zip(d.event.tolist(), d.lane.tolist(), d.occurrence.tolist()))
    slow = sorted(zip(gen[0].tolist(), gen[1].tolist(), gen[2].tolist()))
    assert fast == slow and len(fast) == 10 * 6
    # durations: outer event 0 spans the inner one when nested
    dur0 = (d.end - d.begin)[d.event == 0]
    assert (dur0 == (300 if nested else 100)).all()


def test_real_fixture_fast_path_matches_general_matcher():
    from conftest import FIXTURES

    buf = np.fromfile(FIXTURES / "timeline" / "imbalanced_probe.bin", dtype="<u8")
    d, gen, unmatched = _general(buf)
    assert unmatched == (0, 0)  # unmatched begins, ends
    assert sorted(zip(d.event.tolist(), d.lane.tolist(), d.occurrence.tolist())) == \
        sorted(zip(gen[0].tolist(), gen[1].tolist(), gen[2].tolist()))


def test_out_of_order_record_is_flagged():
    # an end stamped before its begin cannot be told from a wrap by the timer alone: it unwraps
    # to a ~4.29 s step, which the decoder counts and the analysis reports
    d = decode_buffer(build(2, 1, {(0, 0): [(0, B, 1000), (0, E, 500)], (1, 0): [(0, B, 1000), (0, E, 1500)]}))
    assert d.stats.non_monotonic == 1
    res = analyze_decoded(d, ["p"])
    assert any(w.code == "non_monotonic" for w in res.warnings)


def test_single_occurrence_imbalance_wording():
    lanes = {(b, 0): [(0, B, 0), (0, E, 5000 if b == 3 else 1000)] for b in range(20)}
    res = analyze_decoded(decode_buffer(build(20, 1, lanes)), ["work"])
    p = res.phases[0]
    assert p.slowest_blocks[0] == 3 and p.last_blocks == [3] and p.imbalance == pytest.approx(5000 / 1200, abs=1e-3)
    v = [v for v in res.verdicts if v.kind == "imbalance"]
    assert len(v) == 1 and "One occurrence only" in v[0].message
    assert v[0].at_stake_ns == pytest.approx(5000 - 1200)


def test_moving_vs_consistent_stragglers():
    """A different block is slow in each occurrence (moving) versus the same two blocks slow every
    time with the last one alternating between them (consistent)."""
    def lanes_for(slow_of_occ):
        out = {}
        for b in range(20):
            recs, t = [], 0
            for k in range(3):
                dur = 5000 if b in slow_of_occ(k) else 1000
                recs += [(0, B, t), (0, E, t + dur + (k if b in slow_of_occ(k) else 0))]
                t += 10_000
            out[(b, 0)] = recs
        return out

    moving = analyze_decoded(decode_buffer(build(20, 1, lanes_for(lambda k: {4 + 5 * k}))), ["work"])
    p = moving.phases[0]
    assert p.last_blocks == [4, 9, 14] and p.stragglers_consistent is False
    assert [v.kind for v in moving.verdicts if v.phase == "work"][0] == "moving_straggler"

    # blocks 2 and 7 both slow every time; 7 ends last in occurrences 0 and 2, 2 in occurrence 1
    def both(k):
        return {2, 7}
    lanes = lanes_for(both)
    for k, late in enumerate([7, 2, 7]):
        ev, kind, t = lanes[(late, 0)][2 * k + 1]
        lanes[(late, 0)][2 * k + 1] = (ev, kind, t + 50)
    cons = analyze_decoded(decode_buffer(build(20, 1, lanes)), ["work"])
    p = cons.phases[0]
    assert p.last_blocks == [7, 2, 7] and p.stragglers_consistent is True and not p.last_block_always_same
    v = [v for v in cons.verdicts if v.phase == "work" and v.kind == "imbalance"]
    assert len(v) == 1 and "slow in every occurrence" in v[0].message


def test_start_skew_and_barrier_wait_verdicts():
    # balanced blocks (1 us each) that start up to 0.9 us apart, then all wait 3 us before the next phase
    lanes = {}
    for b in range(10):
        s0 = 100 * b
        lanes[(b, 0)] = [(0, B, s0), (0, E, s0 + 1000), (1, B, 5000), (1, E, 6000)]
    res = analyze_decoded(decode_buffer(build(10, 1, lanes)), ["a", "b"])
    kinds = {(v.kind, v.phase) for v in res.verdicts}
    assert ("start_skew", "a") in kinds and ("barrier_wait", "a") in kinds
    assert not any(k in ("imbalance", "fixed_straggler", "moving_straggler") for k, _ in kinds)
    a = res.phases[0]
    assert a.occurrences[0].skew_ns == 900 and a.occurrences[0].wall_ns == 1900
    assert a.wait_after_mean_ns == pytest.approx(sum(5000 - (100 * b + 1000) for b in range(10)) / 10)


def test_torch_tensor_input_matches_the_file():
    """A probe buffer handed over as the torch tensor the kernel wrote (int64, as torch has no uint64 ops)."""
    torch = pytest.importorskip("torch")
    raw = np.fromfile(Path(__file__).parent / "fixtures" / "timeline" / "imbalanced_probe.bin", dtype="<u8")
    t = torch.from_numpy(raw.view(np.int64).copy())
    a, b = decode_buffer(t), decode_buffer(raw)
    assert a.source == "<tensor>" and a.nblocks == b.nblocks == 132 and a.ngroups == b.ngroups == 2
    assert np.array_equal(a.begin, b.begin) and np.array_equal(a.end, b.end) and np.array_equal(a.lane, b.lane)
    # a strided (non-contiguous) view of the same data decodes the same
    wide = torch.zeros((t.numel(), 2), dtype=torch.int64)
    wide[:, 0] = t
    c = decode_buffer(wide[:, 0])
    assert np.array_equal(c.end, b.end)
