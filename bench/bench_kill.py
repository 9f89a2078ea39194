#!/usr/bin/env python3
"""Benchmark: SIGKILL every kernelscope writer mid-write, N times each (default 50).

For each writer (tests/kill_writers.py: analyze report, recategorize in place and as a copy,
compare xlsx/html, timeline Perfetto/Gantt, ncu roofline/markdown, probe overhead, refs cache,
a 16 MiB atomic write): one reference write, then N times: a forked child writes in a loop and is
killed at a random moment within 1.5 write durations (every other kill: at once, within 5 ms or
within 50 ms after the child opened the output's temp file, inside the write itself); the output
must be intact, and the next completed write must leave no temp file. Prints a Markdown table
(``--append`` adds it as a new section at the end of bench/RESULTS.md).

    .venv/bin/python bench/bench_kill.py [--iterations 50] [--seed 1] [--append]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from kill_writers import WRITERS, run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--append", action="store_true", help="append the table to bench/RESULTS.md")
    args = ap.parse_args()
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as td:
        for i, w in enumerate(WRITERS):
            st = run(w, Path(td) / f"w{i}", args.iterations, seed=args.seed + i)
            rows.append(st)
            print(f"{w.name}: {st.iterations} kills, {st.killed_mid_write} mid-write, corrupted {st.corrupted}, "
                  f"temps after next run {st.temps_after_next_run}", file=sys.stderr, flush=True)
            for f in st.failures[:5]:
                print("   ", f, file=sys.stderr)
    wall = time.perf_counter() - t0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    lines = ["| writer | one write (s) | kills | aimed inside a write | left a temp (killed mid-write) | "
             "corrupted | temps after the next run |", "|---|---:|---:|---:|---:|---:|---:|"]
    for st in rows:
        lines.append(f"| {st.writer} | {st.write_s:.3f} | {st.iterations} | {st.targeted} | {st.killed_mid_write} | "
                     f"{st.corrupted} | {st.temps_after_next_run} |")
    tot = (sum(s.iterations for s in rows), sum(s.targeted for s in rows), sum(s.killed_mid_write for s in rows),
           sum(s.corrupted for s in rows), sum(s.temps_after_next_run for s in rows))
    lines.append(f"| **all** | | {tot[0]} | {tot[1]} | {tot[2]} | {tot[3]} | {tot[4]} |")
    table = "\n".join(lines)
    print(table)
    print(f"\n{wall:.0f} s wall", file=sys.stderr)
    if args.append:
        text = (f"\n## writes under SIGKILL\n\n`.venv/bin/python bench/bench_kill.py --iterations {args.iterations} "
                f"--seed {args.seed}` at `{commit}` on the shared 2-core CPU machine ({wall:.0f} s wall). Each "
                f"writer is killed with SIGKILL while a forked child rewrites the output in a loop: every other "
                f"kill at a random moment within 1.5 write durations (rendering included), the others at once, "
                f"within 5 ms or within 50 ms after the child opened the output's temp file (inside the write "
                f"itself); then the output is "
                f"checked (xlsx: every member's CRC "
                f"and the sheet list; PNG: signature and IEND; HTML: closing tag; JSON: parses; others: the "
                f"reference bytes), the next write is run to completion and the directory checked for "
                f"`.NAME.*` temp files. Goal: 0 corrupted, 0 temps after the next run.\n\n{table}\n")
        with open(ROOT / "bench" / "RESULTS.md", "a", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
