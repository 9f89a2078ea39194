#!/usr/bin/env python3
"""Find prior art for a kernel/op keyword (upstream PRs, local checkouts, Jira).

Same as ``kernelscope refs KEYWORD [--category CAT] [--sources ...] [--max N] [--days N] [--no-cache] [--json]``.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_server.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["refs", *sys.argv[1:]]))
