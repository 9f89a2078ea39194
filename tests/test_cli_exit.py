"""What the `kernelscope` command says and exits with when something is off (README, "Exit status").

0 success / accepted, 2 bad input or a run that could not complete (one line on stderr), 3 a run that
completed with a negative verdict (validate REJECTED, a loop that accepted nothing); a closed pipe ends
the run quietly with 0; errors name what is wrong instead of a misleading neighbour."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, TRACES

from mcp_server.core.vocab import ExitCode
from mcp_server.faces.cli import main

ROOT = Path(__file__).resolve().parent.parent
TRACE = str(TRACES / "llama_prefill_sdpa.json.gz")
NCU = FIXTURES / "ncu"
SPEC = FIXTURES / "validate" / "cpu.toml"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*extra.pop("pre", "").split(os.pathsep), str(ROOT)]).strip(
        os.pathsep), **extra}


def test_exit_codes_are_distinct():
    assert [ExitCode.ok, ExitCode.internal, ExitCode.bad_input, ExitCode.not_accepted] == [0, 1, 2, 3]


def test_trace_set_options_on_a_missing_directory_name_the_missing_path(tmp_path, capsys):
    """`analyze DIR --executor ray` with a mistyped DIR said 'unknown option(s) --executor ray'."""
    missing = str(tmp_path / "run_dir")
    assert main(["analyze", missing, "--executor", "ray"]) == ExitCode.bad_input
    err = capsys.readouterr().err
    assert f"{missing}: no such file or directory" in err and "unknown option" not in err
    assert "--executor is an option of `kernelscope analyze` over a trace set" in err
    assert main(["analyze", TRACE, "--executor", "ray"]) == ExitCode.bad_input
    err = capsys.readouterr().err
    assert "--executor applies only to a trace set" in err and "unknown option" not in err
    assert main(["analyze", missing, "--bogus"]) == ExitCode.bad_input
    assert "unknown option(s) --bogus (accepted: " in capsys.readouterr().err


def test_classify_a_directory_lists_its_reports(capsys):
    assert main(["classify", str(NCU)]) == ExitCode.bad_input
    err = capsys.readouterr().err
    assert "is a directory, not a report" in err and "no such file" not in err
    reports = sorted(p.name for p in NCU.iterdir()
                     if p.is_file() and p.name.lower().removesuffix(".xz").removesuffix(".gz").endswith((".ncu-rep", ".csv")))
    assert len(reports) > 5 and ", ".join(reports[:5]) in err and f"and {len(reports) - 5} more" in err
    assert "e.g. " + str(NCU / reports[0]) in err


def test_graph_only_trace_without_reference_says_to_pass_one(capsys):
    """A CUDA-graph-only trace analysed alone: 0 attributed, with a warning that names --reference-trace."""
    from mcp_server.traces import analyze_trace

    graph = TRACES / "llama_decode_graph.json.gz"
    res = analyze_trace(graph)
    w = {x.code: x for x in res.warnings}
    assert res.attributed_count == 0 and w["replays_unattributed"].count == res.graph.graph_kernel_count == 399
    assert "--reference-trace" in w["replays_unattributed"].message
    assert "676.1 us" in w["replays_unattributed"].message  # the kernel time left unattributed
    ok = analyze_trace(graph, reference_trace=TRACES / "llama_decode_mixed.json.gz")
    assert ok.attributed_count == 399 and "replays_unattributed" not in {x.code for x in ok.warnings}
    assert main(["analyze", str(graph), "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert "replays_unattributed" in out and "Module types: none, no kernel is attributed to a module" in out
    assert "399 kernels, none attributed (see the warnings)" in out  # not "0 attributed by unattributed"


def test_validate_without_torch_is_one_line_and_status_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # find_spec("torch") is None: as on a machine without it
    assert main(["validate", str(SPEC)]) == ExitCode.bad_input
    err = capsys.readouterr().err
    assert "validate needs torch, which is not installed" in err and "kernelscope[gpu]" in err
    assert len(err.strip().splitlines()) <= 2 and "Traceback" not in err


def test_validate_child_without_torch_reports_one_line(tmp_path):
    """A torch that fails to import in the harness child: a one-line reason, no traceback, status 2."""
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    proc = subprocess.run([sys.executable, "-m", "mcp_server.faces.cli", "validate", str(SPEC), "--width", "200"],
                          env=_env(pre=str(tmp_path / "fake")), capture_output=True, text=True, timeout=120)
    assert proc.returncode == ExitCode.bad_input, proc.stdout + proc.stderr
    assert "torch cannot be imported" in proc.stdout and "Traceback" not in proc.stdout + proc.stderr


def test_rejected_verdict_exits_3_and_json_too(capsys):
    """cand_wrong.py is wrong on every shape: REJECTED, and a script can branch on it."""
    pytest.importorskip("torch")
    assert main(["validate", str(SPEC), "--seeds", "2", "--time-budget-s", "0.5"]) == ExitCode.not_accepted
    assert "REJECTED" in capsys.readouterr().out


def test_loop_that_accepts_nothing_exits_3(tmp_path, capsys):
    report = NCU / "targets_none.ncu-rep.xz"
    argv = ["loop", "--ledger", str(tmp_path / "l.db"), "--profile", str(report), "--json", "--", "python3", "-c",
            "pass"]
    assert main(argv) == ExitCode.not_accepted
    assert '"stopped": "no_proposals"' in capsys.readouterr().out


def test_loop_result_exit_code():
    from mcp_server.loop.models import LoopResult

    base = dict(ledger="l.db", experiment_id=1, resumed=False, stopped="iters_done", stop_message="")
    assert LoopResult(**base, accepted=1).exit_code() == 0
    assert LoopResult(**base, accepted=0, rejected=2).exit_code() == 3


def test_worked_example_script_fails_when_its_steps_fail(tmp_path):
    """Without ncu its loop steps exit 2: the script says so and exits 1 (it used to exit 0)."""
    if shutil.which("ncu") or Path("/usr/local/cuda/bin/ncu").exists():
        pytest.skip("ncu is installed here: the steps may succeed")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "mla_loop_example.py"), "--out", str(tmp_path)],
                          env=_env(NCU=str(tmp_path / "no-ncu")), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "loop_hbm failed: error: ncu" in proc.stderr and "step(s) failed: loop_hbm, loop_l2" in proc.stderr


@pytest.mark.parametrize("extra", [["--width", "100"], ["--json", "--detail"]])
def test_a_closed_pipe_ends_quietly_with_status_0(extra):
    """`kernelscope analyze ... | head` whose reader is gone: status 0 and nothing on stderr, like standard tools."""
    r, w = os.pipe()
    os.close(r)  # the reader has already gone: the first write fails
    try:
        proc = subprocess.run([sys.executable, "-m", "mcp_server.faces.cli", "analyze", TRACE, *extra], stdout=w,
                              stderr=subprocess.PIPE, env=_env(), timeout=120, text=True)
    finally:
        os.close(w)
    assert proc.returncode == 0 and proc.stderr == ""


def test_the_demo_piped_into_a_closed_reader_ends_quietly():
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run([sys.executable, "-m", "mcp_server.faces.demo"], stdout=w, stderr=subprocess.PIPE,
                              env=_env(), timeout=120, text=True)
    finally:
        os.close(w)
    assert proc.returncode == 0 and proc.stderr == ""
