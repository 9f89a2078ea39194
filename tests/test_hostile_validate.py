"""validate_candidate against a candidate that attacks the machine (issue 21), on the CLI and over MCP (the
server answers afterwards): a grandchild that detaches with a double fork and setsid is killed when the
harness ends, and a candidate that fills memory is stopped at the harness's memory limit with a typed
``memory`` error. CPU only. Reproducers: tools/make_hostile_inputs.py (``validate_escapes``)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hostile_exec import cli, mcp, recipes, text

from mcp_server.validate.engine import harness_memory_limit, validate_candidate

pytest.importorskip("torch")

SPEC = Path(__file__).resolve().parent / "fixtures" / "validate" / "cpu.toml"


def _dead(pid_file: Path) -> None:
    pid = int(pid_file.read_text())
    for _ in range(100):  # the supervisor kills it before it exits; give /proc a moment
        if not os.path.exists(f"/proc/{pid}"):
            return
        time.sleep(0.05)
    raise AssertionError(f"the detached grandchild {pid} survived the harness")


@pytest.fixture
def cands(tmp_path):
    return recipes.validate_escapes(tmp_path / "cands")


def test_a_detached_grandchild_is_killed_engine(cands, tmp_path, monkeypatch):
    monkeypatch.setenv("KS_STRAY_PID", str(tmp_path / "stray.pid"))
    res = validate_candidate(str(SPEC), candidate=f"{cands['double_fork']}:candidate", timeout_s=60)
    assert res.verdict == "rejected" and "values" in res.reasons[0]
    assert [w.code for w in res.warnings if w.code == "harness_strays_killed"] == ["harness_strays_killed"]
    _dead(tmp_path / "stray.pid")


def test_filling_memory_is_a_typed_memory_error_engine(cands, monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_VALIDATE_MEMORY", "1G")
    t0 = time.monotonic()
    res = validate_candidate(str(SPEC), candidate=f"{cands['fill_memory']}:candidate", timeout_s=60)
    assert res.verdict == "error" and res.stopped_by == "memory" and not res.accepted
    assert res.reasons[0].startswith("memory:") and "1024 MiB" in res.reasons[0]
    assert "KERNELSCOPE_VALIDATE_MEMORY" in res.reasons[0]
    assert time.monotonic() - t0 < 30  # stopped at the limit, not at the time limit


def test_the_memory_limit_setting(monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_VALIDATE_MEMORY", "off")
    assert harness_memory_limit() is None
    monkeypatch.setenv("KERNELSCOPE_VALIDATE_MEMORY", "2G")
    assert harness_memory_limit() == 2 << 30
    monkeypatch.delenv("KERNELSCOPE_VALIDATE_MEMORY")
    assert 0 < harness_memory_limit() <= 64 << 30


def test_both_faces(cands, tmp_path):
    env = {"KS_STRAY_PID": str(tmp_path / "cli.pid"), "KERNELSCOPE_VALIDATE_MEMORY": "1G"}
    code, out, err = cli(["validate", str(SPEC), "--candidate", f"{cands['double_fork']}:candidate",
                          "--timeout-s", "60", "--json"], tmp_path, env=env)
    assert code == 3 and "Traceback" not in err, err[-2000:]
    assert json.loads(out)["verdict"] == "rejected"
    _dead(tmp_path / "cli.pid")
    code, out, err = cli(["validate", str(SPEC), "--candidate", f"{cands['fill_memory']}:candidate",
                          "--timeout-s", "60", "--json"], tmp_path, env=env)
    assert "Traceback" not in err, err[-2000:]
    doc = json.loads(out)
    assert doc["verdict"] == "error" and doc["stopped_by"] == "memory", doc["reasons"]
    env["KS_STRAY_PID"] = str(tmp_path / "mcp.pid")
    fork, fill = mcp([("validate_candidate", {"spec_path": str(SPEC), "timeout_s": 60,
                                              "candidate": f"{cands['double_fork']}:candidate"}),
                      ("validate_candidate", {"spec_path": str(SPEC), "timeout_s": 60,
                                              "candidate": f"{cands['fill_memory']}:candidate"})],
                     roots=tmp_path, env=env)
    assert not fork.is_error and fork.structured_content["verdict"] == "rejected", text(fork)
    _dead(tmp_path / "mcp.pid")
    assert not fill.is_error and fill.structured_content["stopped_by"] == "memory", text(fill)
