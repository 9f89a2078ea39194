"""The report workbook format: one owner for writing, reading and editing report workbooks.

Other packages use only the names below (and ``reports.layout``, the sheet and header
facts); the modules behind them are private to this package (import-linter's
"protected" contract in pyproject.toml). Names are loaded on first use, so importing
``mcp_server.reports`` costs nothing until a workbook is touched (``layout``, constants
only, comes with the package).

Reading (``reader``):
  ``read_report(path, need=...) -> Report``, ``kernel_table(report)`` (the
  ``KERNEL_COLUMNS`` shape), ``is_kernelscope_report(path)``,
  ``Report``, ``DetailSheet``, ``Source``, ``ALL_PARTS``.
Writing (``xlsx_writer``, on ``workbook``'s sheets and atomic save):
  ``write_analysis_report(analysis, path)``, ``gpu_time_rows(breakdown, rank=None)`` (the rows
  of the GPU Time sheet); for other workbooks ``Sheet(workbook, title)`` (styled header, cleaned
  values) and ``atomic_save(workbook, path)``.
Editing (``edit``):
  ``plan_recategorize(path, rules) -> (EditPlan, source)``, ``write_plan(plan, out)``, ``EditPlan``.
Figures (``plots``):
  ``pyplot()``: matplotlib's pyplot with a file-only backend chosen once, where plotting starts;
  ``place_labels(ax, points)``: point labels that do not overlap.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_server.core.lazy import lazy_names
from mcp_server.reports import layout  # sheet names and headers: constants, loaded with the package

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from mcp_server.reports.edit import EditPlan, plan_recategorize, write_plan
    from mcp_server.reports.plots import place_labels, pyplot
    from mcp_server.reports.reader import (
        ALL_PARTS,
        DetailSheet,
        Report,
        Source,
        is_kernelscope_report,
        kernel_table,
        read_report,
    )
    from mcp_server.reports.workbook import Sheet, atomic_save
    from mcp_server.reports.xlsx_writer import gpu_time_rows, write_analysis_report

_EXPORTS = {
    "ALL_PARTS": "reader", "DetailSheet": "reader", "Report": "reader", "Source": "reader",
    "is_kernelscope_report": "reader", "kernel_table": "reader", "read_report": "reader",
    "Sheet": "workbook", "atomic_save": "workbook", "write_analysis_report": "xlsx_writer",
    "gpu_time_rows": "xlsx_writer",
    "EditPlan": "edit", "plan_recategorize": "edit", "write_plan": "edit",
    "pyplot": "plots", "place_labels": "plots",
}

__all__ = [
    "ALL_PARTS", "DetailSheet", "EditPlan", "Report", "Sheet", "Source", "atomic_save",
    "gpu_time_rows", "is_kernelscope_report", "kernel_table", "layout", "place_labels", "plan_recategorize", "pyplot",
    "read_report", "write_analysis_report", "write_plan",
]

__getattr__ = lazy_names(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return __all__
