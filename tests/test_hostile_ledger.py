"""The ledger as a hostile caller drives it (issue 21), on the CLI and over MCP (KERNELSCOPE_ROOTS set, the
server answering afterwards): no program a repository configures runs, a candidate's patch is a patch inside
the roots and never echoed, read calls change no file, tokens reach neither the file nor an export, and deep
documents are typed errors naming the bound. Reproducers: tools/make_hostile_inputs.py (``fsmonitor_repo``,
``ledger_inputs``, ``deep_documents``)."""
from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from hostile_exec import cli, mcp, recipes, text

from mcp_server.core.errors import ConfinementError, LedgerError, LimitError
from mcp_server.ledger.engine import ledger_export, ledger_list, ledger_show
from mcp_server.ledger.record import (
    record_candidate,
    record_decision,
    record_experiment,
    record_profile,
    record_validation,
)


def _no_markers(root: Path) -> None:
    ran = [m for m in recipes.MARKERS if (root / m).exists()]
    assert not ran, f"the repository's programs ran: {ran}"


def _snapshot(d: Path) -> dict[str, tuple[int, int, bytes]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(d.iterdir())
            if p.is_file()}


# ----------------------------------------------------------------------------- repository programs


def test_a_repository_s_programs_never_run_engine(tmp_path):
    repo = recipes.fsmonitor_repo(tmp_path)
    res = record_experiment(ledger=str(tmp_path / "l.db"), target=["python", "bench.py"],
                        cwd=str(repo))
    _no_markers(tmp_path)
    exp = ledger_show(id=res.id, ledger=str(tmp_path / "l.db")).experiment
    assert exp.repo == str(repo.resolve()) and exp.git_rev and len(exp.git_rev) == 40
    assert exp.git_dirty is True  # bench.py changed: read without the clean filter


def test_a_repository_s_programs_never_run_cli_and_mcp(tmp_path):
    repo = recipes.fsmonitor_repo(tmp_path)
    code, out, err = cli(["ledger", "record", "experiment", "--cwd", str(repo), "--ledger",
                          str(tmp_path / "l.db"), "--json", "--", "python", str(repo / "bench.py")], tmp_path)
    assert code == 0 and "Traceback" not in err, err
    _no_markers(tmp_path)
    [res] = mcp([("record_experiment", {"ledger": str(tmp_path / "m.db"),
                                    "target": ["python", str(repo / "bench.py")], "cwd": str(repo)})],
                roots=tmp_path)
    assert not res.is_error, text(res)
    _no_markers(tmp_path)


def test_the_loop_applies_patches_without_the_repository_s_programs(tmp_path):
    from mcp_server.loop.changes import AppliedChange

    repo = recipes.fsmonitor_repo(tmp_path)
    patch = tmp_path / "p.patch"
    patch.write_text("diff --git a/bench.py b/bench.py\n--- a/bench.py\n+++ b/bench.py\n@@ -1 +1 @@\n"
                     "-print(2)\n+print(3)\n")
    ch = AppliedChange("patch", repo, patch, base_sha256=None, change_sha256=None, backup=None)
    ch.apply()
    assert (repo / "bench.py").read_text() == "print(3)\n"
    ch.revert()
    assert (repo / "bench.py").read_text() == "print(2)\n"
    _no_markers(tmp_path)


def test_a_local_reference_search_runs_none_of_the_repository_s_programs(tmp_path, monkeypatch):
    """find_references on a local checkout the caller points at: git log -S would run a textconv driver, a
    refresh an fsmonitor hook; neither runs."""
    from mcp_server.refs import find_references

    repo = recipes.fsmonitor_repo(tmp_path)
    reg = tmp_path / "reg.md"
    reg.write_text("# registry\n\n| key | kind | repo | env | package | jql_project | enabled |\n"
                   "|---|---|---|---|---|---|---|\n| hostile | local-git | x/hostile | KS_HOSTILE_ROOT | | | yes |\n")
    monkeypatch.setenv("KS_HOSTILE_ROOT", str(repo))
    res = find_references("print", registry=str(reg), timeout_s=20)
    assert res.sections[0].method == "local:git" and any(i.kind == "commit" for i in res.sections[0].items)
    _no_markers(tmp_path)


# ----------------------------------------------------------------------------- candidate patches


def _experiment(db: Path) -> int:
    return record_experiment(ledger=str(db), target=["./bench"], cwd=str(db.parent)).id


def test_a_patch_must_be_a_patch_and_is_never_echoed(tmp_path):
    files = recipes.ledger_inputs(tmp_path / "in")
    db = tmp_path / "l.db"
    e = _experiment(db)
    with pytest.raises(LedgerError) as ei:
        record_candidate(ledger=str(db), experiment_id=e, proposal="x", change_kind="patch",
                      change_path=str(files["passwd"]))
    assert "not a patch" in str(ei.value) and recipes.SECRET_LINE not in str(ei.value)
    ok = record_candidate(ledger=str(db), experiment_id=e, proposal="x", change_kind="patch",
                       change_path=str(files["patch"]))
    shown = ledger_show(id=e, ledger=str(db), full_results=True)
    assert shown.candidates[0].candidate.id == ok.id and "+VERSION = 'fast'" in shown.candidates[0].candidate.change_text
    for fifo_case in ("fifo",):
        fifo = tmp_path / fifo_case
        os.mkfifo(fifo)
        with pytest.raises(LedgerError, match="not a regular file"):
            record_candidate(ledger=str(db), experiment_id=e, proposal="x", change_kind="file",
                          change_path=str(fifo))
    assert recipes.SECRET_LINE.encode() not in db.read_bytes()


def test_an_older_ledger_holding_a_file_never_shows_it(tmp_path):
    db = tmp_path / "l.db"
    e = _experiment(db)
    files = recipes.ledger_inputs(tmp_path / "in")
    record_candidate(ledger=str(db), experiment_id=e, proposal="x", change_kind="patch",
                  change_path=str(files["patch"]))
    con = sqlite3.connect(db)  # what an earlier kernelscope stored for change_path=/etc/passwd
    con.execute("UPDATE candidates SET change_text = ?", (recipes.SECRET_LINE,))
    con.commit()
    con.close()
    assert recipes.SECRET_LINE not in ledger_show(id=e, ledger=str(db), full_results=True).model_dump_json()
    for fmt in ("md", "json"):
        assert recipes.SECRET_LINE not in (ledger_export(ledger=str(db), format=fmt).text or "")


def test_patch_faces(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    files = recipes.ledger_inputs(tmp_path / "outside")  # outside the server's roots
    inside = recipes.ledger_inputs(work / "in")
    db = work / "l.db"
    e = _experiment(db)
    code, out, err = cli(["ledger", "record", "candidate", "--experiment-id", str(e), "--proposal", "x",
                          "--change-kind", "patch", "--change-path", str(files["passwd"]), "--ledger", str(db)], work)
    assert code == 2 and "not a patch" in err and recipes.SECRET_LINE not in out + err and "Traceback" not in err
    base = {"experiment_id": e, "proposal": "x", "change_kind": "patch", "ledger": str(db)}
    outside, notpatch, ok = mcp([("record_candidate", {**base, "change_path": str(files["patch"])}),
                                 ("record_candidate", {**base, "change_path": str(inside["passwd"])}),
                                 ("record_candidate", {**base, "change_path": str(inside["patch"])})], roots=work)
    assert outside.is_error and "outside the directories this server may use" in text(outside)
    assert notpatch.is_error and "not a patch" in text(notpatch) and recipes.SECRET_LINE not in text(notpatch)
    assert not ok.is_error, text(ok)
    assert recipes.SECRET_LINE.encode() not in db.read_bytes()
    with pytest.raises(ConfinementError):
        from mcp_server.core.atomic import confined_to

        with confined_to([work]):
            record_candidate(ledger=str(db), experiment_id=e, proposal="x", change_kind="file",
                          change_path=str(files["patch"]))


# ----------------------------------------------------------------------------- read calls write nothing


READS = [("list_experiments", {}), ("show_experiment", {"id": 1}), ("export_ledger", {})]


@pytest.mark.parametrize("which", ["foreign", "empty"])
def test_read_calls_change_no_file_engine(tmp_path, which):
    files = recipes.ledger_inputs(tmp_path)
    before = _snapshot(tmp_path)
    for fn, args in ((ledger_list, {}), (ledger_show, {"id": 1}), (ledger_export, {})):
        with pytest.raises(LedgerError) as ei:
            fn(ledger=str(files[which]), **args)
        assert "not a kernelscope ledger" in str(ei.value) and "\n" not in str(ei.value)
    assert _snapshot(tmp_path) == before  # no WAL switch, no schema, no -wal/-shm files
    if which == "foreign":  # a write call refuses it as it is too
        with pytest.raises(LedgerError, match="not a kernelscope ledger"):
            record_experiment(ledger=str(files[which]), target=["./x"], cwd=str(tmp_path))
        assert _snapshot(tmp_path) == before


def test_over_mcp_the_default_ledger_lies_inside_the_roots(tmp_path, monkeypatch):
    from mcp_server.core.atomic import confined_to

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KERNELSCOPE_LEDGER", raising=False)
    (tmp_path / "work").mkdir()
    with confined_to([tmp_path / "work"]), pytest.raises(ConfinementError, match="the ledger"):
        record_experiment(target=["./x"], cwd=str(tmp_path))
    assert not (tmp_path / ".kernelscope").exists()


def test_read_calls_change_no_file_faces(tmp_path):
    files = recipes.ledger_inputs(tmp_path)
    before = _snapshot(tmp_path)
    for which in ("foreign", "empty"):
        for verb, extra in (("list", []), ("show", ["1"]), ("export", [])):
            code, out, err = cli(["ledger", verb, *extra, "--ledger", str(files[which])], tmp_path)
            assert code == 2 and "not a kernelscope ledger" in err and "Traceback" not in err, err
    res = mcp([(tool, {**args, "ledger": str(files[w])}) for w in ("foreign", "empty") for tool, args in READS],
              roots=tmp_path)
    assert all(r.is_error and "not a kernelscope ledger" in text(r) for r in res), [text(r) for r in res]
    assert _snapshot(tmp_path) == before


def test_reading_a_real_ledger_leaves_it_as_it_is(tmp_path):
    db = tmp_path / "l.db"
    _experiment(db)
    before = _snapshot(tmp_path)
    ledger_list(ledger=str(db))
    ledger_show(id=1, ledger=str(db))
    ledger_export(ledger=str(db), format="json")
    assert _snapshot(tmp_path) == before


# ----------------------------------------------------------------------------- tokens


def _ledger_with_token(db: Path, token_file: Path) -> int:
    e = _experiment(db)
    c = record_candidate(ledger=str(db), experiment_id=e, proposal="x", proposal_id="p").id
    record_validation(ledger=str(db), candidate_id=c, result_path=str(token_file))
    record_decision(ledger=str(db), candidate_id=c, decision="reverted", by="t",
                  why=f"failed with token {recipes.TOKEN}")
    return e


def test_tokens_never_reach_the_file_or_an_export(tmp_path):
    files = recipes.ledger_inputs(tmp_path / "in")
    db = tmp_path / "l.db"
    _ledger_with_token(db, files["token"])
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("l.db*"))
    assert recipes.TOKEN.encode() not in raw
    con = sqlite3.connect(db)  # a ledger an older kernelscope wrote, token and all
    con.execute("UPDATE decisions SET why = ?", (f"failed with token {recipes.TOKEN}",))
    con.commit()
    con.close()
    for fmt in ("md", "json"):
        assert recipes.TOKEN not in (ledger_export(ledger=str(db), format=fmt).text or "")
        out = tmp_path / f"x.{fmt}"
        ledger_export(ledger=str(db), format=fmt, output=str(out))
        assert recipes.TOKEN not in out.read_text()
    code, out_text, err = cli(["ledger", "export", "--ledger", str(db)], tmp_path)
    assert code == 0 and recipes.TOKEN not in out_text + err
    code, _, err = cli(["ledger", "export", "--ledger", str(db), "--format", "json", "--output",
                        str(tmp_path / "cli.json")], tmp_path)
    assert code == 0 and recipes.TOKEN not in (tmp_path / "cli.json").read_text()
    ret, written = mcp([("export_ledger", {"ledger": str(db)}),
                        ("export_ledger", {"ledger": str(db), "format": "json", "output": str(tmp_path / "m.json")})],
                       roots=tmp_path)
    assert not ret.is_error and recipes.TOKEN not in text(ret) + json.dumps(ret.structured_content)
    assert not written.is_error and recipes.TOKEN not in (tmp_path / "m.json").read_text()


def test_the_loop_text_view_is_redacted(tmp_path):
    case = recipes.loop_escape(tmp_path)
    named = case["work"] / "patches" / f"{recipes.TOKEN}.patch"
    named.write_text("no diff here\n")
    case["proposals"].write_text('[[proposal]]\nid = "tok"\n[proposal.spec]\nx = 1\n[proposal.apply]\n'
                                 f'patch = "patches/{named.name}"\nrepo = "proj"\n')
    fixture = Path(__file__).resolve().parent / "fixtures" / "ncu" / "targets_none.raw.csv"
    code, out, err = cli(["loop", "--proposals", "proposals.toml", "--profile", str(fixture), "--ledger", "l.db",
                          "--", "python", "proj/bench.py"], case["work"])
    assert code == 3 and "not a unified diff" in out, out + err
    assert recipes.TOKEN not in out + err


# ----------------------------------------------------------------------------- deep documents


def test_deep_results_are_typed_errors_naming_the_bound(tmp_path):
    files = recipes.ledger_inputs(tmp_path / "in")
    db = tmp_path / "l.db"
    e = _experiment(db)
    c = record_candidate(ledger=str(db), experiment_id=e, proposal="x").id
    deep = json.loads(files["deep"].read_text())
    for kw in ({"result_path": str(files["deep"])}, {"result": deep}):
        with pytest.raises(LimitError, match="KERNELSCOPE_MAX_NESTING"):
            record_validation(ledger=str(db), candidate_id=c, **kw)
    with pytest.raises(LimitError, match="KERNELSCOPE_MAX_NESTING"):
        record_profile(ledger=str(db), experiment_id=e, classification=deep)
    # one an earlier kernelscope stored: show and export answer with the bound, not a RecursionError
    con = sqlite3.connect(db)
    con.execute("INSERT INTO validations (candidate_id, created_at, verdict, accepted, result) VALUES (?,?,?,?,?)",
                (c, "2026-01-01T00:00:00Z", "error", 0, files["deep"].read_text()))
    con.commit()
    con.close()
    for call in (lambda: ledger_show(id=e, ledger=str(db), full_results=True),
                 lambda: ledger_export(ledger=str(db), format="json")):
        with pytest.raises(LimitError, match="KERNELSCOPE_MAX_NESTING"):
            call()
    code, _, err = cli(["ledger", "record", "validation", "--candidate-id", str(c), "--result-path",
                        str(files["deep"]), "--ledger", str(db)], tmp_path)
    assert code == 2 and "KERNELSCOPE_MAX_NESTING" in err and "Traceback" not in err
    code, _, err = cli(["ledger", "show", str(e), "--full-results", "--ledger", str(db)], tmp_path)
    assert code == 2 and "KERNELSCOPE_MAX_NESTING" in err and "Traceback" not in err
    code, _, err = cli(["ledger", "record", "validation", "--candidate-id", str(c), "--result",
                        "[" * 5000 + "]" * 5000, "--ledger", str(db)], tmp_path)
    assert code == 2 and "KERNELSCOPE_MAX_NESTING" in err and "Traceback" not in err
    rec, show, export = mcp([("record_validation", {"candidate_id": c, "ledger": str(db),
                                                "result_path": str(files["deep"])}),
                             ("show_experiment", {"id": e, "ledger": str(db), "full_results": True}),
                             ("export_ledger", {"ledger": str(db)})], roots=tmp_path)
    for r in (rec, show, export):
        assert r.is_error and "KERNELSCOPE_MAX_NESTING" in text(r), text(r)


def test_deep_proposals_and_specs_are_typed_errors(tmp_path):
    docs = recipes.deep_documents(tmp_path)
    from mcp_server.loop.proposals import load_proposals
    from mcp_server.validate.engine import validate_candidate

    with pytest.raises(LimitError, match="KERNELSCOPE_MAX_NESTING"):
        load_proposals(docs["proposals"])
    with pytest.raises(LimitError, match="KERNELSCOPE_MAX_NESTING"):
        validate_candidate(str(docs["spec"]))
    fixture = Path(__file__).resolve().parent / "fixtures" / "ncu" / "targets_none.raw.csv"
    for args in (["loop", "--proposals", str(docs["proposals"]), "--profile", str(fixture), "--ledger", "l.db",
                  "--", "python", "b.py"], ["validate", str(docs["spec"])]):
        code, _, err = cli(args, tmp_path)
        assert code == 2 and "KERNELSCOPE_MAX_NESTING" in err and "Traceback" not in err, err
    loop, val = mcp([("run_loop", {"target": ["python", "b.py"], "proposals": str(docs["proposals"]),
                                   "profile": str(fixture), "ledger": str(tmp_path / "l.db")}),
                     ("validate_candidate", {"spec_path": str(docs["spec"])})], roots=tmp_path)
    for r in (loop, val):
        assert r.is_error and "KERNELSCOPE_MAX_NESTING" in text(r), text(r)
