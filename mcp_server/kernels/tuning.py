"""Measured winning kernel configurations per shape family, recorded as data.

A shape family is (kind, M bucket, K, N). The values come from the config sweep of
``tools/mla_probe.py`` on the H200 (see bench/RESULTS.md, "MLA reconstruction BMMs"); a first
call uses them directly, with no autotuning. Shapes outside the table get the nearest bucket.
"""
from __future__ import annotations

#: M buckets: a family is keyed by the smallest bucket >= M.
M_BUCKETS = (1, 8, 16, 64, 256)

#: Defaults before measurement (replaced by the sweep's winners below).
_DEFAULTS: dict[str, dict] = {
    "int4": {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 2},
    "fp8": {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    "w8a8": {"BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3},
}

#: (kind, M bucket, K, N) -> config. Filled from the H200 sweep.
TABLE: dict[tuple[str, int, int, int], dict] = {}

SOURCE = "defaults (no sweep recorded yet)"


def bucket(M: int) -> int:
    for b in M_BUCKETS:
        if M <= b:
            return b
    return M_BUCKETS[-1]


def config_for(kind: str, M: int, K: int, N: int) -> dict:
    """The recorded config of this family (a copy), else the kind's default."""
    hit = TABLE.get((kind, bucket(M), K, N))
    if hit is None:
        same = [v for (k, b, kk, nn), v in TABLE.items() if k == kind and kk == K and nn == N]
        hit = same[0] if same else _DEFAULTS[kind]
    cfg = dict(hit)
    if kind in ("int4", "fp8", "w8a8") and M > 16:
        cfg.setdefault("BLOCK_M", None)
    return cfg
