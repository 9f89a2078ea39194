"""validate on the CPU path: each adversarial candidate is refused for the right reason.

Every test runs the real harness (a fresh child process with a time limit) on the modules in
tests/fixtures/validate/. The GPU versions are in test_validate_gpu.py.
"""
from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest

from mcp_server.core import proc
from mcp_server.validate.engine import validate_candidate

FIX = Path(__file__).resolve().parent / "fixtures" / "validate"
SPEC = str(FIX / "cpu.toml")


def run(name: str | None = None, **kw):
    if name is not None:
        kw.setdefault("candidate", str(FIX / f"{name}.py") + ":candidate")
    kw.setdefault("timeout_s", 60)
    return validate_candidate(SPEC, **kw)


def failed(res) -> set[str]:
    return {c.name for c in res.correctness.checks if not c.passed}


def test_wrong_result():
    r = run("cand_wrong")
    assert r.verdict == "rejected" and not r.accepted
    assert failed(r) == {"values"}
    assert r.timing is None  # an incorrect candidate is not timed
    assert 0.04 < r.correctness.max_rel_err < 0.06  # 5 % too large
    w = r.correctness.worst[0]
    assert w.candidate == pytest.approx(w.reference * 1.05, rel=1e-5)


def test_nan_in_one_element():
    r = run("cand_nan")
    assert r.verdict == "rejected" and "finite" in failed(r)
    c = next(c for c in r.correctness.checks if c.name == "finite")
    assert "1 NaN/Inf element(s)" in c.detail
    assert r.correctness.worst[0].candidate is None  # NaN serialises as null


def test_input_mutation():
    r = run("cand_mutate")
    assert r.verdict == "rejected" and failed(r) == {"inputs_unchanged"}  # the output itself is right


def test_caching_by_pointer():
    r = run("cand_cache_ptr")
    assert r.verdict == "rejected" and failed(r) == {"same_address_new_values"}
    assert "cached by pointer or shape" in r.reasons[0]


def test_uninitialised_output():
    r = run("cand_uninit")
    assert r.verdict == "rejected" and failed(r) & {"finite", "values"}


def test_precision_downgrade():
    r = run("cand_fp16", dtype="bfloat16")
    assert r.verdict == "rejected" and "dtype" in failed(r)
    c = next(c for c in r.correctness.checks if c.name == "dtype")
    assert "float16, baseline bfloat16" in c.detail


def test_correct_only_for_the_first_shape():
    r = run("cand_first_shape")
    assert r.verdict == "rejected" and failed(r) == {"values"}
    c = next(c for c in r.correctness.checks if c.name == "values")
    assert c.detail.startswith("shape {M=8") and c.failures == 3  # every seed of the second shape


def test_timer_patching_is_detected_and_does_not_change_the_measurement():
    r = run("cand_patch_timer", time_budget_s=1.0, other_cache=False)
    assert r.verdict == "rejected" and failed(r) == {"no_patching"}
    names = {p.name for p in r.patched if p.by == "candidate"}
    assert {"time.perf_counter", "time.perf_counter_ns"} <= names
    # the candidate does about 3x the work; the patched timers would have shown it ~10x faster
    assert r.speedup is not None and r.speedup.median < 0.8


def test_sleeping_forever_is_killed_within_the_limit():
    t0 = time.monotonic()
    r = run("cand_sleep", timeout_s=8)
    took = time.monotonic() - t0
    assert r.verdict == "error" and not r.accepted
    assert "killed" in r.reasons[0] and "correctness" in r.reasons[0]
    assert took < 8 + 4


def test_raising():
    r = run("cand_raise")
    assert r.verdict == "error" and "candidate exploded on purpose" in r.reasons[0]
    assert "RuntimeError" in r.reasons[0]


def test_constant_inputs_are_refused():
    r = run(mode="aa", inputs=str(FIX / "base.py") + ":constant_inputs")
    assert r.verdict == "error" and "constant" in r.reasons[0]


def test_missing_function_is_an_error_result():
    r = run(candidate=str(FIX / "cand_wrong.py") + ":nope")
    assert r.verdict == "error" and "no function 'nope'" in r.reasons[0]


def test_aa_is_not_accepted():
    seen = []
    r = run(mode="aa", time_budget_s=1.5, other_cache=False, progress=lambda d, t, m: seen.append(m))
    assert r.correctness.passed and r.verdict == "not_faster" and not r.accepted
    assert r.timing is not None and r.timing.rounds >= 10 and r.timing.method == "cpu_loop"
    assert any(m and m.startswith("correctness") for m in seen) and any(m and m.startswith("timing") for m in seen)
    assert r.device.kind == "cpu" and r.settings["seed"] == 7


def test_half_the_work_is_accepted():
    r = run(baseline=str(FIX / "base.py") + ":matmul_twice", candidate=str(FIX / "base.py") + ":matmul",
            time_budget_s=2, other_cache=False)
    assert r.verdict == "accepted" and r.accepted, r.reasons
    assert r.speedup.ci_low > 1.03 and r.speedup.median > 1.5
    assert len(r.timing.per_shape) == 2 and all(p.speedup > 1.2 for p in r.timing.per_shape)


def test_render_shows_verdict_and_checks():
    from rich.console import Console

    from mcp_server.validate.render import render

    r = run("cand_fp16", dtype="bfloat16")
    buf = io.StringIO()
    render(r, Console(file=buf, width=160), None)
    text = buf.getvalue()
    assert "REJECTED" in text and "dtype" in text and "float16, baseline bfloat16" in text


def test_stream_relays_lines_and_kills_the_group():
    lines = []
    code = ("import subprocess,sys,time\nprint('one',flush=True)\n"
            "subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'])\ntime.sleep(60)")
    t0 = time.monotonic()
    r = proc.stream([sys.executable, "-c", code], timeout=2, on_line=lines.append)
    assert r.timed_out and r.rc is None and lines == ["one"]
    assert time.monotonic() - t0 < 5
    r = proc.stream([sys.executable, "-c", "print('a'); print('b')"], timeout=10, on_line=lines.append)
    assert not r.timed_out and r.rc == 0 and lines[-2:] == ["a", "b"]


def test_graphs_kept_only_when_launch_bound():
    """graphs='auto': a replay must beat the launch loop by > 3 % (the H200 showed graph instances
    differing by ~1.5 % on a GPU-bound 30 us kernel, where a loop measures the same time)."""
    from mcp_server.validate.child import Harness

    h = Harness({"device": "cpu"}, io.StringIO())

    def base(): ...

    def cand(): ...

    def fake(per_graph, per_loop, cand_loop=None):
        def batch(fn, argset, reps, graph):
            if graph is not None:
                return per_graph
            return cand_loop if fn is cand and cand_loop is not None else per_loop
        return batch

    graphs = [{"a": [("g1", []), ("g2", [])], "b": [("g3", []), ("g4", [])]}]
    h._batch = fake(2e-6, 6e-6)        # launch-bound: the loop is 3x slower
    assert h._graphs_pay(base, cand, [[()]], graphs)
    h._batch = fake(30e-6, 30.3e-6)    # GPU-bound: 1 % apart
    assert not h._graphs_pay(base, cand, [[()]], graphs)
    assert h.result["graph_check"] == [{"graph_us": pytest.approx(30.0), "loop_us": pytest.approx(30.3),
                                        "candidate_graph_us": pytest.approx(30.0),
                                        "candidate_loop_us": pytest.approx(30.3)}]
    # the baseline GPU-bound but the candidate's host work outlasting its kernels (the H200 worked example after
    # the streaming kernel: 184 us a call in a launch loop against the baseline's 66 us): graphs, or the loop
    # times the candidate's host work
    h._batch = fake(65e-6, 66e-6, cand_loop=184e-6)
    assert h._graphs_pay(base, cand, [[()]], graphs)
    assert h.result["graph_check"][0]["candidate_loop_us"] == pytest.approx(184.0)
