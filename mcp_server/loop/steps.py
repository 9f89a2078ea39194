"""The loop's steps as injectable callables, and their default: the ncu and validate engines.

The loop adds nothing the tools cannot do: by default each step calls the engine an agent's tool
call runs (``run_ncu``, ``select_candidate`` / ``classify_bottleneck``, ``validate_candidate``)
through its keyword form, which validates the arguments against the operation's request model and
refuses one with the faces' one-line text. The steps read the engines' typed results
(``ncu.models.NcuRun``, ``Selection``, ``Classification``; ``validate.models.ValidationResult``).
Tests (and other drivers) pass their own ``LoopSteps``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from mcp_server.core.replay_dir import ReproTarget
from mcp_server.core.vocab import WarningCode

if TYPE_CHECKING:  # the engines are imported when a step runs (torch stays out of listing tools)
    from mcp_server.ncu.models import Classification, ClassifiedKernel
    from mcp_server.ncu.models import Selection as NcuSelection

SpecArg = Union[Path, dict[str, Any]]


@dataclass
class Selection:
    """What select_candidate chose in one profile, reduced to what the loop needs."""

    kernel: Optional[str]                 # None: nothing worth work
    short_name: Optional[str] = None
    diagnosis: str = ""
    classification: dict[str, Any] = field(default_factory=dict)  # recorded with the profile
    avoid: list[str] = field(default_factory=list)  # kinds of change that do not fit (e.g. quantization)
    fits: list[str] = field(default_factory=list)   # kinds of change that fit
    stop_reason: Optional[str] = None     # why there is no candidate (at the roofline, below the share threshold)


@dataclass
class LoopSteps:
    """``profile(target, report_path, cache_control) -> report path`` (it may replace a file at report_path: the
    loop passes a free name or its own leftover); ``select(report, cache_control)
    -> Selection``; ``validate(spec) -> validate_candidate result (its JSON dict)``."""

    profile: Callable[[list[str], Path, Optional[str]], Path]
    select: Callable[[Path, Optional[str]], Selection]
    validate: Callable[[SpecArg], dict[str, Any]]


# ---------------------------------------------------------------------------
# Default: the engines
# ---------------------------------------------------------------------------

def _ncu_profile(target: list[str], report: Path, cache_control: Optional[str],
                 replay: Optional[ReproTarget] = None) -> Path:
    """run_ncu into ``report`` (replacing the loop's own leftover there: engine.report_path); with ``replay``
    run_ncu expands the make_repro directory into the op's replay and its NVTX range."""
    from mcp_server.ncu.runner import run_ncu

    args: dict[str, Any] = {"target": list(target), "report": str(report), "overwrite": True}
    if replay is not None:
        args.update(target=[str(replay.directory)], repro_op=replay.op)
    if cache_control:
        args["cache_control"] = cache_control
    return Path(run_ncu(**args).report)


def compact_classification(c: Classification) -> dict[str, Any]:
    """Per-kernel class / limiter / residency / confidence / time share of a classify_bottleneck result, and the
    profile's GPU, cache control, ncu version and format: what the ledger records with the profile."""
    kernels = [{"name": k.name, "short_name": k.short_name, "launches": k.launches,
                "class": k.bottleneck.class_, "limiter": k.bottleneck.limiter,
                "l2_resident": k.bottleneck.l2_resident, "confidence": k.bottleneck.confidence,
                "share": k.time_share, "advice": list(k.bottleneck.advice)} for k in c.kernels]
    return {"kernels": kernels, "gpu": c.gpu, "cache_control": c.source.cache_control,
            "ncu_version": c.source.ncu_version, "format": c.source.format}


def diagnosis_of(cand: ClassifiedKernel) -> str:
    """One line on the candidate: class, limiter, residency, time share, confidence, then the advice."""
    b = cand.bottleneck
    residency = {True: "L2-resident", False: "not L2-resident", None: "residency unknown"}[b.l2_resident]
    diag = (f"{b.class_} on {b.limiter or '?'} ({residency}, {cand.time_share:.0%} of kernel time, "
            f"confidence {b.confidence:.2f})")
    return diag + (": " + "; ".join(a for a in b.advice if a) if b.advice else "")


def selection_from(sel: NcuSelection, classification: Classification) -> Selection:
    """The loop's view of select_candidate's result (its candidate, diagnosis, fitting / unfitting change kinds)
    and, for the record, classify_bottleneck's on the same report."""
    cls = compact_classification(classification)
    cand = sel.candidate
    if cand is None:
        reason = "; ".join(w.message for w in sel.warnings if w.code == WarningCode.no_candidate)
        cls["candidate"] = None
        return Selection(kernel=None, classification=cls, stop_reason=reason or "no candidate")
    diag = diagnosis_of(cand)
    name = cand.name or cand.short_name
    cls["candidate"] = name
    cls["diagnosis"] = diag
    cls["fits"], cls["does_not_fit"] = list(sel.fits), list(sel.does_not_fit)
    return Selection(kernel=name, short_name=cand.short_name, diagnosis=diag, classification=cls,
                     avoid=list(sel.does_not_fit), fits=list(sel.fits))


def _ncu_select(report: Path, cache_control: Optional[str], gpu: Optional[str] = None) -> Selection:
    from mcp_server.ncu.classify import classify_bottleneck
    from mcp_server.ncu.select import select_candidate

    args: dict[str, Any] = {"path": str(report), "gpu": gpu, "cache_control": cache_control}
    return selection_from(select_candidate(**args), classify_bottleneck(**args))


def validate(spec: SpecArg) -> dict[str, Any]:
    """validate_candidate on a spec file, or on a proposal's inline spec (its fields as the tool's arguments:
    one its request model refuses is an InputError with the faces' text); its result as JSON."""
    from mcp_server.validate.engine import validate_candidate

    res = validate_candidate(spec_path=str(spec)) if isinstance(spec, Path) else validate_candidate(**spec)
    return res.model_dump(mode="json")


def default_steps(gpu: Optional[str] = None, replay: Optional[ReproTarget] = None) -> LoopSteps:
    """The engines; with ``replay`` (a repro op as the target) run_ncu profiles that op alone."""
    return LoopSteps(profile=functools.partial(_ncu_profile, replay=replay),
                     select=functools.partial(_ncu_select, gpu=gpu), validate=validate)
