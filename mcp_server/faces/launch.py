"""Run a standalone script (``scripts/*.py``) under an interpreter that has kernelscope's dependencies.

The scripts are called as ``python3 scripts/x.py`` or ``scripts/x.py`` (``#!/usr/bin/env python3``),
i.e. under whatever ``python3`` comes first on PATH, which usually lacks rich, pandas and the rest.
``ensure_dependencies()`` (standard library only, so it runs anywhere) re-executes the script under the
checkout's ``.venv/bin/python`` when that exists (``make demo`` / ``make install`` create it), else
prints one line saying how to install them and exits 2.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from mcp_server.core.envvars import env

#: modules whose absence means "not installed here" (the CLI imports them on every verb)
NEEDED = ("rich", "pydantic", "msgspec", "numpy", "pandas")
_GUARD = "KERNELSCOPE_SCRIPT_REEXEC"


def ensure_dependencies(script: str) -> None:
    """Return when this interpreter can run kernelscope; otherwise re-execute ``script`` under the
    checkout's venv, or exit 2 with a one-line hint."""
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if not missing:
        return
    root = Path(__file__).resolve().parents[2]  # the checkout
    venv = root / ".venv"
    vpy = venv / "bin" / "python"
    in_venv = Path(sys.prefix).resolve() == venv.resolve()
    if vpy.is_file() and os.access(vpy, os.X_OK) and not in_venv and not env(_GUARD):
        os.environ[_GUARD] = "1"  # one re-exec at most, whatever that interpreter lacks
        os.execv(str(vpy), [str(vpy), script, *sys.argv[1:]])
    sys.stderr.write(f"error: kernelscope's dependencies ({', '.join(missing)}) are not installed for "
                     f"{sys.executable} (run `make install` in {root}, which creates .venv that these scripts "
                     f"then use, or `pip install -e {root}`)\n")
    sys.exit(2)
