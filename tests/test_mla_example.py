"""The kernel-compass worked example (examples/mla_decode) on the profiles it recorded on the H200.

tools/mla_loop_example.py ran the loop on DeepSeek-V3's W_UV BMM: 16 stacked layers (256 MB of
bf16 weights) profiled cold, one layer (16 MB) profiled warm. Its two ncu reports are the
fixtures tests/fixtures/ncu/mla_wuv_*; its ledger is examples/mla_decode/h200/ledger.db.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_server.ledger.engine import ledger_show
from mcp_server.ncu.classify import classify_bottleneck
from mcp_server.ncu.select import select_candidate

ROOT = Path(__file__).resolve().parent.parent
NCU = ROOT / "tests" / "fixtures" / "ncu"
EX = ROOT / "examples" / "mla_decode"


def test_streaming_weights_classify_dram_bound_and_quantization_fits():
    res = classify_bottleneck(str(NCU / "mla_wuv_16layers_cold.ncu-rep.xz"))
    assert res.source.cache_control == "all"
    (k,) = res.kernels
    assert k.launches == 3 and k.name.startswith("nvjet_sm90")
    b = k.bottleneck
    assert (b.class_, b.limiter, b.l2_resident) == ("memory_bound", "dram", None)
    assert k.metrics["dram_throughput_pct"] > 80
    assert any(w.code == "residency_unknown" for w in res.warnings)
    sel = select_candidate(str(NCU / "mla_wuv_16layers_cold.ncu-rep.xz"))
    assert any("quantization" in f for f in sel.fits)


def test_l2_resident_weights_advise_against_quantization():
    res = classify_bottleneck(str(NCU / "mla_wuv_1layer_warm.ncu-rep.xz"))
    assert res.source.cache_control == "none"
    (k,) = res.kernels
    b = k.bottleneck
    assert b.l2_resident is True and (b.class_, b.limiter) != ("memory_bound", "dram")
    assert any("do not quantize" in a for a in b.advice)
    sel = select_candidate(str(NCU / "mla_wuv_1layer_warm.ncu-rep.xz"))
    assert any(d.startswith("weight quantization") for d in sel.does_not_fit)


def test_the_recorded_ledger_holds_both_decisions():
    ledger = str(EX / "h200" / "ledger.db")
    hbm, l2 = ledger_show(1, ledger=ledger, full_results=True), ledger_show(2, ledger=ledger, full_results=True)
    (c1,) = hbm.candidates
    (c2,) = l2.candidates
    assert c1.decisions[-1].decision == "accepted" and c1.validations[-1].result["speedup"]["ci_low"] > 1.03
    assert c2.decisions[-1].decision == "reverted" and c2.validations[-1].verdict != "accepted"
    assert "--layers" in hbm.experiment.target and hbm.experiment.env["gpu"] == "NVIDIA H200"


def _gpu_and_ncu() -> bool:
    import shutil

    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and (shutil.which("ncu") is not None or Path("/usr/local/cuda/bin/ncu").exists())


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_and_ncu(), reason="needs a CUDA GPU and ncu")
def test_worked_example_end_to_end(tmp_path):
    """The same command that recorded examples/mla_decode/h200 (needs a GPU, ncu and triton)."""
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "mla_loop_example.py"), "--out", str(tmp_path)],
                          cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    hbm = json.loads((tmp_path / "loop_hbm.json").read_text())
    l2 = json.loads((tmp_path / "loop_l2.json").read_text())
    assert hbm["accepted"] == 1 and hbm["steps"][0]["speedup"]["ci_low"] > 1.03
    assert l2["accepted"] == 0 and l2["steps"][0]["decision"] == "reverted"
