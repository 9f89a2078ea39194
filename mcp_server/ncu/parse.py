"""``parse_ncu``: Nsight Compute results into per-kernel profiles: ``.ncu-rep`` (``repfile``: NVIDIA's
``ncu-report`` package, else the installed ncu's own ``extras/python/ncu_report.py``) and CSV (``csvfile``).

CSV shapes handled (all seen from ncu 2025.3 on the H200, tests/fixtures/ncu):

* raw page: one row per launch, metric names as columns, a units row under the header
  (``--print-units base`` or ``auto``); values may carry thousands separators (``"2,592"``);
* details page: one row per (launch, metric) with ``Section Name, Metric Name, Metric Unit,
  Metric Value`` and, in newer versions, rule columns; section metrics are named by label
  (``Duration``, ``ms``), explicit ``--metrics`` by their ncu names;
* ``ncu --csv`` written to stdout: ``==PROF==`` / ``==WARNING==`` lines and the application's
  own output before, between and after the rows;
* NVTX range columns; the older layout without Block/Grid/Device/CC columns.

``n/a`` (and ``no data``) is *missing*, never 0. Metric names are normalised through the
catalogue (aliases across ncu versions and architectures resolve to one canonical name; the
names it does not know are listed in ``unrecognized_metrics``, never dropped silently).
FP32 instruction counts and DRAM bytes recorded only as rates (SpeedOfLight's roofline) are
turned into counts per launch. Launches are grouped per kernel (name, grid, block, NVTX range, registers
and static shared memory: one name can be several binaries): launch count,
duration stats, metrics averaged (rates weighted by duration) and the per-launch rows kept.
Compressed inputs (``.xz``, ``.gz``) are read transparently.
"""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Optional

from mcp_server.core.errors import FileMissingError, InputError
from mcp_server.core.kernel_names import display_kernel_name
from mcp_server.core.operation import engine
from mcp_server.ncu import catalogue as cat
from mcp_server.ncu.csvfile import read_csv
from mcp_server.ncu.models import DurationStats, KernelProfile, LaunchRow, NcuProfile, Source
from mcp_server.ncu.raw import RawLaunch, base_suffix, cache_control_in_log, uncompressed_name, warn
from mcp_server.ncu.repfile import read_report
from mcp_server.ncu.requests import ParseNcuRequest


def _report_stem(name: str) -> Optional[str]:
    """REPORT of REPORT.ncu-rep or of one of its CSV exports (compression suffixes gone); None for another name."""
    for suf in (".ncu-rep", ".raw_auto.csv", ".raw.csv", ".details.csv", ".csv"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return None


def _log_beside(path: Path) -> Optional[Path]:
    stem = _report_stem(uncompressed_name(path.name))
    if stem is None:
        return None
    cand = path.parent / (stem + ".log")
    return cand if cand.is_file() else None


def read_sidecar(path: Path) -> tuple[Optional[dict], Optional[Path]]:
    """The ``REPORT.ncu-rep.json`` sidecar of a report or of its CSV export, if one is there."""
    name = uncompressed_name(path.name)
    stem = _report_stem(name)
    if stem is None:
        stem = name
    for cand in (path.parent / f"{name}.json", path.parent / f"{stem}.ncu-rep.json"):
        if cand.is_file():
            try:
                data = json.loads(cand.read_text())
            except (ValueError, UnicodeDecodeError):
                return None, cand
            return (data if isinstance(data, dict) else None), cand
    return None, None


#: Per-launch rows keep the headline metrics (every metric of every launch stays in the report itself).
LAUNCH_ROW_METRICS = ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "l2_hit_rate_pct")


def _counts_from_rates(m: dict[str, Optional[float]]) -> None:
    """Fill a launch's FP32 instruction counts and DRAM bytes from the rates SpeedOfLight's roofline records
    (per elapsed cycle x SM sub-partition clock x duration; bytes per second x duration) where the counts
    themselves are absent."""
    dur = m.get("duration_ns")
    if not dur:
        return
    hz = m.get("smsp_frequency_hz")
    for op in ("ffma", "fadd", "fmul"):
        rate = m.get(f"{op}_per_cycle")
        if m.get(f"{op}_thread_inst") is None and rate is not None and hz:
            m[f"{op}_thread_inst"] = rate * hz * dur * 1e-9
    bps = m.get("dram_bytes_per_s")
    if m.get("dram_bytes") is None and bps is not None:
        m["dram_bytes"] = bps * dur * 1e-9


def _aggregate(launches: list[RawLaunch]) -> list[KernelProfile]:
    for la in launches:
        _counts_from_rates(la.metrics)
    groups: dict[tuple, list[RawLaunch]] = {}
    for la in launches:
        # registers and static shared memory belong to the binary: launches of one name, grid and block that
        # differ in them are different kernels (NVRTC or Triton specializations), never averaged together
        binary = (la.metrics.get("registers_per_thread"), la.metrics.get("shared_mem_static_bytes"))
        groups.setdefault((la.name, la.grid, la.block, la.nvtx, binary), []).append(la)
    kernels: list[KernelProfile] = []
    all_canon = list(cat.CATALOGUE)
    for (name, grid, block, _nvtx, _binary), ls in groups.items():
        durs = [la.metrics.get("duration_ns") for la in ls]
        dvals = [d for d in durs if d is not None]
        stats = DurationStats(total=sum(dvals), mean=statistics.fmean(dvals) if dvals else 0.0,
                              median=statistics.median(dvals) if dvals else 0.0,
                              min=min(dvals) if dvals else 0.0, max=max(dvals) if dvals else 0.0)
        metrics: dict[str, Optional[float]] = {}
        present = set().union(*(la.metrics.keys() for la in ls))
        for c in all_canon:
            if c not in present:
                continue
            vals = [(la.metrics.get(c), la.metrics.get("duration_ns")) for la in ls]
            pairs = [(v, w) for v, w in vals if v is not None]
            if not pairs:
                metrics[c] = None
                continue
            weights = [w for _, w in pairs if w]
            if cat.CATALOGUE[c].unit in cat.INTENSIVE_UNITS and len(weights) == len(pairs):
                metrics[c] = sum(v * (w or 0.0) for v, w in pairs) / sum(weights)
            else:
                metrics[c] = statistics.fmean(v for v, _ in pairs)
        arch = cat.arch_of(next((la.cc for la in ls if la.cc), None))
        expected = {c for c in all_canon if cat.CATALOGUE[c].collect
                    and (not cat.CATALOGUE[c].by_arch or arch in cat.CATALOGUE[c].by_arch)}
        missing = [c for c in all_canon if c in expected and metrics.get(c) is None]
        metrics = {c: v for c, v in metrics.items() if v is not None}  # n/a and absent: named in `missing`
        kp = KernelProfile(
            id=ls[0].id, name=name, short_name=display_kernel_name(name, 60), launches=len(ls), duration_ns=stats,
            grid=grid, block=block, nvtx="/".join(dict.fromkeys(la.nvtx for la in ls if la.nvtx)) or None,
            metrics=metrics, missing=missing,
            launch_rows=[LaunchRow(id=la.id, duration_ns=la.metrics.get("duration_ns"), nvtx=la.nvtx,
                                   metrics={c: la.metrics.get(c) for c in LAUNCH_ROW_METRICS if c in la.metrics})
                         for la in ls],
        )
        _derive(kp)
        kernels.append(kp)
    kernels.sort(key=lambda k: -k.duration_ns.total)
    return kernels


def _derive(k: KernelProfile) -> None:
    m = k.metrics
    k.registers_per_thread = m.get("registers_per_thread")
    st, dy = m.get("shared_mem_static_bytes"), m.get("shared_mem_dynamic_bytes")
    k.shared_mem_bytes = None if st is None and dy is None else (st or 0.0) + (dy or 0.0)
    k.waves_per_sm = m.get("waves_per_sm")
    limits = {n: m.get(f"occupancy_limit_{n}") for n in ("registers", "shared_mem", "blocks", "warps")}
    known = {n: v for n, v in limits.items() if v is not None}
    if known:
        lo = min(known.values())
        # name the binding limit; ties: registers/shared memory first (what a kernel author can change)
        k.occupancy_limiter = next(n for n in ("registers", "shared_mem", "warps", "blocks")
                                   if n in known and known[n] == lo)
    stalls = [(c[6:], v) for c, v in m.items() if c.startswith("stall_") and v is not None
              and c not in ("stall_selected",)]
    k.top_stalls = sorted(stalls, key=lambda t: -t[1])[:3]
    ffma, fadd, fmul = m.get("ffma_thread_inst"), m.get("fadd_thread_inst"), m.get("fmul_thread_inst")
    tensor = m.get("tensor_ops_bf16")
    if ffma is not None or fadd is not None or fmul is not None or tensor is not None:
        k.flops = 2 * (ffma or 0) + (fadd or 0) + (fmul or 0) + (tensor or 0)
    rd, wr = m.get("dram_read_bytes"), m.get("dram_write_bytes")
    if rd is not None or wr is not None:
        k.dram_bytes = (rd or 0) + (wr or 0)
    elif m.get("dram_bytes") is not None:  # one counter (dram__bytes.sum, or its rate x duration)
        k.dram_bytes = m["dram_bytes"]
    if k.flops is not None and k.dram_bytes:
        k.arithmetic_intensity = k.flops / k.dram_bytes


@engine(ParseNcuRequest)
def parse_ncu(req: ParseNcuRequest) -> NcuProfile:
    """Read an ``.ncu-rep`` or ncu CSV into per-kernel profiles (no verdicts)."""
    cache_control, gpu = req.cache_control, req.gpu
    p = Path(req.path)
    if p.is_dir():
        found = sorted(q.name for q in p.iterdir() if q.is_file() and base_suffix(q) in (".ncu-rep", ".csv"))
        listed = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise InputError("is a directory, not a report", path=p, hint=(
            f"give one of its reports, e.g. {p / found[0]} (it holds {listed})" if found
            else "give a .ncu-rep or an ncu CSV file; this directory holds none"))
    if not p.exists():
        raise FileMissingError("no such file", path=p, hint="give a .ncu-rep or an ncu CSV")
    is_rep = base_suffix(p) == ".ncu-rep" or p.read_bytes()[:3] == b"NVR"
    raw = read_report(p) if is_rep else read_csv(p)
    warnings = list(raw.warnings)
    side, side_path = read_sidecar(p)
    cc_from = None
    cc: Optional[str] = cache_control
    if cc is not None:
        cc_from = "argument"
    elif side and side.get("cache_control") in ("all", "none"):
        cc, cc_from = side["cache_control"], "sidecar"
    elif raw.cache_control is not None:
        cc, cc_from = raw.cache_control, "report"
    else:
        log = _log_beside(p)
        if log is not None:
            cc = cache_control_in_log(log.read_text(errors="replace"))
            cc_from = "log" if cc else None
    if cache_control is not None and side and side.get("cache_control") not in (None, cache_control):
        warnings.append(warn("cache_control_conflict",
                              f"cache_control={cache_control} given, but the sidecar {side_path} records "
                              f"{side.get('cache_control')}; using the argument"))
    device = next((la.device for la in raw.launches if la.device), None)
    if device is None and side and isinstance(side.get("gpu"), dict):
        device = side["gpu"].get("name")
    kernels = _aggregate(raw.launches)
    n_missing = sum(1 for la in raw.launches if la.metrics.get("duration_ns") is None)
    if n_missing:
        warnings.append(warn("metric_missing", f"{n_missing} launch(es) have no duration (gpu__time_duration "
                                                f"absent or n/a); their kernels' time shares are understated",
                              n_missing))
    all_na = [c for c in ("sm_throughput_pct", "memory_throughput_pct")
              if all(k.metrics.get(c) is None for k in kernels)]
    if all_na:
        warnings.append(warn("metric_missing", "no kernel has " + ", ".join(all_na) +
                              " (absent or n/a): collect the SpeedOfLight section"))
    version = (side or {}).get("ncu_version")
    if version:
        mv = re.search(r"(\d{4}\.\d+(\.\d+)*)", str(version))
        version = mv.group(1) if mv else str(version)
    return NcuProfile(
        source=Source(path=str(p), format=raw.format, ncu_version=version,
                      cache_control=cc, cache_control_from=cc_from,
                      clock_control=(side or {}).get("clock_control"), device=device,
                      sidecar=str(side_path) if side_path else None),
        gpu=gpu, total_duration_ns=sum(k.duration_ns.total for k in kernels), kernels=kernels,
        unrecognized_metrics=raw.unrecognized, warnings=warnings)
