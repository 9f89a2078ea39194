"""validate_candidate: run the harness child, then decide from its raw samples.

The child (``child.py``) does everything that touches user code; this side only starts it
(``proc.stream``: argument list, time limit, process group killed), relays its progress,
recomputes the confidence interval from the raw per-round samples (seeded, so the same
samples give the same decision), applies the speed-of-light check and writes the verdict.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mcp_server.core import proc
from mcp_server.core.atomic import atomic_write_text
from mcp_server.core.envvars import env
from mcp_server.core.errors import ToolMissingError
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.paths import PACKAGE_DIR
from mcp_server.core.vocab import ProgressFn, WarningCode
from mcp_server.validate import stats
from mcp_server.validate.models import (
    CacheTiming,
    Check,
    Correctness,
    DeviceInfo,
    Offender,
    Patch,
    Roofline,
    ShapeTiming,
    Speedup,
    TimeSummary,
    Timing,
    ValidationResult,
)
from mcp_server.validate.requests import ValidateRequest
from mcp_server.validate.spec import Spec, eval_expr, load_spec

#: Checks whose failure means the spec (inputs, tolerance) is unusable, not that the candidate is wrong.
SPEC_CHECKS = ("inputs_random", "baseline_within_tolerance")
#: Plausibility slack: a time below 0.9x the roofline floor is flagged.
ROOFLINE_SLACK = 0.9
_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
_FLOPS_KEY = {"bfloat16": "bf16_tflops", "float16": "fp16_tflops", "float32": "fp32_tflops",
              "float64": "fp64_tflops"}


#: Seconds the caller waits past the supervisor's own time limit before killing its process group.
SUPERVISOR_GRACE_S = 20.0
MEMORY_ENV = "KERNELSCOPE_VALIDATE_MEMORY"


def harness_memory_limit() -> int | None:
    """Bytes of resident memory the harness tree may hold: ``KERNELSCOPE_VALIDATE_MEMORY`` (e.g. 16G; 0, none
    or off for no limit), else half the machine's memory, at most 64 GiB (a kernel harness needs a few GB;
    the rest stays for the machine)."""
    from mcp_server.core.limits import parse_size

    raw = (env(MEMORY_ENV) or "").strip()
    if raw.lower() in ("0", "none", "off"):
        return None
    if raw:
        return parse_size(raw, MEMORY_ENV)
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 64 << 30
    return min(64 << 30, total // 2)


@engine(ValidateRequest)
def validate_candidate(req: ValidateRequest, progress: ProgressFn | None = None) -> ValidationResult:
    """Accept the candidate only when it is correct on fresh inputs and faster with confidence: the spec is run in
    a fresh child process (under this interpreter), the verdict decided here from its raw samples."""
    import importlib.util

    spec = load_spec(req.spec_path, req.model_dump(exclude={"spec_path", "timeout_s"}))
    timeout_s = float(req.timeout_s) if req.timeout_s is not None else 2 * spec.time_budget_s + 120
    if importlib.util.find_spec("torch") is None:  # without torch the harness cannot start
        raise ToolMissingError(f"validate needs torch, which is not installed for {sys.executable}",
                               hint="install the gpu extra (pip install 'kernelscope[gpu]') or run where torch is")
    state: dict[str, Any] = {"result": None, "last": "starting the harness", "clocks": None, "supervisor": None}
    is_cuda = spec.device.startswith("cuda")

    def on_line(line: str) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if not isinstance(msg, dict):
            return
        if msg.get("type") == "progress":
            state["last"] = msg.get("message") or state["last"]
            if is_cuda and state["clocks"] is None and str(msg.get("message", "")).startswith("timing ("):
                state["clocks"] = _gpu_clocks(spec.device)
            if progress is not None:
                progress(float(msg.get("done") or 0), msg.get("total"), msg.get("message"))
        elif msg.get("type") == "result":
            state["result"] = msg
        elif msg.get("type") == "supervisor":
            state["supervisor"] = msg

    env = dict(os.environ)
    root = str(PACKAGE_DIR.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    with tempfile.TemporaryDirectory(prefix="kscope-validate-") as tmp:
        cfg_path = Path(tmp) / "config.json"
        atomic_write_text(cfg_path, json.dumps(asdict(spec)), what="harness config")
        py = sys.executable
        memory = harness_memory_limit()
        # the supervisor reaps whatever the candidate starts and holds the time and memory limits (supervise.py)
        args = [py, "-m", "mcp_server.validate.supervise", "--timeout", f"{timeout_s:g}", "--memory", str(memory or 0),
                "--parent", str(os.getpid()), "--", py, "-m", "mcp_server.validate.child", str(cfg_path)]
        pr = proc.stream(args, timeout=timeout_s + SUPERVISOR_GRACE_S, on_line=on_line, cwd=spec.search_dirs[0],
                         env=env)
    if is_cuda and state["clocks"] is None and state["result"] is not None:
        state["clocks"] = _gpu_clocks(spec.device)
    sup = state["supervisor"] or {}
    res = build_result(spec, state["result"], timed_out=pr.timed_out or sup.get("event") == "time", rc=pr.rc,
                       stderr=pr.stderr, last=state["last"], timeout_s=timeout_s, clocks=state["clocks"],
                       memory=sup if sup.get("event") == "memory" else None)
    if sup.get("stray_killed"):
        res.warnings.append(Warning_(code=WarningCode.harness_strays_killed, message=(
            f"the candidate left {sup['stray_killed']} process(es) running after the harness ended (detached "
            "with a double fork or setsid, say); they were killed")))
    return res


# ---------------------------------------------------------------------------
# the decision
# ---------------------------------------------------------------------------

def build_result(spec: Spec, raw: dict | None, *, timed_out: bool, rc: int | None, stderr: str,
                 last: str, timeout_s: float, clocks: dict | None, memory: dict | None = None) -> ValidationResult:
    settings = spec.settings()
    settings["timeout_s"] = timeout_s
    stderr_tail = "\n".join(stderr.strip().splitlines()[-15:]) or None
    if memory is not None or raw is None:
        return _no_result(spec, settings, stderr_tail, memory=memory, timed_out=timed_out, rc=rc, last=last,
                          timeout_s=timeout_s)
    warnings = [Warning_(code=w["code"], message=w["message"]) for w in raw.get("warnings", [])]
    reasons: list[str] = []
    correctness = _correctness(spec, raw)
    checks = correctness.checks
    dev = raw.get("device") or {}
    timing, speedup, roofline, error_tail = None, None, None, None
    error = raw.get("error")
    spec_bad = [c for c in checks if not c.passed and c.name in SPEC_CHECKS]
    failed = [c for c in checks if not c.passed]
    if error is not None:
        reasons.append(error["message"])
        tb = error.get("traceback") or ""
        error_tail = "\n".join(tb.strip().splitlines()[-8:]) or stderr_tail
        verdict = "error"
    elif spec_bad:
        reasons += [f"{c.name}: {c.detail}" for c in spec_bad]
        verdict = "error"
    else:
        reasons += [f"{c.name}: {c.detail}" for c in failed]
        raw_t = raw.get("timing")
        if raw_t:
            timing, speedup = _timing(spec, raw_t, warnings, raw.get("graph_check"))
            roofline = _roofline(spec, raw, timing, dev, warnings)
        if failed:
            verdict = "rejected"
        elif timing is None or speedup is None:
            reasons.append("no timing came back from the harness")
            verdict = "error"
        elif roofline is not None and roofline.implausible and roofline.basis == "spec":
            reasons.append(f"implausible: {roofline.detail}")
            verdict = "rejected"
        else:
            verdict = "accepted" if _faster(spec, speedup, reasons) else "not_faster"
    return ValidationResult(
        accepted=verdict == "accepted", verdict=verdict, reasons=reasons, correctness=correctness, speedup=speedup,
        mode=spec.mode, timing=timing, device=_device(dev, clocks), roofline=roofline,
        patched=[Patch(**p) for p in raw.get("patched", [])], settings=settings,
        wall_s={k: float(v) for k, v in (raw.get("wall") or {}).items() if v is not None}, stderr_tail=error_tail,
        warnings=warnings)


def _no_result(spec: Spec, settings: dict[str, Any], stderr_tail: str | None, *, memory: dict | None,
               timed_out: bool, rc: int | None, last: str, timeout_s: float) -> ValidationResult:
    """The error verdict of a harness that brought no result back: killed for memory or time, or exited early."""
    if memory is not None:
        limit, peak = memory.get("memory_limit") or 0, memory.get("peak_rss") or 0
        reason = (f"memory: the harness and what it started held {peak >> 20} MiB, over their limit of "
                  f"{limit >> 20} MiB, and were killed (last step: {last}); raise it with {MEMORY_ENV}=<size>")
        stopped_by: str | None = "memory"
    elif timed_out:
        reason = f"the harness did not finish within timeout_s = {timeout_s:g} s and was killed (last step: {last})"
        stopped_by = "time"
    else:
        reason = f"the harness child exited with status {rc} without a result (last step: {last})"
        stopped_by = None
    return ValidationResult(accepted=False, verdict="error", reasons=[reason], stopped_by=stopped_by,
                            correctness=Correctness(passed=False), mode=spec.mode, settings=settings,
                            stderr_tail=stderr_tail, warnings=[])


def _correctness(spec: Spec, raw: dict) -> Correctness:
    """The harness's checks and worst offenders; correct when every check passed and nothing raised."""
    checks = [Check(name=c["name"], passed=c["passed"], detail=c.get("detail", ""),
                    failures=c.get("failures", 0)) for c in raw.get("checks", [])]
    worst = [Offender(shape=w["shape"], seed=w["seed"], output=w["output"], index=w["index"],
                      candidate=w.get("candidate"), reference=w.get("reference"), abs_err=w.get("abs_err"))
             for w in raw.get("worst", [])]
    correct = bool(checks) and raw.get("error") is None and all(c.passed for c in checks)
    return Correctness(passed=correct, checks=checks, max_abs_err=raw.get("max_abs_err"),
                       max_rel_err=raw.get("max_rel_err"), worst=worst, shapes=len(spec.shapes), seeds=spec.seeds)


def _device(dev: dict, clocks: dict | None) -> DeviceInfo | None:
    if not dev:
        return None
    return DeviceInfo(kind=dev.get("kind", "cpu"), name=dev.get("name", "?"), l2_bytes=dev.get("l2_bytes"),
                      torch=dev.get("torch"),
                      clocks_mhz=(clocks or {}).get("clocks_mhz") if dev.get("kind") == "cuda" else _cpu_clocks(),
                      driver=(clocks or {}).get("driver"))


def _faster(spec: Spec, speedup: Speedup, reasons: list[str]) -> bool:
    """Whether the interval's lower bound clears 1 + min_gain; the reason either way."""
    bar = 1.0 + spec.min_gain
    med = "n/a" if speedup.median is None else f"{speedup.median:.4f}"
    if speedup.ci_low is not None and speedup.ci_high is not None:
        iv = f"speedup {med} [{speedup.ci_low:.4f}, {speedup.ci_high:.4f}] ({spec.confidence:.0%})"
    else:  # too few rounds for an interval (a short time budget): never accepted on the median alone
        iv = f"speedup {med} (no {spec.confidence:.0%} interval: too few timing rounds)"
    accepted = speedup.ci_low is not None and speedup.ci_low > bar
    if accepted:
        reasons.append(f"correct on {len(spec.shapes)} shape(s) x {spec.seeds} seeds; {iv}: lower bound "
                       f"clears {bar:.4f} (1 + min_gain)")
    else:
        reasons.append(f"correct, but {iv}: lower bound does not clear {bar:.4f} (1 + min_gain)")
    return accepted


def _summary(xs: list[float]) -> TimeSummary:
    return TimeSummary(**stats.summary_us(xs))


def _speedup(iv: stats.Interval, a: list[float], b: list[float]) -> Speedup:
    """The interval as reported, with the share of the rounds ``a``, ``b`` (per-round times) the candidate won."""
    return Speedup(median=_fin(iv.median), ci_low=_fin(iv.ci_low), ci_high=_fin(iv.ci_high),
                   confidence=iv.confidence, half_width=_fin(iv.half_width),
                   fraction_faster=_fin(stats.fraction_faster(a, b)))


def _timing(spec: Spec, t: dict, warnings: list[Warning_], graph_check: list | None = None
            ) -> tuple[Timing, Speedup]:
    a, b = t["baseline_s"], t["candidate_s"]
    shapes_a = [ps["baseline_s"] for ps in t["per_shape"]]
    shapes_b = [ps["candidate_s"] for ps in t["per_shape"]]
    if len(shapes_a) > 1 and all(len(x) == len(a) for x in shapes_a + shapes_b):
        # several shapes: the ratio of the summed per-shape medians, consistent with the per-shape speedups
        iv = stats.summed_medians_ci(shapes_a, shapes_b, confidence=spec.confidence, seed=spec.seed)
    else:
        iv = stats.ratio_of_medians_ci(a, b, confidence=spec.confidence, seed=spec.seed)
    speedup = _speedup(iv, a, b)
    per_shape = []
    for shape, ps in zip(spec.shapes, t["per_shape"]):
        sa, sb = _summary(ps["baseline_s"]), _summary(ps["candidate_s"])
        ratio = sa.median / sb.median if sb.median > 0 else math.nan
        per_shape.append(ShapeTiming(shape=shape, baseline_us=sa, candidate_us=sb, speedup=ratio))
        if len(spec.shapes) > 1 and ratio < 0.98:
            warnings.append(Warning_(code=WarningCode.slower_on_shape,
                                     message=f"the candidate is slower on shape {shape}: {ratio:.3f}x"))
    other = None
    o = t.get("other")
    if o:
        oa, ob = o["baseline_s"], o["candidate_s"]
        iv = stats.ratio_of_medians_ci(oa, ob, confidence=spec.confidence, n_boot=stats.N_BOOT_CHECK,
                                       seed=spec.seed + 1)
        other = CacheTiming(cache=o["cache"], baseline_us=_summary(oa), candidate_us=_summary(ob), rounds=o["rounds"],
                            speedup=_speedup(iv, oa, ob))
    if t["stop"] != "ci_narrow" and (speedup.half_width is None or speedup.half_width > spec.ci_half_width):
        hw = "unbounded" if speedup.half_width is None else f"±{speedup.half_width:.2%}"
        warnings.append(Warning_(code=WarningCode.budget_exhausted,
                                 message=f"sampling stopped ({t['stop']}) after {t['rounds']} rounds with the "
                                         f"interval at {hw}, wider than ±{spec.ci_half_width:.2%}; raise "
                                         "time_budget_s for a sharper answer"))
    timing = Timing(
        baseline_us=_summary(a), candidate_us=_summary(b), samples=len(a) * len(spec.shapes), rounds=len(a),
        cache=t["cache"], method=t["method"],
        calls_per_sample=[r * c for r, c in zip(t["reps"], t["copies"])], input_copies=t["copies"],
        stop=t["stop"], elapsed_s=t["elapsed_s"], sync_overhead_us=float(t.get("overhead_s") or 0) * 1e6,
        per_shape=per_shape, other_cache=other, graph_check=graph_check,
    )
    return timing, speedup


def _peaks(name: str) -> tuple[dict[str, float], str] | None:
    """Peak values (max of datasheet and measured) for a device name from gpu_specs.toml."""
    from mcp_server.core.gpu_specs import find_gpu, load_gpu_specs

    spec = find_gpu(name, load_gpu_specs())
    if spec is None:
        return None
    vals = dict(spec.datasheet)
    for k, v in spec.measured.items():
        vals[k] = max(v, vals.get(k, v))
    return vals, f"gpu_specs.toml [{spec.key}] (max of datasheet and measured)"


def _roofline(spec: Spec, raw: dict, timing: Timing, dev: dict, warnings: list[Warning_]) -> Roofline:
    if dev.get("kind") != "cuda":
        return Roofline(checked=False, detail="no peaks for CPUs: speed-of-light check skipped")
    try:
        found = _peaks(dev.get("name", ""))
    except Exception as exc:  # a malformed table must not hide the verdict
        warnings.append(Warning_(code=WarningCode.roofline_unchecked, message=f"gpu_specs.toml unreadable: {exc}"))
        return Roofline(checked=False, detail=f"gpu_specs.toml unreadable: {exc}")
    if found is None:
        warnings.append(Warning_(code=WarningCode.roofline_unchecked,
                                 message=f"no entry for {dev.get('name')!r} in gpu_specs.toml; speed-of-light "
                                         "check skipped"))
        return Roofline(checked=False, detail="device not in gpu_specs.toml")
    peaks, source = found
    bw = peaks.get("hbm_tb_s", 0) * 1e12
    fl = peaks.get(_FLOPS_KEY[spec.dtype], 0) * 1e12
    basis = "spec" if (spec.bytes or spec.flops) else "inferred"
    eb = _DTYPE_BYTES[spec.dtype]
    io = raw.get("io_bytes") or []
    flagged = []
    for si, st in enumerate(timing.per_shape):
        floor = 0.0
        parts = []
        nbytes = eval_expr(spec.bytes, st.shape, eb) if spec.bytes else (io[si] if si < len(io) else None)
        # warm (L2-resident) data may legitimately beat the DRAM roof: bytes bound only when cold
        if nbytes and bw and timing.cache == "cold":
            floor = max(floor, nbytes / bw)
            parts.append(f"{nbytes / 1e6:.3g} MB at {bw / 1e12:.3g} TB/s")
        if spec.flops and fl:
            nfl = eval_expr(spec.flops, st.shape, eb)
            floor = max(floor, nfl / fl)
            parts.append(f"{nfl / 1e9:.3g} GFLOP at {fl / 1e12:.4g} TFLOP/s")
        if floor > 0:
            st.floor_us = floor * 1e6
            st.floor_basis = "; ".join(parts)
            if st.candidate_us.median < ROOFLINE_SLACK * st.floor_us:
                flagged.append(f"shape {st.shape}: candidate {st.candidate_us.median:.3g} µs < "
                               f"{ROOFLINE_SLACK:g} x floor {st.floor_us:.3g} µs ({st.floor_basis})")
    if flagged:
        detail = "faster than the roofline allows: " + "; ".join(flagged)
        if basis == "inferred":
            warnings.append(Warning_(code=WarningCode.faster_than_roofline,
                                     message=detail + " (bytes inferred from input+output sizes; give 'bytes' "
                                                      "and 'flops' in the spec to make this decide)"))
        return Roofline(checked=True, source=source, basis=basis, detail=detail, implausible=True)
    return Roofline(checked=True, source=source, basis=basis, detail="every shape within the roofline")


def _fin(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _gpu_clocks(device: str) -> dict | None:
    idx = device.split(":", 1)[1] if ":" in device else "0"
    r = proc.run(["nvidia-smi", f"--id={idx}",
                  "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,driver_version",
                  "--format=csv,noheader,nounits"], timeout=10) if shutil.which("nvidia-smi") else None
    if r is None or r.rc != 0 or not r.stdout.strip():
        return None
    parts = [p.strip() for p in r.stdout.strip().splitlines()[0].split(",")]
    if len(parts) < 5:
        return None
    names = ("sm", "mem", "max_sm", "max_mem")
    clocks = {}
    for n, v in zip(names, parts[:4]):
        try:
            clocks[n] = float(v)
        except ValueError:
            pass
    return {"clocks_mhz": clocks or None, "driver": parts[4]}


def _cpu_clocks() -> dict[str, float] | None:
    try:
        mhz = [float(line.split(":", 1)[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
               if line.startswith("cpu MHz")]
    except (OSError, ValueError):
        return None
    return {"mean": sum(mhz) / len(mhz), "max": max(mhz)} if mhz else None

