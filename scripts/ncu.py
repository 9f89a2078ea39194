#!/usr/bin/env python3
"""kernel-compass verb `kernelscope ncu` as a standalone script (same options; see --help)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["ncu", *sys.argv[1:]]))
