#!/usr/bin/env python3
"""Find prior art for a kernel/op keyword (upstream PRs, local checkouts, Jira).

Same as ``kernelscope refs KEYWORD [--category CAT] [--sources ...] [--max N] [--days N] [--no-cache] [--json]``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.faces.launch import ensure_dependencies  # noqa: E402

ensure_dependencies(__file__)  # under a python3 without rich etc.: the checkout's .venv, or a one-line hint

from mcp_server.faces.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["refs", *sys.argv[1:]]))
