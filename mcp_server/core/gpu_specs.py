"""The GPU spec table (``_shared/gpu_specs.toml``): one loader, typed answers.

``load_gpu_specs()`` reads the table (through ``shared_path``, so a user's
``KERNELSCOPE_SHARED`` copy overrides it); ``gpu_spec(name)`` finds one GPU by
its key (``h200``) or by a device name (``NVIDIA H200``). A ``GpuSpec`` keeps the
datasheet values and the measured ones apart; ``ceiling(key)`` answers the value
to use (measured first) together with where it came from.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from mcp_server.core.errors import FileMissingError, InputError
from mcp_server.core.paths import shared_path

if sys.version_info >= (3, 11):
    import tomllib as _toml
else:  # pragma: no cover - Python 3.10
    import tomli as _toml

SPECS_FILE = "gpu_specs.toml"
_TEXT_KEYS = {"name", "vendor", "arch", "match", "source", "how"}


class GpuSpecError(InputError):
    """The GPU spec table is malformed, or names no GPU matching the request."""


@dataclass(frozen=True)
class Ceiling:
    value: float
    source: str          # "measured" | "datasheet"
    key: str


@dataclass(frozen=True)
class GpuSpec:
    key: str                                  # table key, e.g. "h200"
    name: str
    vendor: str
    arch: str | None
    match: tuple[str, ...]
    datasheet: Mapping[str, float]
    measured: Mapping[str, float] = field(default_factory=dict)
    measured_how: str | None = None

    def ceiling(self, key: str) -> Ceiling | None:
        """The value to use for ``key``: measured when the table has it, else datasheet."""
        if key in self.measured:
            return Ceiling(float(self.measured[key]), "measured", key)
        if key in self.datasheet:
            return Ceiling(float(self.datasheet[key]), "datasheet", key)
        return None

    def value(self, key: str) -> float | None:
        c = self.ceiling(key)
        return None if c is None else c.value

    @property
    def sm_count(self) -> int | None:
        v = self.value("sm_count")
        return None if v is None else int(v)

    @property
    def l2_bytes(self) -> float | None:
        v = self.value("l2_mb")
        return None if v is None else v * 1e6


def _numbers(path: Path, key: str, table: Mapping) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in table.items():
        if k in _TEXT_KEYS or isinstance(v, dict):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise GpuSpecError(f"[{key}] {k} is not a number (a {type(v).__name__})", path=path,
                               hint="values are plain numbers in the unit their name says")
        out[k] = float(v)
    return out


def load_gpu_specs(path: str | Path | None = None) -> dict[str, GpuSpec]:
    """Every GPU of the table, by key. Errors name the file and the table."""
    p = Path(path) if path is not None else shared_path(SPECS_FILE)
    if not p.is_file():
        raise FileMissingError("GPU spec table not found", path=p,
                               hint="restore _shared/gpu_specs.toml or point KERNELSCOPE_SHARED at a copy")
    try:
        data = _toml.loads(p.read_text(encoding="utf-8"))
    except (_toml.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise GpuSpecError(f"not valid TOML: {exc}", path=p) from None
    specs: dict[str, GpuSpec] = {}
    for key, table in data.items():
        if not isinstance(table, dict):
            raise GpuSpecError(f"top-level key {key!r} is not a [table]", path=p)
        meas = table.get("measured", {})
        if not isinstance(meas, dict):
            raise GpuSpecError(f"[{key}] measured must be a table", path=p)
        match = table.get("match", [])
        if isinstance(match, str):
            match = [match]
        specs[key.lower()] = GpuSpec(
            key=key.lower(), name=str(table.get("name", key)), vendor=str(table.get("vendor", "")),
            arch=table.get("arch"), match=tuple(str(m) for m in match),
            datasheet=_numbers(p, key, table), measured=_numbers(p, f"{key}.measured", meas),
            measured_how=meas.get("how"),
        )
    return specs


def find_gpu(name: str | None, specs: Mapping[str, GpuSpec] | None = None) -> GpuSpec | None:
    """A spec by key or by a device-name substring; None when nothing matches."""
    if not name:
        return None
    specs = specs if specs is not None else load_gpu_specs()
    low = name.strip().lower()
    if low in specs:
        return specs[low]
    best: tuple[int, GpuSpec] | None = None
    for spec in specs.values():
        for m in spec.match:
            if m.lower() in low and (best is None or len(m) > best[0]):
                best = (len(m), spec)
    return best[1] if best else None


def gpu_spec(name: str, path: str | Path | None = None) -> GpuSpec:
    """One GPU by key (``h200``) or device name (``NVIDIA H200``); a typed error if unknown."""
    specs = load_gpu_specs(path)
    spec = find_gpu(name, specs)
    if spec is None:
        raise GpuSpecError(f"no GPU {name!r} in the spec table",
                           path=path or shared_path(SPECS_FILE),
                           hint=f"known: {', '.join(sorted(specs))}; add a [table] for it")
    return spec
