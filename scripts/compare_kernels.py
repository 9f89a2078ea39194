#!/usr/bin/env python3
"""Module-by-module comparison of two runs (traces or reports).

Same as ``kernelscope compare A B [--labels LA LB] [--json] [-o diff.xlsx] [--html report.html]``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["compare", *sys.argv[1:]]))
