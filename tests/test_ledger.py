"""The experiment ledger: records, keys, guards, schema, exports, git/environment capture."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_server.core.errors import FileMissingError, InputError, LedgerError
from mcp_server.ledger import store
from mcp_server.ledger.engine import ledger_export, ledger_list, ledger_show
from mcp_server.ledger.record import (
    record_candidate,
    record_decision,
    record_experiment,
    record_profile,
    record_validation,
)
from mcp_server.ledger.store import SCHEMA_VERSION, Ledger, resolve_path

# The shape of a validate_candidate answer (issue 10's JSON contract).
ACCEPTED = {
    "accepted": True, "verdict": "accepted", "reasons": ["speedup lower bound 2.05 clears 1.03"],
    "correctness": {"passed": True, "checks": [{"name": "values", "passed": True, "detail": ""}],
                    "max_abs_err": 0.0039, "max_rel_err": 0.0078},
    "speedup": {"median": 2.12, "ci_low": 2.05, "ci_high": 2.2, "confidence": 0.95}, "mode": "ab",
    "timing": {"baseline_us": {"median": 120.0}, "candidate_us": {"median": 56.6}, "samples": 40, "rounds": 20,
               "cache": "cold"},
    "device": {"name": "cpu"}, "settings": {}, "warnings": [],
}
SLOWER = dict(ACCEPTED, accepted=False, verdict="not_faster", reasons=["speedup upper bound 0.93 below 1.03"],
              speedup={"median": 0.91, "ci_low": 0.89, "ci_high": 0.93, "confidence": 0.95})


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.py").write_text("print('bench')\n")
    (tmp_path / "report.ncu-rep").write_bytes(b"not really a report, hashed only")
    (tmp_path / "int4.diff").write_text("--- a/k.py\n+++ b/k.py\n@@ -1 +1 @@\n-a\n+b\n")
    return str(tmp_path / "led" / "ledger.db")


def _one_of_each(db):
    e = record_experiment(ledger=db, target=["python", "bench.py", "--size", "big"])
    p = record_profile(ledger=db, experiment_id=e.id, report_path="report.ncu-rep",
                      classification={"kernels": [{"name": "bmm_kernel", "class": "memory_bound", "limiter": "dram",
                                                   "l2_resident": None, "confidence": 0.8, "share": 0.9}],
                                      "candidate": "bmm_kernel", "cache_control": "all"})
    c = record_candidate(ledger=db, experiment_id=e.id, profile_id=p.id, kernel="bmm_kernel",
                      diagnosis="memory_bound (dram)", proposal="INT4 weights: a quarter of the bytes",
                      proposal_id="int4", change_kind="patch", change_path="int4.diff")
    v = record_validation(ledger=db, candidate_id=c.id, result=ACCEPTED)
    d = record_decision(ledger=db, candidate_id=c.id, decision="accepted", by="agent",
                      why="validated 2.12x")
    return e, p, c, v, d


def test_records_link_and_list_counts(db):
    e, p, c, v, d = _one_of_each(db)
    assert (e.id, p.id, c.id, v.id, d.id) == (1, 1, 1, 1, 1)
    assert v.experiment_id == e.id and d.candidate_id == c.id
    c2 = record_candidate(ledger=db, experiment_id=e.id, proposal_id="fuse", proposal="fuse it")
    record_validation(ledger=db, candidate_id=c2.id, result=SLOWER)
    record_decision(ledger=db, candidate_id=c2.id, decision="reverted", by="agent", why="slower")
    record_candidate(ledger=db, experiment_id=e.id, proposal_id="pending-one", proposal="x")
    lst = ledger_list(ledger=db)
    assert lst.schema_version == SCHEMA_VERSION and lst.total == 1
    s = lst.experiments[0]
    assert (s.profiles, s.candidates, s.accepted, s.reverted, s.abandoned, s.pending) == (1, 3, 1, 1, 0, 1)
    shown = ledger_show(id=e.id, ledger=db)
    assert [v.status for v in shown.candidates] == ["accepted", "reverted", "pending"]
    # the profile's report is recorded by hash, the patch by hash and text
    assert len(shown.profiles[0].report_sha256) == 64
    cand = shown.candidates[0].candidate
    assert cand.change_kind == "patch" and cand.change_text.startswith("--- a/k.py")
    # summary by default, the full validate result on request
    assert "timing" not in shown.candidates[0].validations[0].result
    full = ledger_show(id=e.id, ledger=db, full_results=True)
    assert full.candidates[0].validations[0].result == ACCEPTED


def test_keys_make_retries_return_the_first_record(db):
    e = record_experiment(ledger=db, target=["python", "bench.py"], key="exp-a")
    again = record_experiment(ledger=db, target=["python", "bench.py"], key="exp-a")
    assert (again.id, again.created) == (e.id, False)
    c = record_candidate(ledger=db, experiment_id=e.id, proposal_id="p", key="cand-a")
    c2 = record_candidate(ledger=db, experiment_id=e.id, proposal_id="p", key="cand-a")
    assert c2.id == c.id and not c2.created
    with Ledger.open(db) as led:
        assert len(led.candidates(e.id)) == 1


def test_guards_name_the_problem(db):
    e = record_experiment(ledger=db, target=["python", "bench.py"])
    c = record_candidate(ledger=db, experiment_id=e.id, proposal_id="p")
    with pytest.raises(LedgerError, match="no accepted validation"):
        record_decision(ledger=db, candidate_id=c.id, decision="accepted", by="a", why="fast, I think")
    record_validation(ledger=db, candidate_id=c.id, result=SLOWER)
    with pytest.raises(LedgerError, match="no accepted validation"):
        record_decision(ledger=db, candidate_id=c.id, decision="accepted", by="a", why="one timing")
    with pytest.raises(LedgerError, match="validate_candidate result"):
        record_validation(ledger=db, candidate_id=c.id, result={"speedup": 2.0})
    with pytest.raises(LedgerError, match="candidate_id=99: no such record"):
        record_validation(ledger=db, candidate_id=99, result=ACCEPTED)
    with pytest.raises(InputError, match="^record_profile: invalid argument.*experiment_id: Field required$"):
        record_profile(ledger=db, report_path="report.ncu-rep")
    with pytest.raises(FileMissingError, match="missing.ncu-rep"):
        record_profile(ledger=db, experiment_id=e.id, report_path="missing.ncu-rep")
    with pytest.raises(LedgerError, match="a profile needs report_path or classification"):
        record_profile(ledger=db, experiment_id=e.id)
    with pytest.raises(InputError, match="^record_decision: invalid argument.*: by: Field required; why: Field required$"):
        record_decision(ledger=db, candidate_id=c.id, decision="reverted")
    with pytest.raises(InputError, match="by: String should have at least 1 character"):
        record_decision(ledger=db, candidate_id=c.id, decision="reverted", by="", why="slower")
    with pytest.raises(InputError, match="^record_experiment: invalid argument.*target: Field required$"):
        record_experiment(ledger=db)
    with pytest.raises(InputError, match="target: List should have at least 1 item"):
        record_experiment(ledger=db, target=[])
    with pytest.raises(InputError, match="record_candidate: unknown argument|Extra inputs are not permitted"):
        record_candidate(ledger=db, experiment_id=e.id, proposal_id="p", decision="accepted")  # not a candidate's


def test_validation_from_a_result_file(db, tmp_path):
    e = record_experiment(ledger=db, target=["python", "bench.py"])
    c = record_candidate(ledger=db, experiment_id=e.id, proposal_id="p")
    (tmp_path / "v.json").write_text(json.dumps(ACCEPTED))
    v = record_validation(ledger=db, candidate_id=c.id, result_path=str(tmp_path / "v.json"))
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(LedgerError, match="not JSON"):
        record_validation(ledger=db, candidate_id=c.id, result_path=str(tmp_path / "bad.json"))
    assert ledger_show(id=e.id, ledger=db, full_results=True).candidates[0].validations[0].id == v.id


def test_path_choice_default_env_and_argument(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KERNELSCOPE_LEDGER", raising=False)
    assert resolve_path(None) == store.DEFAULT_PATH
    record_experiment(target=["./run.sh"])
    assert (tmp_path / ".kernelscope" / "ledger.db").is_file()
    monkeypatch.setenv("KERNELSCOPE_LEDGER", str(tmp_path / "env.db"))
    record_experiment(target=["./run.sh"])
    assert ledger_list().ledger == str(tmp_path / "env.db") and ledger_list().total == 1
    assert ledger_list(ledger=str(tmp_path / ".kernelscope" / "ledger.db")).total == 1


def test_read_operations_never_create_a_ledger(tmp_path):
    missing = tmp_path / "none.db"
    with pytest.raises(LedgerError, match="no ledger here"):
        ledger_list(ledger=str(missing))
    with pytest.raises(LedgerError, match="no ledger here"):
        ledger_export(ledger=str(missing))
    assert not missing.exists()


def test_foreign_files_and_newer_schema_are_refused(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(LedgerError, match="not a kernelscope ledger"):
        Ledger.open(junk)
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(LedgerError, match="not a kernelscope ledger"):
        Ledger.open(other)
    newer = tmp_path / "newer.db"
    Ledger.open(newer).close()
    con = sqlite3.connect(newer)
    con.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    con.commit()
    con.close()
    with pytest.raises(LedgerError, match="newer kernelscope"):
        Ledger.open(newer)
    with pytest.raises(LedgerError, match="is a directory"):
        Ledger.open(tmp_path)


def test_file_is_wal_with_schema_version(db):
    _one_of_each(db)
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_markdown_export_is_the_experiment_log(db, tmp_path):
    _one_of_each(db)
    out = tmp_path / "log.md"
    res = ledger_export(ledger=db, format="md", output=str(out))
    assert res.output == str(out) and res.text is None and res.experiments == 1
    md = out.read_text()
    assert md.startswith("# Experiment log")
    assert "## Experiment 1: `python bench.py --size big`" in md
    assert "| 1 | `int4` | `bmm_kernel` | accepted | 2.120× [2.050, 2.200] (95%) | accepted | validated 2.12x |" in md
    assert "| `bmm_kernel` | memory_bound | dram | unknown | 0.80 | 90.0% |" in md
    assert "- decision: **accepted** by agent" in md
    assert "> INT4 weights: a quarter of the bytes" in md
    assert "```diff" in md  # the patch is shown


def test_json_export_holds_every_record(db):
    _one_of_each(db)
    res = ledger_export(ledger=db, format="json")
    doc = json.loads(res.text)
    assert doc["schema_version"] == SCHEMA_VERSION
    [exp] = doc["experiments"]
    assert exp["experiment"]["target"] == ["python", "bench.py", "--size", "big"]
    assert exp["candidates"][0]["validations"][0]["result"] == ACCEPTED
    assert exp["candidates"][0]["decisions"][0]["decision"] == "accepted"
    with pytest.raises(InputError, match="ledger_export: invalid argument.*format: Input should be 'json' or 'md'"):
        ledger_export(ledger=db, format="xml")


def _git(cwd, *args):
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True)


def test_experiment_records_git_state_of_the_targets_repo(tmp_path, monkeypatch):
    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "bench.py").write_text("print(1)\n")
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "add", "bench.py")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "base")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    monkeypatch.chdir(tmp_path)  # run from outside the repo: the script's repo is the one recorded
    db = str(tmp_path / "l.db")
    e1 = record_experiment(ledger=db, target=["python", "proj/bench.py"])
    (repo / "bench.py").write_text("print(2)\n")
    e2 = record_experiment(ledger=db, target=["python", "proj/bench.py"])
    x1 = ledger_show(id=e1.id, ledger=db).experiment
    x2 = ledger_show(id=e2.id, ledger=db).experiment
    assert x1.repo == str(repo.resolve()) and x1.git_rev == head and x1.git_dirty is False
    assert x2.git_rev == head and x2.git_dirty is True
    assert x1.target_key == x2.target_key
    env = x1.env
    assert env["python"] and env["kernelscope"]
    assert set(env) >= {"torch", "triton", "ncu", "gpu", "driver"}  # recorded, None where absent


def test_tokens_in_the_target_never_reach_the_ledger(db, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_abcdefghijklmnopqrstuvwxyz0123")
    token = "ghp_abcdefghijklmnopqrstuvwxyz0123"
    argv = ["python", "bench.py", "--token=hunter2hunter2", "--gh", token]
    e = record_experiment(ledger=db, target=argv)
    shown = ledger_show(id=e.id, ledger=db)
    assert shown.experiment.target == ["python", "bench.py", "--token=***", "--gh", "***"]
    raw = open(db, "rb").read() + (open(db + "-wal", "rb").read() if os.path.exists(db + "-wal") else b"")
    assert b"hunter2" not in raw and b"ghp_abcdef" not in raw


def test_a_migration_upgrades_an_old_file_in_place(tmp_path, monkeypatch):
    path = tmp_path / "old.db"
    e = record_experiment(ledger=str(path), target=["./bench"], cwd=str(tmp_path))
    monkeypatch.setattr(store, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setitem(store.MIGRATIONS, SCHEMA_VERSION + 1, ("ALTER TABLE experiments ADD COLUMN label TEXT",))
    with Ledger.open(path) as led:
        assert led.schema_version == SCHEMA_VERSION + 1
        assert led.get("experiments", e.id)["label"] is None
        assert led.get("experiments", e.id)["target"] == ["./bench"]  # the records survive the upgrade


MIGRATE_AT_ONCE = r"""
import sys
from mcp_server.ledger.store import Ledger
with Ledger.open(sys.argv[1]) as led:
    print(led.schema_version)
"""


def test_processes_opening_a_new_ledger_at_once_migrate_it_once(tmp_path):
    path = tmp_path / "new.db"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    procs = [subprocess.Popen([sys.executable, "-c", MIGRATE_AT_ONCE, str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [e for _, e in outs]
    assert [o.strip() for o, _ in outs] == [str(SCHEMA_VERSION)] * 4
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0] == 6
    con.close()


def test_every_tool_schema_is_one_a_claude_client_accepts():
    """MCP input schemas are objects at the top, and Claude's API refuses a top-level oneOf/anyOf/allOf (a union on
    `kind` would have to sit under a property): the ledger has one flat tool per kind of record, each requiring
    exactly what that record needs (docs/ledger.md, "One tool per kind of record")."""
    from mcp_server.faces.registry import operations
    from mcp_server.faces.server import tool_input_schema

    schemas = {op.tool: tool_input_schema(op) for op in operations()}
    assert [t for t, s in schemas.items() if s.get("type") != "object" or {"oneOf", "anyOf", "allOf"} & set(s)] == []
    assert {t: s.get("required") for t, s in schemas.items() if t.startswith("record_")} == {
        "record_experiment": ["target"], "record_profile": ["experiment_id"], "record_candidate": ["experiment_id"],
        "record_validation": ["candidate_id"], "record_decision": ["candidate_id", "decision", "by", "why"]}
    assert "kind" not in set().union(*(schemas[t]["properties"] for t in schemas if t.startswith("record_")))
