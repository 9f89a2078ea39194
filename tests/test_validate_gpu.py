"""validate on the GPU path (bf16 on CUDA): the adversarial candidates and the honest ones.

Marked ``gpu``: skipped where torch sees no CUDA GPU. Run on the H200 machine with
``python3 -m pytest -m gpu tests/test_validate_*.py``; results are in bench/RESULTS.md.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from mcp_server.validate.engine import validate_candidate

FIX = Path(__file__).resolve().parent / "fixtures" / "validate"


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _has_cuda(), reason="no CUDA GPU here")]

BASE = dict(spec_path=None, baseline=f"{FIX}/base.py:matmul", inputs=f"{FIX}/base.py:make_inputs",
            shapes=[{"M": 1, "K": 1024, "N": 4096}, {"M": 8, "K": 1024, "N": 4096}], dtype="bfloat16",
            device="cuda", seed=11, time_budget_s=2, timeout_s=120)


def run(name: str | None = None, **kw):
    args = {**BASE, **kw}
    if name is not None:
        args.setdefault("candidate", f"{FIX}/{name}.py:candidate")
    return validate_candidate(**args)


def failed(res) -> set[str]:
    return {c.name for c in res.correctness.checks if not c.passed}


@pytest.mark.parametrize("name, expect", [
    ("cand_wrong", {"values"}),
    ("cand_nan", {"finite", "values"}),
    ("cand_mutate", {"inputs_unchanged"}),
    ("cand_cache_ptr", {"same_address_new_values"}),
    ("cand_fp16", {"dtype"}),
    ("cand_first_shape", {"values"}),
])
def test_adversarial_rejected_for_the_right_reason(name, expect):
    r = run(name)
    assert r.verdict == "rejected", r.reasons
    assert expect <= failed(r), (failed(r), r.reasons)
    assert r.device.kind == "cuda"


def test_uninitialised_output_reads_the_poison():
    r = run("cand_uninit")
    assert r.verdict == "rejected"
    # freed blocks were filled with 0xFF (NaN) before the candidate ran: what it returns is NaN,
    # not the baseline's result that the same block held a moment earlier
    assert "finite" in failed(r), r.reasons


def test_side_stream_work_returned_before_it_finishes():
    r = run("cand_side_stream")
    assert r.verdict == "rejected"
    assert "stream_complete" in failed(r), r.reasons


def test_timer_patching_gpu():
    r = run("cand_patch_timer", other_cache=False)
    assert r.verdict == "rejected" and failed(r) == {"no_patching"}
    names = {p.name for p in r.patched}
    assert "torch.cuda.Event.elapsed_time" in names and "torch.cuda.synchronize" in names
    assert r.speedup.median < 0.8  # ~3x the work, measured as such


def test_sleep_killed_and_raise_reported():
    t0 = time.monotonic()
    r = run("cand_sleep", timeout_s=20)
    assert r.verdict == "error" and "killed" in r.reasons[0] and time.monotonic() - t0 < 25
    r = run("cand_raise")
    assert r.verdict == "error" and "candidate exploded" in r.reasons[0]


def test_aa_not_accepted_gpu():
    r = run(mode="aa")
    assert r.correctness.passed and not r.accepted and r.verdict == "not_faster", r.reasons
    assert r.timing.method in ("cuda_graph", "launch_loop") and r.timing.graph_check
    assert r.speedup.ci_low < 1.0 + 0.03


def test_half_the_work_accepted_gpu():
    r = run(baseline=f"{FIX}/base.py:matmul_twice", candidate=f"{FIX}/base.py:matmul")
    assert r.verdict == "accepted", r.reasons
    assert 1.6 < r.speedup.median < 2.4 and r.speedup.ci_low > 1.03
    assert r.roofline.checked and not r.roofline.implausible


def test_roofline_flags_an_impossible_claim():
    # bytes that this call could not move at HBM speed in the time it takes: the check must flag it
    r = run(mode="aa", bytes="M*K*N*elem*1000")
    assert r.roofline.checked and r.roofline.implausible and r.verdict == "rejected"
