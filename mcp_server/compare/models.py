"""Result models of ``budget`` and ``diff_modules`` (pydantic only; cheap to import)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from mcp_server.core.models import Model, Warning_

SideKind = Literal["trace", "kernelscope-report", "upstream-report", "table"]


class SideInfo(Model):
    """Where one side of a comparison came from and what was used of it."""

    label: str
    path: str
    kind: SideKind
    source_table: str = Field(description="table the numbers come from: 'kernels' (full list) or 'GPU Kernels' "
                                          "(upstream)")
    truncated: bool = Field(False, description="the upstream table was cut at its row cap: totals are a lower bound")
    phase: Optional[str] = Field(None, description="phase filter applied (prefill | decode), if any")
    phases_present: list[str] = Field(default_factory=list)
    kernel_count: int
    total_us: float
    categories_sha256: str = ""
    reference: Optional[str] = Field(None, description="eager trace that attributed this side's CUDA-graph replays")
    reference_phase: Optional[str] = Field(None, description="that reference trace's phase (prefill | decode)")
    attribution_method: Optional[str] = Field(None, description="how replay kernels were attributed (same-trace, "
                                                                "reference-trace, unattributed)")
    attribution_confidence: Optional[float] = Field(None, description="mean confidence of the replay attribution")
    attribution_suspect: bool = Field(False, description="reference of another phase or low confidence: this side's "
                                                         "module blocks are not to be trusted")
    steps: Optional[int] = Field(None, description="steps (iterations / graph replays) found in the side, when known")


def side_reference(s: SideInfo) -> str:
    """', reference X (prefill, reference-trace, confidence 0.79, SUSPECT)' for the text faces; '' if none."""
    parts = []
    if s.steps:
        parts.append(f", {s.steps} step(s)")
    if s.reference:
        bits = [x for x in (s.reference_phase, s.attribution_method) if x]
        if s.attribution_confidence is not None:
            bits.append(f"confidence {s.attribution_confidence:.2f}")
        if s.attribution_suspect:
            bits.append("SUSPECT")
        parts.append(f", reference {s.reference}" + (f" ({', '.join(bits)})" if bits else ""))
    elif s.attribution_method == "unattributed":
        parts.append(", replays unattributed (no eager kernels to learn modules from: pass a reference)")
    elif s.attribution_method and s.attribution_confidence is not None:
        parts.append(f", replays attributed {s.attribution_method} (confidence {s.attribution_confidence:.2f})")
    return "".join(parts)


def fmt_ratio(r: Optional[float]) -> str:
    """A ratio for the text faces: ``1.25x``, ``—`` when there is none."""
    return "—" if r is None else f"{r:.2f}x"


class CategoryMismatch(Model):
    """A kernel whose stored category (in a report) differs from the current rules."""

    side: str
    kernel: str
    stored: str
    current: str
    us: float


class BudgetRow(Model):
    category: str
    a_us: float
    b_us: float
    a_pct: float = Field(description="share of side A's total, percent")
    b_pct: float = Field(description="share of side B's total, percent")
    a_count: int
    b_count: int
    gap_us: float = Field(description="b_us - a_us (positive: B spends more)")
    ratio: Optional[float] = Field(None, description="b_us / a_us (null when a_us is 0)")


class BudgetResult(Model):
    a: SideInfo
    b: SideInfo
    rows: list[BudgetRow] = Field(description="one per category, sorted by |gap_us| descending")
    total_a_us: float
    total_b_us: float
    gap_us: float
    ratio: Optional[float] = None
    mismatches: list[CategoryMismatch] = Field(default_factory=list)
    warnings: list[Warning_] = Field(default_factory=list)


class KernelRow(Model):
    """One unique kernel name inside a block on one side (all its launches summed)."""

    name: str
    category: str
    us: float
    count: int
    cpu_op: str = Field("", description="innermost cpu op of the launches ('' when the input lacks it)")
    input_dims: str = Field("", description="Input Dims of that cpu op ('' when not recorded)")


MatchKind = Literal["same", "renamed", "category", "time", "gone", "new"]


class KernelMatch(Model):
    """Which A kernel corresponds to which B kernel inside a block.

    ``same``/``renamed``: aligned by the LCS of normalised names (renamed: raw names differ);
    ``category``: replaced, paired by category; ``time``: replaced, paired across categories by
    time; ``gone``: A only; ``new``: B only. ``segment`` groups the kernels replaced together
    (-1 for LCS-aligned kernels).
    """

    kind: MatchKind
    a_name: Optional[str] = None
    b_name: Optional[str] = None
    a_category: Optional[str] = None
    b_category: Optional[str] = None
    a_us: float = 0.0
    b_us: float = 0.0
    a_count: int = Field(0, description="launches on side A")
    b_count: int = 0
    a_dims: str = Field("", description="input dims of the A kernel ('' when not recorded)")
    b_dims: str = ""
    segment: int = -1


class Annotation(Model):
    kind: Literal["FUSION", "IMPROVE", "MISSING"]
    side: Literal["a", "b"] = Field(description="FUSION: side with more kernels; IMPROVE: slower side; MISSING: side "
                                                "lacking the category")
    message: str
    kernels: list[str] = Field(default_factory=list, description="kernel names involved")
    category: Optional[str] = None


class BlockDiff(Model):
    block: str
    role: str = ""
    a_us: float
    b_us: float
    gap_us: float = Field(description="b_us - a_us")
    ratio: Optional[float] = None
    a_count: int = Field(description="kernel launches on side A")
    b_count: int
    optimize: bool = Field(False, description="largest |gap|: the block to work on first")
    slower: Optional[Literal["a", "b"]] = None
    module_types: list[str] = Field(default_factory=list, description="module keys that mapped to this block")
    a_kernels: list[KernelRow] = Field(default_factory=list)
    b_kernels: list[KernelRow] = Field(default_factory=list)
    matches: list[KernelMatch] = Field(default_factory=list)
    annotations: list[Annotation] = Field(default_factory=list)


class DiffResult(Model):
    a: SideInfo
    b: SideInfo
    blocks: list[BlockDiff] = Field(description="sorted by |gap_us| descending; the first is marked optimize")
    total_a_us: float
    total_b_us: float
    gap_us: float
    ratio: Optional[float] = None
    top_block: Optional[str] = None
    blocks_source: str = ""
    mismatches: list[CategoryMismatch] = Field(default_factory=list)
    output_xlsx: Optional[str] = None
    output_html: Optional[str] = None
    warnings: list[Warning_] = Field(default_factory=list)
