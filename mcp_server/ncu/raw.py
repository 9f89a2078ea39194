"""What the ncu readers share: ncu's printed numbers and units, the raw launch records, decompression.

``n/a`` (and ``no data``) is *missing*, never 0. Values are converted from the unit ncu printed (base or auto)
to the catalogue's canonical unit. ``csvfile`` and ``repfile`` read launches into ``RawProfile``; ``parse``
groups them per kernel.
"""
from __future__ import annotations

import gzip
import lzma
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from mcp_server.core.errors import InputError
from mcp_server.core.models import Warning_
from mcp_server.core.vocab import WarningCode


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
        return value * (_prefix_scale(u.split("/")[0], ("byte", "B")) or 1.0)
    if canonical_unit == "hz":
        if "/" in u:  # cycle/nsecond, cycle/usecond, cycle/second
            den = u.split("/", 1)[1]
            return value * 1e9 / _TIME_NS.get(den, 1e9)
        return value * (_prefix_scale(u, ("hz", "Hz", "HZ")) or 1.0)
    if canonical_unit == "bytes_per_s":
        num, _, den = u.partition("/")
        s = _prefix_scale(num, ("byte", "B")) or 1.0
        return value * s * 1e9 / _TIME_NS.get(den or "second", 1e9)
    if canonical_unit in ("count", "ratio"):
        num = u.split("/")[0]
        for base in ("inst", "cycle", "sector", "warp", "thread", "block", "request", "byte", "register"):
            if num.endswith(base) and num != base:
                scale = _prefix_scale(num, (base,))
                if scale is not None:
                    return value * scale
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
    format: str
    launches: list[RawLaunch]
    warnings: list[Warning_] = field(default_factory=list)
    cache_control: Optional[str] = None
    unrecognized: list[str] = field(default_factory=list)  # metric names / labels the catalogue does not map


def warn(code: str, message: str, count: int = 1) -> Warning_:
    return Warning_(code=WarningCode(code), message=message, count=count)


def read_uncompressed(path: Path) -> tuple[bytes, bool]:
    """The file's bytes, unpacked when it is xz or gzip (by suffix or magic); and whether it was."""
    data = path.read_bytes()
    try:
        if path.suffix == ".xz" or data[:6] == b"\xfd7zXZ\x00":
            return lzma.decompress(data), True
        if path.suffix == ".gz" or data[:2] == b"\x1f\x8b":
            return gzip.decompress(data), True
    except (lzma.LZMAError, OSError, EOFError) as exc:
        raise NcuFormatError(f"cannot decompress ({exc})", path=path) from None
    return data, False


def open_text(path: Path) -> str:
    return read_uncompressed(path)[0].decode("utf-8", "replace").lstrip("\ufeff")


def uncompressed_name(name: str) -> str:
    """A file name less its compression suffixes (.xz, .gz)."""
    for comp in (".xz", ".gz"):
        if name.endswith(comp):
            name = name[: -len(comp)]
    return name


def base_suffix(path: Path) -> str:
    return Path(uncompressed_name(path.name.lower())).suffix


#: report entries that describe the device, the profiler or the topology, not the kernel: not listed as unrecognized
NOT_KERNEL_METRICS = ("device__attribute_", "profiler__", "numa__", "nvlink__", "breakdown:")


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
