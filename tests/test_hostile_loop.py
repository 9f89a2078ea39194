"""run_loop as a hostile proposals file drives it (issue 21): every proposal that would write outside the
project, inside .git, or that cannot be applied or validated ends as an ``error`` with its reason, nothing
outside changes, the loop moves on, and a rerun skips them instead of wedging; on the CLI and over MCP
(KERNELSCOPE_ROOTS set; the server answers afterwards). Reproducers: tools/make_hostile_inputs.py
(``loop_escape``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_exec import cli, mcp, recipes, text

from mcp_server.core.atomic import confined_to
from mcp_server.core.errors import ConfinementError
from mcp_server.ledger.engine import ledger_show
from mcp_server.loop.changes import AppliedChange
from mcp_server.loop.engine import run_loop
from mcp_server.loop.proposals import load_proposals

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ncu" / "targets_none.raw.csv"
TARGET = ["python", "proj/bench.py"]

REASONS = {  # what each refusal says (the proposal id -> words of its why)
    "absolute": "is absolute",
    "dotdot": "goes up a folder",
    "symlink": "outside the target's repository",
    "gitdir": "resolves inside .git",
    "repo-root": "outside the target's repository",
    "patch-dotdot": "outside its folder ('..')",
    "patch-git": "inside .git",
    "stale-patch": "neither applies nor reverts cleanly",
    "not-a-patch": "is not a unified diff",
    "int8-spec": "dtype: Input should be",
}


@pytest.fixture
def case(tmp_path):
    return recipes.loop_escape(tmp_path)


def _untouched(case) -> None:
    assert case["victim"].read_text() == recipes.VICTIM
    assert case["kernel"].read_text() == recipes.LOOP_BASE
    assert "fsmonitor" not in (case["proj"] / ".git" / "config").read_text()
    assert not list((case["work"] / "loop" / "backup").glob("*/*"))


def _check_steps(steps: list[dict], mcp_face: bool) -> None:
    got = {s["proposal_id"]: s for s in steps}
    assert set(got) == set(recipes.LOOP_ESCAPES), sorted(got)
    for s in got.values():
        assert s["decision"] == "error" and s["verdict"] is None, s
        assert "\n" not in s["why"] and "Traceback" not in s["why"]
    for pid, words in REASONS.items():
        assert words in got[pid]["why"], (pid, got[pid]["why"])
    if mcp_face:
        assert "outside the directories this server may use" in got["with-outside"]["why"]
    else:  # the CLI reads the file its user names; the spec is then refused and the swap restored
        assert "dtype: Input should be" in got["with-outside"]["why"]


def test_engine_refuses_every_escape_and_moves_on(case, monkeypatch):
    monkeypatch.chdir(case["work"])
    res = run_loop(TARGET, proposals="proposals.toml", profile=str(FIXTURE), ledger="l.db")
    _check_steps([s.model_dump() for s in res.steps], mcp_face=False)
    assert res.errors == len(recipes.LOOP_ESCAPES) and res.accepted == res.rejected == 0
    assert res.stopped == "proposals_exhausted"
    _untouched(case)
    shown = ledger_show(id=res.experiment_id, ledger="l.db")
    assert {v.status for v in shown.candidates} == {"error"} and shown.summary.error == len(recipes.LOOP_ESCAPES)
    # started again: nothing is stuck pending, nothing is tried twice
    again = run_loop(TARGET, proposals="proposals.toml", profile=str(FIXTURE), ledger="l.db")
    assert again.steps == [] and len(again.skipped) == len(recipes.LOOP_ESCAPES)
    assert all("already recorded as an error" in s.reason for s in again.skipped)
    _untouched(case)


def test_cli_face(case):
    code, out, err = cli(["loop", "--proposals", "proposals.toml", "--profile", str(FIXTURE), "--ledger", "l.db",
                          "--json", "--", *TARGET], case["work"])
    assert code == 3, err[-3000:]  # completed, nothing accepted (vocab.ExitCode.not_accepted)
    assert "Traceback" not in err
    _check_steps(json.loads(out)["steps"], mcp_face=False)
    _untouched(case)
    code, out, err = cli(["loop", "--proposals", "proposals.toml", "--profile", str(FIXTURE), "--ledger", "l.db",
                          "--", *TARGET], case["work"])
    assert code == 3 and "Traceback" not in err, err[-3000:]
    assert "already recorded as an error" in out and "0 accepted" in out


def test_mcp_face_keeps_every_write_inside_the_roots(case):
    args = {"target": TARGET, "proposals": str(case["proposals"]), "profile": str(FIXTURE),
            "ledger": str(case["work"] / "l.db")}
    first, again = mcp([("run_loop", args), ("run_loop", args)], roots=case["work"])
    assert not first.is_error, text(first)
    _check_steps(first.structured_content["steps"], mcp_face=True)
    assert not again.is_error and again.structured_content["steps"] == []
    _untouched(case)


def test_a_ledger_pointing_outside_the_roots_is_refused_before_writing(tmp_path):
    """A pending candidate read back from a ledger (a file anyone may have edited) is checked again before
    every write: over MCP nothing is written outside the roots, and never inside .git."""
    victim = tmp_path / "outside" / "bashrc"
    victim.parent.mkdir()
    victim.write_text(recipes.VICTIM)
    src = tmp_path / "work" / "evil.py"
    src.parent.mkdir()
    src.write_text("echo pwned\n")
    ch = AppliedChange("file", victim, src, base_sha256=None, change_sha256=None, backup=tmp_path / "work" / "b")
    with confined_to([tmp_path / "work"]), pytest.raises(ConfinementError, match="outside the directories"):
        ch.apply()
    git = tmp_path / "work" / ".git"
    git.mkdir()
    (git / "config").write_text("[core]\n")
    ch = AppliedChange("file", git / "config", src, base_sha256=None, change_sha256=None, backup=None)
    with pytest.raises(ConfinementError, match="inside .git"):
        ch.apply()
    assert victim.read_text() == recipes.VICTIM and (git / "config").read_text() == "[core]\n"


def test_load_proposals_alone_keeps_patches_in_their_repo(case):
    props = {p.id: p for p in load_proposals(case["proposals"])}
    assert props["patch-dotdot"].change.problem and props["stale-patch"].change.problem is None
    assert props["absolute"].change.source is None  # a refused change reads nothing


def test_a_pending_patch_that_no_longer_applies_is_an_error_not_a_wedge(case, monkeypatch):
    """A run stopped mid-validation leaves its patch candidate pending; the tree then moves on so the patch
    neither applies nor reverts. The next run records an error with the reason and goes on; the one after
    that is clean (before: every run failed with 'the tree was edited meanwhile')."""
    from mcp_server.loop.engine import drive
    from mcp_server.loop.steps import LoopSteps, Selection

    monkeypatch.chdir(case["work"])
    good = case["work"] / "patches" / "good.patch"
    good.write_text("diff --git a/kernel.py b/kernel.py\n--- a/kernel.py\n+++ b/kernel.py\n@@ -1 +1 @@\n"
                    f"-{recipes.LOOP_BASE}+VERSION = 'fast'\n")
    case["proposals"].write_text('[[proposal]]\nid = "good"\n[proposal.spec]\nx = 1\n[proposal.apply]\n'
                                 'patch = "patches/good.patch"\nrepo = "proj"\n')

    def interrupted(spec):
        raise KeyboardInterrupt

    sel = Selection(kernel="k", classification={"kernels": []})
    steps = LoopSteps(profile=lambda t, r, c: r, select=lambda r, c: sel, validate=interrupted)
    with pytest.raises(KeyboardInterrupt):
        drive(TARGET, steps=steps, proposals="proposals.toml", profile=str(FIXTURE), ledger="l.db")
    assert case["kernel"].read_text() == recipes.LOOP_BASE  # restored before the interrupt went on
    case["kernel"].write_text("VERSION = 'moved on'\n")  # the patch neither applies nor reverts now
    res = drive(TARGET, steps=steps, proposals="proposals.toml", profile=str(FIXTURE), ledger="l.db")
    [step] = res.steps
    assert step.resumed and step.decision == "error" and "neither applies nor reverts" in step.why
    again = drive(TARGET, steps=steps, proposals="proposals.toml", profile=str(FIXTURE), ledger="l.db")
    assert again.steps == [] and "already recorded as an error" in again.skipped[0].reason
    assert case["kernel"].read_text() == "VERSION = 'moved on'\n"
