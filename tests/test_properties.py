"""Property-based tests (hypothesis): the timeline decoder recovers whatever probe sequence
the writers made, for any layout, grid shape, nesting and timer wrap; the trace analyzer keeps
its totals on traces with randomly damaged events."""
from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest
from conftest import TRACES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_server.core.errors import KernelscopeError
from mcp_server.timeline import layout as L
from mcp_server.timeline.decode import decode_buffer
from mcp_server.traces import analyze_trace


def _program(draw) -> list[tuple[int, int]]:
    """A random sequence of (event, type) with properly nested phases, every phase closed."""
    recs, stack = [], []
    for _ in range(draw(st.integers(1, 12))):
        can_open = [e for e in range(4) if e not in stack]
        if stack and (not can_open or draw(st.booleans())):
            recs.append((stack.pop(), L.END))
        else:
            ev = draw(st.sampled_from(can_open))
            recs.append((ev, L.BEGIN))
            stack.append(ev)
    while stack:
        recs.append((stack.pop(), L.END))
    return recs


@st.composite
def probe_runs(draw):
    """Writers that each run a program of properly nested phases (one shared program, as the
    blocks of a persistent kernel do, or one per writer); times start anywhere in the 32-bit
    window (so some lanes wrap) and every step advances 32..5000 ns."""
    nblocks = draw(st.integers(1, 6))
    ngroups = draw(st.integers(1, 3))
    layout = draw(st.sampled_from(["legacy", "sm"]))
    shared = _program(draw) if draw(st.booleans()) else None
    start = draw(st.integers(0, (1 << 32) - 1))
    lanes = {}
    expected = set()
    for b in range(nblocks):
        for g in range(ngroups):
            t = start + draw(st.integers(0, 2000))
            recs, opened, occ = [], {}, {}
            for ev, kind in (shared if shared is not None else _program(draw)):
                t += draw(st.integers(32, 5000))
                recs.append((ev, kind, t))
                if kind == L.BEGIN:
                    opened[ev] = t
                else:
                    k = occ.get(ev, 0)
                    occ[ev] = k + 1
                    expected.add((b * ngroups + g, ev, k, t - opened.pop(ev)))
            lanes[(b, g)] = recs
    return nblocks, ngroups, layout, lanes, expected


def _build(nblocks, ngroups, layout, lanes):
    rounds = max(len(r) for r in lanes.values()) + 1  # one spare round: nothing truncated
    buf = np.zeros(L.buffer_slots(nblocks, ngroups, rounds), dtype=np.uint64)
    buf[0] = L.header_word(nblocks, ngroups)
    for (b, g), recs in lanes.items():
        for k, (ev, kind, ts) in enumerate(recs):
            tag = L.encode_tag(ev, kind, block=b, group=g, ngroups=ngroups, sm_id=7 + b, layout=layout)
            buf[L.slot_of(b, g, k, nblocks, ngroups)] = L.encode_record(tag, ts)
    return buf


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(probe_runs())
def test_decoder_recovers_every_interval(run):
    nblocks, ngroups, layout, lanes, expected = run
    d = decode_buffer(_build(nblocks, ngroups, layout, lanes))
    assert (d.nblocks, d.ngroups) == (nblocks, ngroups)
    assert d.stats.unmatched_begins == 0 and d.stats.unmatched_ends == 0 and d.stats.tag_mismatches == 0
    got = {(int(ln), int(ev), int(oc), int(e - b))
           for ln, ev, oc, b, e in zip(d.lane, d.event, d.occurrence, d.begin, d.end)}
    assert got == expected


def _damage(events: list, rng: random.Random, n: int) -> list:
    out = list(events)
    for _ in range(n):
        i = rng.randrange(len(out))
        e = dict(out[i]) if isinstance(out[i], dict) else {}
        how = rng.randrange(5)
        if how == 0 and e:
            e.pop(rng.choice(list(e)))                      # a missing field
        elif how == 1:
            e["ts"] = "not a number"                        # an odd type
        elif how == 2:
            e["args"] = [1, 2, 3]                           # args not an object
        elif how == 3:
            e["dur"] = None
        else:
            out[i] = rng.choice([None, 7, "x", []])         # not an event at all
            continue
        out[i] = e
    return out


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 60))
def test_damaged_events_keep_totals_consistent(tmp_path_factory, seed, n):
    data = json.loads(gzip.decompress((TRACES / "llama_prefill_sdpa.json.gz").read_bytes()))
    data["traceEvents"] = _damage(data["traceEvents"], random.Random(seed), n)
    p = tmp_path_factory.mktemp("dmg") / "t.json"
    p.write_text(json.dumps(data))
    try:
        res = analyze_trace(p)
    except KernelscopeError:
        return  # a typed error naming the file is an acceptable answer too
    assert res.kernel_count == res.attributed_count + res.unattributed_count
    assert sum(c.total_us for c in res.categories) == pytest.approx(res.total_kernel_us, rel=1e-9, abs=1e-6)
    k = res.kernels
    assert len(k) == res.kernel_count
    assert k["dur_us"].sum() == pytest.approx(res.total_kernel_us, rel=1e-9, abs=1e-6)
