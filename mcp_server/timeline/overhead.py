"""Probe overhead: the same kernel timed with and without probes (CUDA events, medians).

Three ways in:

* :func:`overhead_from_samples` - two lists of per-launch times (us) you measured yourself;
* :func:`time_callables` - two Python callables launching the kernel with and without probes
  (e.g. a Triton kernel with a ``PROBE`` constexpr), timed interleaved with torch CUDA events;
* :func:`build_and_time` - a CUDA source built twice with nvcc (with and without
  ``-DKERNELSCOPE_PROBE``), each binary run once; the binary prints one line
  ``KS_TIMING <build> <variant> <us> <us> ...`` per variant (see tools/timeline_phases.cu).

The figures travel as JSON (``<buffer stem>.overhead.json`` beside a buffer is picked up by
``timeline analyze``): ``with_probes_us``, ``without_probes_us`` (lists of per-launch times),
optional ``noise_pct`` (spread between two probe-free runs) and ``method``.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import tempfile
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from mcp_server.core import proc
from mcp_server.core.errors import BufferFormatError, FileMissingError, InputError, ToolMissingError
from mcp_server.timeline import INCLUDE_DIR
from mcp_server.timeline.models import ProbeOverhead


def _iqr_rel(xs: Sequence[float]) -> float:
    if len(xs) < 4:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    med = statistics.median(xs)
    return 100.0 * (q[2] - q[0]) / 2.0 / med if med else 0.0


def overhead_from_samples(with_us: Sequence[float], without_us: Sequence[float], *, method: str = "",
                          noise_pct: Optional[float] = None, source: Optional[str] = None) -> ProbeOverhead:
    if not with_us or not without_us:
        raise InputError("probe overhead needs at least one timing with and one without probes")
    w, wo = statistics.median(with_us), statistics.median(without_us)
    if wo <= 0:
        raise InputError(f"probe-free median time is {wo} us; timings must be positive")
    pct = 100.0 * (w - wo) / wo
    spread = max(_iqr_rel(with_us), _iqr_rel(without_us), noise_pct or 0.0)
    return ProbeOverhead(
        with_median_us=round(w, 3), without_median_us=round(wo, 3), overhead_pct=round(pct, 3),
        samples=min(len(with_us), len(without_us)), noise_pct=noise_pct,
        within_noise=abs(pct) <= spread, method=method, source=source)


def load_overhead(path: Union[str, os.PathLike]) -> ProbeOverhead:
    p = Path(path)
    if not p.exists():
        raise FileMissingError("probe overhead file not found", path=p)
    from mcp_server.core.limits import human, limit, over

    if p.is_file() and p.stat().st_size > limit("TEXT_FILE_BYTES"):
        raise over("TEXT_FILE_BYTES", "the probe overhead file", human(p.stat().st_size), path=p, unit="bytes")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"), parse_constant=_no_constant, parse_float=_finite)
        if not isinstance(doc, dict):
            raise TypeError("top level is not an object")
        medians = _medians_only(doc)
        noise = doc.get("noise_pct")
        noise_f = float(noise) if noise is not None else None
        if medians is not None:
            return overhead_from_medians(*medians, samples=int(doc.get("samples") or 0), noise_pct=noise_f,
                                         method=str(doc.get("method", "")), source=str(p))
        w = [float(x) for x in doc["with_probes_us"]]
        wo = [float(x) for x in doc["without_probes_us"]]
    except RecursionError:
        raise BufferFormatError("not a probe overhead file (JSON nested too deeply)", path=p) from None
    except (ValueError, KeyError, TypeError, OverflowError, OSError) as exc:
        raise BufferFormatError(
            f"not a probe overhead file ({_why(exc)})", path=p,
            hint="expected JSON with lists with_probes_us and without_probes_us, or medians with_median_us and "
                 "without_median_us") from None
    return overhead_from_samples(w, wo, method=str(doc.get("method", "")), noise_pct=noise_f, source=str(p))


def _why(exc: BaseException) -> str:
    """Why the file is not an overhead file, in words that quote nothing it holds (a caller may name any file)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]} list"  # one of the two sample keys read above
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    if isinstance(exc, TypeError) and str(exc) == "top level is not an object":
        return str(exc)
    return "a value that is not a finite number"


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a measurement")


def _finite(text: str) -> float:
    v = float(text)
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]} is not a finite number")
    return v


#: keys other tools write the two medians under (kernelscope's own ProbeOverhead names first)
_MEDIAN_KEYS = (("with_median_us", "without_median_us"), ("with_probes_median_us", "without_probes_median_us"),
                ("with_probes_us", "without_probes_us"))


def _medians_only(doc: dict) -> Optional[tuple[float, float]]:
    """(with, without) medians of a file that holds no samples, or None when it holds sample lists."""
    if isinstance(doc.get("with_probes_us"), (list, tuple)) or isinstance(doc.get("without_probes_us"), (list, tuple)):
        return None
    for kw, kwo in _MEDIAN_KEYS:
        if kw in doc and kwo in doc:
            a, b = doc[kw], doc[kwo]
            if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
                return None
            return float(a), float(b)
    return None


def overhead_from_medians(with_median_us: float, without_median_us: float, *, samples: int = 0,
                          noise_pct: Optional[float] = None, method: str = "",
                          source: Optional[str] = None) -> ProbeOverhead:
    """Overhead from two medians alone (no samples: the spread is only what ``noise_pct`` says)."""
    if without_median_us <= 0 or with_median_us <= 0:
        raise InputError(f"probe overhead medians must be positive, got {with_median_us} and {without_median_us} us",
                         path=source)
    pct = 100.0 * (with_median_us - without_median_us) / without_median_us
    return ProbeOverhead(
        with_median_us=round(with_median_us, 3), without_median_us=round(without_median_us, 3),
        overhead_pct=round(pct, 3), samples=samples, noise_pct=noise_pct,
        within_noise=noise_pct is not None and abs(pct) <= noise_pct,
        method=(method + "; " if method else "") + "medians only (no samples in the file)", source=source)


def write_overhead(path: Union[str, os.PathLike], with_us: Sequence[float], without_us: Sequence[float],
                   method: str = "", noise_pct: Optional[float] = None) -> Path:
    p = Path(path)
    doc: dict[str, object] = {"with_probes_us": list(map(float, with_us)),
                              "without_probes_us": list(map(float, without_us)), "method": method}
    if noise_pct is not None:
        doc["noise_pct"] = noise_pct
    from mcp_server.core.atomic import atomic_write_text

    return atomic_write_text(p, json.dumps(doc, indent=1), what="overhead file")


def time_callables(with_probes: Callable[[], object], without_probes: Callable[[], object], *,
                   warmup: int = 5, reps: int = 30, before_each: Optional[Callable[[], object]] = None,
                   method: str = "torch CUDA events per launch, interleaved") -> ProbeOverhead:
    """Time two launchers interleaved on the current CUDA device; medians over ``reps``."""
    try:
        import torch
    except ImportError:  # pragma: no cover - needs the gpu extra
        raise ToolMissingError("timing needs torch with CUDA (pip install 'kernelscope[gpu]')") from None
    if not torch.cuda.is_available():
        raise ToolMissingError("no CUDA device: probe overhead must be measured on a GPU")
    for _ in range(warmup):
        with_probes()
        without_probes()
    torch.cuda.synchronize()
    res: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(reps):
        for flag, fn in ((False, without_probes), (True, with_probes)):
            if before_each is not None:
                before_each()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            e1.synchronize()
            res[flag].append(e0.elapsed_time(e1) * 1000.0)
    return overhead_from_samples(res[True], res[False], method=method)


def _run(cmd: list[str], timeout: float) -> proc.ProcResult:
    """``cmd`` through the one subprocess runner; a run past ``timeout`` is an error."""
    res = proc.run(cmd, timeout=timeout)
    if res.timed_out:
        raise InputError(f"{cmd[0]} ran past {timeout:.0f} s and was killed")
    return res


def parse_timing_lines(text: str) -> dict[str, dict[str, list[float]]]:
    """``KS_TIMING <build> <variant> <us>...`` lines -> {build: {variant: [us, ...]}}."""
    out: dict[str, dict[str, list[float]]] = {}
    for line in text.splitlines():
        m = re.match(r"\s*KS_TIMING\s+(\S+)\s+(\S+)\s+(.*)$", line)
        if m:
            out.setdefault(m.group(1), {})[m.group(2)] = [float(x) for x in m.group(3).split()]
    return out


def build_and_time(source: Union[str, os.PathLike], run_args: Sequence[str] = (), *, variant: str,
                   nvcc: str = "nvcc", arch: str = "sm_90", extra_flags: Sequence[str] = (),
                   workdir: Union[None, str, os.PathLike] = None, timeout: float = 300.0) -> ProbeOverhead:
    """Build ``source`` with and without ``-DKERNELSCOPE_PROBE``, run both, compare ``variant``'s times.

    The program is run as ``exe *run_args <build>`` with build ``probe`` or ``noprobe`` appended and
    must print ``KS_TIMING <build> <variant> <us>...``.
    """
    src = Path(source)
    if not src.exists():
        raise FileMissingError("CUDA source not found", path=src)
    wd = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ks_overhead_"))
    times: dict[str, list[float]] = {}
    for build, flags in (("noprobe", []), ("probe", ["-DKERNELSCOPE_PROBE"])):
        exe = wd / f"{src.stem}_{build}"
        cmd = [nvcc, "-O3", f"-arch={arch}", "-I", str(INCLUDE_DIR), *flags, *extra_flags, str(src), "-o", str(exe)]
        try:
            cp = _run(cmd, timeout)
        except FileNotFoundError:
            raise ToolMissingError(f"{nvcc} not found: building with and without probes needs the CUDA "
                                   "toolkit") from None
        if cp.rc != 0:
            raise InputError(f"nvcc failed building {src} ({build}): {cp.stderr.strip()[-800:]}", path=src)
        cp = _run([str(exe), *run_args, build], timeout)
        if cp.rc != 0:
            raise InputError(f"{exe.name} exited with {cp.rc}: {cp.stderr.strip()[-800:]}")
        got = parse_timing_lines(cp.stdout).get(build, {}).get(variant)
        if not got:
            raise InputError(f"{exe.name} printed no 'KS_TIMING {build} {variant} ...' line")
        times[build] = got
    return overhead_from_samples(times["probe"], times["noprobe"], source=str(src),
                                 method=f"nvcc -O3 -arch={arch}, with/without -DKERNELSCOPE_PROBE, CUDA events per "
                                        "launch")
