"""The loop survives ``kill -9`` at any moment: started again, it resumes with no duplicate or lost record.

A child process runs the loop (injected steps whose validation takes a while, so kills land
mid-validation with a change applied as well as between records); the parent kills it with
SIGKILL at seeded random moments and starts it again until a run completes. Then every
proposal has exactly one candidate, one decision and at most one validation, the decisions
are the ones an uninterrupted run makes, the accepted change is in place, the rejected ones
are not, and no backup is left.
"""
from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from test_loop import BASE, FAST, SLOW, _proposal

from mcp_server.ledger.engine import ledger_show

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

CHILD = r"""
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from test_loop import FakeSteps
from mcp_server.loop.engine import drive
fake = FakeSteps(__import__("pathlib").Path("proj/kernel.py"), sleep=float(sys.argv[3]))
res = drive(["python", "proj/bench.py"], steps=fake.steps(), iters=10, proposals="proposals.toml", ledger="l.db",
            max_rejects=5)
print(json.dumps(res.model_dump(mode="json")))
"""

PROPOSALS = [
    ("slow-a", "slow", 0.9, SLOW, "reverted"),
    ("fast", "fast", 2.0, FAST, "accepted"),
    ("slow-b", "slow", 0.95, SLOW, "reverted"),
    ("spec-only", None, 1.5, FAST, "accepted"),  # validated with the accepted change in place
    ("slow-c", "slow", 0.8, SLOW, "reverted"),
]


def _setup(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "kernel.py").write_text(BASE)
    (tmp_path / "proj" / "bench.py").write_text("import kernel\n")
    (tmp_path / "variants").mkdir()
    (tmp_path / "variants" / "fast.py").write_text(FAST)
    (tmp_path / "variants" / "slow.py").write_text(SLOW)
    (tmp_path / "proposals.toml").write_text(
        "".join(_proposal(pid, swap=swap, speedup=s, expect=expect) for pid, swap, s, expect, _ in PROPOSALS))


def _start(tmp_path: Path, sleep: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(TESTS), str(ROOT), str(sleep)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_loop_resumes_after_kill_9_with_no_duplicate_or_lost_records(tmp_path):
    _setup(tmp_path)
    rng = random.Random(int(os.environ.get("KS_KILL_SEED", "20261201")))
    kills = mid_candidate = 0
    final = None
    for attempt in range(40):
        p = _start(tmp_path, sleep=0.4)
        if attempt < 39:
            try:
                out, err = p.communicate(timeout=rng.uniform(0.3, 1.2))
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.communicate()
                kills += 1
                if (tmp_path / "l.db").exists():
                    con = sqlite3.connect(tmp_path / "l.db")
                    mid_candidate += con.execute(
                        "SELECT count(*) FROM candidates c WHERE NOT EXISTS "
                        "(SELECT 1 FROM decisions d WHERE d.candidate_id = c.id)").fetchone()[0]
                    con.close()
                continue
        else:
            out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        final = json.loads(out.strip().splitlines()[-1])
        break
    # the kills really interrupted the loop, several times with a candidate in flight
    assert final is not None and kills >= 3 and mid_candidate >= 2, (kills, mid_candidate)
    print(f"{kills} kills ({mid_candidate} with a candidate in flight) before a run completed")

    con = sqlite3.connect(tmp_path / "l.db")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    shown = ledger_show(id=final["experiment_id"], ledger=str(tmp_path / "l.db"), full_results=True)
    by_id = {v.candidate.proposal_id: v for v in shown.candidates}
    # one candidate per proposal, each decided once, validated at most once (no duplicates, nothing lost)
    assert sorted(by_id) == sorted(pid for pid, *_ in PROPOSALS)
    assert len(shown.candidates) == len(PROPOSALS)
    for pid, _swap, _s, _expect, decision in PROPOSALS:
        v = by_id[pid]
        assert len(v.decisions) == 1, pid
        assert len(v.validations) == 1, pid
        assert v.status == decision, (pid, v.status, v.decisions[0].why)
    # the change was in place whenever a validation ran (the fake's verdict depends on it)
    assert all("held" in v.validations[0].result["reasons"][0] for v in shown.candidates)
    assert (tmp_path / "proj" / "kernel.py").read_text() == FAST
    assert not list((tmp_path / "loop" / "backup").glob("*/*"))
    # and a further start finds nothing left to do
    p = _start(tmp_path, sleep=0.0)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-2000:]
    again = json.loads(out.strip().splitlines()[-1])
    assert again["steps"] == [] and again["stopped"] == "proposals_exhausted"
    assert (tmp_path / "proj" / "kernel.py").read_text() == FAST
