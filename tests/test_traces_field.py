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
from mcp_server.core.vocab import WarningCode
from mcp_server.traces import analyze_trace
from mcp_server.traces.loader import load_trace


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


def test_budget_and_compare_read_old_schema_traces():
    # before: "totals of 0.0" on both sides
    b = budget(TRACES / "format_pt18_prefill.json.gz", TRACES / "llama_prefill_sdpa.json.gz")
    assert b.a.total_us == pytest.approx(b.b.total_us) and b.a.total_us == pytest.approx(212.3, abs=0.05)
    assert all(r.gap_us == pytest.approx(0.0, abs=1e-6) for r in b.rows)
    d = diff_modules(TRACES / "format_pt18_prefill.json.gz", TRACES / "format_rocm_stream_prefill.json.gz")
    assert d.a.total_us == pytest.approx(d.b.total_us) == pytest.approx(212.3, abs=0.05)


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


# ---- CUDA-graph captures as the reference of their replays (issue 23) ----

def _twin_share(res) -> tuple[float, int]:
    """Share of replay kernel time attributed to the module of its eager twin (the eager step's kernel at
    the same position: the decoder runs the same code eagerly and under capture), and the kernels compared."""
    eager = run("capture_eager").kernels.sort_values("ts_us")
    names, paths = list(eager["name"]), list(eager["module_path"])
    g = res.kernels[res.kernels["graph"]].sort_values("ts_us")
    same = tot = 0.0
    n = 0
    for _, part in g.groupby("correlation", sort=False):
        assert list(part["name"]) == names  # each replay runs the eager step's kernels, in order
        for p, q, d in zip(part["module_path"], paths, part["dur_us"]):
            tot += d
            same += d if p == q else 0.0
            n += 1
    return same / tot, n


def test_replays_attributed_from_their_capture_trace():
    alone = run("capture_replay")
    assert alone.attributed_count == 0 and "replays_unattributed" in {w.code for w in alone.warnings}
    assert {p.phase for p in alone.phases if p.phase} == {"graph"}  # no evidence of a phase
    cap = run("capture_capture")
    assert cap.kernel_count == 2 and "no_gpu_events" not in {w.code for w in cap.warnings}
    w = [x for x in cap.warnings if x.code == WarningCode.graph_capture]  # never a silent near-zero
    assert w and w[0].count == 191 and "--reference-trace" in w[0].message
    assert not [x for x in run("capture_eager").warnings if x.code == WarningCode.graph_capture]
    res = run("capture_replay", "capture_capture")
    assert res.graph.graph_kernel_count == 573 and res.graph.attributed_count == 573  # 3 replays x 191
    assert res.graph.method == "reference-trace" and res.graph.mean_confidence == 1.0
    assert any("attribution by capture" in n for n in res.graph.notes)
    assert any("1 graph capture(s) (191 launches)" in n for n in res.graph.notes)
    share, n = _twin_share(res)
    assert n == 573 and share >= 0.99, share
    assert share == 1.0  # measured: every replay kernel lands in its eager twin's module
    g = res.kernels[res.kernels["graph"]]
    assert set(g["phase"]) == {"decode"}  # the capture's aten::embedding ids are [8, 1]: decode shapes
    assert {"LlamaAttention", "LlamaMLP", "Linear", "LlamaRMSNorm"} <= set(g["module_type"])
    assert not [w for w in res.warnings if w.code in ("low_graph_confidence", "replays_unattributed")]


def test_capture_missing_a_launch_is_aligned_with_low_confidence(tmp_path):
    src = json.loads(gzip.decompress((TRACES / "capture_capture.json.gz").read_bytes()))
    p = tmp_path / "capture_short.json"
    p.write_text(json.dumps(recipes.drop_capture_launch(src, 120)), encoding="utf-8")
    res = analyze_trace(TRACES / "capture_replay.json.gz", reference_trace=p)
    assert res.graph.attributed_count == 573 and res.graph.mean_confidence < 0.5
    w = [x for x in res.warnings if x.code == WarningCode.low_graph_confidence]
    assert w and "capture" in w[0].message


def test_named_capture_launches_align_by_kernel_name():
    """HIP launches name their kernel (SGLang's MI300X capture): a launch more or less is placed by name."""
    from mcp_server.traces.graph import Capture, attribute_from_capture

    k = run("capture_eager").kernels.sort_values("ts_us")
    names, paths = list(k["name"]), list(k["module_path"])
    cap = Capture(kinds=[0] * (len(names) - 1), kernels=names[:50] + names[51:], paths=paths[:50] + paths[51:],
                  phases=["decode"] * (len(names) - 1))
    got = attribute_from_capture(names, [0] * len(names), [cap])
    assert got is not None
    out, conf, ph = got
    assert [o for i, o in enumerate(out) if i != 50] == paths[:50] + paths[51:]
    assert conf.count(1.0) == len(names) - 1 and conf[50] == 0.5 and set(ph) == {"decode"}



def test_replay_launches_the_capture_lacks_all_take_the_phase_around_them():
    """A run of several replay kernels the capture does not hold takes the phase of the captured launches
    on both sides when they agree: every kernel of the run, not only its first."""
    from mcp_server.traces.graph import Capture, attribute_from_capture

    k = run("capture_eager").kernels.sort_values("ts_us")
    names, paths = list(k["name"]), list(k["module_path"])
    keep = names[:50] + names[53:]
    cap = Capture(kinds=[0] * len(keep), kernels=keep, paths=paths[:50] + paths[53:], phases=["decode"] * len(keep))
    got = attribute_from_capture(names, [0] * len(names), [cap])
    assert got is not None
    _, conf, ph = got
    assert conf[50:53] == [0.5, 0.5, 0.5] and ph[50:53] == ["decode"] * 3 and set(ph) == {"decode"}

# ---- phase: decode only with evidence ----

def test_replays_without_evidence_are_graph_not_decode():
    train = run("train_graph")  # an MLP training step replayed: no marker, no decode shapes
    ph = train.kernels.groupby("graph")["phase"].agg(lambda s: set(s.astype(str)))
    assert ph[True] == {"graph"} and ph[False] == {""}
    assert run("llama_decode_graph").kernels["phase"].astype(str).unique().tolist() == ["graph"]
    # an eager decode step of the same model aligns closely: its phase is the replays'
    assert set(run("llama_decode_graph", "llama_decode_mixed").kernels["phase"].astype(str)) == {"decode"}
    assert set(run("llama_decode_mixed").kernels["phase"].astype(str)) == {"", "decode"}
    assert set(run("tp2_decode_mixed").kernels["phase"].astype(str)) == {"decode"}
    # a prefill step of the same model aligns loosely (ratio ~0.63): it teaches no phase
    assert set(run("llama_decode_graph", "llama_prefill_sdpa").kernels["phase"].astype(str)) == {"graph"}


@pytest.mark.parametrize("note,phase", [
    ("step[DECODE bs=8]", "decode"),  # SGLang's step annotation
    ("execute_8_context_0(sq0sk0sqsq0sqsk0)_generation_8(sq8sk8sqsq8sqsk8)", "decode"),
    ("execute_context_8(8_8)_generation_0(0)", "prefill"),  # vLLM piecewise graphs inside a prefill step
    ("execute_context_2(8_8)_generation_6(6)", "graph"),  # a mixed step tells no single phase
])
def test_phase_annotations_around_replays(tmp_path, note, phase):
    src = json.loads(gzip.decompress((TRACES / "llama_decode_graph.json.gz").read_bytes()))
    p = tmp_path / "annotated.json"
    p.write_text(json.dumps(recipes.annotate_replays(src, note)), encoding="utf-8")
    res = analyze_trace(p)
    assert set(res.kernels["phase"].astype(str)) == {phase}
    assert set(res.kernels["source"].astype(str)) == {""}  # an annotation is not a source frame


def test_phase_of_annotation():
    from mcp_server.traces.loader import phase_of_annotation

    assert phase_of_annotation("capture_32_DECODE") == "decode"
    assert phase_of_annotation("step[EXTEND bs=15 toks=15360]") == "prefill"
    assert phase_of_annotation("ProfilerStep#6") == phase_of_annotation("## forward ##") == ""


def test_a_trace_holding_the_capture_attributes_its_own_replays(tmp_path):
    # one profile over capture and replays: the capture in the same trace is the reference
    cap = json.loads(gzip.decompress((TRACES / "capture_capture.json.gz").read_bytes()))
    rep = json.loads(gzip.decompress((TRACES / "capture_replay.json.gz").read_bytes()))
    p = tmp_path / "capture_and_replays.json"
    p.write_text(json.dumps({**rep, "traceEvents": cap["traceEvents"] + rep["traceEvents"]}), encoding="utf-8")
    res = analyze_trace(p)
    assert res.graph.method == "same-trace" and res.graph.attributed_count == res.graph.graph_kernel_count == 573
    assert any("attribution by capture" in n for n in res.graph.notes)
    assert _twin_share(res) == (1.0, 573)


def test_a_capture_of_another_graph_is_not_used():
    # the transformers Llama decode graph (133 kernels a replay) against this decoder's capture (191 launches)
    res = run("llama_decode_graph", "capture_capture")
    assert res.graph.attributed_count == 0
    w = [x for x in res.warnings if x.code == WarningCode.replays_unattributed]
    assert w and "graph capture(s) and eager kernels of the reference trace" in w[0].message
