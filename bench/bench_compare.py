#!/usr/bin/env python3
"""Benchmark: diff_modules and budget on two reports of 50 detail sheets x 1000 rows.

    .venv/bin/python bench/bench_compare.py [--sheets 50] [--rows 1000] [--repeat 5]

The two workbooks are written in torch-profiler-parser's layout (newer title
layout) by ``tests/upstream_layout.make_large_report`` with different seeds;
building them is not timed. Each operation is timed end to end (read both
workbooks, recategorise, compute) ``--repeat`` times; the median is reported.
Target: under 1 s each.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def _time(fn, repeat: int) -> tuple[float, list[float]]:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs), runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sheets", type=int, default=50)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    from upstream_layout import make_large_report

    from mcp_server.compare.budget import budget
    from mcp_server.compare.diff import diff_modules

    with tempfile.TemporaryDirectory() as d:
        a = make_large_report(str(Path(d) / "a.xlsx"), sheets=args.sheets, rows=args.rows, seed=1)
        b = make_large_report(str(Path(d) / "b.xlsx"), sheets=args.sheets, rows=args.rows, seed=2)
        size = (Path(a).stat().st_size + Path(b).stat().st_size) / 2 / 1e6
        res = diff_modules(a, b)  # warm-up (imports, regex caches) and a sanity check
        n_rows = res.a.kernel_count
        t_diff, runs_diff = _time(lambda: diff_modules(a, b), args.repeat)
        t_budget, runs_budget = _time(lambda: budget(a, b), args.repeat)
    print(f"reports: 2 x {args.sheets} detail sheets x {args.rows} rows ({n_rows} kernel rows per side, "
          f"{size:.1f} MB each)")
    print(f"diff_modules: median {t_diff:.3f} s  (runs: {', '.join(f'{x:.3f}' for x in runs_diff)})  "
          f"{len(res.blocks)} blocks")
    print(f"budget:       median {t_budget:.3f} s  (runs: {', '.join(f'{x:.3f}' for x in runs_budget)})")
    ok = t_diff < 1.0 and t_budget < 1.0
    print("target (< 1 s each):", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
