#!/usr/bin/env python3
"""Write the small hostile inputs that the isolation and bad-input tests replay.

Each file is a reproducer of one way a file an agent did not make can attack a reader:

* ``xlsx_max_cell.xlsx``: a report whose 'GPU Kernels' sheet has one cell at XFD1048576, the last
  cell Excel allows; the calamine reader sizes its grid from it and aborts the process (SIGABRT).

    python3 tools/make_hostile_inputs.py --out tests/fixtures/hostile
"""
from __future__ import annotations

import argparse
from pathlib import Path


def xlsx_max_cell(path: Path) -> None:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "GPU Kernels"
    ws.append(["Kernel Name", "Category", "Total Duration (us)", "Count", "Avg (us)", "% of Total", "Module Types"])
    ws["XFD1048576"] = "x"
    wb.create_sheet("Summary").append(["Metric", "Value (us)", "Percentage", "Detail Tab"])
    wb.save(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/hostile")
    out = Path(ap.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    xlsx_max_cell(out / "xlsx_max_cell.xlsx")


if __name__ == "__main__":
    main()
