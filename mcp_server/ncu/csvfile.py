"""ncu CSV pages into raw launch records.

CSV shapes handled (all seen from ncu 2025.3 on the H200, tests/fixtures/ncu):

* raw page: one row per launch, metric names as columns, a units row under the header
  (``--print-units base`` or ``auto``); values may carry thousands separators (``"2,592"``);
* details page: one row per (launch, metric) with ``Section Name, Metric Name, Metric Unit,
  Metric Value`` and, in newer versions, rule columns; section metrics are named by label
  (``Duration``, ``ms``), explicit ``--metrics`` by their ncu names;
* ``ncu --csv`` written to stdout: ``==PROF==`` / ``==WARNING==`` lines and the application's
  own output before, between and after the rows;
* NVTX range columns; the older layout without Block/Grid/Device/CC columns.
"""
from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Optional

from mcp_server.core.models import Warning_
from mcp_server.ncu import catalogue as cat
from mcp_server.ncu.raw import (
    NOT_KERNEL_METRICS,
    NcuFormatError,
    RawLaunch,
    RawProfile,
    cache_control_in_log,
    convert,
    open_text,
    parse_number,
    warn,
)

_INFO_COLS = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
              "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
              "Metric Value", "Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type",
              "Estimated Speedup", "Kernel Time", "Function Name", "Demangled Name"}


def _is_nvtx_col(col: str) -> bool:
    return "Push/Pop_Range" in col or "Start/Stop_Range" in col or col.lower().startswith("nvtx")


def _nvtx_value(cell: str) -> Optional[str]:
    """``'598  "<default domain>:gemm_bf16:none:..."'`` -> ``gemm_bf16`` (push/pop ranges joined by /)."""
    if not cell or not cell.strip():
        return None
    names = []
    for m in re.finditer(r'"([^"]*)"', cell):
        parts = m.group(1).split(":")
        if len(parts) >= 2 and parts[1] not in ("none", ""):
            names.append(parts[1])
    if not names:
        txt = cell.strip().strip('"')
        return txt or None
    return "/".join(names)


def _split_csv_lines(text: str) -> tuple[list[list[str]], int]:
    """Rows of the CSV part; the count of other (application) lines dropped (ncu's ``==`` lines are dropped too).

    A record may span lines (a quoted rule description with newlines): lines are joined while
    a quote is open.
    """
    records: list[str] = []
    other = 0
    buf: list[str] = []
    for line in text.splitlines():
        if buf:
            buf.append(line)
            if "\n".join(buf).count('"') % 2 == 0:
                records.append("\n".join(buf))
                buf = []
            continue
        s = line.strip()
        if not s or s.startswith("=="):
            continue
        if not s.startswith('"'):
            other += 1
            continue
        if line.count('"') % 2:
            buf = [line]
            continue
        records.append(line)
    if buf:
        records.append("\n".join(buf))
    rows: list[list[str]] = []
    for rec in records:
        try:
            rows.extend(csv.reader(io.StringIO(rec)))
        except csv.Error:
            other += 1
    return rows, other


def _find_header(rows: list[list[str]]) -> int:
    for i, r in enumerate(rows):
        cells = set(r)
        if "ID" in cells and ("Kernel Name" in cells or "Function Name" in cells or "Demangled Name" in cells):
            return i
    return -1


def read_csv(path: Path) -> RawProfile:
    text = open_text(path)
    if not text.strip():
        raise NcuFormatError("the CSV is empty", path=path,
                             hint="export with `ncu --import R.ncu-rep --page raw --csv > R.csv`")
    rows, n_other = _split_csv_lines(text)
    hi = _find_header(rows)
    if hi < 0:
        if "==ERROR==" in text or "ERR_NVGPUCTRPERM" in text:
            first = next((ln for ln in text.splitlines() if "==ERROR==" in ln or "ERR_NVGPUCTRPERM" in ln), "")
            raise NcuFormatError(f"no ncu CSV rows, only ncu's error output: {first.strip()[:200]}", path=path)
        raise NcuFormatError("not an ncu CSV: no header row with 'ID' and 'Kernel Name' columns", path=path,
                             hint="pass a CSV written by `ncu --csv` or `ncu --import ... --csv`")
    header = rows[hi]
    n = len(header)
    body = [r + [""] * (n - len(r)) for r in rows[hi + 1:] if n - 6 <= len(r) <= n and r != header]
    warnings: list[Warning_] = []
    if n_other:
        warnings.append(warn("foreign_lines_skipped",
                              f"{n_other} line(s) that are not ncu CSV (the application's own output) were skipped",
                              n_other))
    details = "Metric Name" in header and "Metric Value" in header
    unknown: list[str] = []
    if details:
        launches = _details_rows(path, header, body, unknown)
        fmt = "csv-details"
    else:
        launches = _raw_rows(path, header, body, unknown)
        fmt = "csv-raw"
    if not launches:
        raise NcuFormatError("the CSV has a header but no kernel rows", path=path,
                             hint="the ncu run profiled no kernel, or the file was cut; re-export it")
    return RawProfile(format=fmt, launches=launches, warnings=warnings,
                      cache_control=cache_control_in_log(text), unrecognized=sorted(set(unknown)))


def _launch_info(header: list[str], r: list[str]) -> dict:
    col = {h: i for i, h in enumerate(header)}

    def get(name: str) -> Optional[str]:
        i = col.get(name)
        return r[i] if i is not None and r[i] != "" else None

    nv = [r[i] for i, h in enumerate(header) if _is_nvtx_col(h) and r[i].strip()]
    name = get("Kernel Name") or get("Demangled Name") or get("Function Name") or "?"
    return {"name": name, "grid": get("Grid Size"), "block": get("Block Size"),
            "device": get("device__attribute_display_name"),
            "cc": get("CC"), "nvtx": "/".join(filter(None, (_nvtx_value(c) for c in nv))) or None}


def _raw_rows(path: Path, header: list[str], body: list[list[str]], unknown: list[str]) -> list[RawLaunch]:
    units: list[str] = [""] * len(header)
    id_i = header.index("ID")
    if body and body[0][id_i] == "":
        units, body = body[0], body[1:]
    known = [(i, cat.BY_NCU_NAME[h]) for i, h in enumerate(header) if h in cat.BY_NCU_NAME]
    metric_cols = [h for h in header if h not in _INFO_COLS and not _is_nvtx_col(h)]
    if not known:
        raise NcuFormatError(
            f"none of the CSV's {len(metric_cols)} metric columns is an ncu metric the catalogue knows "
            f"(first: {', '.join(metric_cols[:3]) or 'none'})", path=path,
            hint="collect with `kernelscope ncu run` or ncu --section SpeedOfLight; see mcp_server/ncu/catalogue.py")
    # preferred spelling first: for each canonical keep the column of its earliest-listed name
    best: dict[str, int] = {}
    for i, c in known:
        if c not in best or cat.NAME_RANK[header[i]] < cat.NAME_RANK[header[best[c]]]:
            best[c] = i
    unknown.extend(h for h in metric_cols if h not in cat.BY_NCU_NAME and not h.startswith(NOT_KERNEL_METRICS))
    out: list[RawLaunch] = []
    for r in body:
        ident = parse_number(r[id_i])
        if ident is None:
            continue
        info = _launch_info(header, r)
        m: dict[str, Optional[float]] = {}
        for c, i in best.items():
            m[c] = convert(parse_number(r[i]), units[i], cat.CATALOGUE[c].unit)
        out.append(RawLaunch(id=int(ident), metrics=m, **info))
    return out


def _details_rows(path: Path, header: list[str], body: list[list[str]], unknown: list[str]) -> list[RawLaunch]:
    col = {h: i for i, h in enumerate(header)}
    si, ni, ui, vi = col.get("Section Name"), col["Metric Name"], col.get("Metric Unit"), col["Metric Value"]
    by_id: dict[int, RawLaunch] = {}
    rank: dict[tuple[int, str], int] = {}  # an ncu name in catalogue order first, then a section label
    seen_any = False
    for r in body:
        ident = parse_number(r[col["ID"]])
        if ident is None:
            continue
        k = int(ident)
        if k not in by_id:
            by_id[k] = RawLaunch(id=k, **_launch_info(header, r))
        mname = r[ni].strip()
        if not mname:
            continue  # a rule row
        canon = cat.BY_NCU_NAME.get(mname)
        prio = cat.NAME_RANK.get(mname, 0)
        if canon is None and si is not None:
            canon = cat.DETAILS_LABELS.get((r[si].strip(), mname))
            prio = 1000
        if canon is None:
            unknown.append(f"{r[si].strip()}: {mname}" if si is not None and r[si].strip() else mname)
            continue
        seen_any = True
        if rank.get((k, canon), 10_000) < prio:
            continue
        rank[(k, canon)] = prio
        unit = r[ui] if ui is not None else ""
        by_id[k].metrics[canon] = convert(parse_number(r[vi]), unit, cat.CATALOGUE[canon].unit)
    if by_id and not seen_any:
        raise NcuFormatError("the details CSV names no metric the catalogue knows", path=path,
                             hint="export the details page of a report collected with SpeedOfLight/LaunchStats")
    return [by_id[k] for k in sorted(by_id)]
