"""Run a target under Nsight Compute: argument lists only, a time limit, typed failures.

The target is an argument list (``["python", "bench.py", "--n", "4"]``), never a shell
string. ncu always writes ``-o REPORT.ncu-rep --log-file REPORT.log`` so the application's
output never mixes with the data (the application's own stdout/stderr go to
``REPORT.app.txt``); a sidecar ``REPORT.ncu-rep.json`` records the exact argv, versions,
cache and clock control and the GPU. Progress counts the ``==PROF== Profiling`` lines of the
log as ncu writes them. On timeout the whole process group is killed and the partial report
is not parsed.
"""
from __future__ import annotations

import datetime as _dt
import glob
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from mcp_server import __version__
from mcp_server.core.errors import InputError, KernelscopeError, ToolMissingError
from mcp_server.core.models import Warning_
from mcp_server.ncu import catalogue as cat
from mcp_server.ncu.models import NcuRun
from mcp_server.ncu.parse import _warn

ProgressFn = Callable[[float, "float | None", "str | None"], None]


class NcuNotFoundError(ToolMissingError):
    """No ncu executable could be found."""


class NcuPermissionError(KernelscopeError):
    """The driver refuses access to the GPU performance counters (ERR_NVGPUCTRPERM)."""


class NcuProfilerLoadError(KernelscopeError):
    """ncu could not load its profiler library in this environment (some sandboxed GPU runtimes)."""


class NcuNoKernelsError(KernelscopeError):
    """ncu ran, but no kernel was profiled (the filters matched nothing, or the target launched none)."""


class NcuTargetFailedError(KernelscopeError):
    """The profiled target exited with a non-zero code before any kernel was profiled."""


class NcuTimeoutError(KernelscopeError):
    """The run passed its time limit; the process group was killed."""


PERM_FIX = ("run as root, give the process CAP_SYS_ADMIN, or set the driver option "
            "NVreg_RestrictProfilingToAdminUsers=0 (options nvidia in /etc/modprobe.d, then reload the driver)")

_LOAD_PATTERNS = ("LibraryNotLoaded", "Failed to initialize the profiler", "Failed to load",
                  "could not be loaded", "Profiling is not supported", "Device not supported")


CUDA_NCU = "/usr/local/cuda/bin/ncu"
NSIGHT_GLOB = "/opt/nvidia/nsight-compute/*/ncu"


def find_ncu(explicit: Optional[str] = None) -> str:
    """``--ncu PATH``, ``$NCU``, ``PATH``, ``/usr/local/cuda/bin``, ``/opt/nvidia/nsight-compute/*``."""
    tried: list[str] = []
    cands: list[str] = []
    if explicit:
        cands.append(explicit)
    elif os.environ.get("NCU"):
        cands.append(os.environ["NCU"])
    else:
        w = shutil.which("ncu")
        if w:
            cands.append(w)
        cands.append(CUDA_NCU)
        cands += sorted(glob.glob(NSIGHT_GLOB), reverse=True)
    for c in cands:
        tried.append(c)
        p = shutil.which(c) if os.sep not in c else (c if os.path.isfile(c) and os.access(c, os.X_OK) else None)
        if p:
            return p
    where = "the ncu given" if explicit else (
        "$NCU" if os.environ.get("NCU") else "PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute/*")
    raise NcuNotFoundError(f"ncu (Nsight Compute CLI) not found: looked in {where} ({', '.join(tried) or 'nothing'})",
                           hint="install Nsight Compute, or pass --ncu PATH / set NCU")


def ncu_version(ncu: str) -> Optional[str]:
    from mcp_server.core import proc
    try:
        r = proc.run([ncu, "--version"], timeout=30)
    except OSError:
        return None
    m = re.search(r"Version\s+([\d.]+)", r.stdout + r.stderr)
    return m.group(1) if m else None


def gpu_info() -> dict:
    """Name and compute capability of GPU 0 from nvidia-smi (empty when there is none)."""
    from mcp_server.core import proc
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    try:
        r = proc.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"], timeout=20)
    except OSError:
        return {}
    line = (r.stdout.splitlines() or [""])[0]
    parts = [s.strip() for s in line.split(",")]
    return {"name": parts[0], "cc": parts[1]} if len(parts) >= 2 and parts[0] else {}


def report_paths(report: str) -> tuple[Path, Path, Path, Path]:
    """(report.ncu-rep, report.log, report.ncu-rep.json, report.app.txt)."""
    rep = Path(report)
    if not rep.name.endswith(".ncu-rep"):
        rep = rep.with_name(rep.name + ".ncu-rep")
    stem = rep.with_name(rep.name[: -len(".ncu-rep")])
    return (rep, stem.with_name(stem.name + ".log"), rep.with_name(rep.name + ".json"),
            stem.with_name(stem.name + ".app.txt"))


def build_argv(ncu: str, target: Sequence[str], report: Path, log: Path, *, metric_set: str = "classify",
               arch: Optional[str] = None, set_name: Optional[str] = None, sections: Sequence[str] = (),
               metrics: Sequence[str] = (), kernel_name: Optional[str] = None, kernel_id: Optional[str] = None,
               launch_skip: Optional[int] = None, launch_count: Optional[int] = None,
               nvtx_include: Sequence[str] = (), nvtx_exclude: Sequence[str] = (), cache_control: str = "all",
               clock_control: str = "none", profile_from_start: bool = True,
               target_processes: str = "all", replay_mode: Optional[str] = None,
               overwrite: bool = False) -> list[str]:
    """The ncu argument list (no shell): report + log always, then collection, filters, the target."""
    if not target:
        raise InputError("no target: give the command to profile after --", hint="e.g. -- python bench.py")
    argv = [ncu, "-o", str(report), "--log-file", str(log)]
    if overwrite:
        argv.append("-f")
    argv += ["--cache-control", cache_control, "--clock-control", clock_control,
             "--target-processes", target_processes]
    if replay_mode:
        argv += ["--replay-mode", replay_mode]
    if not profile_from_start:
        argv += ["--profile-from-start", "off"]
    if set_name:
        argv += ["--set", set_name]
    secs: list[str] = []
    mets: list[str] = []
    if metric_set == "classify":
        secs += list(cat.DEFAULT_SECTIONS)
        mets += cat.collect_names(arch)
    elif metric_set == "minimal":
        mets += cat.minimal_names()
    elif metric_set != "none":
        raise InputError(f"metric_set={metric_set!r} is not one of classify, minimal, none")
    for s in list(sections):
        if s not in secs:
            secs.append(s)
    for m in metrics:
        for part in str(m).split(","):
            if part.strip() and part.strip() not in mets:
                mets.append(part.strip())
    for s in secs:
        argv += ["--section", s]
    if mets:
        argv += ["--metrics", ",".join(mets)]
    if kernel_name:
        argv += ["--kernel-name", kernel_name]
    if kernel_id:
        argv += ["--kernel-id", kernel_id]
    if launch_skip is not None:
        argv += ["--launch-skip", str(int(launch_skip))]
    if launch_count is not None:
        argv += ["--launch-count", str(int(launch_count))]
    if nvtx_include or nvtx_exclude:
        argv.append("--nvtx")
        for x in nvtx_include:
            argv += ["--nvtx-include", x]
        for x in nvtx_exclude:
            argv += ["--nvtx-exclude", x]
    return argv + list(target)


def _tail(text: str, n: int = 15) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[-1500:]


def diagnose(log_text: str, rc: Optional[int], n_profiled: int, filters: str,
             report: Path) -> Optional[KernelscopeError]:
    """The typed failure an ncu log shows, or None."""
    if "ERR_NVGPUCTRPERM" in log_text:
        return NcuPermissionError("the driver does not allow access to the GPU performance counters "
                                  "(ERR_NVGPUCTRPERM)", hint=PERM_FIX)
    for pat in _LOAD_PATTERNS:
        if pat in log_text:
            line = next((ln.strip() for ln in log_text.splitlines() if pat in ln), pat)
            return NcuProfilerLoadError(f"ncu cannot load the profiler here: {line[:300]}",
                                        hint="some sandboxed GPU runtimes cannot host ncu; use a machine with full "
                                             "driver access (counters are never estimated instead)")
    if n_profiled == 0:
        if rc not in (0, None):
            return NcuTargetFailedError(f"the target exited with code {rc} before any kernel was profiled; "
                                        f"log tail: {_tail(log_text)}", path=report)
        return NcuNoKernelsError(f"no kernels were profiled ({filters or 'no filters'}); "
                                 f"log tail: {_tail(log_text, 5)}",
                                 hint="check --kernel-name/--kernel-id/--launch-skip/NVTX filters, and that the "
                                      "target launches GPU work")
    return None


def run_ncu(target: list[str], report: str = "kernelscope_ncu", ncu: Optional[str] = None,
            repro_op: Optional[str] = None, metric_set: str = "classify", set_name: Optional[str] = None,
            sections: Optional[list[str]] = None,
            metrics: Optional[list[str]] = None, kernel_name: Optional[str] = None, kernel_id: Optional[str] = None,
            launch_skip: Optional[int] = None, launch_count: Optional[int] = None,
            nvtx_include: Optional[list[str]] = None, nvtx_exclude: Optional[list[str]] = None,
            cache_control: str = "all", clock_control: str = "none", profile_from_start: bool = True,
            target_processes: str = "all", replay_mode: Optional[str] = None, overwrite: bool = False,
            timeout_s: float = 600.0, cwd: Optional[str] = None, parse: bool = True,
            progress: Optional[ProgressFn] = None) -> NcuRun:
    """Profile ``target`` with ncu into a report, a log and a sidecar; parse the report when asked.

    A target that is one make_repro directory profiles one of its ops (``repro_op``, default op0): the target
    becomes the replay of that op alone and the kernel filter its NVTX range (``replay_dir``)."""
    from mcp_server.core import proc
    from mcp_server.core.atomic import atomic_write_text, check_output_path
    from mcp_server.core.replay_dir import repro_target

    if timeout_s <= 0:
        raise InputError(f"timeout_s={timeout_s} must be positive")
    replay = repro_target(target, repro_op, cwd)
    if replay is not None:
        if nvtx_include:
            raise InputError(f"nvtx_include is set by the repro target (the range {replay.nvtx_include} of "
                             f"{replay.op}): leave it out", hint="narrow further with kernel_name or launch_count")
        target, nvtx_include = list(replay.argv), [replay.nvtx_include]
    exe = find_ncu(ncu)
    rep, log, side, app = report_paths(report)
    check_output_path(rep, "ncu report")
    if rep.exists() and not overwrite:
        raise InputError("report exists", path=rep, hint="pass overwrite=true (--overwrite) or another --report")
    for stale in (log,):
        if stale.exists():
            stale.unlink()
    version = ncu_version(exe)
    gpu = gpu_info()
    arch = cat.arch_of(gpu.get("cc"))
    argv = build_argv(exe, target, rep, log, metric_set=metric_set, arch=arch, set_name=set_name,
                      sections=sections or (), metrics=metrics or (), kernel_name=kernel_name, kernel_id=kernel_id,
                      launch_skip=launch_skip, launch_count=launch_count, nvtx_include=nvtx_include or (),
                      nvtx_exclude=nvtx_exclude or (), cache_control=cache_control, clock_control=clock_control,
                      profile_from_start=profile_from_start, target_processes=target_processes,
                      replay_mode=replay_mode, overwrite=overwrite)
    count = 0

    def on_line(line: str) -> None:
        nonlocal count
        if line.startswith("==PROF==") and "Profiling" in line:
            count += 1
            if progress is not None:
                m = re.search(r'Profiling "([^"]*)"', line)
                progress(count, float(launch_count) if launch_count else None,
                         f"profiled {count}: {m.group(1) if m else 'kernel'}")

    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    try:
        res = proc.run_watched(argv, timeout=timeout_s, watch=log, on_line=on_line, cwd=cwd)
    except FileNotFoundError as exc:
        raise NcuNotFoundError(f"cannot start {exe}: {exc}") from None
    wall = time.monotonic() - t0
    log_text = log.read_text(errors="replace") if log.is_file() else ""
    atomic_write_text(app, res.stdout + ("\n" if res.stdout and res.stderr else "") + res.stderr, "application output")
    filters = ", ".join(f"{k}={v}" for k, v in (("kernel_name", kernel_name), ("kernel_id", kernel_id),
                                                 ("launch_skip", launch_skip), ("launch_count", launch_count),
                                                 ("nvtx_include", nvtx_include), ("nvtx_exclude", nvtx_exclude)) if v)
    sidecar = {
        "kernelscope_ncu_sidecar": 1, "argv": argv, "target": list(target), "ncu": exe, "ncu_version": version,
        "cache_control": cache_control, "clock_control": clock_control, "gpu": gpu, "started": started,
        "wall_s": round(wall, 3), "rc": res.rc, "timed_out": res.timed_out, "kernels_profiled": count,
        "filters": filters or None, "kernelscope": __version__,
    }
    if replay is not None:
        sidecar["repro"] = {"dir": str(replay.directory), "op": replay.op, "name": replay.name}
    atomic_write_text(side, json.dumps(sidecar, indent=1) + "\n", "ncu sidecar")
    if res.timed_out:
        raise NcuTimeoutError(f"ncu ran past timeout_s={timeout_s:g} s after {count} profiled kernel(s); the process "
                              f"group was killed and the partial report is not parsed", path=rep,
                              hint="raise timeout_s, or narrow with --kernel-name/--launch-count")
    combined = log_text + "\n" + res.stderr
    err = diagnose(combined, res.rc, count, filters, rep)
    if err is not None:
        raise err
    warnings: list[Warning_] = []
    if res.rc not in (0, None):
        warnings.append(_warn("target_failed", f"the target exited with code {res.rc} after {count} profiled "
                              f"kernel(s); the report holds what was profiled. Log tail: {_tail(log_text, 5)}"))
    if not rep.is_file():
        raise NcuNoKernelsError(f"ncu wrote no report ({count} kernels counted); log tail: {_tail(log_text, 5)}",
                                path=rep)
    profile = None
    if parse:
        from mcp_server.ncu.parse import parse_ncu

        try:
            profile = parse_ncu(str(rep))
        except ToolMissingError as exc:
            warnings.append(_warn("report_not_parsed", str(exc)))
    return NcuRun(report=str(rep), log=str(log), sidecar=str(side), app_output=str(app), argv=argv, ncu=exe,
                  replay=None if replay is None else f"{replay.directory} {replay.op} ({replay.name})",
                  ncu_version=version, cache_control=cache_control, clock_control=clock_control,
                  gpu=gpu.get("name"), kernels_profiled=count, target_rc=res.rc, wall_s=round(wall, 3),
                  profile=profile, warnings=warnings)
