#!/usr/bin/env python3
"""kernel-compass verb `kernelscope loop` as a standalone script (same options; see --help)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.faces.launch import ensure_dependencies  # noqa: E402

ensure_dependencies(__file__)  # under a python3 without rich etc.: the checkout's .venv, or a one-line hint

from mcp_server.faces.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["loop", *sys.argv[1:]]))
