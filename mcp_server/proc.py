"""Run an external program safely: argument list, timeout, whole process group killed on expiry."""
from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class ProcResult:
    rc: int | None  # None: killed on timeout
    stdout: str
    stderr: str
    timed_out: bool


def run(args: list[str], *, timeout: float, cwd: str | None = None,
        env: Mapping[str, str] | None = None, max_bytes: int = 4 << 20) -> ProcResult:
    """Run ``args`` (no shell). On timeout the process group gets SIGKILL and ``timed_out`` is set."""
    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("LC_ALL", "C.UTF-8")
    proc = subprocess.Popen(
        args, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=max(timeout, 0.05))
        timed_out = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        out, err = proc.communicate()
        timed_out = True
    return ProcResult(
        rc=None if timed_out else proc.returncode,
        stdout=out[:max_bytes].decode("utf-8", "replace"),
        stderr=err[:65536].decode("utf-8", "replace"),
        timed_out=timed_out,
    )
