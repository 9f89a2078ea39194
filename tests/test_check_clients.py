"""tools/check_clients.py with the real Claude Code CLI and MCP Inspector: run where the CLI is installed
and KERNELSCOPE_CHECK_CLIENTS=1 (it takes minutes: the plugin's first start installs its venv)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not (shutil.which("claude") and shutil.which("npx")), reason="Claude Code CLI or npx not installed")
@pytest.mark.skipif(os.environ.get("KERNELSCOPE_CHECK_CLIENTS") != "1", reason="set KERNELSCOPE_CHECK_CLIENTS=1 (minutes)")
def test_the_real_clients_connect_list_and_call():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "check_clients.py")], capture_output=True, text=True,
                         timeout=1500, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " 0 failed" in out.stdout
