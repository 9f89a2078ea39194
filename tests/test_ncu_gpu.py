"""run_ncu end to end on a GPU with ncu (skipped elsewhere): profile two fixture targets and classify them."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _gpu_and_ncu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    if not torch.cuda.is_available():
        return False
    from mcp_server.ncu.runner import find_ncu

    try:
        find_ncu()
    except Exception:  # noqa: BLE001
        return False
    return True


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_and_ncu(), reason="needs a CUDA GPU and ncu")
def test_run_ncu_profiles_and_classifies(tmp_path):
    from mcp_server.ncu.classify import classify_profile
    from mcp_server.ncu.runner import run_ncu

    seen = []
    res = run_ncu([sys.executable, str(ROOT / "tools" / "ncu_targets.py"), "--chatty", "elementwise", "tiny_add",
                   "--reps", "2"], report=str(tmp_path / "e2e"), cache_control="none", profile_from_start=False,
                  timeout_s=300, progress=lambda d, t, m: seen.append(d))
    assert res.kernels_profiled == 4 and seen == [1, 2, 3, 4]
    assert "target elementwise: launch 1 of 2" in Path(res.app_output).read_text()
    assert "target elementwise" not in Path(res.log).read_text()
    assert res.profile is not None, [w.message for w in res.warnings]
    c = classify_profile(res.profile)
    got = {k.grid: (k.bottleneck.class_, k.bottleneck.limiter) for k in c.kernels}
    assert got["(65536, 1, 1)"] == ("memory_bound", "dram")
    assert got["(1, 1, 1)"] == ("latency_bound", "small_grid")
    assert c.source.cache_control == "none" and c.gpu == "h200"
