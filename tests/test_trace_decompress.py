"""Every decompressor gives the same analysis of every committed trace fixture (issue 15).

The digests below were made with the loader as it was before the fast decompressors (commit 17daa4d,
stdlib gzip only): the same script, run on that checkout, printed them. A digest covers the whole
``TraceAnalysis`` (``model_dump(mode="json")`` less the trace and categories paths, which differ between
checkouts) plus the per-kernel table as CSV, so a
decoder that changes one kernel's duration or one module name fails here. If the analysis model is
changed on purpose, regenerate them with ``digest()`` on the stdlib backend.

The analyses use the categories CSV as it was then (``tests/fixtures/decompress_categories.csv``, a copy of
``_shared/kernel_categories.csv`` at 6cd089b): the digests cover the categories and the rules' sha256, and this
test is about decoders, so an edit of the shared rules must not change it.
"""
from __future__ import annotations

import gzip
import hashlib
import json

import pytest
from conftest import FIXTURES, TRACES

from mcp_server.core.errors import LimitError, TraceFormatError
from mcp_server.traces import analyze_trace
from mcp_server.traces._reader import GZIP_BACKENDS, compression, gzip_backend

# Regenerated (stdlib backend) when the result gained ``breakdown`` (the GPU time breakdown, issue 23): with that
# field left out, every digest below equals the one it replaced, so the decoders' answers did not change.
# capture_capture, train_graph and llama_decode_mixed again for the outside_modules warning (kernels launched
# between module calls), which is the only difference; capture_capture again for its graph_capture warning.
BEFORE = {
    "dsv3_prefill": "46af5daf408bf37f",
    # bf12164708d02ff8 before the replays_unattributed warning (e220384), which is the only difference;
    # 2c3210106dda83c6 before issue 23's phase rule: its replays, with no marker and no reference, are phase
    # 'graph' instead of an assumed 'decode', and replays_unattributed names the capture trace as a reference
    "llama_decode_graph": "13cc18f9d50cff16",
    # issue 23's fixtures: digests made with the stdlib backend when they were added
    "format_pt18_prefill": "7427993c87a2eeed",
    "format_rocm_stream_prefill": "4dd4af059efe7cc4",
    "capture_capture": "9dd64f2ca5a5acfe",
    "capture_eager": "8d8a7088d5366f1f",
    "capture_replay": "e2f26970a35aab90",
    "train_graph": "4673e50dede26bf9",
    "llama_decode_mixed": "a6ce6aad69877a8b",
    "llama_prefill_eager": "4e529fc0506bacff",
    "llama_prefill_sdpa": "8d3cedd9a87a3b09",
    "tp2_decode_mixed": "a691d39ca2afe472",
    "tp2_prefill": "c9dcd2dc3c380bc7",
}
_PKG = {"isal": "isal", "zlib-ng": "zlib_ng"}
CATEGORIES = str(FIXTURES / "decompress_categories.csv")


def digest(res) -> str:
    d = res.model_dump(mode="json")
    d.pop("trace", None)  # paths differ between checkouts; the rest must not
    d.pop("categories_source", None)
    h = hashlib.sha256(json.dumps(d, sort_keys=True).encode())
    h.update(res.kernels.to_csv(index=False).encode())
    return h.hexdigest()[:16]


def test_every_fixture_has_a_digest():
    assert sorted(p.name[: -len(".json.gz")] for p in TRACES.glob("*.json.gz")) == sorted(BEFORE)


@pytest.mark.parametrize("backend", GZIP_BACKENDS)
@pytest.mark.parametrize("name", sorted(BEFORE))
def test_gzip_backends_match_the_analysis_made_before(name, backend, monkeypatch):
    if backend in _PKG:
        pytest.importorskip(_PKG[backend])
    monkeypatch.setenv("KERNELSCOPE_TRACE_GZIP", backend)
    assert gzip_backend() == backend
    assert digest(analyze_trace(TRACES / f"{name}.json.gz", categories=CATEGORIES)) == BEFORE[name]


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_plain_json_matches(name, tmp_path):
    p = tmp_path / f"{name}.json"
    p.write_bytes(gzip.decompress((TRACES / f"{name}.json.gz").read_bytes()))
    assert compression(p) == ""
    assert digest(analyze_trace(p, categories=CATEGORIES)) == BEFORE[name]


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_zstd_matches(name, tmp_path):
    zstandard = pytest.importorskip("zstandard")
    text = gzip.decompress((TRACES / f"{name}.json.gz").read_bytes())
    p = tmp_path / f"{name}.json.zst"
    # two frames, as `zstd` writes when files are concatenated: both must be read
    half = len(text) // 2
    c = zstandard.ZstdCompressor(level=3)
    p.write_bytes(c.compress(text[:half]) + c.compress(text[half:]))
    assert compression(p) == "zstd"
    assert digest(analyze_trace(p, categories=CATEGORIES)) == BEFORE[name]


def test_default_backend_is_the_fastest_installed(monkeypatch):
    monkeypatch.delenv("KERNELSCOPE_TRACE_GZIP", raising=False)
    pytest.importorskip("isal")
    assert gzip_backend() == "isal"


def test_unknown_backend_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_TRACE_GZIP", "brotli")
    with pytest.raises(TraceFormatError, match="KERNELSCOPE_TRACE_GZIP names no gzip backend") as ei:
        analyze_trace(TRACES / "llama_decode_graph.json.gz")
    assert "brotli" not in str(ei.value)  # an environment value is never shown


@pytest.mark.parametrize("backend", GZIP_BACKENDS)
def test_damaged_gzip_gives_the_same_typed_errors_on_every_backend(backend, tmp_path, monkeypatch):
    if backend in _PKG:
        pytest.importorskip(_PKG[backend])
    monkeypatch.setenv("KERNELSCOPE_TRACE_GZIP", backend)
    raw = (TRACES / "llama_prefill_sdpa.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceFormatError, match="truncated"):
        analyze_trace(cut)
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(raw[:-8] + bytes(8))  # CRC and size trailer zeroed
    with pytest.raises(TraceFormatError, match="corrupt gzip data"):
        analyze_trace(bad)


def test_damaged_zstd_is_a_typed_error(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    text = gzip.decompress((TRACES / "llama_prefill_sdpa.json.gz").read_bytes())
    z = zstandard.ZstdCompressor(level=3).compress(text)
    bad = tmp_path / "bad.json.zst"
    bad.write_bytes(z[:2000] + bytes(4000) + z[6000:])
    with pytest.raises(TraceFormatError, match="corrupt zstd data"):
        analyze_trace(bad)
    cut = tmp_path / "cut.json.zst"  # zstd streams end silently when cut: the JSON is then incomplete
    cut.write_bytes(z[: len(z) // 2])
    with pytest.raises(TraceFormatError):
        analyze_trace(cut)


def test_zstd_of_zeros_stops_at_the_ratio_guard(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    p = tmp_path / "zeros.json.zst"
    with open(p, "wb") as f, zstandard.ZstdCompressor(level=1).stream_writer(f) as w:
        w.write(b'{"traceEvents": [')
        for _ in range(64):
            w.write(bytes(4 << 20))
    with pytest.raises(LimitError, match="KERNELSCOPE_MAX_TRACE_RATIO"):
        analyze_trace(p)


# --- the split decode (a helper process decodes the text after a split point; issue 15) -----------------


def _force_split(monkeypatch) -> list:
    """Split every streamable trace (small blocks, so a fixture spans several); returns the helper outcomes."""
    from mcp_server.traces import split, stream

    monkeypatch.setenv("KERNELSCOPE_TRACE_SPLIT", "force")
    monkeypatch.setattr(stream, "BLOCK", 64 << 10)
    outcomes: list = []
    orig = split.Split.result

    def result(self, cut):
        got = orig(self, cut)
        outcomes.append(got is not None)
        return got

    monkeypatch.setattr(split.Split, "result", result)
    return outcomes


@pytest.mark.parametrize("plain", [False, True])
@pytest.mark.parametrize("name", sorted(BEFORE))
def test_split_decode_matches_the_analysis_made_before(name, plain, tmp_path, monkeypatch):
    p = TRACES / f"{name}.json.gz"
    if plain:
        p = tmp_path / f"{name}.json"
        p.write_bytes(gzip.decompress((TRACES / f"{name}.json.gz").read_bytes()))
    from mcp_server.traces.analyze import analyze_trace as engine  # reads blocks of stream.BLOCK

    outcomes = _force_split(monkeypatch)
    assert digest(engine(p, categories=CATEGORIES)) == BEFORE[name]
    assert outcomes == [True]  # the helper decoded its part and it was used


def test_split_decode_errors_are_the_same_and_leave_no_helper(tmp_path, monkeypatch):
    from mcp_server.traces import split
    from mcp_server.traces.analyze import analyze_trace as engine

    raw = (TRACES / "llama_prefill_sdpa.json.gz").read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) * 3 // 4])  # the damage lies in the helper's part
    with pytest.raises(TraceFormatError) as plain_err:
        analyze_trace(cut)
    outcomes = _force_split(monkeypatch)
    helpers: list = []
    orig = split.Split.start.__func__

    def start(cls, *a):
        s = orig(cls, *a)
        helpers.append(s)
        return s

    monkeypatch.setattr(split.Split, "start", classmethod(start))
    with pytest.raises(TraceFormatError) as split_err:
        engine(cut)
    assert str(split_err.value) == str(plain_err.value)
    assert helpers and outcomes in ([], [False])  # (the cut file's size trailer is garbage: any split point)
    assert all(h.proc.poll() is not None for h in helpers)  # reaped


def test_no_split_on_one_core_or_when_turned_off(monkeypatch, tmp_path):
    from mcp_server.traces import split

    p = tmp_path / "t.json"
    p.write_bytes(b" " * (split.SPLIT_MIN + 10))
    monkeypatch.delenv("KERNELSCOPE_TRACE_SPLIT", raising=False)
    assert split.split_point(p, 100) is not None
    monkeypatch.setattr(split.os, "sched_getaffinity", lambda _pid: {0}, raising=False)
    assert split.split_point(p, 100) is None
    monkeypatch.undo()
    monkeypatch.setenv("KERNELSCOPE_TRACE_SPLIT", "off")
    assert split.split_point(p, 100) is None
