"""Over MCP, outputs are written only inside the allowed roots and never replace a file of another kind."""
from __future__ import annotations

import os
import typing
from pathlib import Path

import anyio
import pytest
from conftest import TRACES
from mcp import Client

from mcp_server.faces.confine import inside, roots_from_uris
from mcp_server.faces.server import build_server

TRACE = str(TRACES / "llama_prefill_sdpa.json.gz")


@pytest.fixture()
def root(tmp_path, monkeypatch):
    r = tmp_path / "work"
    r.mkdir()
    monkeypatch.setenv("KERNELSCOPE_ROOTS", str(r))
    monkeypatch.setenv("KERNELSCOPE_ISOLATION", "0")  # the checks run before dispatch either way
    return r


def _call(tool, args):
    async def go():
        async with Client(build_server()) as c:
            return await c.call_tool(tool, args)

    return anyio.run(go)


def test_output_outside_the_roots_is_refused_and_not_created(root, tmp_path):
    outside = tmp_path / "elsewhere" / "x.xlsx"
    res = _call("analyze_trace", {"trace_path": TRACE, "output_xlsx": str(outside)})
    assert res.is_error and "outside the directories this server may write to" in res.content[0].text
    assert str(root) in res.content[0].text
    assert not outside.exists() and not outside.parent.exists()


def test_dotdot_and_symlinks_do_not_escape(root, tmp_path):
    (tmp_path / "target").mkdir()
    os.symlink(tmp_path / "target", root / "link")
    for path in (root / ".." / "escape.xlsx", root / "link" / "x.xlsx"):
        res = _call("analyze_trace", {"trace_path": TRACE, "output_xlsx": str(path)})
        assert res.is_error and "outside" in res.content[0].text
    assert not list((tmp_path / "target").iterdir())


def test_a_file_of_another_kind_is_not_replaced_without_overwrite(root):
    victim = root / "notes.xlsx"
    victim.write_text("my notes, not a workbook\n")
    res = _call("diff_modules", {"a": TRACE, "b": TRACE, "output_xlsx": str(victim)})
    text = res.content[0].text
    assert res.is_error and "exists and is not xlsx output" in text and "overwrite=true" in text
    assert victim.read_text() == "my notes, not a workbook\n"
    ok = _call("diff_modules", {"a": TRACE, "b": TRACE, "output_xlsx": str(victim), "overwrite": True})
    assert not ok.is_error and victim.read_bytes()[:2] == b"PK"


def test_over_mcp_replacing_any_existing_output_needs_overwrite(root):
    """An agent's call that does not say overwrite=true never destroys a file, even a report of the same kind."""
    out = root / "r.xlsx"
    res = _call("analyze_trace", {"trace_path": TRACE, "output_xlsx": str(out)})
    assert not res.is_error, res.content[0].text
    first = out.read_bytes()
    again = _call("analyze_trace", {"trace_path": TRACE, "output_xlsx": str(out)})
    assert again.is_error and "r.xlsx exists" in again.content[0].text and "overwrite=true" in again.content[0].text
    assert out.read_bytes() == first
    ok = _call("analyze_trace", {"trace_path": TRACE, "output_xlsx": str(out), "overwrite": True})
    assert not ok.is_error, ok.content[0].text
    assert out.read_bytes()[:2] == b"PK"


def test_an_output_name_of_another_kind_is_refused_on_both_faces(root, capsys):
    from mcp_server.faces.cli import main

    for name in ("report.csv", "README.md", "report"):
        res = _call("analyze_trace", {"trace_path": TRACE, "output_xlsx": str(root / name), "overwrite": True})
        assert res.is_error and "xlsx" in res.content[0].text, res.content[0].text
        assert main(["analyze", TRACE, "-o", str(root / name), "--overwrite"]) == 2
        assert "but what this writes there is xlsx" in capsys.readouterr().err
    assert not list(root.iterdir())
    res = _call("analyze_timeline", {"buffer_path": "x.bin", "png_path": str(root / "gantt.jpg")})
    assert res.is_error and "name it with .png" in res.content[0].text


def test_the_cli_never_replaces_a_file_of_another_kind_without_overwrite(tmp_path, capsys):
    """`kernelscope analyze t.json.gz -o README.md` must not replace the README: the kind is checked on the CLI
    too (a README renamed to .xlsx, a hand-written Markdown file under a Markdown output)."""
    from mcp_server.faces.cli import main

    readme = tmp_path / "README.md"
    readme.write_text("# my project\n")
    fake = tmp_path / "notes.xlsx"
    fake.write_text("# my project\n")
    assert main(["analyze", TRACE, "-o", str(readme)]) == 2
    assert main(["analyze", TRACE, "-o", str(fake)]) == 2
    assert "exists and is not xlsx output" in capsys.readouterr().err
    assert readme.read_text() == fake.read_text() == "# my project\n"
    assert main(["analyze", TRACE, "-o", str(fake), "--overwrite"]) == 0
    assert fake.read_bytes()[:2] == b"PK"
    assert main(["analyze", TRACE, "-o", str(fake)]) == 0  # the CLI replaces its own kind without asking
    ledger = str(tmp_path / "l.db")
    import shutil

    shutil.copyfile(Path(__file__).parents[1] / "mcp_server" / "demo_data" / "mla_example_ledger.db", ledger)
    assert main(["ledger", "export", "--ledger", ledger, "--output", str(readme)]) == 2
    assert "exists and is not md output" in capsys.readouterr().err and readme.read_text() == "# my project\n"
    assert main(["ledger", "export", "--ledger", ledger, "--format", "json", "--output", str(tmp_path / "log.md")]) == 2
    assert "name it with .json" in capsys.readouterr().err
    log = tmp_path / "log.md"
    for _ in range(2):  # its own export is replaced
        assert main(["ledger", "export", "--ledger", ledger, "--output", str(log)]) == 0
    assert log.read_text().startswith("# Experiment log")


def test_annotations_tell_the_truth_for_the_default_call(root):
    """A tool that only writes the files a call names is not destructive: over MCP, every output it
    declares (and each file it writes beside one) is replaced only with overwrite=true, checked here for
    every declared output. Tools that run the caller's command are destructive; reading tools read-only."""
    from mcp_server.core.atomic import APPENDED_KINDS, KIND_SUFFIXES
    from mcp_server.core.errors import InputError
    from mcp_server.core.operation import EXECUTES_CODE
    from mcp_server.faces.confine import ConfinementError, check_outputs
    from mcp_server.faces.registry import operations
    async def go():
        async with Client(build_server()) as c:
            return {t.name: t.annotations for t in (await c.list_tools()).tools}

    ann = anyio.run(go)
    for op in operations():
        a = ann[op.tool]
        assert a.destructive_hint is (op.hints == EXECUTES_CODE), op.tool
        assert a.read_only_hint is (not op.outputs and op.hints.read_only), op.tool
        for field, kind in op.outputs.items():
            kind = kind.removesuffix("-in-place")
            kind = "md" if kind == "md-or-json" else kind
            if kind in APPENDED_KINDS:  # a ledger is appended to, a directory filled: nothing replaced
                continue
            existing = root / f"{op.tool}.{field}{KIND_SUFFIXES.get(kind, ('.xlsx',))[0]}"
            existing.write_bytes(b"an earlier output\n")
            is_list = typing.get_origin(op.request.model_fields[field].annotation) is list
            value = [str(existing)] if is_list else str(existing)
            with pytest.raises(InputError, match="overwrite=true"):
                check_outputs(op, op.request.model_construct(**{field: value}), [root])
            check_outputs(op, op.request.model_construct(**{field: value, "overwrite": True}), [root])
    for name in ("analyze_trace", "diff_modules", "recategorize", "analyze_timeline", "select_candidate",
                 "export_ledger", "record_experiment", "record_decision"):
        assert ann[name].destructive_hint is False and ann[name].read_only_hint is False, name
    for name in ("run_ncu", "validate_candidate", "run_loop"):
        assert ann[name].destructive_hint is True, name
    assert ann["budget"].destructive_hint is False and ann["budget"].read_only_hint is True
    assert issubclass(ConfinementError, InputError)


def test_rank_reports_of_an_earlier_run_are_not_replaced_without_overwrite(root):
    sets = Path(__file__).parent / "fixtures" / "tracesets" / "straggler"
    out = root / "set[1].xlsx"
    (root / "set[1].rank2.xlsx").write_bytes(b"an earlier rank report")
    res = _call("analyze_trace_set", {"paths": [str(sets)], "output_xlsx": str(out), "executor": "inline"})
    assert res.is_error and "would replace set[1].rank2.xlsx beside it" in res.content[0].text
    assert "overwrite=true" in res.content[0].text and not out.exists()
    assert (root / "set[1].rank2.xlsx").read_bytes() == b"an earlier rank report"


def test_recategorize_in_place_is_confined(root, tmp_path):
    outside = tmp_path / "report.xlsx"
    from mcp_server.traces import analyze_trace

    analyze_trace(TRACE, output_xlsx=outside)
    before = outside.read_bytes()
    res = _call("recategorize", {"paths": [str(outside)]})
    assert res.is_error and "outside" in res.content[0].text
    assert outside.read_bytes() == before
    res = _call("recategorize", {"paths": [str(outside)], "output_dir": str(root / "out")})
    assert not res.is_error, res.content[0].text


def test_roots_helpers():
    assert roots_from_uris(["file:///a/b%20c", "https://x/y"]) == [Path("/a/b c")]
    assert inside(Path("/a/b/c"), [Path("/a/b")]) and not inside(Path("/a/bc"), [Path("/a/b")])


def test_client_roots_without_a_back_channel_fall_back_to_the_server_roots(root, tmp_path):
    """The 2026 protocol deprecates roots (SEP-2577) and this SDK's transports give the server no
    back-channel to ask for them: a client that declares roots gets KERNELSCOPE_ROOTS / the cwd."""
    from mcp_types import ListRootsResult, Root

    client_dir = tmp_path / "client_project"
    client_dir.mkdir()

    async def list_roots(*_args, **_kwargs):
        return ListRootsResult(roots=[Root(uri=client_dir.as_uri(), name="project")])

    async def go():
        async with Client(build_server(), list_roots_callback=list_roots) as c:
            bad = await c.call_tool("analyze_trace", {"trace_path": TRACE, "output_xlsx": str(client_dir / "r.xlsx")})
            good = await c.call_tool("analyze_trace", {"trace_path": TRACE, "output_xlsx": str(root / "r.xlsx")})
            return bad, good

    bad, good = anyio.run(go)
    assert bad.is_error and "outside" in bad.content[0].text and not (client_dir / "r.xlsx").exists()
    assert not good.is_error and (root / "r.xlsx").exists()


def test_overwrite_lets_a_call_replace_a_read_only_output(tmp_path, capsys):
    """A read-only report is refused (atomic.py) unless the call says overwrite, on both faces."""
    from mcp_server.faces.cli import main

    out = tmp_path / "r.xlsx"
    assert main(["analyze", TRACE, "-o", str(out)]) == 0
    out.chmod(0o444)
    before = out.read_bytes()
    assert main(["analyze", TRACE, "-o", str(out)]) == 2
    assert "read-only" in capsys.readouterr().err and out.read_bytes() == before
    assert main(["analyze", TRACE, "-o", str(out), "--overwrite"]) == 0
    assert out.stat().st_mode & 0o777 == 0o444  # replaced, its mode kept
