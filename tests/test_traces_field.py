"""Traces from other profiler versions and platforms read like current ones (issue 23).

Fixtures: ``format_*`` are a committed H200 trace rewritten in another schema's field types by
``tools/make_format_traces.py``; ``capture_*`` and ``train_graph`` were made on the H200 by
``tools/make_capture_traces.py`` (tests/fixtures/README.md).
"""
from __future__ import annotations

import gzip
import json
import sys
from functools import lru_cache
from pathlib import Path

import pytest
from conftest import TRACES

from mcp_server.compare.budget import budget
from mcp_server.compare.diff import diff_modules
from mcp_server.traces import analyze_trace
from mcp_server.traces.loader import load_trace
from mcp_server.vocab import WarningCode


@lru_cache(maxsize=None)
def run(name: str, ref: str | None = None):
    return analyze_trace(TRACES / f"{name}.json.gz", reference_trace=(TRACES / f"{ref}.json.gz") if ref else None)


def _tree(res) -> dict[str, tuple[float, int]]:
    return {n.path: (round(n.total_us, 6), n.kernel_count) for n in res.tree}


@pytest.mark.parametrize("name", ["format_pt18_prefill", "format_rocm_stream_prefill"])
def test_other_schemas_read_like_the_current_trace(name):
    base, other = run("llama_prefill_sdpa"), run(name)
    assert other.kernel_count == base.kernel_count == 110
    assert other.total_kernel_us == pytest.approx(base.total_kernel_us)
    assert other.attributed_count == base.attributed_count == 110
    assert _tree(other) == _tree(base)
    assert [(c.category, c.count) for c in other.categories] == [(c.category, c.count) for c in base.categories]
    assert [(p.phase, p.kernel_count) for p in other.phases] == [("prefill", 110)]
    assert not [w for w in other.warnings if w.code == WarningCode.damaged_events]
    cols = other.kernels
    assert (cols["cpu_op"] != "").sum() == (base.kernels["cpu_op"] != "").sum()  # the Operator spans are read
    assert set(cols["stream"]) == set(base.kernels["stream"]) == {7}  # "stream 7" is stream 7


def test_pt18_categories_and_string_ids_are_read():
    rt = load_trace(TRACES / "format_pt18_prefill.json.gz")
    assert rt.skipped == 0
    assert len(rt.k_name) == 110 and len(rt.c_name) > 0 and len(rt.l_name) > 0
    # the dims of `Input dims` are kept like those of `Input Dims`
    assert any(d.startswith("[[") for d in rt.dims)


def test_rocm_hex_streams_keep_every_launch():
    rt = load_trace(TRACES / "format_rocm_stream_prefill.json.gz")
    assert rt.skipped == 0
    base = load_trace(TRACES / "llama_prefill_sdpa.json.gz")
    assert len(rt.l_corr) == len(base.l_corr)
    res = run("format_rocm_stream_prefill")
    assert res.platform == "amd"
    # HIP launches name their kernel (args.kernel): kept beside the launch
    named = {rt.names[i] for i in rt.l_kernel.tolist() if i}
    assert named and named <= {rt.names[i] for i in rt.k_name.tolist()}


# ---- traces with no GPU activity: never a silent zero (analyze, budget, compare) ----

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import make_format_traces as recipes  # noqa: E402


def _variant(tmp_path, recipe) -> Path:
    src = json.loads(gzip.decompress((TRACES / "llama_prefill_sdpa.json.gz").read_bytes()))
    p = tmp_path / f"{recipe.__name__}.json"
    p.write_text(json.dumps(recipe(src)), encoding="utf-8")
    return p


@pytest.mark.parametrize("recipe,why", [
    (recipes.cpu_only, "CPU events only"),
    (recipes.cupti_ranges, "106 cuda_profiler_range events"),
    (recipes.gpu_damaged, "all 110 of its GPU activity events"),
])
def test_no_gpu_events_is_a_warning_that_says_why(tmp_path, recipe, why):
    p = _variant(tmp_path, recipe)
    res = analyze_trace(p)
    assert res.kernel_count == 0 and res.total_kernel_us == 0
    w = {x.code: x for x in res.warnings}
    assert WarningCode.no_gpu_events in w, res.warnings
    assert why in w[WarningCode.no_gpu_events].message
    # budget and compare carry it too, beside their own empty_side
    for result in (budget(p, TRACES / "llama_prefill_sdpa.json.gz"), diff_modules(p, TRACES / "llama_prefill_sdpa.json.gz")):
        codes = [x.code for x in result.warnings]
        assert WarningCode.no_gpu_events in codes, codes


def test_launch_kinds():
    # launches during capture run nothing: the warning says to pass it as the reference of a replay trace
    from mcp_server.traces.loader import launch_kind

    assert [launch_kind(n) for n in ("cudaLaunchKernel", "cuLaunchKernelEx", "hipExtModuleLaunchKernel",
                                     "cudaMemcpyAsync", "hipMemsetAsync", "cudaGraphLaunch", "cudaEventRecord")] == \
        [0, 0, 0, 1, 2, -1, -1]
