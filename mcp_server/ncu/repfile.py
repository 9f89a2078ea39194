"""``.ncu-rep`` reports into raw launch records, through NVIDIA's ``ncu-report`` package, else the installed
ncu's own ``extras/python/ncu_report.py``. Compressed reports (``.xz``, ``.gz``) are unpacked to a temporary file.
"""
from __future__ import annotations

import contextlib
import math
import tempfile
from pathlib import Path
from typing import Optional

from mcp_server.core.errors import ToolMissingError
from mcp_server.ncu import catalogue as cat
from mcp_server.ncu.raw import (
    NOT_KERNEL_METRICS,
    NcuFormatError,
    RawLaunch,
    RawProfile,
    parse_number,
    read_uncompressed,
)

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
        import ncu_report

        return ncu_report
    except ImportError:
        pass
    errors = []
    for d in ncu_python_dirs():
        try:
            mod = _from_install.get(d) or _import_from_install(d)
            _from_install[d] = mod
            return mod
        except Exception as exc:  # noqa: BLE001 - a foreign module may fail in any way; try the next
            errors.append(f"{d}: {type(exc).__name__}")
    where = (f"; the ncu installs' own modules failed to load ({', '.join(errors)})" if errors else
             "; no Nsight Compute install with extras/python/ncu_report.py was found (PATH, $NCU, "
             "$CUDA_HOME, /usr/local/cuda*/nsight-compute*, /opt/nvidia/nsight-compute*)")
    raise ToolMissingError("reading .ncu-rep needs NVIDIA's ncu-report package" + where,
                           hint="pip install ncu-report, or export a CSV with `ncu --import R --csv`")


def read_report(path: Path) -> RawProfile:
    ncu_report = _load_ncu_report()
    raw, packed = read_uncompressed(path)
    if not raw:
        raise NcuFormatError("the report is empty (0 bytes)", path=path,
                             hint="the ncu run was killed before writing; run it again")
    if raw[:3] != b"NVR":
        raise NcuFormatError("not an Nsight Compute report (no NVR header)", path=path)
    real = path
    if packed:  # the library reads a file: the unpacked report goes to a temporary one
        with tempfile.NamedTemporaryFile(suffix=".ncu-rep", delete=False) as tmp:
            tmp.write(raw)
        real = Path(tmp.name)
    try:
        try:
            ctx = ncu_report.load_report(str(real))
        except Exception as exc:  # noqa: BLE001 - the library raises plain exceptions
            raise NcuFormatError(f"ncu-report cannot read it ({exc})", path=path,
                                 hint="the file is truncated or from an unsupported ncu version") from None
        launches, unknown = _report_launches(ctx)
    finally:
        if packed:
            real.unlink(missing_ok=True)
    if not launches:
        raise NcuFormatError("the report holds no profiled kernel", path=path,
                             hint="truncated, or the run's filters matched nothing")
    return RawProfile(format="ncu-rep", launches=launches, unrecognized=unknown)


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
                               if x not in cat.BY_NCU_NAME and not x.startswith(NOT_KERNEL_METRICS)
                               and not x.startswith(("launch__grid_dim_", "launch__block_dim_")))
            except Exception:  # noqa: BLE001 - an older module without metric_names(): nothing to list
                pass
            n += 1
    return out, sorted(unknown)
