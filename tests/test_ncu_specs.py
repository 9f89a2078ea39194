"""The GPU spec table (_shared/gpu_specs.toml) through mcp_server.core.gpu_specs."""
from __future__ import annotations

import pytest

from mcp_server.core.errors import FileMissingError
from mcp_server.core.gpu_specs import GpuSpecError, find_gpu, gpu_spec, load_gpu_specs


def test_every_gpu_of_the_issue_is_there_with_its_basics():
    specs = load_gpu_specs()
    assert {"h100", "h200", "a100", "b200", "l40s", "mi300x", "mi355x"} <= set(specs)
    for s in specs.values():
        for key in ("sm_count", "l2_mb", "hbm_tb_s", "bf16_tflops"):
            c = s.ceiling(key)
            assert c is not None and c.value > 0, (s.key, key)
    assert specs["mi300x"].vendor == "amd" and specs["h200"].vendor == "nvidia"


def test_h200_measured_ceilings_override_the_datasheet():
    s = gpu_spec("h200")
    assert s.datasheet["hbm_tb_s"] == 4.8 and s.datasheet["bf16_tflops"] == pytest.approx(989.4)
    assert s.ceiling("hbm_tb_s").source == "measured" and s.ceiling("hbm_tb_s").value == 4.3
    assert s.ceiling("bf16_tflops").value == 790 and s.ceiling("l2_mb").value == 60
    assert s.ceiling("fp32_tflops").source == "datasheet"
    assert s.sm_count == 132 and s.l2_bytes == 60e6 and s.value("hbm_tb_s") == 4.3
    assert "copy" in s.measured_how
    assert gpu_spec("h100").ceiling("hbm_tb_s").source == "datasheet"


def test_lookup_by_device_name():
    assert gpu_spec("NVIDIA H200").key == "h200"
    assert find_gpu("NVIDIA H100 80GB HBM3").key == "h100"
    assert find_gpu("AMD Instinct MI300X").key == "mi300x"
    assert find_gpu("Tesla T4") is None
    with pytest.raises(GpuSpecError, match="known: a100"):
        gpu_spec("Tesla T4")


def test_user_table_extra_keys_and_errors(tmp_path, monkeypatch):
    good = tmp_path / "gpu_specs.toml"
    good.write_text('[x1]\nname = "X1"\nmatch = ["X1"]\nhbm_tb_s = 1.0\n[x1.measured]\nl2_effective_mb = 30\n')
    monkeypatch.setenv("KERNELSCOPE_SHARED", str(tmp_path))
    s = gpu_spec("x1")
    assert s.ceiling("l2_effective_mb").value == 30 and s.ceiling("l2_effective_mb").source == "measured"
    good.write_text('[x1]\nhbm_tb_s = "fast"\n')
    with pytest.raises(GpuSpecError, match=r"\[x1\] hbm_tb_s is not a number \(a str\)"):
        load_gpu_specs()
    good.write_text("[x1\n")
    with pytest.raises(GpuSpecError, match="not valid TOML"):
        load_gpu_specs()
    good.unlink()  # a user directory without the file falls back to the shipped table
    assert "h200" in load_gpu_specs()
    with pytest.raises(FileMissingError, match="GPU spec table not found"):
        load_gpu_specs(tmp_path / "nope.toml")
