"""run_ncu with a fake ``ncu`` on PATH (a small Python script): argv, sidecar, progress, typed errors, timeout."""
from __future__ import annotations

import json
import lzma
import os
import sys
import time
from pathlib import Path

import pytest

from mcp_server.core.errors import InputError
from mcp_server.ncu import runner
from mcp_server.ncu.requests import RunNcuRequest
from mcp_server.ncu.runner import (
    NcuNoKernelsError,
    NcuNotFoundError,
    NcuPermissionError,
    NcuProfilerLoadError,
    NcuTargetFailedError,
    NcuTimeoutError,
    build_argv,
    find_ncu,
    run_ncu,
)

NCU = Path(__file__).resolve().parent / "fixtures" / "ncu"

FAKE = r'''#!{python}
import json, os, subprocess, sys, time
argv = sys.argv[1:]
if argv == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (build 36398880) (public-release)")
    sys.exit(0)
json.dump(argv, open(os.environ["FAKE_NCU_ARGV"], "w"))
rep = argv[argv.index("-o") + 1]
log = open(argv[argv.index("--log-file") + 1], "w")
mode = os.environ.get("FAKE_NCU_MODE", "ok")
def w(line):
    log.write(line + "\n"); log.flush()
w("==PROF== Connected to process 123 (/usr/bin/python3.12)")
print("application output line")
if mode == "ok":
    for i in range(3):
        w('==PROF== Profiling "vectorized_elementwise_kernel" - %d: 0%%....50%%....100%% - 9 passes' % i)
    w("==PROF== Disconnected from process 123")
    open(rep, "wb").write(open(os.environ["FAKE_NCU_REPORT"], "rb").read())
    sys.exit(int(os.environ.get("FAKE_NCU_RC", "0")))
if mode == "perm":
    w("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
      "on the target device 0.")
    sys.exit(1)
if mode == "load":
    w("==ERROR== Failed to initialize the profiler: LibraryNotLoaded")
    sys.exit(1)
if mode == "nokernels":
    w("==PROF== Disconnected from process 123")
    w("==WARNING== No kernels were profiled.")
    sys.exit(0)
if mode == "fail":
    print("Traceback (most recent call last): boom", file=sys.stderr)
    w("==PROF== Disconnected from process 123")
    w("==ERROR== The application returned an error code (3).")
    sys.exit(3)
if mode == "hang":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    open(os.environ["FAKE_NCU_CHILD"], "w").write(str(child.pid))
    w('==PROF== Profiling "k" - 0: 0%....50%....100% - 9 passes')
    time.sleep(120)
'''


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "ncu"
    exe.write_text(FAKE.replace("{python}", sys.executable))
    exe.chmod(0o755)
    report = tmp_path / "fixture.ncu-rep"
    report.write_bytes(lzma.decompress((NCU / "targets_none.ncu-rep.xz").read_bytes()))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setenv("FAKE_NCU_ARGV", str(tmp_path / "argv.json"))
    monkeypatch.setenv("FAKE_NCU_REPORT", str(report))
    monkeypatch.setenv("FAKE_NCU_CHILD", str(tmp_path / "child.pid"))
    return tmp_path


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_argv_is_a_list_with_report_and_log(tmp_path):
    req = RunNcuRequest(target=["python", "my script.py", "--flag", "a b"], metric_set="minimal",
                        kernel_name="regex:gemm", launch_skip=2, launch_count=3, nvtx_include=["decode/"],
                        cache_control="none")
    argv = build_argv("ncu", req, tmp_path / "r.ncu-rep", tmp_path / "r.log")
    assert argv[:5] == ["ncu", "-o", str(tmp_path / "r.ncu-rep"), "--log-file", str(tmp_path / "r.log")]
    assert argv[-4:] == ["python", "my script.py", "--flag", "a b"]  # one element each, no shell quoting
    i = argv.index("--cache-control")
    assert argv[i + 1] == "none" and argv[argv.index("--clock-control") + 1] == "none"
    assert argv[argv.index("--kernel-name") + 1] == "regex:gemm"
    assert argv[argv.index("--launch-skip") + 1] == "2" and argv[argv.index("--launch-count") + 1] == "3"
    assert "--nvtx" in argv and argv[argv.index("--nvtx-include") + 1] == "decode/"
    assert "gpu__time_duration.sum" in argv[argv.index("--metrics") + 1]


def test_classify_set_has_sections_and_arch_metrics(tmp_path):
    req = RunNcuRequest(target=["x"], sections=["SourceCounters"], metrics=["a__b.sum,c__d.sum"], set_name="full")
    argv = build_argv("ncu", req, tmp_path / "r.ncu-rep", tmp_path / "r.log", arch="sm_90")
    secs = [argv[i + 1] for i, a in enumerate(argv) if a == "--section"]
    assert "SpeedOfLight" in secs and "SourceCounters" in secs
    mets = argv[argv.index("--metrics") + 1].split(",")
    assert "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active" in mets
    assert mets[-2:] == ["a__b.sum", "c__d.sum"]
    assert argv[argv.index("--set") + 1] == "full"


def test_no_target(tmp_path):
    with pytest.raises(InputError, match="run_ncu: invalid argument.*target: List should have at least 1 item"):
        run_ncu([], report=str(tmp_path / "r"))


def test_ncu_not_found(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setattr(runner, "CUDA_NCU", str(tmp_path / "cuda" / "bin" / "ncu"))
    monkeypatch.setattr(runner, "NSIGHT_GLOB", str(tmp_path / "nsight-compute" / "*" / "ncu"))
    with pytest.raises(NcuNotFoundError, match="ncu .*not found"):
        find_ncu()
    with pytest.raises(NcuNotFoundError, match="--ncu PATH"):
        run_ncu(["python", "-c", "pass"], report=str(tmp_path / "r"))
    monkeypatch.setenv("NCU", str(tmp_path / "missing-ncu"))
    with pytest.raises(NcuNotFoundError, match=r"\$NCU"):
        find_ncu()


def test_run_writes_report_log_sidecar_and_counts_progress(fake_ncu):
    seen = []
    (fake_ncu / "out").mkdir()
    res = run_ncu(["python", "bench.py", "--n", "4"], report=str(fake_ncu / "out" / "run1"),
                  cache_control="none", launch_count=3, timeout_s=60, parse=True,
                  progress=lambda d, t, m: seen.append((d, t, m)))
    assert res.kernels_profiled == 3
    assert [s[0] for s in seen] == [1, 2, 3] and seen[0][1] == 3.0 and "vectorized_elementwise_kernel" in seen[0][2]
    assert res.report.endswith("run1.ncu-rep") and Path(res.report).is_file()
    assert Path(res.log).read_text().count("==PROF== Profiling") == 3
    assert "application output line" in Path(res.app_output).read_text()  # kept out of the data
    side = json.loads(Path(res.sidecar).read_text())
    assert side["argv"] == res.argv and side["target"] == ["python", "bench.py", "--n", "4"]
    assert side["cache_control"] == "none" and side["clock_control"] == "none"
    assert side["ncu_version"] == "2025.3.1.0" and res.ncu_version == "2025.3.1.0"
    argv = json.loads((fake_ncu / "argv.json").read_text())
    assert argv == res.argv[1:]
    if res.profile is not None:  # parsed with ncu-report; the sidecar gives the cache control
        assert res.profile.source.cache_control == "none" and len(res.profile.kernels) == 6
    else:
        assert any(w.code == "report_not_parsed" for w in res.warnings)
    with pytest.raises(Exception, match="report exists"):
        run_ncu(["python", "bench.py"], report=res.report, timeout_s=60)


def test_target_failing_after_profiling_is_a_warning(fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_RC", "7")
    res = run_ncu(["python", "x.py"], report=str(fake_ncu / "r"), timeout_s=60, parse=False)
    assert res.target_rc == 7
    assert any(w.code == "target_failed" and "code 7" in w.message for w in res.warnings)


@pytest.mark.parametrize("mode,err,text", [
    ("perm", NcuPermissionError, "NVreg_RestrictProfilingToAdminUsers=0"),
    ("load", NcuProfilerLoadError, "LibraryNotLoaded"),
    ("nokernels", NcuNoKernelsError, "kernel_name=nomatch"),
    ("fail", NcuTargetFailedError, "code 3"),
])
def test_typed_errors(fake_ncu, monkeypatch, mode, err, text):
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    with pytest.raises(err, match=text):
        run_ncu(["python", "x.py"], report=str(fake_ncu / f"r_{mode}"), kernel_name="nomatch", timeout_s=60)
    side = json.loads((fake_ncu / f"r_{mode}.ncu-rep.json").read_text())
    assert side["kernels_profiled"] == 0


def test_timeout_kills_the_process_group(fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    t0 = time.monotonic()
    with pytest.raises(NcuTimeoutError, match="timeout_s=2 .*not parsed"):
        run_ncu(["python", "x.py"], report=str(fake_ncu / "hang"), timeout_s=2)
    assert time.monotonic() - t0 < 20
    pid = int((fake_ncu / "child.pid").read_text())
    for _ in range(50):
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert not _alive(pid), "the target's child survived the timeout"
    side = json.loads((fake_ncu / "hang.ncu-rep.json").read_text())
    assert side["timed_out"] is True and side["kernels_profiled"] == 1


def test_permission_text_in_a_log_file_is_recognised():
    err = runner.diagnose("==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - The user does not have permission",
                          1, 0, "", Path("r.ncu-rep"))
    assert isinstance(err, NcuPermissionError) and "CAP_SYS_ADMIN" in str(err)


def test_fallback_locations_are_searched(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setattr(runner, "CUDA_NCU", str(tmp_path / "cuda" / "bin" / "ncu"))
    monkeypatch.setattr(runner, "NSIGHT_GLOB", str(tmp_path / "nsight-compute" / "*" / "ncu"))
    for ver in ("2024.1.0", "2025.3.1"):
        d = tmp_path / "nsight-compute" / ver
        d.mkdir(parents=True)
        (d / "ncu").write_text("#!/bin/sh\n")
        (d / "ncu").chmod(0o755)
    assert find_ncu() == str(tmp_path / "nsight-compute" / "2025.3.1" / "ncu")  # the newest


def test_no_shell_anywhere_in_the_ncu_engine():
    src = Path(runner.__file__).parent
    for f in src.glob("*.py"):
        text = f.read_text()
        assert "shell=True" not in text and "os.system" not in text and "shlex" not in text, f.name


# -- a make_repro directory as the target ---------------------------------------------------------------

@pytest.fixture(scope="module")
def attn_repro(tmp_path_factory):
    """The eager Llama prefill's attention ops rebuilt by make_repro (op0 aten::mm ... op3 aten::_softmax)."""
    from conftest import TRACES

    from mcp_server.repro.extract import make_repro

    out = tmp_path_factory.mktemp("ncu_repro") / "attn"
    res = make_repro(str(TRACES / "llama_prefill_eager.json.gz"), str(out), module="LlamaAttention", top=5)
    return res, out


def test_repro_dir_profiles_exactly_its_op(fake_ncu, attn_repro):
    res, out = attn_repro
    softmax = next(o for o in res.ops if o.name == "aten::_softmax")
    run = run_ncu([out.name], repro_op=softmax.id, cwd=str(out.parent), report=str(fake_ncu / "sm"),
                  timeout_s=60, parse=False)
    argv = json.loads((fake_ncu / "argv.json").read_text())  # what ncu was given
    replay = [sys.executable, str(out.resolve() / "repro.py"), "--only", softmax.id, "--cache", "cold",
              "--iters", "5", "--nvtx"]
    assert argv[-len(replay):] == replay and run.argv[-len(replay):] == replay
    head = argv[:-len(replay)]
    assert "--nvtx" in head and [head[i + 1] for i, a in enumerate(head) if a == "--nvtx-include"] == [
        f"{softmax.id}/"]
    assert "--kernel-name" not in head  # the op's range is the filter, not a guessed regex
    side = json.loads(Path(run.sidecar).read_text())
    assert side["target"] == replay
    assert side["repro"] == {"dir": str(out.resolve()), "op": softmax.id, "name": "aten::_softmax"}
    assert "nvtx_include=['op3/']" in side["filters"]
    assert run.replay == f"{out.resolve()} {softmax.id} (aten::_softmax)"


def test_repro_dir_cli_defaults_to_the_slowest_op(fake_ncu, attn_repro, capsys):
    from mcp_server.faces.cli import main as cli_main

    res, out = attn_repro
    rc = cli_main(["ncu", "run", "--report", str(fake_ncu / "cli"), "--no-parse", "--json", "--", str(out)])
    assert rc == 0, capsys.readouterr().err
    argv = json.loads((fake_ncu / "argv.json").read_text())
    rc = cli_main(["ncu", "run", "--report", str(fake_ncu / "cli_text"), "--no-parse", "--", str(out)])
    text = " ".join(capsys.readouterr().out.split())  # the console wraps lines
    assert rc == 0 and "op0 (aten::mm) alone, its NVTX range the kernel filter" in text
    assert argv[argv.index("--only") + 1] == res.ops[0].id == "op0" and argv[argv.index("--nvtx-include") + 1] == "op0/"
    rc = cli_main(["ncu", "run", "--report", str(fake_ncu / "cli2"), "--repro-op", "op1", "--no-parse", "--", str(out)])
    argv = json.loads((fake_ncu / "argv.json").read_text())
    assert rc == 0 and argv[argv.index("--only") + 1] == "op1" and argv[argv.index("--nvtx-include") + 1] == "op1/"


def test_repro_target_errors(tmp_path, attn_repro):
    from mcp_server.core.errors import InputError, ReproError

    _, out = attn_repro
    with pytest.raises(ReproError, match="not a rebuilt op of this directory .*op0, op1, op2, op3, op4"):
        run_ncu([str(out)], repro_op="op7", report=str(tmp_path / "r"))
    with pytest.raises(ReproError, match="needs the target to be one repro directory, not a 2-word command"):
        run_ncu(["python", "bench.py"], repro_op="op0", report=str(tmp_path / "r"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(ReproError, match="not a repro directory"):
        run_ncu([str(tmp_path / "plain")], report=str(tmp_path / "r"))
    with pytest.raises(InputError, match="nvtx_include is set by the repro target"):
        run_ncu([str(out)], nvtx_include=["other/"], report=str(tmp_path / "r"))
    import shutil

    from mcp_server.core.replay_dir import repro_target

    odd = tmp_path / "odd"
    shutil.copytree(out, odd)
    doc = json.loads((odd / "ops.json").read_text())
    doc["ops"][0]["name"] = "root:x:0:0:root:/root:/bin/bash"  # not an op name: never echoed
    (odd / "ops.json").write_text(json.dumps(doc))
    rt = repro_target([str(odd)])
    assert rt is not None and rt.op == "op0" and rt.name == "?"


def test_repro_replay_command_runs(attn_repro, capsys):
    """The replay command ncu is given is one the generated repro.py runs (here in-process on the CPU: no NVTX)."""
    pytest.importorskip("torch")
    import importlib.util

    from mcp_server.core.replay_dir import repro_target

    _, out = attn_repro
    rt = repro_target([str(out)], "op3")
    assert rt is not None and rt.spec == out.resolve() / "spec_op3.toml" and rt.name == "aten::_softmax"
    assert rt.argv[:2] == (sys.executable, str(out.resolve() / "repro.py"))
    spec = importlib.util.spec_from_file_location("ncu_repro_attn", rt.argv[1])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([*rt.argv[2:], "--device", "cpu"]) == 0
    rows = [ln.split() for ln in capsys.readouterr().out.splitlines()[1:]]  # under the header: one row per op
    assert len(rows) == 1 and rows[0][:2] == ["op3", "aten::_softmax"] and float(rows[0][4]) > 0  # warm us


def test_repro_target_errors_on_the_mcp_face(attn_repro, monkeypatch):
    """A wrong op or op id answers one line on the MCP face (run_ncu and run_loop alike), never a traceback."""
    import anyio
    from mcp import Client

    from mcp_server.faces.server import mcp

    _, out = attn_repro
    monkeypatch.setenv("KERNELSCOPE_ROOTS", str(out.parent))
    monkeypatch.chdir(out.parent)

    async def go():
        async with Client(mcp) as c:
            return [await c.call_tool(tool, args) for tool, args in (
                ("run_ncu", {"target": [str(out)], "repro_op": "op9", "report": str(out.parent / "r")}),
                ("run_loop", {"target": [str(out)], "repro_op": "op9"}),
                ("run_loop", {"target": [str(out)], "repro_op": "softmax"}))]

    answers = anyio.run(go)
    texts = [" ".join(c.text for c in a.content if hasattr(c, "text")) for a in answers]
    assert all(a.is_error for a in answers) and not any("Traceback" in t for t in texts)
    assert "op 'op9' is not a rebuilt op of this directory" in texts[0] and "op0, op1" in texts[0]
    assert "op 'op9' is not a rebuilt op" in texts[1] and "repro_op" in texts[2]
