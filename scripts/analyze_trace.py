#!/usr/bin/env python3
"""Attribute a PyTorch-profiler trace's GPU kernels to nn.Modules, categories and phases.

Same as ``kernelscope analyze TRACE [-o report.xlsx] [--categories CSV] [--reference-trace EAGER] [--json]``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["analyze", *sys.argv[1:]]))
