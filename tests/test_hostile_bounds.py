"""Bounds (issue 21): every size a trace set's head or a request controls is checked before anything is sized
by it, with one typed line naming the bound, the same text on the CLI and over MCP, the server serving after
each call. Reproducers come from tools/make_hostile_inputs.py ("disclosure and bounds")."""
from __future__ import annotations

import os
import shutil

import pytest
from conftest import TRACES
from hostile_faces import HOSTILE, cli, cli_error, mcp_session, recipes

from mcp_server.core.errors import LimitError, TraceFormatError
from mcp_server.tracesets.discover import resolve_ranks
from mcp_server.tracesets.executors import max_workers

SDPA = str(TRACES / "llama_prefill_sdpa.json.gz")
BALANCED = HOSTILE.parent / "tracesets" / "balanced"


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """One directory per reproducer (``analyze DIR`` is the trace-set face), plus a FIFO."""
    base = tmp_path_factory.mktemp("sets")
    out = {}
    for name in ("trace_world_size.json", "trace_rank_huge.json", "trace_dist_deep.json.gz"):
        d = base / name.split(".")[0]
        d.mkdir()
        shutil.copy(HOSTILE / name, d / name)
        out[name.split(".")[0]] = str(d)
    fifo = base / "pipe.json"
    os.mkfifo(fifo)
    out["fifo"] = str(fifo)
    return out


def _cases(sets):
    ws = os.path.join(sets["trace_world_size"], "trace_world_size.json")
    rk = os.path.join(sets["trace_rank_huge"], "trace_rank_huge.json")
    too_many = max_workers() + 1
    return {
        "world_size": (["analyze", sets["trace_world_size"]],
                       ("analyze_trace_set", {"paths": [sets["trace_world_size"]]}),
                       (f"{ws}: distributedInfo.world_size is 1000000000000, over the limit of 65,536",
                        "KERNELSCOPE_MAX_WORLD_SIZE")),
        "rank_huge": (["analyze", sets["trace_rank_huge"]],
                      ("analyze_trace_set", {"paths": [sets["trace_rank_huge"]]}),
                      (f"{rk}: the rank number is a 401-digit number, over the limit of 65,536",)),
        "dist_deep": (["analyze", sets["trace_dist_deep"]],
                      ("analyze_trace_set", {"paths": [sets["trace_dist_deep"]]}),
                      ("distributedInfo is nested more than 32 levels deep",)),
        "workers": (["traceset", "analyze", str(BALANCED), "--workers", str(too_many)],
                    ("analyze_trace_set", {"paths": [str(BALANCED)], "workers": too_many}),
                    (f"workers={too_many} is over the bound on local workers, {max_workers()}",)),
        "fifo_in_a_set": (["analyze", SDPA, sets["fifo"]],
                          ("analyze_trace_set", {"paths": [SDPA, sets["fifo"]]}),
                          (f"{sets['fifo']}: not a regular file (a FIFO, socket or device)",)),
        "spec_pow": (["validate", str(HOSTILE / "spec_pow_flops.toml")],
                     ("validate_candidate", {"spec_path": str(HOSTILE / "spec_pow_flops.toml")}),
                     ("spec_pow_flops.toml: 'flops' = a string of 10 character(s) overflows a float on shape #1",)),
        "fifo_alone": (["analyze", sets["fifo"]],
                       ("analyze_trace", {"trace_path": sets["fifo"]}),
                       (f"{sets['fifo']}: not a regular file",)),
    }


CASE_NAMES = ["world_size", "rank_huge", "dist_deep", "workers", "fifo_in_a_set", "fifo_alone", "spec_pow"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_cli_refuses_by_name_before_allocating(sets, name, capsys):
    args, _, words = _cases(sets)[name]
    line = cli_error(args, capsys)
    for w in words:
        assert w in line, line


def test_mcp_gives_the_same_lines_and_keeps_serving(sets, capsys):
    cases = _cases(sets)
    lines = {n: cli_error(cases[n][0], capsys) for n in CASE_NAMES}
    got = mcp_session([cases[n][1] for n in CASE_NAMES])
    for name, (is_error, text, _) in zip(CASE_NAMES, got):
        assert is_error, (name, text)
        assert text == lines[name], name


def test_a_non_string_device_name_is_a_warning_on_both_faces(capsys):
    import json

    p = str(HOSTILE / "trace_device_name.json")
    code, out, err = cli(["analyze", p, "--json"], capsys)
    assert code == 0 and "Traceback" not in err, err
    doc = json.loads(out)
    warn = [w for w in doc["warnings"] if w["code"] == "metadata_ignored"]
    assert doc["device"] is None and doc["kernel_count"] == 1
    assert warn[0]["message"] == "deviceProperties[0].name is not a string (a JSON number); the device is left unknown"
    ((is_error, text, data),) = mcp_session([("analyze_trace", {"trace_path": p})])
    assert not is_error, text
    assert data["device"] is None and [w for w in data["warnings"] if w["code"] == "metadata_ignored"] == warn


def test_world_size_is_checked_before_the_missing_ranks_are_listed(tmp_path, monkeypatch):
    t = (HOSTILE / "trace_world_size.json").read_text()
    (tmp_path / "r0.json").write_text(t.replace("1000000000000", "65536"))
    refs, world, warnings = resolve_ranks([str(tmp_path)])
    assert world == 65536 and [w.code for w in warnings] == ["ranks_missing"] and warnings[0].count == 65535
    assert warnings[0].message.startswith("1 of 65536 ranks present; missing: 1, 2, 3") and \
        warnings[0].message.endswith("32 ...")
    monkeypatch.setenv("KERNELSCOPE_MAX_WORLD_SIZE", "1024")
    with pytest.raises(LimitError, match="over the limit of 1,024"):
        resolve_ranks([str(tmp_path)])


def test_rank_from_a_file_name_is_bounded_too(tmp_path):
    t = (HOSTILE / "trace_world_size.json").read_text()
    body = t.replace('"distributedInfo":{"backend":"nccl","rank":0,"world_size":1000000000000},', "")
    (tmp_path / ("run-TP-" + "9" * 100 + ".json")).write_text(body)
    with pytest.raises(LimitError, match="the rank number is a number of over 18 digits"):
        resolve_ranks([str(tmp_path)])


def test_a_real_distributed_info_with_process_groups_passes_the_depth_bound(tmp_path):
    info = ('{"distributedInfo":{"backend":"nccl","rank":1,"world_size":2,"pg_count":1,"pg_config":[{"pg_name":"0",'
            '"pg_desc":"default_pg","backend_config":"cuda:nccl","pg_size":2,"ranks":[0,1]}],"nccl_version":"2.21.5"},')
    t = (HOSTILE / "trace_world_size.json").read_text()
    (tmp_path / "a.json").write_text(info + t.split(",", 3)[-1].split("},", 1)[-1])
    refs, world, _ = resolve_ranks([str(tmp_path)])
    assert world == 2 and refs[0].rank == 1


def test_deep_distributed_info_is_a_trace_format_error():
    with pytest.raises(TraceFormatError, match="nested more than 32 levels"):
        resolve_ranks([str(HOSTILE / "trace_dist_deep.json.gz")])


# ----------------------------------------------------------------------------- found by bench/bench_fuzz.py


def test_damaged_or_foreign_ledgers_are_typed_errors_on_both_faces(tmp_path, capsys):
    damaged, text_env = tmp_path / "damaged.db", tmp_path / "env_text.db"
    recipes.ledger_damaged(damaged)  # before: sqlite3.DatabaseError escaped
    recipes.ledger_env_text(text_env)  # before: AttributeError escaped
    words = {damaged: "the ledger cannot be read (database disk image is malformed)",
             text_env: "the ledger's env record is not a JSON object"}
    lines = {}
    for p, w in words.items():
        for args in (["ledger", "list", "--ledger", str(p)], ["ledger", "export", "--ledger", str(p)]):
            line = cli_error(args, capsys)
            assert line.startswith(f"{p}: {w}"), line
            assert recipes.SECRET_MARK not in line
        lines[p] = line
    got = mcp_session([("list_experiments", {"ledger": str(damaged)}), ("export_ledger", {"ledger": str(text_env)})],
                      env={"KERNELSCOPE_ROOTS": str(tmp_path)})
    assert [(e, t) for e, t, _ in got] == [(True, lines[damaged]), (True, lines[text_env])]


def test_a_bad_kernel_regex_in_proposals_names_the_file(tmp_path):
    from mcp_server.core.errors import ProposalError
    from mcp_server.loop.proposals import load_proposals

    p = tmp_path / "proposals.toml"
    p.write_text('[[proposal]]\nid = "a"\nkernel = "regex:gemm|("\n[proposal.spec]\nbaseline = "k.py:run"\n')
    with pytest.raises(ProposalError) as ei:
        load_proposals(p)
    assert str(ei.value) == (f"{p}: proposal 'a': kernel, character 6 of the pattern: bad regex: missing ), "
                             "unterminated subpattern")


@pytest.mark.parametrize("var, value, words", [
    ("KERNELSCOPE_CALL_TIMEOUT", "abc", "KERNELSCOPE_CALL_TIMEOUT is not a positive number of seconds"),
    ("KERNELSCOPE_WORKER_MEMORY", "lots", "KERNELSCOPE_WORKER_MEMORY (a memory limit) is not a size"),
])
def test_a_bad_limit_variable_is_named_never_shown_on_both_faces(var, value, words, capsys, monkeypatch):
    """Before: KERNELSCOPE_CALL_TIMEOUT=abc was a ValueError traceback; the memory variable's value was echoed."""
    from mcp_server.faces.cli import main

    monkeypatch.setenv(var, value)
    capsys.readouterr()
    assert main(["analyze", SDPA], limits=True) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {words}") and value not in err and "Traceback" not in err
    ((is_error, text, _),) = mcp_session([("analyze_trace", {"trace_path": SDPA})], env={var: value}, alive=False)
    assert is_error and text.startswith(words) and value not in text


def test_more_damaged_ledgers_found_by_the_fuzz_bench(tmp_path, capsys):
    numbers, bad_text = tmp_path / "target_numbers.db", tmp_path / "bad_text.db"
    recipes.ledger_target_numbers(numbers)  # before: a pydantic ValidationError of every item
    recipes.ledger_bad_text(bad_text)  # before: UnicodeDecodeError
    want = {numbers: "the ledger's target record is not a JSON array of strings",
            bad_text: "the ledger cannot be read (a text record is not UTF-8 (column note))"}
    lines = {p: cli_error(["ledger", "list", "--ledger", str(p)], capsys) for p in want}
    for p, w in want.items():
        assert lines[p].startswith(f"{p}: {w}"), lines[p]
    got = mcp_session([("list_experiments", {"ledger": str(p)}) for p in want], env={"KERNELSCOPE_ROOTS": str(tmp_path)})
    assert [(e, t) for e, t, _ in got] == [(True, lines[p]) for p in want]


def test_a_nan_count_in_a_report_is_a_typed_error_on_both_faces(capsys):
    p = str(HOSTILE / "xlsx_nan_count.xlsx")  # before: ValueError (int of NaN)
    line = cli_error(["budget", p, p], capsys)
    assert line == f"{p}: sheet 'GPU Kernels': row 2: a count that is not a finite whole number"
    ((is_error, text, _),) = mcp_session([("budget", {"a": p, "b": p})])
    assert is_error and text == line
