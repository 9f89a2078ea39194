"""Bad inputs give typed errors naming the file; damaged events are skipped with a counted warning."""
from __future__ import annotations

import gzip
import json

import pytest
from conftest import TRACES

from mcp_server.core.errors import FileMissingError, TraceFormatError
from mcp_server.traces import analyze_trace
from mcp_server.traces.loader import load_trace


def _events(name="llama_prefill_sdpa"):
    return json.loads(gzip.decompress((TRACES / f"{name}.json.gz").read_bytes()))


def _expect(exc_type, path, *words):
    with pytest.raises(exc_type) as ei:
        analyze_trace(path)
    msg = str(ei.value)
    assert str(path) in msg
    for w in words:
        assert w in msg.lower(), msg
    return msg


def test_missing_file(tmp_path):
    _expect(FileMissingError, tmp_path / "nope.json.gz", "not found")


def test_directory(tmp_path):
    _expect(FileMissingError, tmp_path, "directory")


def test_empty_file(tmp_path):
    p = tmp_path / "empty.json"
    p.write_bytes(b"")
    _expect(TraceFormatError, p, "empty")


def test_truncated_gzip(tmp_path):
    blob = (TRACES / "llama_prefill_eager.json.gz").read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(blob[: len(blob) // 2])
    _expect(TraceFormatError, p, "truncated")


def test_corrupt_gzip(tmp_path):
    blob = bytearray((TRACES / "llama_prefill_eager.json.gz").read_bytes())
    blob[100:140] = b"\x00" * 40
    p = tmp_path / "corrupt.json.gz"
    p.write_bytes(bytes(blob))
    _expect(TraceFormatError, p, "gzip")


def test_not_json(tmp_path):
    p = tmp_path / "notes.json"
    p.write_text("this is not a trace\n")
    _expect(TraceFormatError, p, "not valid json")


def test_gzipped_not_json(tmp_path):
    p = tmp_path / "notes.json.gz"
    p.write_bytes(gzip.compress(b"<html>nope</html>"))
    _expect(TraceFormatError, p, "not valid json")


def test_json_without_trace_events(tmp_path):
    p = tmp_path / "other.json"
    p.write_text(json.dumps({"schemaVersion": 1, "events": []}))
    _expect(TraceFormatError, p, "traceevents")


def test_trace_events_of_the_wrong_type(tmp_path):
    p = tmp_path / "wrong.json"
    p.write_text(json.dumps({"traceEvents": 5}))
    msg = _expect(TraceFormatError, p, "not a kineto trace", "traceevents")
    assert "not valid json" not in msg.lower()


def test_truncated_json(tmp_path):
    text = json.dumps(_events())
    p = tmp_path / "half.json"
    p.write_text(text[: len(text) // 2])
    _expect(TraceFormatError, p, "not valid json")


def test_invalid_utf8(tmp_path):
    text = json.dumps(_events()).encode()
    i = text.index(b'"name": "') + 9
    p = tmp_path / "bad_utf8.json"
    p.write_bytes(text[:i] + b"\xff\xfe" + text[i:])
    _expect(TraceFormatError, p, "utf-8")


def test_damaged_events_are_skipped_and_counted(tmp_path):
    data = _events()
    ev = data["traceEvents"]
    kernels = [i for i, e in enumerate(ev) if e.get("cat") == "kernel"]
    good = sum(1 for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    del ev[kernels[0]]["ts"]                       # missing field
    ev[kernels[1]]["dur"] = "long"                 # odd type
    ev[kernels[2]]["args"] = ["not", "a", "dict"]  # odd type
    ev[kernels[3]]["name"] = 12345                 # odd type
    ev.append({"ph": "X", "cat": "python_function"})  # no name/ts
    ev.append("just a string")
    ev.append(None)
    p = tmp_path / "damaged.json"
    p.write_text(json.dumps(data))
    res = analyze_trace(p)
    kernel_count = good - 4
    assert res.kernel_count == kernel_count
    w = {x.code: x for x in res.warnings}["damaged_events"]
    assert w.count == 7 and "skipped 7" in w.message
    assert res.attributed_count > 0.9 * kernel_count  # the rest is still attributed


def test_huge_ids(tmp_path):
    data = _events()
    big = 10**30
    for e in data["traceEvents"]:
        a = e.get("args")
        if isinstance(a, dict) and "correlation" in a:
            a["correlation"] += big
        if isinstance(a, dict) and "stream" in a:
            a["stream"] = 2**70
        if "id" in e:
            e["id"] = e["id"] + big
    p = tmp_path / "huge.json"
    p.write_text(json.dumps(data))
    ref = analyze_trace(TRACES / "llama_prefill_sdpa.json.gz")
    res = analyze_trace(p)
    assert res.kernel_count == ref.kernel_count
    assert res.attributed_count == ref.attributed_count  # correlation still links kernels to launches


def test_plain_json_and_bare_array(tmp_path):
    data = _events("llama_prefill_eager")
    p = tmp_path / "plain.json"
    p.write_text(json.dumps(data, indent=1))  # pretty-printed like export_chrome_trace
    a = analyze_trace(p)
    q = tmp_path / "array.json"
    q.write_text(json.dumps(data["traceEvents"]))  # Chrome trace array form
    b = analyze_trace(q)
    ref = analyze_trace(TRACES / "llama_prefill_eager.json.gz")
    assert a.kernel_count == b.kernel_count == ref.kernel_count
    assert a.total_kernel_us == pytest.approx(ref.total_kernel_us)
    assert a.device == ref.device and b.device is None


def test_chunked_stream_matches_whole(tmp_path, monkeypatch):
    """Tiny blocks force many streaming cuts; the result must equal the one-shot decode."""
    from mcp_server.traces import stream

    ref = load_trace(TRACES / "dsv3_prefill.json.gz")
    monkeypatch.setattr(stream, "BLOCK", 4096)
    small = load_trace(TRACES / "dsv3_prefill.json.gz")
    assert small.event_count == ref.event_count and small.skipped == 0
    assert (small.k_ts == ref.k_ts).all() and (small.p_ts == ref.p_ts).all()
    assert small.metadata == ref.metadata


def test_hip_runtime_names(tmp_path):
    """ROCm traces name the runtime calls hip*: the launch link and graph detection still hold."""
    raw = gzip.decompress((TRACES / "llama_decode_mixed.json.gz").read_bytes())
    raw = raw.replace(b'"cudaGraphLaunch"', b'"hipGraphLaunch"').replace(b'"cudaLaunchKernel"', b'"hipLaunchKernel"')
    raw = raw.replace(b'"cuLaunchKernelEx"', b'"hipExtModuleLaunchKernel"')
    raw = raw.replace(b'"cuda_runtime_version"', b'"hip_runtime_version"')
    p = tmp_path / "rocm_like.json"
    p.write_bytes(raw)
    res = analyze_trace(p)
    ref = analyze_trace(TRACES / "llama_decode_mixed.json.gz")
    assert res.platform == "amd" and ref.platform == "nvidia"
    assert res.graph.graph_kernel_count == ref.graph.graph_kernel_count == 399
    assert res.attributed_count == ref.attributed_count
