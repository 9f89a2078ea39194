"""Operations of the compare engine, declared once (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from mcp_server.compare.models import BudgetResult, DiffResult
from mcp_server.compare.recategorize import RecategorizeResult
from mcp_server.compare.requests import BudgetRequest, DiffModulesRequest, RecategorizeRequest
from mcp_server.core.operation import READ_ONLY, WRITES_FILES, Operation

OPERATIONS = [
    Operation(
        tool="recategorize", verb="recategorize", title="Re-apply kernel categories to reports",
        help="re-apply the kernel categories CSV to xlsx reports (in place, atomic)",
        description=(
            "Re-classify every kernel of xlsx reports (kernelscope's or trace_module_analyzer's) with the categories "
            "CSV: Category columns, detail-sheet and Summary category tables, Module Tree breakdowns. In place "
            "(atomic) or into output_dir; returns per file how many kernels changed and (kernel, old, new)."),
        request=RecategorizeRequest, result=RecategorizeResult,
        engine="mcp_server.compare.recategorize:recategorize", render="mcp_server.compare.render:render_recategorize",
        hints=WRITES_FILES, positional=("paths",), outputs={"output_dir": "dir", "paths": "xlsx-in-place"},
    ),
    Operation(
        tool="budget", verb="budget", title="Per-category time budget of two runs",
        help="per-category time of two runs side by side (works on CUDA-graph decode)",
        description=(
            "Compare two runs (traces .json/.json.gz, kernelscope or upstream xlsx reports) per kernel category: "
            "each side's us and share, gap (b - a) and ratio, sorted by |gap|. Works on CUDA-graph decode traces; "
            "upstream reports use 'GPU Kernels' and say when it was truncated."),
        request=BudgetRequest, result=BudgetResult,
        engine="mcp_server.compare.budget:budget", render="mcp_server.compare.render:render_budget",
        hints=READ_ONLY, positional=("a", "b"),
    ),
    Operation(
        tool="diff_modules", verb="compare", title="Module-by-module comparison of two runs",
        help="module-by-module comparison of two runs: panels, --json, xlsx, HTML",
        description=(
            "Group each run's kernels by module type into functional blocks (functional_blocks.csv), align the "
            "kernels of each block across the runs and annotate FUSION / IMPROVE / MISSING; blocks sorted by "
            "|gap| (b - a) with the largest marked for optimisation. Inputs: traces or xlsx reports. Optional "
            "xlsx and HTML reports hold every row."),
        request=DiffModulesRequest, result=DiffResult,
        engine="mcp_server.compare.diff:diff_modules", render="mcp_server.compare.render:render_diff",
        hints=WRITES_FILES, positional=("a", "b"), outputs={"output_xlsx": "xlsx", "output_html": "html"},
        aliases={"output_xlsx": ("-o", "--output"), "output_html": ("--html",), "top_n": ("--panels",)},
    ),
]
