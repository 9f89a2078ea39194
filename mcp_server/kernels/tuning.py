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

#: (kind, M bucket, K, N) -> config: the fastest of the sweep on the H200 (8 stacked layers,
#: 128 MiB BF16, cold), measured for M = 1, 8 and 64; buckets 16 and 256 reuse 8 and 64.
#: Sweep: bench/results/mla_sweep_h200.json (tools/mla_h200.py, the run of 2026-12-01).
TABLE: dict[tuple[str, int, int, int], dict] = {
    ("fp8", 1, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 1, 512, 128): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 8, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 16, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 8, 512, 128): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 16, 512, 128): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 64, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 1, "num_warps": 4, "num_stages": 2},
    ("fp8", 256, 128, 512): {"variant": "asm", "BLOCK_N": 128, "SUB": 1, "num_warps": 4, "num_stages": 2},
    ("fp8", 64, 512, 128): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("fp8", 256, 512, 128): {"variant": "asm", "BLOCK_N": 128, "SUB": 2, "num_warps": 4, "num_stages": 3},
    ("int4", 1, 128, 512): {"variant": "dot", "BLOCK_N": 256, "num_warps": 4, "num_stages": 2, "DEP": True},
    ("int4", 1, 512, 128): {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "PF": True},
    ("int4", 8, 128, 512): {"variant": "dot", "BLOCK_N": 256, "num_warps": 4, "num_stages": 2, "DEP": True},
    ("int4", 16, 128, 512): {"variant": "dot", "BLOCK_N": 256, "num_warps": 4, "num_stages": 2, "DEP": True},
    ("int4", 8, 512, 128): {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "PF": True},
    ("int4", 16, 512, 128): {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "PF": True},
    ("int4", 64, 128, 512): {"variant": "dot", "BLOCK_N": 256, "num_warps": 8, "num_stages": 2, "DEP": False},
    ("int4", 256, 128, 512): {"variant": "dot", "BLOCK_N": 256, "num_warps": 8, "num_stages": 2, "DEP": False},
    ("int4", 64, 512, 128): {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "PF": True},
    ("int4", 256, 512, 128): {"variant": "dot", "BLOCK_N": 128, "num_warps": 4, "num_stages": 3, "PF": True},
}

SOURCE = "H200 sweep 2026-12-01 (bench/results/mla_sweep_h200.json)"


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
