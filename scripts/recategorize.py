#!/usr/bin/env python3
"""Re-apply the kernel category rules to report workbooks (in place, atomic).

Same as ``kernelscope recategorize FILE... [--categories CSV] [--output-dir DIR] [--json]``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["recategorize", *sys.argv[1:]]))
