"""On-disk cache of reference searches, and the remembered GitHub rate-limit reset.

Location: ``$KERNELSCOPE_CACHE_DIR/refs`` or ``~/.cache/kernelscope/refs``. Entries are keyed by
source and query (a SHA-256 of both), hold only the result section (never a token), expire after
a TTL, and are written atomically (temp file in the same directory + ``os.replace``). Every
cache failure is silent: the cache only saves requests, it never fails a search.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from mcp_server.core.atomic import atomic_write_text
from mcp_server.core.envvars import env
from mcp_server.core.errors import WriteError, redact

DEFAULT_TTL_S = 3600.0


def cache_dir() -> Path:
    base = env("KERNELSCOPE_CACHE_DIR")
    root = Path(base).expanduser() if base else Path.home() / ".cache" / "kernelscope"
    return root / "refs"


def _atomic_write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = redact(json.dumps(data, ensure_ascii=False, sort_keys=True))
    atomic_write_text(path, text, what="cache entry")


class RefCache:
    """TTL cache of result sections keyed by (source, query parts)."""

    def __init__(self, directory: Path | None = None, ttl_s: float = DEFAULT_TTL_S, enabled: bool = True):
        self.dir = directory if directory is not None else cache_dir()
        self.ttl_s = ttl_s
        self.enabled = enabled

    def _path(self, source: str, parts: tuple[Any, ...]) -> tuple[Path, str]:
        key = json.dumps([source, *parts], ensure_ascii=False, sort_keys=True, default=str)
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in source)[:40]
        return self.dir / f"{safe}-{digest}.json", key

    def get(self, source: str, *parts: Any) -> dict | None:
        if not self.enabled:
            return None
        path, key = self._path(source, parts)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        stored = data.get("stored")
        if not isinstance(stored, (int, float)) or time.time() - stored > self.ttl_s or stored > time.time() + 60:
            return None
        value = data.get("value")
        return value if isinstance(value, dict) else None

    def put(self, source: str, *parts: Any, value: dict) -> None:
        if not self.enabled:
            return
        path, key = self._path(source, parts)
        try:
            _atomic_write_json(path, {"key": key, "stored": time.time(), "value": value})
        except (OSError, WriteError):  # atomic writes raise WriteError (a directory in the way)
            pass

    # --- remembered GitHub rate-limit reset (one small file per auth mode, no read-modify-write)

    def _limit_path(self, name: str) -> Path:
        return self.dir / f"ratelimit-{name}.json"

    def limited_until(self, name: str) -> float | None:
        """Epoch seconds until which searches of ``name`` are known to be rate limited."""
        try:
            data = json.loads(self._limit_path(name).read_text(encoding="utf-8"))
            reset = float(data["reset"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return reset if reset > time.time() else None

    def remember_limit(self, name: str, reset_epoch: float) -> None:
        # Remembered even under --no-cache: it protects the rate limit, it is not a result.
        try:
            _atomic_write_json(self._limit_path(name), {"reset": float(reset_epoch)})
        except (OSError, WriteError):  # atomic writes raise WriteError (a directory in the way)
            pass
