"""GPU time breakdown (busy / idle / computation / communication / memory / exposed communication).

Each figure is checked against a straightforward computation written here: the trace file is read
with the json module, every elementary segment between two event boundaries is tested against
every event, and a segment's length counts for each class active in it.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from mcp_server.traces import analyze_trace
from mcp_server.traces.breakdown import union_length

FIX = Path(__file__).parent / "fixtures" / "traces"
STREAMS = FIX.parent / "breakdown" / "breakdown_streams.json.gz"  # tools/make_breakdown_trace.py: 2 devices, 4 streams, NCCL overlap
TP2 = FIX / "tp2_prefill.json.gz"  # H200, NCCL all-reduces on the compute stream


def _events(path: Path) -> list[dict]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    evs = doc["traceEvents"]
    launched = {e["args"]["correlation"] for e in evs
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    out = []
    for e in evs:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        kind = ("memory" if e["cat"] != "kernel" else
                "communication" if "nccl" in e["name"].lower() else "computation")
        a = e["args"]
        out.append({"ts": e["ts"], "end": e["ts"] + e["dur"], "cls": kind, "device": a.get("device", e["pid"]),
                    "stream": a.get("stream", e["tid"]), "launched": a["correlation"] in launched})
    if any(x["launched"] for x in out) and not all(x["launched"] for x in out):
        out = [x for x in out if x["launched"]]
    return out


def _sweep(evs: list[dict], w0: float, w1: float) -> dict[str, float]:
    """Per class the time some event of it runs; segments between consecutive boundaries."""
    cuts = sorted({x["ts"] for x in evs} | {x["end"] for x in evs})
    got = dict(busy=0.0, comp=0.0, comm=0.0, mem=0.0, xcomm=0.0, xmem=0.0, both=0.0)
    for a, b in zip(cuts, cuts[1:]):
        mid = (a + b) / 2
        live = {x["cls"] for x in evs if x["ts"] <= mid < x["end"]}
        if not live:
            continue
        d = b - a
        got["busy"] += d
        got["comp"] += d * ("computation" in live)
        got["comm"] += d * ("communication" in live)
        got["mem"] += d * ("memory" in live)
        got["xcomm"] += d * ("communication" in live and "computation" not in live)
        got["xmem"] += d * (live == {"memory"})
        got["both"] += d * ("communication" in live and "computation" in live)
    got["window"] = w1 - w0
    got["idle"] = got["window"] - got["busy"]
    return got


def _check(row, evs: list[dict], w0: float, w1: float) -> None:
    want = _sweep(evs, w0, w1)
    assert row.kernel_count == len(evs)
    assert row.window_us == pytest.approx(want["window"], abs=1e-6)
    for field, key in (("busy_us", "busy"), ("idle_us", "idle"), ("computation_us", "comp"),
                       ("communication_us", "comm"), ("memory_us", "mem"), ("exposed_communication_us", "xcomm"),
                       ("exposed_memory_us", "xmem")):
        assert getattr(row, field) == pytest.approx(want[key], abs=1e-6), field
    if want["comm"]:
        assert row.comm_overlap_pct == pytest.approx(100 * want["both"] / want["comm"], abs=1e-6)
    else:
        assert row.comm_overlap_pct is None
    # TraceLens's identity: computation + exposed communication + exposed memory + idle = window
    assert row.computation_us + row.exposed_communication_us + row.exposed_memory_us + row.idle_us == \
        pytest.approx(row.window_us, abs=1e-6)


@pytest.mark.parametrize("path", [STREAMS, TP2], ids=["streams", "tp2_prefill"])
def test_breakdown_equals_a_segment_sweep(path: Path) -> None:
    res = analyze_trace(path)
    b = res.breakdown
    evs = _events(path)
    w0, w1 = min(x["ts"] for x in evs), max(x["end"] for x in evs)
    _check(b.total, evs, w0, w1)
    devices = sorted({x["device"] for x in evs})
    assert [d.device for d in b.devices] == ([] if len(devices) == 1 else
                                             sorted(devices, key=lambda d: -_sweep(
                                                 [x for x in evs if x["device"] == d], 0, 0)["busy"]))
    for row in b.devices:
        sub = [x for x in evs if x["device"] == row.device]
        _check(row, sub, min(x["ts"] for x in sub), max(x["end"] for x in sub))
    pairs = sorted({(x["device"], x["stream"]) for x in evs})
    assert sorted((s.device, s.stream) for s in b.streams) == pairs
    for row in b.streams:
        dev = [x for x in evs if x["device"] == row.device]
        sub = [x for x in dev if x["stream"] == row.stream]
        _check(row, sub, min(x["ts"] for x in dev), max(x["end"] for x in dev))
    assert [s.busy_us for s in b.streams] == sorted((s.busy_us for s in b.streams), reverse=True)


def test_the_traits_of_the_fixtures() -> None:
    """What the two fixtures hold, so the sweep test covers overlap, several devices and the launch window."""
    b = analyze_trace(STREAMS).breakdown
    assert b.window == "launched GPU events" and b.excluded_count == 6
    warm = [e for e in json.loads(gzip.decompress(STREAMS.read_bytes()))["traceEvents"] if e["name"] == "warmup_kernel"]
    assert "6 GPU event(s)" in b.window_note and b.excluded_us == pytest.approx(sum(e["dur"] for e in warm))
    assert len(b.devices) == 2 and len(b.streams) == 4
    d0 = next(d for d in b.devices if d.device == 0)
    assert 0 < d0.exposed_communication_us < d0.communication_us  # NCCL partly under compute
    assert 0 < d0.exposed_memory_us < d0.memory_us  # copies partly under compute
    assert 0 < d0.comm_overlap_pct < 100
    t = analyze_trace(TP2).breakdown
    assert t.window == "all GPU events" and t.excluded_count == 0
    # one stream: the all-reduces never overlap compute, so all of their time is exposed
    assert len(t.streams) == 1 and t.total.communication_us > 200
    assert t.total.exposed_communication_us == t.total.communication_us and t.total.comm_overlap_pct == 0.0


def test_union_length_groups_touching_and_nested() -> None:
    s = np.array([0.0, 5.0, 2.0, 10.0, 10.0, 1.0, 3.0])
    e = np.array([5.0, 7.0, 3.0, 12.0, 11.0, 4.0, 3.5])
    g = np.array([0, 0, 0, 0, 0, 1, 1])
    # group 0: [0,5)+[5,7) touch -> 7, [2,3) nested, [10,12) with [10,11) nested -> 2; group 1: [1,4) holds [3,3.5)
    assert union_length(s, e, g, 3).tolist() == [9.0, 3.0, 0.0]
    assert union_length(s[:0], e[:0], g[:0], 2).tolist() == [0.0, 0.0]


def test_no_gpu_events_no_breakdown(tmp_path: Path) -> None:
    p = tmp_path / "cpu.json"
    p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1,
                                              "ts": 1.0, "dur": 2.0, "args": {}}]}))
    assert analyze_trace(p).breakdown is None


def test_gpu_time_sheet_holds_every_row(tmp_path: Path) -> None:
    from openpyxl import load_workbook

    out = tmp_path / "r.xlsx"
    res = analyze_trace(STREAMS, output_xlsx=out)
    rows = list(load_workbook(out, read_only=True)["GPU Time"].iter_rows(values_only=True))
    assert rows[0][0].startswith("Window: launched GPU events")
    body = rows[2:]
    b = res.breakdown
    want = [b.total, *b.devices, *b.streams]
    assert len(body) == len(want) == 7
    for row, r in zip(body, want):
        assert row[0] == r.scope and row[3] == r.kernel_count
        assert row[5] == pytest.approx(r.busy_us) and row[10] == pytest.approx(r.exposed_communication_us)


def test_trace_set_gpu_time_per_rank(tmp_path: Path) -> None:
    from openpyxl import load_workbook

    from mcp_server.tracesets.analyze import analyze_trace_set

    paths = sorted(str(p) for p in (Path(__file__).parent / "fixtures" / "tracesets" / "straggler").glob("*.json.gz"))
    res = analyze_trace_set(paths, executor="inline", output_xlsx=str(tmp_path / "s.xlsx"),
                            output_html=str(tmp_path / "s.html"))
    assert [g.rank for g in res.gpu_time] == [r.rank for r in res.ranks]  # slowest first
    for g, r in zip(res.gpu_time, res.ranks):
        one = analyze_trace(r.path).breakdown
        assert g.total == one.total and g.streams == one.streams and g.window == one.window
    assert res.gpu_time[0].rank == 1 and res.gpu_time[0].total.busy_us > 1.25 * res.gpu_time[-1].total.busy_us
    rows = list(load_workbook(tmp_path / "s.xlsx", read_only=True)["GPU Time"].iter_rows(values_only=True))
    assert rows[0][:3] == ("Rank", "Scope", "Device") and len(rows) == 1 + 4 * 2  # trace + one stream per rank
    assert "GPU time per rank" in (tmp_path / "s.html").read_text()


def _codes(res) -> dict[str, int]:
    return {w.code: w.count for w in res.warnings}


def test_every_unattributed_kernel_has_a_reason(tmp_path: Path) -> None:
    """Each reason a kernel has no module is a warning with its own code, and the reasons add up."""
    res = analyze_trace(STREAMS)
    codes = _codes(res)
    assert codes["kernels_before_first_step"] == 6  # the warm-up kernels without a launch
    assert codes["thread_without_modules"] == 3  # the backward kernels of the autograd thread
    assert codes["outside_modules"] == 2  # launched on the module thread after the model returned
    assert codes["kernels_before_first_step"] + codes["thread_without_modules"] + codes["outside_modules"] == \
        res.unattributed_count
    msg = next(w.message for w in res.warnings if w.code == "thread_without_modules")
    assert "backward" in msg
    # CUDA-graph replays with nothing to learn modules from (the H200 replay-only fixture)
    graph = analyze_trace(FIX / "llama_decode_graph.json.gz")
    assert _codes(graph).get("replays_unattributed") == graph.unattributed_count == graph.graph.graph_kernel_count
    assert "no_module_spans" not in _codes(graph)  # replays have their own reason
    # the same synthetic trace without its module span
    doc = json.loads(gzip.decompress(STREAMS.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc))
    res = analyze_trace(bare)
    assert _codes(res).get("no_module_spans") == res.unattributed_count == res.kernel_count
    assert "kernels_before_first_step" not in _codes(res)  # one reason is enough when there are no modules at all
    # an attributed trace carries none of them
    full = analyze_trace(TP2)
    reasons = {"no_module_spans", "kernels_before_first_step", "replays_unattributed", "thread_without_modules",
               "outside_modules"}
    assert full.unattributed_count == 0 and not reasons & set(_codes(full))


def test_pointer_sized_stream_ids_keep_their_rows() -> None:
    """ROCm writes stream handles (pointer-sized numbers): each (device, stream) is still its own row."""
    from mcp_server.traces.breakdown import COMPUTATION, compute_breakdown

    ts = np.array([0.0, 1.0, 2.0, 3.0])
    b = compute_breakdown(ts, np.ones(4), np.full(4, COMPUTATION, dtype=np.int8), np.array([0, 0, 1, 1]),
                          np.array([2**62, -5, 2**62, 7]))
    assert sorted((s.device, s.stream) for s in b.streams) == [(0, -5), (0, 2**62), (1, 7), (1, 2**62)]
    assert all(s.kernel_count == 1 and s.busy_us == 1.0 for s in b.streams)
