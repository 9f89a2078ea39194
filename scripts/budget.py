#!/usr/bin/env python3
"""Per-category time of two runs side by side (works on CUDA-graph decode traces).

Same as ``kernelscope budget A B [--labels LA LB] [--phase prefill|decode] [--json]``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["budget", *sys.argv[1:]]))
