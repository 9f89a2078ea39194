"""What an experiment ran on: the target's git state and the environment (GPU, driver, versions).

Every probe is bounded (short timeouts through ``mcp_server.core.proc``) and optional: what
cannot be found is recorded as missing (``None``), never guessed. torch and triton are
not imported (their versions come from the installed distributions' metadata).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

from mcp_server.core import proc


def target_repo_dir(target: list[str], cwd: Optional[str] = None) -> Path:
    """The directory whose git state describes the target: that of the first ``.py`` / ``.sh``
    argument naming an existing file (the script), else of the program itself when it is a
    file outside the system directories, else the working directory."""
    base = Path(cwd or os.getcwd())

    def resolve(arg: str) -> Path:
        p = Path(arg).expanduser()
        return p if p.is_absolute() else base / p

    for arg in target:
        if arg.endswith((".py", ".sh")) and resolve(arg).is_file():
            return resolve(arg).resolve().parent
    if target and os.sep in target[0] and resolve(target[0]).is_file():
        prog = resolve(target[0]).resolve()
        if not str(prog).startswith(("/usr/", "/bin/", "/sbin/", "/opt/")):
            return prog.parent
    return base.resolve()


def git_state(directory: Path, timeout: float = 5.0) -> dict[str, Any]:
    """``{"repo", "git_rev", "git_dirty"}`` of the git work tree holding ``directory`` (Nones outside git).

    Read through ``proc.git``: the repository is one a caller names, so nothing it configures runs (an
    fsmonitor hook, hooks, clean filters). A file with a clean filter is compared unfiltered, so it may count
    as a change the filter would have hidden (the flag errs towards dirty)."""
    out: dict[str, Any] = {"repo": None, "git_rev": None, "git_dirty": None}
    if shutil.which("git") is None or not directory.is_dir():
        return out
    top = proc.git(directory, "rev-parse", "--show-toplevel", timeout=timeout)
    if top.rc != 0:
        return out
    out["repo"] = top.stdout.strip()
    rev = proc.git(directory, "rev-parse", "--verify", "-q", "HEAD", timeout=timeout)
    if rev.rc == 0:
        out["git_rev"] = rev.stdout.strip()
    st = proc.git(directory, "status", "--porcelain", "--untracked-files=no", "--ignore-submodules=all",
                  timeout=timeout)
    if st.rc == 0:
        out["git_dirty"] = bool(st.stdout.strip())
    return out


def work_tree(directory: Path) -> Optional[Path]:
    """The top of the git work tree holding ``directory`` (the nearest folder with a ``.git`` entry), found
    without running git; None outside one."""
    d = directory.resolve()
    for c in (d, *d.parents):
        if (c / ".git").exists():
            return c
    return None


def target_repository(target: list[str], cwd: Optional[str] = None) -> Path:
    """The folder the loop may change for this target: the git work tree holding it, else the target's own
    folder (``target_repo_dir``)."""
    d = target_repo_dir(target, cwd)
    return work_tree(d) or d


def _dist_version(name: str) -> Optional[str]:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _gpu(timeout: float) -> dict[str, Any]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {"gpu": None, "driver": None, "gpu_source": "nvidia-smi not found"}
    r = proc.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"], timeout=timeout)
    if r.rc != 0 or not r.stdout.strip():
        return {"gpu": None, "driver": None, "gpu_source": f"nvidia-smi failed (rc={r.rc})"}
    names, drivers = [], []
    for line in r.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        names.append(parts[0])
        if len(parts) > 1:
            drivers.append(parts[1])
    return {"gpu": names[0] if len(set(names)) == 1 else names, "gpu_count": len(names),
            "driver": drivers[0] if drivers else None, "gpu_source": "nvidia-smi"}


def _ncu_version() -> Optional[str]:
    """The version of the ncu the profiler would use (the ncu engine's finder), None when there is none."""
    from mcp_server.core.errors import KernelscopeError
    from mcp_server.ncu.runner import find_ncu, ncu_version

    try:
        return ncu_version(find_ncu())
    except KernelscopeError:
        return None


def environment(timeout: float = 10.0) -> dict[str, Any]:
    """GPU, driver, and the versions of python, torch, triton, ncu and kernelscope found here."""
    from mcp_server import __version__
    env: dict[str, Any] = {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "kernelscope": __version__,
        "torch": _dist_version("torch"),
        "triton": _dist_version("triton"),
        "ncu": _ncu_version(),
    }
    env.update(_gpu(timeout))
    return env


def target_key(target: list[str], repo_dir: Path) -> str:
    """Names the target across experiments: the argument list and the directory it describes."""
    blob = json.dumps({"target": list(target), "dir": str(repo_dir)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
