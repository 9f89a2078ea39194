"""Timeline analysis on the real H200 probe buffers (tests/fixtures/timeline, see its README).

The persistent kernel (tools/timeline_phases.cu) has 132 blocks (one per SM) x 2 probe groups,
3 rounds of load/compute/reduce/store separated by grid barriers and a final instant. The
imbalanced variant gives blocks 5, 37 and 90 four times the compute work and block 17 three
times the reduce work; the balanced variant gives every block the same work.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import FIXTURES

from mcp_server.timeline.analysis import IMBALANCE_RATIO, analyze_timeline
from mcp_server.timeline.compare import compare_timelines
from mcp_server.timeline.decode import decode_buffer

TL = FIXTURES / "timeline"
EVENTS = TL / "phases.events"
PHASES = ["load", "compute", "reduce", "store"]
IMBALANCE_KINDS = {"imbalance", "fixed_straggler", "moving_straggler"}


@pytest.fixture(scope="module")
def imb():
    return analyze_timeline(TL / "imbalanced_probe.bin", EVENTS)


@pytest.fixture(scope="module")
def bal():
    return analyze_timeline(TL / "balanced_probe.bin", EVENTS)


def _phase(res, name):
    return next(p for p in res.phases if p.name == name)


def test_decodes_the_real_buffer_cleanly(imb):
    assert (imb.nblocks, imb.ngroups, imb.tag_layout, imb.sm_known) == (132, 2, "sm", True)
    d = imb.decode
    assert imb.records == 132 * 2 * 25 and imb.intervals == 132 * 2 * 12
    assert d.unmatched_begins == d.unmatched_ends == d.tag_mismatches == d.zero_slots == 0
    assert not d.overflow
    # the buffer was sized exactly: every writer reached the last round; kernelscope's writer keeps a bounds
    # guard (the overflow bit is clear), so that is no truncation and no warning says so (it did, on every run)
    assert d.truncated_lanes == 264 and not any(w.code == "truncation_possible" for w in imb.warnings)
    assert [p.name for p in imb.phases] == PHASES
    assert all(len(p.occurrences) == 3 and all(o.blocks == 132 for o in p.occurrences) for p in imb.phases)
    assert [i.name for i in imb.instants] == ["done"] and imb.instants[0].count == 264


def test_finds_the_planted_compute_imbalance(imb):
    c = _phase(imb, "compute")
    assert c.imbalance > 3.0  # 4x work on 3 of 132 blocks: slowest / mean = 4 / (1 + 9/132) ~ 3.7
    assert set(c.slowest_blocks[:3]) == {5, 37, 90}
    # the planted blocks are ~4x any other block
    assert min(c.slowest_block_mean_ns[:3]) > 3.5 * c.slowest_block_mean_ns[3]
    assert set(c.last_blocks) <= {5, 37, 90} and c.stragglers_consistent is True
    v = [v for v in imb.verdicts if v.phase == "compute" and v.kind in IMBALANCE_KINDS]
    assert len(v) == 1 and all(str(b) in v[0].message for b in (5, 37, 90))


def test_names_the_always_last_reduce_block(imb):
    r = _phase(imb, "reduce")
    assert r.slowest_blocks[0] == 17
    assert r.last_blocks == [17, 17, 17] and r.last_block_always_same
    assert 2.5 < r.imbalance < 3.5
    fixed = [v for v in imb.verdicts if v.kind == "fixed_straggler" and v.phase == "reduce"]
    assert len(fixed) == 1 and "Block 17 finishes last in every occurrence" in fixed[0].message


def test_unplanted_phases_are_balanced(imb):
    for name in ("load", "store"):
        assert _phase(imb, name).imbalance < 1.1
    assert not [v for v in imb.verdicts if v.phase in ("load", "store") and v.kind in IMBALANCE_KINDS]


def test_verdicts_ranked_by_time_at_stake(imb):
    stakes = [v.at_stake_ns for v in imb.verdicts]
    assert stakes == sorted(stakes, reverse=True)
    assert imb.verdicts[0].phase == "compute"


def test_critical_path_and_waits(imb):
    cp = imb.critical_path
    assert [s.phase for s in cp] == PHASES * 3
    assert sum(s.critical_ns for s in cp) == pytest.approx(imb.span_ns, rel=0.01)
    assert {s.last_block for s in cp if s.phase == "reduce"} == {17}
    c, r = _phase(imb, "compute"), _phase(imb, "reduce")
    assert c.critical_ns > r.critical_ns > _phase(imb, "load").critical_ns
    # the 132-block barrier after compute: most writers wait ~ (slowest - their own) there
    assert c.wait_after_mean_ns > 0.6 * (c.occurrences[0].slowest_ns - c.occurrences[0].mean_ns)
    assert _phase(imb, "load").wait_after_mean_ns < 0.1 * c.wait_after_mean_ns
    for o in c.occurrences:
        assert o.wall_ns >= o.slowest_ns and o.skew_ns < 0.05 * o.wall_ns


def test_balanced_variant_shows_no_imbalance(bal):
    assert bal.decode.unmatched_begins == 0 and not bal.decode.overflow
    assert all(p.imbalance < IMBALANCE_RATIO for p in bal.phases)
    assert all(p.imbalance < 1.1 for p in bal.phases)
    assert not [v for v in bal.verdicts if v.kind in IMBALANCE_KINDS]
    assert all(p.stragglers_consistent is False for p in bal.phases)  # no block is slow every time
    assert any(v.kind == "balanced" for v in bal.verdicts)


def test_probe_overhead_is_picked_up(imb):
    po = imb.probe_overhead
    assert po is not None and po.samples == 30 and po.source.endswith("imbalanced_probe.overhead.json")
    assert abs(po.overhead_pct) < 5.0  # a few probes per phase of tens of microseconds
    assert any(v.kind == "data_quality" and "unprofiled A/B" in v.message for v in imb.verdicts)


def test_legacy_tags_give_the_same_answer():
    leg = analyze_timeline(TL / "imbalanced_legacy.bin", EVENTS)
    assert leg.tag_layout == "legacy" and not leg.sm_known and leg.decode.tag_mismatches == 0
    assert set(_phase(leg, "compute").slowest_blocks[:3]) == {5, 37, 90}
    assert _phase(leg, "reduce").last_blocks == [17, 17, 17]
    # a legacy (FlashInfer) writer has no bounds guard: filling the last round may have lost records, said
    assert leg.decode.truncated_lanes == 264 and any(w.code == "truncation_possible" for w in leg.warnings)
    # forcing the wrong layout is not silent: the block bits still match, but every "SM id" is 0
    wrong = analyze_timeline(TL / "imbalanced_legacy.bin", EVENTS, tag_layout="sm")
    assert any(w.code == "sm_single" for w in wrong.warnings)
    # and the sm-layout buffer forced to legacy disagrees with its positions
    wrong2 = analyze_timeline(TL / "imbalanced_probe.bin", EVENTS, tag_layout="legacy")
    assert wrong2.decode.tag_mismatches == 6600 and any(w.code == "tag_mismatch" for w in wrong2.warnings)
    assert set(_phase(wrong2, "compute").slowest_blocks[:3]) == {5, 37, 90}  # positions still decide


def test_guard_overflow_buffer():
    res = analyze_timeline(TL / "overflow_probe.bin", EVENTS)
    assert res.decode.overflow and any(w.code == "overflow" for w in res.warnings)
    # 5 slots per writer: load begin/end, compute begin/end, reduce begin -> one unmatched begin each
    assert res.decode.unmatched_begins == 264
    assert [p.name for p in res.phases] == ["load", "compute"]


def test_triton_buffer():
    res = analyze_timeline(TL / "triton_rows.bin", TL / "triton_rows.events")
    assert (res.nblocks, res.ngroups, res.tag_layout) == (264, 1, "sm")
    assert res.decode.unmatched_begins == res.decode.unmatched_ends == res.decode.tag_mismatches == 0
    assert [p.name for p in res.phases] == ["rowsum", "scale"]
    assert all(len(p.occurrences) == 4 for p in res.phases)
    assert res.instants[0].name == "done" and res.instants[0].count == 264
    assert res.probe_overhead is not None and res.probe_overhead.samples == 30
    # its programs loop over rows with no grid barrier: rowsum's occurrences overlap, so no start-skew verdict
    assert [w.count for w in res.warnings if w.code == "unsynchronised"] == [1]
    assert not any(v.kind == "start_skew" for v in res.verdicts)
    # nor do its imbalance verdicts send the reader to a synchronisation that is not there
    imb = [v.message for v in res.verdicts if v.kind in ("imbalance", "fixed_straggler", "moving_straggler")]
    assert imb and all("following synchronisation" not in m and "no grid-wide synchronisation" in m for m in imb)
    sync = analyze_timeline(TL / "imbalanced_probe.bin", EVENTS).verdicts
    assert any("following synchronisation" in v.message for v in sync if v.kind != "data_quality")


@pytest.mark.parametrize("name", ["int4_wuk", "int4_wuv", "fp8_wuk"])
def test_a_persistent_kernel_claiming_work_reads_unsynchronised(name):
    """The streaming BMM kernel's own buffers (units claimed from a counter, no grid barrier): every phase's
    occurrences overlap, the answer says so and gives no start-skew verdict (which would blame a release after a
    synchronisation that does not exist); the barrier-separated fixture kernel never reads this way."""
    res = analyze_timeline(TL / "stream_h200" / f"{name}.bin")
    assert [p.name for p in res.phases] == ["wait", "multiply", "store", "slot", "issue"]
    warn = [w for w in res.warnings if w.code == "unsynchronised"]
    assert len(warn) == 1 and warn[0].count >= 3, res.warnings        # W_UV's wait and issue overlap less
    assert "multiply" in warn[0].message and "grid-wide" in warn[0].message
    assert not any(v.kind == "start_skew" for v in res.verdicts)
    assert res.decode.unmatched_begins == res.decode.unmatched_ends == res.decode.tag_mismatches == 0
    for fx in ("balanced_probe.bin", "imbalanced_probe.bin"):
        assert not any(w.code == "unsynchronised" for w in analyze_timeline(TL / fx, EVENTS).warnings)


def test_compare_imbalanced_to_balanced():
    cmp = compare_timelines(TL / "imbalanced_probe.bin", TL / "balanced_probe.bin", EVENTS)
    rows = {r.name: r for r in cmp.phases}
    assert set(rows) == set(PHASES)
    assert cmp.d_span_ns < -0.5 * cmp.span_before_ns
    c = rows["compute"]
    assert c.before.imbalance > 3 and c.after.imbalance < 1.1
    assert c.d_critical_ns < 0 and c.d_wait_ns < 0
    assert abs(rows["load"].d_critical_ns) < 0.05 * rows["load"].before.critical_ns
    assert cmp.findings[0].startswith("span")
    assert any(f.startswith("compute:") for f in cmp.findings)


def test_decoder_positions_match_tags_on_real_data():
    d = decode_buffer(TL / "imbalanced_probe.bin")
    assert d.stats.tag_mismatches == 0
    assert set(np.unique(d.group).tolist()) == {0, 1}
    # one block per SM: every block's two groups sit on the same SM, all SMs distinct
    sm = d.lane_sm.reshape(132, 2)
    assert (sm[:, 0] == sm[:, 1]).all() and len(set(sm[:, 0].tolist())) == 132
