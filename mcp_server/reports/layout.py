"""The report workbook layout: sheet names, headers and naming rules.

One place for the facts of the upstream (torch-profiler-parser
trace_module_analyzer) layout that kernelscope both writes and reads, plus the
names of kernelscope's own extra sheets. Readers locate columns by these
header texts, never by position.
"""
from __future__ import annotations

import re

SUMMARY = "Summary"
OVERVIEW = "Overview"
MODULE_TREE = "Module Tree"
GPU_KERNELS = "GPU Kernels"
#: kernelscope extras
FULL_KERNELS = "Kernels (full)"
METADATA = "Metadata"
#: the GPU time breakdown (busy / idle / computation / communication / memory), per trace, device, stream
GPU_TIME = "GPU Time"
#: sheets that are never detail sheets (upstream also writes "Model Info" in some versions)
NON_DETAIL_SHEETS = frozenset({SUMMARY, OVERVIEW, MODULE_TREE, GPU_KERNELS, FULL_KERNELS, METADATA, GPU_TIME,
                                "Model Info"})


def full_table_sheet_name(part: int) -> str:
    """Name of the ``part``-th (0-based) sheet of the full kernel table.

    ``Kernels (full)``, ``Kernels (full 2)``, ...
    """
    return FULL_KERNELS if part == 0 else f"{FULL_KERNELS[:-1]} {part + 1})"


def is_full_table_sheet(sheet: str) -> bool:
    """A sheet of kernelscope's full kernel table (``full_table_sheet_name``)."""
    return sheet == FULL_KERNELS or (sheet.startswith(FULL_KERNELS[:-1]) and sheet.endswith(")"))


def is_kernelscope_workbook(sheets) -> bool:
    """kernelscope's own reports carry the full kernel table and/or the Metadata sheet; upstream's neither."""
    return FULL_KERNELS in sheets or METADATA in sheets

#: upstream caps GPU Kernels and each detail kernel table at this many rows
MAX_ROWS = 1000
TRUNCATED_PREFIX = "... truncated"


def truncated_line() -> str:
    return f"{TRUNCATED_PREFIX} at {MAX_ROWS} rows"


SUMMARY_HEADERS = ["Metric", "Value (us)", "Percentage", "Detail Tab"]
SUMMARY_TOTAL_LABEL = "Total Kernel Time"
SUMMARY_CATEGORY_HEADERS = ["Category", "Count", "Total (us)", "Avg (us)", "Percentage"]
OVERVIEW_HEADERS = ["Module Type", "Depth", "Count", "Mean (us)", "Std (us)", "Min (us)", "Max (us)",
                    "Total (us)", "% of Parent", "Top Kernel"]
#: kernelscope appends "Path" (the node's instance path) after the upstream columns
TREE_HEADERS = ["Module", "Total Time (us)", "Kernels/Ops", "Breakdown", "Phase"]
TREE_PATH_HEADER = "Path"
GPU_KERNEL_HEADERS = ["Kernel Name", "Category", "Total Duration (us)", "Count", "Avg (us)", "% of Total",
                      "Module Types"]
GPU_TIME_HEADERS = ["Scope", "Device", "Stream", "GPU events", "Window (us)", "Busy (us)", "Idle (us)",
                    "Computation (us)", "Communication (us)", "Memcpy+memset (us)", "Exposed communication (us)",
                    "Exposed memcpy+memset (us)", "Busy %", "Comm overlapped by compute %"]
DETAIL_CATEGORY_HEADERS = ["Category", "Percentage (%)", "Total Duration (us)"]
DETAIL_KERNEL_HEADERS = ["Module", "Input Dims", "Kernel Name", "Duration (us)", "% of wall time", "Category",
                         "Formula", "TFLOP", "TFLOPs", "Source"]
#: kernelscope's extra column after the upstream ones: achieved TFLOP/s against the GPU's dense bf16 peak
PEAK_HEADER = "% of bf16 peak"
#: the columns a reader needs in a detail kernel table
DETAIL_REQUIRED = ["Module", "Kernel Name", "Duration (us)", "Category"]
GPU_KERNELS_REQUIRED = ["Kernel Name", "Category", "Total Duration (us)", "Count"]

#: detail-sheet phase suffixes: phase[:3]
PHASE_ABBREV = {"pre": "prefill", "dec": "decode", "ext": "extend", "gra": "graph"}

_DETAIL_NAME_RE = re.compile(r"^(?P<base>.*?)(?: \((?P<phase>[a-z]{3})?(?:,?(?P<variant>[A-Z]))?\))?$")
#: older layout title "{name} [phase] — N kernels"
OLD_TITLE_RE = re.compile(r"^(?P<name>.*?)(?: \[(?P<phase>[^\]]+)\])? — (?P<count>\d+) kernels?\s*$")
KERNEL_SUM_RE = re.compile(r"Kernel sum:\s*(-?[\d,.]+)\s*us")
WALL_RE = re.compile(r"Wall time:\s*(-?[\d,.]+)\s*us")
OVERLAP_RE = re.compile(r"Overlap:\s*(-?[\d,.]+)\s*us")

_BREAKDOWN_ITEM_RE = re.compile(r"(?:^|, )(?P<cat>[^:]+?): (?P<us>-?[\d,]+(?:\.\d+)?) us \((?P<pct>-?[\d.]+)%\)")


def detail_sheet_name(module_type: str, phase: str = "", variant: str = "") -> str:
    """Upstream naming: ``Type[:28]`` plus `` (pre|dec[,A])`` within Excel's 31 characters."""
    parts = [x for x in (phase[:3], variant) if x]
    if parts:
        suffix = f" ({','.join(parts)})"
        return f"{module_type[:28 - len(suffix)]}{suffix}"
    return module_type[:28]


def parse_detail_sheet_name(sheet: str) -> tuple[str, str, str]:
    """(type prefix, phase ('prefill'|'decode'|...|''), variant) from a detail sheet name."""
    m = _DETAIL_NAME_RE.match(sheet)
    if not m:
        return sheet, "", ""
    ph = m.group("phase") or ""
    return m.group("base"), PHASE_ABBREV.get(ph, ph), m.group("variant") or ""


def format_breakdown(by_cat: dict[str, float], total: float) -> str:
    """Upstream Module Tree breakdown: ``cat: X us (p%), ...`` sorted by time, zero entries dropped."""
    parts = []
    for cat, us in sorted(by_cat.items(), key=lambda kv: -kv[1]):
        if us <= 0:
            continue
        pct = us / total * 100 if total > 0 else 0.0
        parts.append(f"{cat}: {us:,.0f} us ({pct:.1f}%)")
    return ", ".join(parts)


def parse_breakdown(text: str) -> dict[str, float]:
    """Inverse of ``format_breakdown`` (values as written, i.e. rounded to 1 us)."""
    out: dict[str, float] = {}
    for m in _BREAKDOWN_ITEM_RE.finditer(str(text)):
        out[m.group("cat")] = out.get(m.group("cat"), 0.0) + float(m.group("us").replace(",", ""))
    return out


def share_text(us: float, total: float) -> str:
    """``us`` as a percentage of ``total`` (Summary's Percentage column); ``0.0%`` when the total is not positive."""
    return f"{us / total * 100 if total > 0 else 0.0:.1f}%"


def parse_number(v) -> float | None:
    """A cell value as float: numbers, ``"12.5%"``, ``"1,234.5"``; None when empty/unparseable."""
    if v is None:
        return None
    if isinstance(v, (int, float)):  # bool too

        return float(v)
    s = str(v).strip().replace(",", "")
    if s.endswith("%"):
        s = s[:-1]
    if not s:
        return None
    try:
        return float(s)
    except ValueError:
        return None
