"""kernelscope: GPU kernel performance tooling for LLM inference.

Engines live in the sub-packages (traces, reports, compare, refs, timeline);
``server`` exposes them as MCP tools and ``cli`` as the ``kernelscope`` command.
"""
from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

#: Repository root when running from a checkout; the ``_shared`` data lives there.
PACKAGE_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent


def shared_path(name: str) -> Path:
    """Path of a file under ``_shared/`` (user-editable data shared by engines and skills).

    ``KERNELSCOPE_SHARED`` overrides the directory.
    """
    import os

    base = os.environ.get("KERNELSCOPE_SHARED")
    root = Path(base) if base else REPO_ROOT / "_shared"
    return root / name
