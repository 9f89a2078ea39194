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
from typing import Optional

from mcp_server import __version__
from mcp_server.core import proc
from mcp_server.core.atomic import atomic_write_text, check_output_path
from mcp_server.core.errors import InputError, KernelscopeError, ToolMissingError
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.core.replay_dir import ReproTarget, repro_target
from mcp_server.core.vocab import ProgressFn
from mcp_server.ncu import catalogue as cat
from mcp_server.ncu.models import NcuProfile, NcuRun
from mcp_server.ncu.raw import warn
from mcp_server.ncu.requests import RunNcuRequest


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
    for c in cands:  # the first that is an executable file
        p = shutil.which(c) if os.sep not in c else (c if os.path.isfile(c) and os.access(c, os.X_OK) else None)
        if p:
            return p
    where = "the ncu given" if explicit else (
        "$NCU" if os.environ.get("NCU") else "PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute/*")
    raise NcuNotFoundError(f"ncu (Nsight Compute CLI) not found: looked in {where} ({', '.join(cands) or 'nothing'})",
                           hint="install Nsight Compute, or pass --ncu PATH / set NCU")


def ncu_version(ncu: str) -> Optional[str]:
    try:
        r = proc.run([ncu, "--version"], timeout=30)
    except OSError:
        return None
    m = re.search(r"Version\s+([\d.]+)", r.stdout + r.stderr)
    return m.group(1) if m else None


def gpu_info() -> dict:
    """Name and compute capability of GPU 0 from nvidia-smi (empty when there is none)."""
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


def build_argv(ncu: str, req: RunNcuRequest, report: Path, log: Path, arch: Optional[str] = None) -> list[str]:
    """The ncu argument list (no shell): report + log always, then collection, filters, the target."""
    argv = [ncu, "-o", str(report), "--log-file", str(log)]
    if req.overwrite:
        argv.append("-f")
    argv += ["--cache-control", req.cache_control, "--clock-control", req.clock_control,
             "--target-processes", req.target_processes]
    if req.replay_mode:
        argv += ["--replay-mode", req.replay_mode]
    if not req.profile_from_start:
        argv += ["--profile-from-start", "off"]
    if req.set_name:
        argv += ["--set", req.set_name]
    secs, mets = _collection(req, arch)
    for s in secs:
        argv += ["--section", s]
    if mets:
        argv += ["--metrics", ",".join(mets)]
    if req.kernel_name:
        argv += ["--kernel-name", req.kernel_name]
    if req.kernel_id:
        argv += ["--kernel-id", req.kernel_id]
    if req.launch_skip is not None:
        argv += ["--launch-skip", str(int(req.launch_skip))]
    if req.launch_count is not None:
        argv += ["--launch-count", str(int(req.launch_count))]
    if req.nvtx_include or req.nvtx_exclude:
        argv.append("--nvtx")
        for x in req.nvtx_include or ():
            argv += ["--nvtx-include", x]
        for x in req.nvtx_exclude or ():
            argv += ["--nvtx-exclude", x]
    return argv + list(req.target)


def _collection(req: RunNcuRequest, arch: Optional[str]) -> tuple[list[str], list[str]]:
    """The sections and metrics to collect: the named metric set's, then the extra ones asked for."""
    secs: list[str] = []
    mets: list[str] = []
    if req.metric_set == "classify":
        secs += list(cat.DEFAULT_SECTIONS)
        mets += cat.collect_names(arch)
    elif req.metric_set == "minimal":
        mets += cat.minimal_names()
    for s in req.sections or ():
        if s not in secs:
            secs.append(s)
    for m in req.metrics or ():
        for part in str(m).split(","):
            if part.strip() and part.strip() not in mets:
                mets.append(part.strip())
    return secs, mets


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


@engine(RunNcuRequest)
def run_ncu(req: RunNcuRequest, progress: Optional[ProgressFn] = None) -> NcuRun:
    """Profile ``target`` with ncu into a report, a log and a sidecar; parse the report when asked.

    A target that is one make_repro directory profiles one of its ops (``repro_op``, default op0): the target
    becomes the replay of that op alone and the kernel filter its NVTX range (``replay_dir``)."""
    replay = repro_target(req.target, req.repro_op, req.cwd)
    if replay is not None:
        req = _replay_request(req, replay)
    exe = find_ncu(req.ncu)
    rep, log, side, app = _outputs(req)
    version = ncu_version(exe)
    gpu = gpu_info()
    argv = build_argv(exe, req, rep, log, arch=cat.arch_of(gpu.get("cc")))
    watch = _Watch(req.launch_count, progress)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.monotonic()
    try:
        res = proc.run_watched(argv, timeout=req.timeout_s, watch=log, on_line=watch.line, cwd=req.cwd)
    except FileNotFoundError as exc:
        raise NcuNotFoundError(f"cannot start {exe}: {exc}") from None
    wall = time.monotonic() - t0
    count = watch.count
    log_text = log.read_text(errors="replace") if log.is_file() else ""
    atomic_write_text(app, res.stdout + ("\n" if res.stdout and res.stderr else "") + res.stderr, "application output")
    filters = _filters(req)
    sidecar = {
        "kernelscope_ncu_sidecar": 1, "argv": argv, "target": list(req.target), "ncu": exe, "ncu_version": version,
        "cache_control": req.cache_control, "clock_control": req.clock_control, "gpu": gpu, "started": started,
        "wall_s": round(wall, 3), "rc": res.rc, "timed_out": res.timed_out, "kernels_profiled": count,
        "filters": filters or None, "kernelscope": __version__,
    }
    if replay is not None:
        sidecar["repro"] = {"dir": str(replay.directory), "op": replay.op, "name": replay.name}
    atomic_write_text(side, json.dumps(sidecar, indent=1) + "\n", "ncu sidecar")
    if res.timed_out:
        raise NcuTimeoutError(f"ncu ran past timeout_s={req.timeout_s:g} s after {count} profiled kernel(s); the "
                              f"process group was killed and the partial report is not parsed", path=rep,
                              hint="raise timeout_s, or narrow with --kernel-name/--launch-count")
    err = diagnose(log_text + "\n" + res.stderr, res.rc, count, filters, rep)
    if err is not None:
        raise err
    warnings: list[Warning_] = []
    if res.rc not in (0, None):
        warnings.append(warn("target_failed", f"the target exited with code {res.rc} after {count} profiled "
                              f"kernel(s); the report holds what was profiled. Log tail: {_tail(log_text, 5)}"))
    if not rep.is_file():
        raise NcuNoKernelsError(f"ncu wrote no report ({count} kernels counted); log tail: {_tail(log_text, 5)}",
                                path=rep)
    profile = _parsed(rep, warnings) if req.parse else None
    return NcuRun(report=str(rep), log=str(log), sidecar=str(side), app_output=str(app), argv=argv, ncu=exe,
                  replay=None if replay is None else f"{replay.directory} {replay.op} ({replay.name})",
                  ncu_version=version, cache_control=req.cache_control, clock_control=req.clock_control,
                  gpu=gpu.get("name"), kernels_profiled=count, target_rc=res.rc, wall_s=round(wall, 3),
                  profile=profile, warnings=warnings)


def _replay_request(req: RunNcuRequest, replay: ReproTarget) -> RunNcuRequest:
    """The request with a repro directory's op as the target: its replay alone, its NVTX range the filter."""
    if req.nvtx_include:
        raise InputError(f"nvtx_include is set by the repro target (the range {replay.nvtx_include} of "
                         f"{replay.op}): leave it out", hint="narrow further with kernel_name or launch_count")
    return req.model_copy(update={"target": list(replay.argv), "nvtx_include": [replay.nvtx_include]})


def _outputs(req: RunNcuRequest) -> tuple[Path, Path, Path, Path]:
    """The report, log, sidecar and application-output paths, checked; a stale log removed."""
    rep, log, side, app = report_paths(req.report)
    check_output_path(rep, "ncu report")
    if rep.exists() and not req.overwrite:
        raise InputError("report exists", path=rep, hint="pass overwrite=true (--overwrite) or another --report")
    if log.exists():
        log.unlink()
    return rep, log, side, app


class _Watch:
    """Counts the ``==PROF== Profiling`` lines of the log as ncu writes them, reporting each as progress."""

    def __init__(self, launch_count: Optional[int], progress: Optional[ProgressFn]):
        self.count = 0
        self.total = float(launch_count) if launch_count else None
        self.progress = progress

    def line(self, line: str) -> None:
        if line.startswith("==PROF==") and "Profiling" in line:
            self.count += 1
            if self.progress is not None:
                m = re.search(r'Profiling "([^"]*)"', line)
                self.progress(self.count, self.total, f"profiled {self.count}: {m.group(1) if m else 'kernel'}")


def _filters(req: RunNcuRequest) -> str:
    """The kernel filters given, as the sidecar and the no-kernels error name them."""
    return ", ".join(f"{k}={v}" for k, v in (("kernel_name", req.kernel_name), ("kernel_id", req.kernel_id),
                                             ("launch_skip", req.launch_skip), ("launch_count", req.launch_count),
                                             ("nvtx_include", req.nvtx_include), ("nvtx_exclude", req.nvtx_exclude))
                     if v)


def _parsed(rep: Path, warnings: list[Warning_]) -> Optional[NcuProfile]:
    """The report parsed into per-kernel profiles; None (with a warning) where ncu-report is not installed."""
    from mcp_server.ncu.parse import parse_ncu

    try:
        return parse_ncu(str(rep))
    except ToolMissingError as exc:
        warnings.append(warn("report_not_parsed", str(exc)))
        return None
