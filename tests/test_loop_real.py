"""The loop on its real path without a GPU: ``run_loop`` over the declared operations, selecting on the
committed H200 ncu fixture and validating with validate_candidate's CPU harness; and a ``kill -9`` in the
middle of a real validation, resumed with no duplicate or lost record.

The target's kernel file holds a matmul that does the work twice; proposals swap in one that does it
once (correct and faster: accepted) or four times (correct and slower: rejected, the file restored).
The spec's baseline is a frozen copy of the original, so the candidate is whatever the swap put in place.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcp_server.ledger.engine import ledger_export, ledger_show
from mcp_server.loop.engine import run_loop

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "ncu" / "targets_none.raw.csv"  # H200, --cache-control none
TENSOR_GEMM = "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT"  # the candidate select_candidate picks there

REF = '''import torch


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(shape["M"], shape["K"], generator=g)
    w = torch.randn(shape["K"], shape["N"], generator=g) / shape["K"] ** 0.5
    return x.to(device=device, dtype=dtype), w.to(device=device, dtype=dtype)


def matmul(x, w):
    return (x @ w + x @ w) / 2
'''
TWICE = "def matmul(x, w):\n    return (x @ w + x @ w) / 2\n"
ONCE = "def matmul(x, w):\n    return x @ w\n"
FOUR = ("def matmul(x, w):\n    y = x @ w\n    for _ in range(3):\n        z = x @ w\n"
        "    return y if z is not None else None\n")

SPEC = '''baseline = "ref.py:matmul"
candidate = "proj/kern.py:matmul"
inputs = "ref.py:make_inputs"
shapes = [{M = 64, K = 256, N = 256}]
dtype = "float32"
device = "cpu"
time_budget_s = 2
cache = "warm"
seed = 7
'''

PROPOSALS = '''[[proposal]]
id = "int4-weights"
text = "Quantize the GEMM's weights to INT4"
kind = "quantization"
spec = "spec.toml"
[proposal.apply]
file = "proj/kern.py"
with = "variants/once.py"

[[proposal]]
id = "four-times"
text = "A deliberately slower variant (the work done four times)"
kernel = "regex:^nvjet"
spec = "spec.toml"
[proposal.apply]
file = "proj/kern.py"
with = "variants/four.py"

[[proposal]]
id = "once"
text = "Drop the duplicated matmul"
kernel = "regex:^nvjet"
spec = "spec.toml"
[proposal.apply]
file = "proj/kern.py"
with = "variants/once.py"
'''


def _project(root: Path) -> None:
    (root / "proj").mkdir()
    (root / "proj" / "kern.py").write_text(TWICE)
    (root / "proj" / "bench.py").write_text("import kern\n")
    (root / "ref.py").write_text(REF)
    (root / "variants").mkdir()
    (root / "variants" / "once.py").write_text(ONCE)
    (root / "variants" / "four.py").write_text(FOUR)
    (root / "spec.toml").write_text(SPEC)
    (root / "proposals.toml").write_text(PROPOSALS)


def _check_ledger(root: Path, experiment_id: int) -> None:
    shown = ledger_show(id=experiment_id, ledger=str(root / "l.db"), full_results=True)
    got = {v.candidate.proposal_id: v for v in shown.candidates}
    assert sorted(got) == ["four-times", "int4-weights", "once"] and len(shown.candidates) == 3
    assert got["int4-weights"].status == "abandoned" and got["int4-weights"].validations == []
    assert "compute-bound on the tensor pipe" in got["int4-weights"].decisions[0].why
    four, once = got["four-times"], got["once"]
    assert four.status == "reverted" and once.status == "accepted"
    for v in (four, once):
        assert len(v.validations) == 1 and len(v.decisions) == 1
        assert v.validations[0].result["correctness"]["passed"] is True  # both variants compute the same function
        assert v.candidate.kernel == TENSOR_GEMM
    assert four.validations[0].result["speedup"]["ci_high"] < 1.0
    assert once.validations[0].result["speedup"]["ci_low"] > 1.03
    assert (root / "proj" / "kern.py").read_text() == ONCE
    assert not list((root / "loop" / "backup").glob("*/*"))
    assert len(shown.profiles) == 1 and shown.profiles[0].report_path == str(FIXTURE)
    cls = shown.profiles[0].classification
    assert cls["cache_control"] == "none" and cls["candidate"] == TENSOR_GEMM
    assert any("weight quantization" in k for k in cls["does_not_fit"]) and cls["fits"]


def test_run_loop_selects_on_h200_fixture_and_validates_on_cpu(tmp_path, monkeypatch):
    _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    seen = []
    res = run_loop(["python", "proj/bench.py"], proposals="proposals.toml", profile=str(FIXTURE), ledger="l.db",
                   progress=lambda done, total, msg: seen.append((done, total, msg)))
    assert res.candidate == TENSOR_GEMM and "compute_bound on tensor" in res.diagnosis
    assert [(s.proposal_id, s.decision) for s in res.steps] == [("four-times", "reverted"), ("once", "accepted")]
    assert [s.proposal_id for s in res.skipped] == ["int4-weights"]
    assert res.stopped == "proposals_exhausted"
    assert seen and seen[-1][:2] == (2, 5) and any("validating once" in (m or "") for _, _, m in seen)
    _check_ledger(tmp_path, res.experiment_id)
    # started again: the accepted change edited proj/kern.py, which the spec names; nothing is re-tried
    again = run_loop(["python", "proj/bench.py"], proposals="proposals.toml", profile=str(FIXTURE), ledger="l.db")
    assert again.resumed and again.steps == [] and again.stopped == "proposals_exhausted"
    assert {s.proposal_id: s.reason.split(" (")[0] for s in again.skipped} == {
        "four-times": "already reverted", "once": "already accepted", "int4-weights": "already abandoned"}
    _check_ledger(tmp_path, res.experiment_id)
    md = ledger_export(ledger="l.db").text
    assert f"| `{TENSOR_GEMM}` | compute_bound | tensor | no |" in md
    assert "Profiled with `--cache-control none` (warm: residency verdicts valid)." in md
    assert "Changes that do not: weight quantization (fewer bytes per weight): the kernel is compute-bound" in md


CHILD = r"""
import json, sys
from mcp_server.loop.engine import run_loop
res = run_loop(["python", "proj/bench.py"], proposals="proposals.toml", profile=sys.argv[1], ledger="l.db")
print(json.dumps(res.model_dump(mode="json")))
"""


def _child(root: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(FIXTURE)], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])))


def _validating(root: Path) -> bool:
    """A candidate is recorded without a decision and its change is in place: a validation is running."""
    if not (root / "l.db").exists():
        return False
    con = sqlite3.connect(root / "l.db", timeout=10)
    try:
        n = con.execute("SELECT count(*) FROM candidates c WHERE NOT EXISTS "
                        "(SELECT 1 FROM decisions d WHERE d.candidate_id = c.id)").fetchone()[0]
    except sqlite3.OperationalError:
        n = 0
    con.close()
    return n > 0 and (root / "proj" / "kern.py").read_text() != TWICE


def test_kill_9_during_a_real_validation_resumes_without_duplicates(tmp_path):
    _project(tmp_path)
    p = _child(tmp_path)
    deadline = time.monotonic() + 120
    while not _validating(tmp_path):
        assert p.poll() is None, p.communicate()[1][-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)  # inside validate_candidate's harness
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    # killed with the change applied and its decision not written
    assert (tmp_path / "proj" / "kern.py").read_text() in (ONCE, FOUR)
    p = _child(tmp_path)
    out, err = p.communicate(timeout=240)
    assert p.returncode == 0, err[-2000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["resumed"] is True
    assert res["steps"][0]["resumed"] is True  # the interrupted candidate was finished first
    _check_ledger(tmp_path, res["experiment_id"])


def test_without_a_report_it_profiles_through_run_ncu(tmp_path, monkeypatch):
    """No ncu on this machine: run_ncu's typed error comes through, nothing is applied, nothing half-written."""
    import shutil

    if shutil.which("ncu") or os.path.exists("/usr/local/cuda/bin/ncu"):
        pytest.skip("ncu is installed here: the GPU-marked worked example covers profiling")
    from mcp_server.core.errors import ToolMissingError

    _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NCU", raising=False)
    with pytest.raises(ToolMissingError, match="ncu"):
        run_loop(["python", "proj/bench.py"], proposals="proposals.toml", ledger="l.db")
    shown = ledger_show(id=1, ledger="l.db")
    assert shown.profiles == [] and shown.candidates == []
    assert (tmp_path / "proj" / "kern.py").read_text() == TWICE
