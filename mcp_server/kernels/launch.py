"""What the INT4 and FP8 launchers (``w4a16``, ``w8a16``) share: the config (given, or the tuning table's), the
launch options, the M block, the persistent grid, the split-K factors, the SM count, the interpreter switch."""
from __future__ import annotations

import os

import triton


def launch_opts(cfg: dict, stages: int) -> dict:
    """The launch options: num_warps, num_stages (``stages`` by default) and ``maxnreg`` (a per-thread register
    cap, so more programs fit an SM) when the config names one."""
    return {"num_warps": cfg.get("num_warps", 4), "num_stages": cfg.get("num_stages", stages),
            **({"maxnreg": int(cfg["maxnreg"])} if cfg.get("maxnreg") else {})}


def block_m(cfg: dict, M: int) -> int:
    return cfg.get("BLOCK_M") or min(64, max(16, triton.next_power_of_2(M)))


def persistent_grid(cfg: dict, H: int, M: int, N: int, bn: int, bm: int, device) -> tuple[int]:
    """One program per output tile, at most ``CTAS_PER_SM`` (2) per SM: each loops over its tiles."""
    return (min(H * (N // bn) * triton.cdiv(M, bm), sm_count(device) * cfg.get("CTAS_PER_SM", 2)),)


def launch_config(family: str, x, N: int, config: dict | None, warn: bool = True) -> dict:
    """A copy of ``config``, else the tuning table's (``tuning.config_for``), warning when the shape is untuned."""
    from mcp_server.kernels import tuning

    if config is not None:
        return dict(config)
    H, M, K = x.shape
    cfg = tuning.config_for(family, M, K, N, H, sm_count(x.device))
    if warn:
        tuning.warn_untuned(family, M, K, N, cfg)
    return cfg


def split_k(cfg: dict, K: int, unit: int, max_sub: int = 0) -> tuple[int, int]:
    """(SPLIT, SUB): K is cut into SPLIT parts, each read ``unit`` * SUB at a step (SUB up to ``max_sub``)."""
    split, sub = int(cfg.get("SPLIT", 1)), int(cfg.get("SUB", 1))
    if (max_sub and sub > max_sub) or K % (split * unit * sub):
        raise ValueError(f"K={K} is not a multiple of SPLIT*{unit}*SUB={split * unit * sub}"
                         + (f" (SUB 1 or {max_sub})" if max_sub else ""))
    return split, sub


_SM_COUNT: dict = {}


def sm_count(device) -> int:
    """The device's SM count (4 off CUDA, as the interpreter's launch grid needs one), cached per device."""
    import torch

    if device.type != "cuda":
        return 4
    key = device.index or 0
    if key not in _SM_COUNT:
        _SM_COUNT[key] = torch.cuda.get_device_properties(key).multi_processor_count
    return _SM_COUNT[key]


def interpreting() -> bool:
    """Whether triton runs kernels in its CPU interpreter (``TRITON_INTERPRET``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
