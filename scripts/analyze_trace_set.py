#!/usr/bin/env python3
"""Analyze the per-rank traces of a multi-rank run (files, a directory or a glob) across ranks.

Same as ``kernelscope traceset analyze PATH... [-o set.xlsx] [--html set.html] [--executor ray] [--json]``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.faces.launch import ensure_dependencies  # noqa: E402

ensure_dependencies(__file__)  # under a python3 without rich etc.: the checkout's .venv, or a one-line hint

from mcp_server.faces.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["traceset", "analyze", *sys.argv[1:]]))
