"""Request models of the compare operations (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from mcp_server.core.argbounds import LIST_ITEMS, NAME_CHARS, PATH_CHARS, item_bounds
from mcp_server.core.operation import SizedRequest, WritesOutputs, top_n_field

SIDE_HELP = "Side {}: trace (.json/.json.gz) or report (.xlsx, kernelscope or trace_module_analyzer)"
CATEGORIES_HELP = "Categories CSV (category,pattern); default: the shared kernel_categories.csv"
Labels = Optional[list[str]]
LABELS_FIELD = Field(default=None, min_length=2, max_length=2,
                     description="Two labels for A and B (default: file names)")
PHASE_FIELD = Field(default=None, description="Keep only this phase's kernels")


class RecategorizeRequest(SizedRequest, WritesOutputs):
    paths: list[str] = Field(min_length=1, max_length=LIST_ITEMS, description="Report workbooks (.xlsx) to update")
    categories: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=CATEGORIES_HELP)
    output_dir: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Write updated copies here instead of editing in place"))

    check_items = item_bounds("paths", chars=PATH_CHARS)  # type: ignore[pydantic-field]


class BudgetRequest(SizedRequest):
    a: str = Field(max_length=PATH_CHARS, description=SIDE_HELP.format("A"))
    b: str = Field(max_length=PATH_CHARS, description=SIDE_HELP.format("B"))
    labels: Labels = LABELS_FIELD
    phase: Optional[Literal["prefill", "decode"]] = PHASE_FIELD
    categories: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=CATEGORIES_HELP)
    per_step: Optional[bool] = Field(default=None, description=(
        "Divide each side by its step count (graph replays + eager forward calls); default: automatic when the "
        "counts differ and the kernels per step agree; false keeps whole totals"))

    check_items = item_bounds("labels", chars=NAME_CHARS)  # type: ignore[pydantic-field]


class DiffModulesRequest(SizedRequest, WritesOutputs):
    top_n: int = top_n_field(4, "Blocks kept in the answer (largest |gap| first; kernels per block: half as many, "
                                "at least 3)")
    a: str = Field(max_length=PATH_CHARS, description=SIDE_HELP.format("A"))
    b: str = Field(max_length=PATH_CHARS, description=SIDE_HELP.format("B"))
    labels: Labels = LABELS_FIELD
    categories: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=CATEGORIES_HELP)
    blocks: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Functional blocks CSV; default: the shared functional_blocks.csv"))
    phase: Optional[Literal["prefill", "decode"]] = PHASE_FIELD
    output_xlsx: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Write the diff workbook (.xlsx) here"))
    output_html: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Write a self-contained HTML report here"))
    reference_a: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Eager trace of A's model, or A's graph-capture trace, to attribute A's CUDA-graph replays to modules"))
    reference_b: Optional[str] = Field(default=None, max_length=PATH_CHARS, description=(
        "Eager trace of B's model, or B's graph-capture trace, to attribute B's CUDA-graph replays to modules"))
    per_step: Optional[bool] = Field(default=None, description=(
        "Divide each side by its step count (graph replays + eager forward calls); default: automatic when the "
        "counts differ and the kernels per step agree; false keeps whole totals"))

    check_items = item_bounds("labels", chars=NAME_CHARS)  # type: ignore[pydantic-field]
