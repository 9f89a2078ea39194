#!/usr/bin/env python3
"""Module-by-module comparison of two runs (traces or reports).

Same as ``kernelscope compare A B [--labels LA LB] [--json] [-o diff.xlsx] [--html report.html]``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.faces.launch import ensure_dependencies  # noqa: E402

ensure_dependencies(__file__)  # under a python3 without rich etc.: the checkout's .venv, or a one-line hint

from mcp_server.faces.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["compare", *sys.argv[1:]]))
