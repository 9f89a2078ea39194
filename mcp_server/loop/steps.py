"""The loop's steps as injectable callables, and their default: the declared MCP operations.

The loop adds nothing the tools cannot do: by default each step calls the operation an
agent would call (``run_ncu``, ``classify_bottleneck`` / ``select_candidate``,
``validate_candidate``) through ``mcp_server.faces``, with the same request validation.
Tests (and other drivers) pass their own ``LoopSteps``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

from mcp_server.core.errors import ToolMissingError
from mcp_server.core.replay_dir import ReproTarget

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
    -> Selection``; ``validate(spec) -> validate_candidate result (JSON dict)``."""

    profile: Callable[[list[str], Path, Optional[str]], Path]
    select: Callable[[Path, Optional[str]], Selection]
    validate: Callable[[SpecArg], dict[str, Any]]


# ---------------------------------------------------------------------------
# Default: the declared operations
# ---------------------------------------------------------------------------

def _operation(tool: str):
    from mcp_server.faces.registry import operations
    for op in operations():
        if op.tool == tool:
            return op
    raise ToolMissingError(f"the {tool} operation is not available in this build",
                           hint="install kernelscope with its ncu and validate engines")


def call_tool(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call a declared operation as the MCP face would (validated request, full answer) and return its JSON."""
    op = _operation(tool)
    from pydantic import ValidationError

    from mcp_server.core.errors import InputError
    from mcp_server.core.operation import invalid_arguments
    args = {k: v for k, v in arguments.items() if k in op.field_names}
    if "detail" in op.field_names:
        args["detail"] = True
    try:
        req = op.make_request(args)
    except ValidationError as exc:  # a spec the tool refuses (dtype="int8"): the same one-line text as its faces
        raise InputError(invalid_arguments(tool, exc)) from None
    res = op.call(req)
    return res.model_dump(mode="json")


def _first(names: tuple[str, ...], available: tuple[str, ...]) -> Optional[str]:
    return next((n for n in names if n in available), None)


def _ncu_profile(target: list[str], report: Path, cache_control: Optional[str],
                 replay: Optional[ReproTarget] = None) -> Path:
    op = _operation("run_ncu")
    fields = op.field_names
    args: dict[str, Any] = {op.remainder or "target": list(target)}
    if replay is not None:  # run_ncu expands the directory into ``target`` (replay.argv) and the op's NVTX range
        args.update({op.remainder or "target": [str(replay.directory)], "repro_op": replay.op})
    out_field = _first(("output", "report", "out", "output_path", "report_path"), fields)
    if out_field:
        args[out_field] = str(report)
    if cache_control and "cache_control" in fields:
        args["cache_control"] = cache_control
    if "overwrite" in fields:  # the loop names its reports; one there is its own leftover (engine.report_path)
        args["overwrite"] = True
    res = call_tool("run_ncu", args)
    for k in ("report", "report_path", "output", "path"):
        v = res.get(k)
        if isinstance(v, str) and v:
            return Path(v)
        if isinstance(v, dict) and isinstance(v.get("path"), str):
            return Path(v["path"])
    return report


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return "; ".join(_text(x) for x in v if x)
    if isinstance(v, dict):
        return "; ".join(f"{k}: {_text(x)}" for k, x in v.items() if x not in (None, "", [], {}))
    return str(v)


def _kinds(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    out = []
    for x in v:
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, dict):
            out.append(str(x.get("kind") or x.get("name") or x.get("change") or x))
    return out


def compact_classification(res: dict[str, Any]) -> dict[str, Any]:
    """Per-kernel class / limiter / residency / confidence / time share from a classify or select answer."""
    kernels = []
    total = 0.0
    for k in res.get("kernels") or []:
        d = (k.get("duration_ns") or {}).get("total")
        total += d if isinstance(d, (int, float)) else 0.0
    for k in res.get("kernels") or []:
        b = k.get("bottleneck") or {}
        d = (k.get("duration_ns") or {}).get("total")
        share = k.get("time_share", k.get("share"))
        if share is None and total and isinstance(d, (int, float)):
            share = d / total
        kernels.append({"name": k.get("name"), "short_name": k.get("short_name"), "launches": k.get("launches"),
                        "class": b.get("class"), "limiter": b.get("limiter"), "l2_resident": b.get("l2_resident"),
                        "confidence": b.get("confidence"), "share": share,
                        "advice": b.get("advice") or []})
    if not kernels:  # select_candidate's answer: one ranking row per kernel
        for r in res.get("ranking") or []:
            kernels.append({"name": r.get("short_name"), "short_name": r.get("short_name"), "class":
                            r.get("bottleneck_class"), "limiter": r.get("limiter"), "share": r.get("time_share"),
                            "score": r.get("score"), "why_not": r.get("why_not")})
    src = res.get("source") or {}
    return {"kernels": kernels, "gpu": res.get("gpu"), "cache_control": src.get("cache_control"),
            "ncu_version": src.get("ncu_version"), "format": src.get("format")}


def selection_from(res: dict[str, Any], classification: Optional[dict[str, Any]] = None) -> Selection:
    """Read select_candidate's answer (its candidate, diagnosis, fitting / unfitting change kinds);
    ``classification``, a classify_bottleneck answer for the same report, gives the per-kernel record."""
    cls = compact_classification(classification if classification is not None else res)
    cand = res.get("candidate")
    if isinstance(cand, str):
        cand = {"name": cand}
    if not isinstance(cand, dict) or not (cand.get("name") or cand.get("short_name")):
        reason = _text(res.get("reason") or res.get("stop_reason")) or "; ".join(
            str(w.get("message")) for w in res.get("warnings") or []
            if isinstance(w, dict) and w.get("code") == "no_candidate") or "no candidate"
        cls["candidate"] = None
        return Selection(kernel=None, classification=cls, stop_reason=reason)
    b = cand.get("bottleneck") or {}
    diag = _text(res.get("diagnosis") or cand.get("diagnosis"))
    if not diag and b:
        res_txt = {True: "L2-resident", False: "not L2-resident", None: "residency unknown"}.get(
            b.get("l2_resident"), "residency unknown")
        diag = f"{b.get('class')} on {b.get('limiter') or '?'} ({res_txt}"
        share = cand.get("time_share")
        if isinstance(share, (int, float)):
            diag += f", {share:.0%} of kernel time"
        if isinstance(b.get("confidence"), (int, float)):
            diag += f", confidence {b['confidence']:.2f}"
        diag += ")"
        if b.get("advice"):
            diag += ": " + _text(b.get("advice"))
    avoid = _kinds(res.get("does_not_fit") or res.get("avoid") or cand.get("avoid"))
    fits = _kinds(res.get("fits") or cand.get("fits"))
    cls["candidate"] = cand.get("name") or cand.get("short_name")
    cls["diagnosis"] = diag
    cls["fits"], cls["does_not_fit"] = fits, avoid
    return Selection(kernel=cand.get("name") or cand.get("short_name"), short_name=cand.get("short_name"),
                     diagnosis=diag, classification=cls, avoid=avoid, fits=fits)


def _ncu_select(gpu: Optional[str]) -> Callable[[Path, Optional[str]], Selection]:
    def select(report: Path, cache_control: Optional[str]) -> Selection:
        args: dict[str, Any] = {"path": str(report)}
        if gpu:
            args["gpu"] = gpu
        if cache_control:
            args["cache_control"] = cache_control
        return selection_from(call_tool("select_candidate", args), call_tool("classify_bottleneck", args))
    return select


def _validate(spec: SpecArg) -> dict[str, Any]:
    if isinstance(spec, Path):
        return call_tool("validate_candidate", {"spec_path": str(spec)})
    return call_tool("validate_candidate", dict(spec))


def default_steps(gpu: Optional[str] = None, replay: Optional[ReproTarget] = None) -> LoopSteps:
    """The declared operations; with ``replay`` (a repro op as the target) run_ncu profiles that op alone."""
    def profile(target: list[str], report: Path, cache_control: Optional[str]) -> Path:
        return _ncu_profile(target, report, cache_control, replay)

    return LoopSteps(profile=profile if replay is not None else _ncu_profile, select=_ncu_select(gpu),
                     validate=_validate)
