"""Request model of the loop (docs/ARCHITECTURE.md, "Three faces")."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from mcp_server.core.argbounds import NameArg, PathArg, PathList
from mcp_server.core.operation import WritesOutputs


class LoopRequest(WritesOutputs):
    target: PathList = Field(min_length=1, description=(
        "The target's argument list, e.g. [\"python\", \"bench.py\", \"--size\", \"big\"] (CLI: after --); or one "
        "make_repro directory ([\"out/attn\"]): its op `repro_op` is profiled alone, and proposals may give "
        "`candidate` instead of `spec` to be validated against that op's spec (spec_OP.toml)"))
    repro_op: Optional[NameArg] = Field(default=None, max_length=16, pattern=r"^op[0-9]+$", description=(
        "With a make_repro directory as the target: the op to work on (default op0, the slowest); profiled as "
        "run_ncu's repro_op is (its replay alone, its NVTX range the kernel filter)"))
    iters: int = Field(default=5, ge=1, le=1000, description="Proposals to validate in this run at most")
    proposals: Optional[PathArg] = Field(default=None, description=(
        "Proposals file (TOML [[proposal]] tables: id, text, kernel, kind, spec = a validate_candidate spec, or "
        "candidate = 'file.py:function' with a repro directory as the target, apply = file swap or git patch). "
        "Without it the loop profiles, selects and stops, showing the candidate"))
    profile: Optional[PathArg] = Field(default=None, description=(
        "Use this ncu report (.ncu-rep or CSV) instead of running ncu (runs without ncu)"))
    ledger: Optional[PathArg] = Field(default=None, description=(
        "Ledger file (default: $KERNELSCOPE_LEDGER, else ./.kernelscope/ledger.db)"))
    gpu: Optional[NameArg] = Field(default=None, description="GPU of the spec table for the roofline, e.g. h200")
    cache_control: Optional[Literal["all", "none"]] = Field(default=None, description=(
        "ncu cache control: none (warm) is needed for L2-residency verdicts; default run_ncu's"))
    max_rejects: int = Field(default=3, ge=1, description=(
        "Stop after this many rejected proposals in a row (an error, a change not applied, does not count)"))
    by: NameArg = Field(default="loop", min_length=1, description="Who the decisions are recorded as made by")
    fresh: bool = Field(default=False, description=(
        "Start a new experiment instead of resuming the last one of this target (rejected proposals stay skipped)"))
