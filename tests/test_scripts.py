"""The standalone scripts under a python3 without kernelscope's dependencies: they re-execute under the
checkout's .venv when it exists, else say in one line how to install (never ModuleNotFoundError: rich)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))


def test_every_script_is_executable_and_guards_its_interpreter():
    assert SCRIPTS
    for s in SCRIPTS:
        assert os.access(s, os.X_OK), f"{s.name} is not executable (chmod +x)"
        text = s.read_text()
        assert text.startswith("#!/usr/bin/env python3\n")
        assert text.index("ensure_dependencies(__file__)") < text.index("from mcp_server.faces.cli import main"), s.name


def _checkout(tmp_path: Path) -> Path:
    """A copy of the checkout's package and scripts (no .venv), so the scripts see this root."""
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "mcp_server", root / "mcp_server", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "scripts", root / "scripts")
    return root


def _bare(script: Path, *args: str) -> subprocess.CompletedProcess:
    """Run ``script`` as a bare interpreter would: -S leaves out site-packages (no rich, no pandas)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERNELSCOPE_SCRIPT_REEXEC")}
    return subprocess.run([sys.executable, "-S", str(script), *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_without_a_venv_the_script_says_how_to_install(tmp_path):
    root = _checkout(tmp_path)
    proc = _bare(root / "scripts" / "analyze_trace.py", "--help")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "kernelscope's dependencies" in proc.stderr and "are not installed" in proc.stderr
    assert f"make install` in {root}" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_with_the_checkouts_venv_the_script_runs_under_it(tmp_path):
    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests do not run in a venv here")
    root = _checkout(tmp_path)
    vbin = root / ".venv" / "bin"
    vbin.mkdir(parents=True)
    # the checkout's venv interpreter: here a wrapper of the one running the tests (which has the dependencies)
    (vbin / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (vbin / "python").chmod(0o755)
    proc = _bare(root / "scripts" / "analyze_trace_set.py", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage: kernelscope traceset analyze" in proc.stdout


def test_readme_examples_write_under_out_and_say_how_to_reach_the_command():
    """The README's examples write into out/ (ignored by git), never the repository root, and the README
    says how `kernelscope` gets on PATH after `make demo`."""
    import re

    readme = (ROOT / "README.md").read_text()
    assert "source .venv/bin/activate" in readme and "/out/" in (ROOT / ".gitignore").read_text().splitlines()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    outputs = []
    for line in "\n".join(blocks).splitlines():
        if not line.lstrip().startswith(("kernelscope", "--", "python")):
            continue
        for m in re.finditer(r"(?:\s-o|--output|--png|--perfetto|--md|--html|>)\s+(\S+)", line):
            outputs.append(m.group(1))
    assert len(outputs) >= 8
    bad = [o for o in outputs if not o.startswith(("out/", "/tmp/"))]
    assert not bad, f"README examples write outside out/: {bad}"


def test_make_demo_says_how_to_reach_the_command():
    """After `make demo` the command lives in .venv/bin, not on PATH: the demo target says so."""
    make = (ROOT / "Makefile").read_text()
    demo = make[make.index("\ndemo:"):].split("\n\n", 1)[0]
    assert "source $(VENV)/bin/activate" in demo and "$(VENV)/bin/kernelscope" in demo
