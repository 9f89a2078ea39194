"""``recategorize``: re-apply the kernel category rules to report workbooks.

The engine behind the ``recategorize`` tool and verb. What changes in a
workbook (detail sheets' Category columns and category tables, GPU Kernels,
the full kernel table, the Summary category table, Module Tree breakdowns) is
decided and written by the report-format owner, ``mcp_server.reports``
(``plan_recategorize`` / ``write_plan``): only changed cells are rewritten, the
write is atomic, and a second run with the same rules changes nothing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import Field

from mcp_server.compare.requests import RecategorizeRequest
from mcp_server.core.errors import FileMissingError, ReportFormatError, WriteError
from mcp_server.core.models import Model, Warning_
from mcp_server.core.operation import engine


class CategoryChange(Model):
    kernel: str
    old: str
    new: str


class RecategorizedFile(Model):
    path: str
    output: str = Field(description="file written (the input itself when in place)")
    source: str = Field(description="kernelscope | upstream-old | upstream-new")
    changed: int = Field(description="number of distinct kernel names whose category changed")
    rows_changed: int = Field(0, description="Category cells rewritten across all sheets")
    changes: list[CategoryChange] = Field(default_factory=list)
    sheets_updated: list[str] = Field(default_factory=list)
    warnings: list[Warning_] = Field(default_factory=list)


class RecategorizeResult(Model):
    categories_source: str
    categories_sha256: str
    files: list[RecategorizedFile]
    total_changed: int
    warnings: list[Warning_] = Field(default_factory=list)


def _out_path(path: Path, output_dir: Optional[str]) -> Path:
    if not output_dir:
        return path
    d = Path(output_dir)
    if d.exists() and not d.is_dir():
        raise WriteError("output_dir exists and is not a directory", path=d)
    d.mkdir(parents=True, exist_ok=True)
    return d / path.name


@engine(RecategorizeRequest)
def recategorize(req: RecategorizeRequest) -> RecategorizeResult:
    """Re-apply the category rules (``categories`` CSV or the shared default) to each report."""
    from mcp_server.core.categories import load_categories
    from mcp_server.reports import plan_recategorize, write_plan

    rules = load_categories(req.categories)
    files = []
    for raw in req.paths:
        p = Path(raw)
        if not p.exists():
            raise FileMissingError("report not found", path=p)
        if p.is_dir():
            raise FileMissingError("report path is a directory, expected an .xlsx file", path=p)
        if p.suffix.lower() not in (".xlsx", ".xlsm"):
            raise ReportFormatError("not an .xlsx report (recategorize edits report workbooks; "
                                    "analyze a trace with -o report.xlsx first)", path=p)
        plan, source = plan_recategorize(p, rules)
        out = _out_path(p, req.output_dir)
        write_plan(plan, out)
        changes = [CategoryChange(kernel=k, old=o, new=n) for (k, o, n) in plan.changes]
        files.append(RecategorizedFile(
            path=str(p), output=str(out), source=source,
            changed=len({c.kernel for c in changes}), rows_changed=plan.rows_changed, changes=changes,
            sheets_updated=list(plan.sheets), warnings=plan.warnings))
    return RecategorizeResult(categories_source=rules.source, categories_sha256=rules.sha256, files=files,
                              total_changed=sum(f.changed for f in files), warnings=rules.reserved_warnings())
