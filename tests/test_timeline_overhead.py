"""Probe-overhead helpers: statistics, the JSON form, and the build-and-time protocol."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES

from mcp_server.core.errors import BufferFormatError, FileMissingError, InputError, ToolMissingError
from mcp_server.timeline.overhead import (
    build_and_time,
    load_overhead,
    overhead_from_samples,
    parse_timing_lines,
    write_overhead,
)

TL = FIXTURES / "timeline"


def test_from_samples_medians_and_noise():
    po = overhead_from_samples([11.0, 10.9, 11.2, 11.1, 11.0], [10.0, 10.1, 9.9, 10.0, 10.0], method="m")
    assert po.with_median_us == 11.0 and po.without_median_us == 10.0 and po.overhead_pct == pytest.approx(10.0)
    assert not po.within_noise and po.samples == 5
    small = overhead_from_samples([10.02, 10.0, 10.01, 9.99], [10.0, 10.01, 9.98, 10.02], noise_pct=0.5)
    assert small.within_noise
    with pytest.raises(InputError):
        overhead_from_samples([], [1.0])


def test_real_fixture_overhead_files():
    po = load_overhead(TL / "balanced_probe.overhead.json")
    doc = json.loads((TL / "balanced_probe.overhead.json").read_text())
    assert po.samples == len(doc["with_probes_us"]) == 30
    assert po.noise_pct == doc["noise_pct"] and po.overhead_pct == pytest.approx(doc["overhead_pct"], abs=1e-3)
    tri = load_overhead(TL / "triton_rows.overhead.json")
    assert tri.noise_pct is None and tri.with_median_us < tri.without_median_us  # measured: probes faster


def test_overhead_file_roundtrip_and_errors(tmp_path: Path):
    p = write_overhead(tmp_path / "x.overhead.json", [2.0, 2.1], [2.0, 2.0], method="unit", noise_pct=1.0)
    assert load_overhead(p).overhead_pct == pytest.approx(2.5)
    bad = tmp_path / "bad.json"
    bad.write_text('{"with_probes_us": "x"}')
    with pytest.raises(BufferFormatError, match="with_probes_us"):
        load_overhead(bad)
    with pytest.raises(FileMissingError):
        load_overhead(tmp_path / "none.json")


def test_parse_timing_lines():
    text = "KS_INFO x\nKS_TIMING probe imbalanced 1.5 2.5\nnoise\nKS_TIMING noprobe imbalanced 1.0 2.0 3.0\n"
    assert parse_timing_lines(text) == {"probe": {"imbalanced": [1.5, 2.5]}, "noprobe": {"imbalanced": [1.0, 2.0, 3.0]}}


def test_build_and_time_errors(tmp_path: Path):
    with pytest.raises(FileMissingError):
        build_and_time(tmp_path / "missing.cu", variant="v")
    src = tmp_path / "k.cu"
    src.write_text("int main() { return 0; }\n")
    with pytest.raises(ToolMissingError, match="nvcc"):
        build_and_time(src, variant="v", nvcc=str(tmp_path / "no-nvcc"))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
def test_build_and_time_reports_compile_errors(tmp_path: Path):
    src = tmp_path / "broken.cu"
    src.write_text("this is not CUDA\n")
    with pytest.raises(InputError, match="nvcc failed"):
        build_and_time(src, variant="v", workdir=tmp_path)


def _has_gpu() -> bool:
    try:
        return shutil.which("nvidia-smi") is not None and \
            subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not (_has_gpu() and shutil.which("nvcc")), reason="needs an NVIDIA GPU and nvcc")
def test_build_and_time_on_gpu(tmp_path: Path):
    src = Path(__file__).resolve().parents[1] / "tools" / "timeline_phases.cu"
    po = build_and_time(src, [str(tmp_path)], variant="imbalanced", workdir=tmp_path)
    assert po.samples == 30 and po.without_median_us > 100 and abs(po.overhead_pct) < 10


def _fake_nvcc(tmp_path: Path, program: str) -> Path:
    """A stand-in for nvcc: writes ``program`` (a Python script) as the executable named by -o."""
    import sys

    nvcc = tmp_path / "fake-nvcc"
    nvcc.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        "out = sys.argv[sys.argv.index('-o') + 1]\n"
        f"open(out, 'w').write({('#!' + sys.executable + chr(10) + program)!r})\n"
        "os.chmod(out, 0o755)\n")
    nvcc.chmod(0o755)
    return nvcc


def test_build_and_time_runs_both_builds_through_the_runner(tmp_path: Path):
    src = tmp_path / "k.cu"
    src.write_text("// stand-in\n")
    prog = ("import sys\nb = sys.argv[-1]\n"
            "print('KS_TIMING', b, 'v', *(['12.0'] * 5 if b == 'probe' else ['10.0'] * 5))\n")
    po = build_and_time(src, variant="v", nvcc=str(_fake_nvcc(tmp_path, prog)), workdir=tmp_path)
    assert po.with_median_us == pytest.approx(12.0) and po.without_median_us == pytest.approx(10.0)
    assert po.overhead_pct == pytest.approx(20.0) and po.samples == 5
    slow = "import time\ntime.sleep(30)\n"
    with pytest.raises(InputError, match="ran past 1 s and was killed"):
        build_and_time(src, variant="v", nvcc=str(_fake_nvcc(tmp_path, slow)), workdir=tmp_path, timeout=1.0)
