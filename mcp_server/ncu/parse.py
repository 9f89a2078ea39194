"""Read Nsight Compute results: ``.ncu-rep`` (via NVIDIA's ``ncu-report`` package, else the installed ncu's
own ``extras/python/ncu_report.py``) and CSV.

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
turned into counts per launch. Launches are grouped per kernel (name, grid, block): launch count,
duration stats, metrics averaged (rates weighted by duration) and the per-launch rows kept.
Compressed inputs (``.xz``, ``.gz``) are read transparently.
"""
from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import lzma
import math
import re
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from mcp_server.core.errors import FileMissingError, InputError, ToolMissingError
from mcp_server.core.models import Warning_
from mcp_server.core.operation import engine
from mcp_server.ncu import catalogue as cat
from mcp_server.ncu.models import DurationStats, KernelProfile, LaunchRow, NcuProfile, Source
from mcp_server.ncu.requests import ParseNcuRequest


class NcuFormatError(InputError):
    """An ncu report or CSV cannot be read (empty, truncated, not ncu output, no known columns)."""


# --------------------------------------------------------------------------- values and units

_MISSING = {"", "n/a", "N/A", "no data", "nan", "-", "--"}
_NUM = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_SI = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 1024.0, "Mi": 1024.0 ** 2, "Gi": 1024.0 ** 3, "Ti": 1024.0 ** 4}
_TIME_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
            "s": 1e9, "second": 1e9, "ps": 1e-3, "psecond": 1e-3}


def parse_number(text: str | None) -> Optional[float]:
    """ncu's printed number -> float; ``n/a`` / ``no data`` / empty -> None (never 0)."""
    if text is None:
        return None
    s = str(text).strip().strip('"').strip()
    if s in _MISSING:
        return None
    s = s.replace(",", "")
    if s.endswith("%"):
        s = s[:-1].strip()
    if not _NUM.match(s):
        return None
    v = float(s)
    return v if math.isfinite(v) else None


def _prefix_scale(unit: str, bases: Iterable[str]) -> Optional[float]:
    for base in bases:
        if unit.endswith(base):
            pre = unit[: len(unit) - len(base)]
            if pre in _BIN:
                return _BIN[pre]
            if pre in _SI:
                return _SI[pre]
    return None


def convert(value: Optional[float], unit: str, canonical_unit: str) -> Optional[float]:
    """Convert a value printed in ``unit`` (base or auto) to the catalogue's canonical unit."""
    if value is None:
        return None
    u = (unit or "").strip()
    if canonical_unit == "ns":
        return value * _TIME_NS.get(u, 1.0)
    if canonical_unit == "bytes":
        num = u.split("/")[0]
        s = _prefix_scale(num, ("byte", "B"))
        return value * (s if s is not None else 1.0)
    if canonical_unit == "hz":
        if "/" in u:  # cycle/nsecond, cycle/usecond, cycle/second
            den = u.split("/", 1)[1]
            return value * 1e9 / _TIME_NS.get(den, 1e9)
        s = _prefix_scale(u, ("hz", "Hz", "HZ"))
        return value * (s if s is not None else 1.0)
    if canonical_unit == "bytes_per_s":
        num, _, den = u.partition("/")
        s = _prefix_scale(num, ("byte", "B")) or 1.0
        return value * s * 1e9 / _TIME_NS.get(den or "second", 1e9)
    if canonical_unit in ("count", "ratio"):
        num = u.split("/")[0]
        for base in ("inst", "cycle", "sector", "warp", "thread", "block", "request", "byte", "register"):
            if num.endswith(base) and num != base:
                s = _prefix_scale(num, (base,))
                if s is not None:
                    return value * s
        return value
    return value  # pct: as printed


# --------------------------------------------------------------------------- raw launch records

@dataclass
class RawLaunch:
    id: int
    name: str
    grid: Optional[str] = None
    block: Optional[str] = None
    nvtx: Optional[str] = None
    device: Optional[str] = None
    cc: Optional[str] = None
    metrics: dict[str, Optional[float]] = field(default_factory=dict)  # canonical -> value


@dataclass
class RawProfile:
    path: str
    format: str
    launches: list[RawLaunch]
    warnings: list[Warning_] = field(default_factory=list)
    ncu_version: Optional[str] = None
    cache_control: Optional[str] = None
    clock_control: Optional[str] = None
    unrecognized: list[str] = field(default_factory=list)  # metric names / labels the catalogue does not map


def _warn(code: str, message: str, count: int = 1) -> Warning_:
    try:
        from mcp_server.core.vocab import WarningCode

        code = WarningCode(code)
    except (ImportError, ValueError):
        pass
    return Warning_(code=code, message=message, count=count)


def _open_text(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".xz" or data[:6] == b"\xfd7zXZ\x00":
        try:
            data = lzma.decompress(data)
        except lzma.LZMAError as exc:
            raise NcuFormatError(f"cannot decompress ({exc})", path=path) from None
    elif path.suffix == ".gz" or data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise NcuFormatError(f"cannot decompress ({exc})", path=path) from None
    return data.decode("utf-8", "replace").lstrip("\ufeff")


def _base_suffix(path: Path) -> str:
    name = path.name.lower()
    for comp in (".xz", ".gz"):
        if name.endswith(comp):
            name = name[: -len(comp)]
    return Path(name).suffix


# --------------------------------------------------------------------------- CSV

_INFO_COLS = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
              "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
              "Metric Value", "Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type",
              "Estimated Speedup", "Kernel Time", "Function Name", "Demangled Name"}


#: report entries that describe the device, the profiler or the topology, not the kernel: not listed as unrecognized
_NOT_KERNEL_METRICS = ("device__attribute_", "profiler__", "numa__", "nvlink__", "breakdown:")


def _is_nvtx_col(col: str) -> bool:
    return "Push/Pop_Range" in col or "Start/Stop_Range" in col or col.lower().startswith("nvtx")


def _nvtx_value(cell: str) -> Optional[str]:
    """``'598  "<default domain>:gemm_bf16:none:..."'`` -> ``gemm_bf16`` (push/pop ranges joined by /)."""
    if not cell or not cell.strip():
        return None
    names = []
    for m in re.finditer(r'"([^"]*)"', cell):
        parts = m.group(1).split(":")
        if len(parts) >= 2 and parts[1] not in ("none", ""):
            names.append(parts[1])
    if not names:
        txt = cell.strip().strip('"')
        return txt or None
    return "/".join(names)


def _split_csv_lines(text: str) -> tuple[list[list[str]], int, int]:
    """Rows of the CSV part; counts of ``==`` lines and of other (application) lines dropped.

    A record may span lines (a quoted rule description with newlines): lines are joined while
    a quote is open.
    """
    records: list[str] = []
    prof = other = 0
    buf: list[str] = []
    for line in text.splitlines():
        if buf:
            buf.append(line)
            if "\n".join(buf).count('"') % 2 == 0:
                records.append("\n".join(buf))
                buf = []
            continue
        s = line.strip()
        if not s:
            continue
        if s.startswith("=="):
            prof += 1
            continue
        if not s.startswith('"'):
            other += 1
            continue
        if line.count('"') % 2:
            buf = [line]
            continue
        records.append(line)
    if buf:
        records.append("\n".join(buf))
    rows: list[list[str]] = []
    for rec in records:
        try:
            rows.extend(csv.reader(io.StringIO(rec)))
        except csv.Error:
            other += 1
    return rows, prof, other


def _find_header(rows: list[list[str]]) -> int:
    for i, r in enumerate(rows):
        cells = set(r)
        if "ID" in cells and ("Kernel Name" in cells or "Function Name" in cells or "Demangled Name" in cells):
            return i
    return -1


def read_csv(path: Path) -> RawProfile:
    text = _open_text(path)
    if not text.strip():
        raise NcuFormatError("the CSV is empty", path=path,
                             hint="export with `ncu --import R.ncu-rep --page raw --csv > R.csv`")
    rows, _, n_other = _split_csv_lines(text)
    hi = _find_header(rows)
    if hi < 0:
        if "==ERROR==" in text or "ERR_NVGPUCTRPERM" in text:
            first = next((ln for ln in text.splitlines() if "==ERROR==" in ln or "ERR_NVGPUCTRPERM" in ln), "")
            raise NcuFormatError(f"no ncu CSV rows, only ncu's error output: {first.strip()[:200]}", path=path)
        raise NcuFormatError("not an ncu CSV: no header row with 'ID' and 'Kernel Name' columns", path=path,
                             hint="pass a CSV written by `ncu --csv` or `ncu --import ... --csv`")
    header = rows[hi]
    n = len(header)
    body = [r + [""] * (n - len(r)) for r in rows[hi + 1:] if n - 6 <= len(r) <= n and r != header]
    warnings: list[Warning_] = []
    if n_other:
        warnings.append(_warn("foreign_lines_skipped",
                              f"{n_other} line(s) that are not ncu CSV (the application's own output) were skipped",
                              n_other))
    details = "Metric Name" in header and "Metric Value" in header
    unknown: list[str] = []
    if details:
        launches = _details_rows(path, header, body, warnings, unknown)
        fmt = "csv-details"
    else:
        launches = _raw_rows(path, header, body, warnings, unknown)
        fmt = "csv-raw"
    if not launches:
        raise NcuFormatError("the CSV has a header but no kernel rows", path=path,
                             hint="the ncu run profiled no kernel, or the file was cut; re-export it")
    return RawProfile(path=str(path), format=fmt, launches=launches, warnings=warnings,
                      cache_control=cache_control_in_log(text), unrecognized=sorted(set(unknown)))


def _launch_info(header: list[str], r: list[str]) -> dict:
    col = {h: i for i, h in enumerate(header)}

    def get(name: str) -> Optional[str]:
        i = col.get(name)
        return r[i] if i is not None and r[i] != "" else None

    nv = [r[i] for i, h in enumerate(header) if _is_nvtx_col(h) and r[i].strip()]
    name = get("Kernel Name") or get("Demangled Name") or get("Function Name") or "?"
    return {"name": name, "grid": get("Grid Size"), "block": get("Block Size"),
            "device": get("device__attribute_display_name"),
            "cc": get("CC"), "nvtx": "/".join(filter(None, (_nvtx_value(c) for c in nv))) or None}


def _raw_rows(path: Path, header: list[str], body: list[list[str]], warnings: list[Warning_],
              unknown: list[str]) -> list[RawLaunch]:
    units: list[str] = [""] * len(header)
    id_i = header.index("ID")
    if body and body[0][id_i] == "":
        units, body = body[0], body[1:]
    known = [(i, cat.BY_NCU_NAME[h]) for i, h in enumerate(header) if h in cat.BY_NCU_NAME]
    metric_cols = [h for h in header if h not in _INFO_COLS and not _is_nvtx_col(h)]
    if not known:
        raise NcuFormatError(
            f"none of the CSV's {len(metric_cols)} metric columns is an ncu metric the catalogue knows "
            f"(first: {', '.join(metric_cols[:3]) or 'none'})", path=path,
            hint="collect with `kernelscope ncu run` or ncu --section SpeedOfLight; see mcp_server/ncu/catalogue.py")
    # preferred spelling first: for each canonical keep the column of its earliest-listed name
    order = {n: k for d in cat.CATALOGUE.values() for k, n in enumerate(d.names)}
    best: dict[str, int] = {}
    for i, c in known:
        if c not in best or order[header[i]] < order[header[best[c]]]:
            best[c] = i
    unknown.extend(h for h in metric_cols if h not in cat.BY_NCU_NAME and not h.startswith(_NOT_KERNEL_METRICS))
    out: list[RawLaunch] = []
    for r in body:
        ident = parse_number(r[id_i])
        if ident is None:
            continue
        info = _launch_info(header, r)
        m: dict[str, Optional[float]] = {}
        for c, i in best.items():
            m[c] = convert(parse_number(r[i]), units[i], cat.CATALOGUE[c].unit)
        out.append(RawLaunch(id=int(ident), metrics=m, **info))
    return out


def _details_rows(path: Path, header: list[str], body: list[list[str]], warnings: list[Warning_],
                  unknown: list[str]) -> list[RawLaunch]:
    col = {h: i for i, h in enumerate(header)}
    si, ni, ui, vi = col.get("Section Name"), col["Metric Name"], col.get("Metric Unit"), col["Metric Value"]
    by_id: dict[int, RawLaunch] = {}
    rank: dict[tuple[int, str], int] = {}  # an ncu name in catalogue order first, then a section label
    order = {n: k for d in cat.CATALOGUE.values() for k, n in enumerate(d.names)}
    seen_any = False
    for r in body:
        ident = parse_number(r[col["ID"]])
        if ident is None:
            continue
        k = int(ident)
        if k not in by_id:
            by_id[k] = RawLaunch(id=k, **_launch_info(header, r))
        mname = r[ni].strip()
        if not mname:
            continue  # a rule row
        canon = cat.BY_NCU_NAME.get(mname)
        prio = order.get(mname, 0)
        if canon is None and si is not None:
            canon = cat.DETAILS_LABELS.get((r[si].strip(), mname))
            prio = 1000
        if canon is None:
            unknown.append(f"{r[si].strip()}: {mname}" if si is not None and r[si].strip() else mname)
            continue
        seen_any = True
        if rank.get((k, canon), 10_000) < prio:
            continue
        rank[(k, canon)] = prio
        unit = r[ui] if ui is not None else ""
        by_id[k].metrics[canon] = convert(parse_number(r[vi]), unit, cat.CATALOGUE[canon].unit)
    if by_id and not seen_any:
        raise NcuFormatError("the details CSV names no metric the catalogue knows", path=path,
                             hint="export the details page of a report collected with SpeedOfLight/LaunchStats")
    return [by_id[k] for k in sorted(by_id)]


# --------------------------------------------------------------------------- .ncu-rep

#: where an Nsight Compute install keeps its Python report module (``extras/python/ncu_report.py``)
_EXTRAS = Path("extras") / "python"


def ncu_python_dirs() -> list[Path]:
    """``extras/python`` folders of the Nsight Compute installs found, newest first: the ``ncu`` on PATH
    (its own folder, or ``../nsight-compute*`` for CUDA's ``bin/ncu``), ``$NCU``, ``$CUDA_HOME`` /
    ``$CUDA_PATH``, ``/usr/local/cuda*/nsight-compute*``, ``/opt/nvidia/nsight-compute*`` (and their
    version folders)."""
    import glob
    import os
    import shutil

    roots: list[Path] = []
    for exe in (os.environ.get("NCU"), shutil.which("ncu")):
        if exe and os.path.isfile(exe):
            real = Path(os.path.realpath(exe)).parent
            roots += [real, real.parent, *sorted(real.parent.glob("nsight-compute*"), reverse=True)]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        v = os.environ.get(var)
        if v:
            roots += sorted(Path(v).glob("nsight-compute*"), reverse=True)
    roots += [Path(p) for p in sorted(glob.glob("/usr/local/cuda*/nsight-compute*"), reverse=True)]
    for top in sorted(glob.glob("/opt/nvidia/nsight-compute*"), reverse=True):
        roots += [Path(top), *sorted(Path(top).glob("*"), reverse=True)]
    out: list[Path] = []
    for r in roots:
        d = r / _EXTRAS
        if (d / "ncu_report.py").is_file() and d not in out:
            out.append(d)
    return out


def _import_package():
    import ncu_report

    return ncu_report


def _import_from_install(d: Path):
    """Load ``d/ncu_report.py`` (SWIG; it imports ``_ncu_report`` from its own folder) as a private module."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("_kernelscope_ncu_report", d / "ncu_report.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {d / 'ncu_report.py'}")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(d))
    try:
        spec.loader.exec_module(mod)
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(d))
    return mod


_from_install: dict[Path, object] = {}  # extras/python folder -> its module, loaded once per process


def _load_ncu_report():
    """NVIDIA's report module: the ``ncu-report`` package, else the installed ncu's ``extras/python``."""
    try:
        mod = _import_package()
    except ImportError:
        mod = None
        errors = []
        for d in ncu_python_dirs():
            try:
                mod = _from_install.get(d) or _import_from_install(d)
                _from_install[d] = mod
                break
            except Exception as exc:  # noqa: BLE001 - a foreign module may fail in any way; try the next
                errors.append(f"{d}: {type(exc).__name__}")
        if mod is None:
            where = (f"; the ncu installs' own modules failed to load ({', '.join(errors)})" if errors else
                     "; no Nsight Compute install with extras/python/ncu_report.py was found (PATH, $NCU, "
                     "$CUDA_HOME, /usr/local/cuda*/nsight-compute*, /opt/nvidia/nsight-compute*)")
            raise ToolMissingError("reading .ncu-rep needs NVIDIA's ncu-report package" + where,
                                   hint="pip install ncu-report, or export a CSV with `ncu --import R --csv`") from None
    return mod


def read_report(path: Path) -> RawProfile:
    ncu_report = _load_ncu_report()
    tmp = None
    real = path
    data_head = path.read_bytes()[:6]
    if path.suffix in (".xz", ".gz") or data_head[:6] == b"\xfd7zXZ\x00" or data_head[:2] == b"\x1f\x8b":
        raw = path.read_bytes()
        try:
            raw = lzma.decompress(raw) if (path.suffix == ".xz" or raw[:6] == b"\xfd7zXZ\x00") else gzip.decompress(raw)
        except (lzma.LZMAError, OSError, EOFError) as exc:
            raise NcuFormatError(f"cannot decompress ({exc})", path=path) from None
        tmp = tempfile.NamedTemporaryFile(suffix=".ncu-rep", delete=False)
        tmp.write(raw)
        tmp.close()
        real = Path(tmp.name)
    try:
        if real.stat().st_size == 0:
            raise NcuFormatError("the report is empty (0 bytes)", path=path,
                                 hint="the ncu run was killed before writing; run it again")
        if real.read_bytes()[:3] != b"NVR":
            raise NcuFormatError("not an Nsight Compute report (no NVR header)", path=path)
        try:
            ctx = ncu_report.load_report(str(real))
        except Exception as exc:  # noqa: BLE001 - the library raises plain exceptions
            raise NcuFormatError(f"ncu-report cannot read it ({exc})", path=path,
                                 hint="the file is truncated or from an unsupported ncu version") from None
        launches, unknown = _report_launches(ctx)
    finally:
        if tmp is not None:
            Path(tmp.name).unlink(missing_ok=True)
    if not launches:
        raise NcuFormatError("the report holds no profiled kernel", path=path,
                             hint="truncated, or the run's filters matched nothing")
    return RawProfile(path=str(path), format="ncu-rep", launches=launches, unrecognized=unknown)


def _metric_value(action, name: str) -> tuple[bool, Optional[float]]:
    m = action.metric_by_name(name)
    if m is None:
        return False, None
    try:
        if hasattr(m, "has_value") and not m.has_value():
            return True, None
        kind = m.kind()
        if kind == m.ValueKind_STRING:
            return True, parse_number(m.as_string())
        v = m.as_double()
        return True, (v if math.isfinite(v) else None)
    except Exception:  # noqa: BLE001
        return True, None


def _str_metric(action, name: str) -> Optional[str]:
    m = action.metric_by_name(name)
    if m is None:
        return None
    try:
        return m.as_string() if m.kind() == m.ValueKind_STRING else str(m.as_uint64())
    except Exception:  # noqa: BLE001
        return None


def _dim(action, what: str) -> Optional[str]:
    vals = []
    for ax in "xyz":
        ok, v = _metric_value(action, f"launch__{what}_dim_{ax}")
        if not ok or v is None:
            return None
        vals.append(int(v))
    return f"({vals[0]}, {vals[1]}, {vals[2]})"


def _report_launches(ctx) -> tuple[list[RawLaunch], list[str]]:
    out: list[RawLaunch] = []
    unknown: set[str] = set()
    n = 0
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            a = rng.action_by_idx(ai)
            m: dict[str, Optional[float]] = {}
            for d in cat.CATALOGUE.values():
                for nm in d.names:
                    if nm[:1].isupper():
                        continue
                    ok, v = _metric_value(a, nm)
                    if ok:
                        m[d.canonical] = v
                        break
            nvtx = None
            try:
                st = a.nvtx_state()
                names = []
                for did in st.domains():
                    names.extend(st.domain_by_id(did).push_pop_ranges())
                nvtx = "/".join(names) or None
            except Exception:  # noqa: BLE001
                pass
            major = _str_metric(a, "device__attribute_compute_capability_major")
            minor = _str_metric(a, "device__attribute_compute_capability_minor")
            try:
                name = a.name(a.NameBase_DEMANGLED)
            except Exception:  # noqa: BLE001
                name = a.name()
            out.append(RawLaunch(
                id=n, name=name, grid=_dim(a, "grid"), block=_dim(a, "block"), nvtx=nvtx,
                device=_str_metric(a, "device__attribute_display_name"),
                cc=f"{major}.{minor}" if major and minor else None, metrics=m))
            try:
                unknown.update(x for x in a.metric_names()
                               if x not in cat.BY_NCU_NAME and not x.startswith(_NOT_KERNEL_METRICS)
                               and not x.startswith(("launch__grid_dim_", "launch__block_dim_")))
            except Exception:  # noqa: BLE001 - an older module without metric_names(): nothing to list
                pass
            n += 1
    return out, sorted(unknown)


# --------------------------------------------------------------------------- sidecar, aggregation

def cache_control_in_log(text: str) -> Optional[str]:
    """ncu's own notes: 'Running with uncontrolled GPU caches' means --cache-control none.

    ncu 2025.3 prints one note per uncontrolled setting (clocks, caches); when it printed a note
    but not the caches one, the caches were controlled (all). No notes: unknown.
    """
    if "uncontrolled GPU caches" in text:
        return "none"
    if "==WARNING== Note: Running with" in text:
        return "all"
    return None


def _log_beside(path: Path) -> Optional[Path]:
    name = path.name
    for comp in (".xz", ".gz"):
        if name.endswith(comp):
            name = name[: -len(comp)]
    for suf in (".ncu-rep", ".raw_auto.csv", ".raw.csv", ".details.csv", ".csv"):
        if name.endswith(suf):
            cand = path.parent / (name[: -len(suf)] + ".log")
            return cand if cand.is_file() else None
    return None


def read_sidecar(path: Path) -> tuple[Optional[dict], Optional[Path]]:
    """The ``REPORT.ncu-rep.json`` sidecar of a report or of its CSV export, if one is there."""
    name = path.name
    for comp in (".xz", ".gz"):
        if name.endswith(comp):
            name = name[: -len(comp)]
    stem = name
    for suf in (".ncu-rep", ".raw_auto.csv", ".raw.csv", ".details.csv", ".csv"):
        if stem.endswith(suf):
            stem = stem[: -len(suf)]
            break
    for cand in (path.parent / f"{name}.json", path.parent / f"{stem}.ncu-rep.json"):
        if cand.is_file():
            try:
                data = json.loads(cand.read_text())
            except (ValueError, UnicodeDecodeError):
                return None, cand
            return (data if isinstance(data, dict) else None), cand
    return None, None


def _short(name: str) -> str:
    from mcp_server.core.kernel_names import display_kernel_name

    return display_kernel_name(name, 60)


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
        groups.setdefault((la.name, la.grid, la.block, la.nvtx), []).append(la)
    kernels: list[KernelProfile] = []
    all_canon = list(cat.CATALOGUE)
    for (name, grid, block, _nvtx), ls in groups.items():
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
            id=ls[0].id, name=name, short_name=_short(name), launches=len(ls), duration_ns=stats,
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
        found = sorted(q.name for q in p.iterdir() if q.is_file() and _base_suffix(q) in (".ncu-rep", ".csv"))
        listed = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise InputError("is a directory, not a report", path=p, hint=(
            f"give one of its reports, e.g. {p / found[0]} (it holds {listed})" if found
            else "give a .ncu-rep or an ncu CSV file; this directory holds none"))
    if not p.exists():
        raise FileMissingError("no such file", path=p, hint="give a .ncu-rep or an ncu CSV")
    suffix = _base_suffix(p)
    head = p.read_bytes()[:6]
    is_rep = suffix == ".ncu-rep" or head[:3] == b"NVR"
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
        warnings.append(_warn("cache_control_conflict",
                              f"cache_control={cache_control} given, but the sidecar {side_path} records "
                              f"{side.get('cache_control')}; using the argument"))
    device = next((la.device for la in raw.launches if la.device), None)
    if device is None and side and isinstance(side.get("gpu"), dict):
        device = side["gpu"].get("name")
    kernels = _aggregate(raw.launches)
    n_missing = sum(1 for la in raw.launches if la.metrics.get("duration_ns") is None)
    if n_missing:
        warnings.append(_warn("metric_missing", f"{n_missing} launch(es) have no duration (gpu__time_duration "
                                                f"absent or n/a); their kernels' time shares are understated",
                              n_missing))
    all_na = [c for c in ("sm_throughput_pct", "memory_throughput_pct")
              if all(k.metrics.get(c) is None for k in kernels)]
    if all_na:
        warnings.append(_warn("metric_missing", "no kernel has " + ", ".join(all_na) +
                              " (absent or n/a): collect the SpeedOfLight section"))
    version = (side or {}).get("ncu_version") or raw.ncu_version
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
