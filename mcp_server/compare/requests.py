"""Request models of the compare operations (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from mcp_server.core.argbounds import CATEGORIES_HELP, NameList, PathArg, PathList
from mcp_server.core.operation import SizedRequest, WritesOutputs, top_n_field

SIDE_HELP = "Side {}: trace (.json/.json.gz) or report (.xlsx, kernelscope or trace_module_analyzer)"
Labels = Optional[NameList]
LABELS_FIELD = Field(default=None, min_length=2, max_length=2,
                     description="Two labels for A and B (default: file names)")
PHASE_FIELD = Field(default=None, description="Keep only this phase's kernels")
PER_STEP_FIELD = Field(default=None, description=(
    "Divide each side by its step count (graph replays + eager forward calls); default: automatic when the "
    "counts differ and the kernels per step agree; false keeps whole totals"))


class RecategorizeRequest(SizedRequest, WritesOutputs):
    paths: PathList = Field(min_length=1, description="Report workbooks (.xlsx) to update")
    categories: Optional[PathArg] = Field(default=None, description=CATEGORIES_HELP)
    output_dir: Optional[PathArg] = Field(default=None, description=(
        "Write updated copies here instead of editing in place"))


class BudgetRequest(SizedRequest):
    a: PathArg = Field(description=SIDE_HELP.format("A"))
    b: PathArg = Field(description=SIDE_HELP.format("B"))
    labels: Labels = LABELS_FIELD
    phase: Optional[Literal["prefill", "decode"]] = PHASE_FIELD
    categories: Optional[PathArg] = Field(default=None, description=CATEGORIES_HELP)
    per_step: Optional[bool] = PER_STEP_FIELD


class DiffModulesRequest(SizedRequest, WritesOutputs):
    top_n: int = top_n_field(4, "Blocks kept in the answer (largest |gap| first; kernels per block: half as many, "
                                "at least 3)")
    a: PathArg = Field(description=SIDE_HELP.format("A"))
    b: PathArg = Field(description=SIDE_HELP.format("B"))
    labels: Labels = LABELS_FIELD
    categories: Optional[PathArg] = Field(default=None, description=CATEGORIES_HELP)
    blocks: Optional[PathArg] = Field(default=None, description=(
        "Functional blocks CSV; default: the shared functional_blocks.csv"))
    phase: Optional[Literal["prefill", "decode"]] = PHASE_FIELD
    output_xlsx: Optional[PathArg] = Field(default=None, description=(
        "Write the diff workbook (.xlsx) here"))
    output_html: Optional[PathArg] = Field(default=None, description=(
        "Write a self-contained HTML report here"))
    reference_a: Optional[PathArg] = Field(default=None, description=(
        "Eager trace of A's model, or A's graph-capture trace, to attribute A's CUDA-graph replays to modules"))
    reference_b: Optional[PathArg] = Field(default=None, description=(
        "Eager trace of B's model, or B's graph-capture trace, to attribute B's CUDA-graph replays to modules"))
    per_step: Optional[bool] = PER_STEP_FIELD
