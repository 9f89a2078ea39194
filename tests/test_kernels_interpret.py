"""The Triton MLA kernels on the CPU: TRITON_INTERPRET=1 on small shapes, against the dequantized
reference (correctness only). Needs torch and triton (the optional 'gpu' extra); skips without them.

The interpreter runs the kernels' plain-ops paths (the inline-asm unpack and the bf16 dots are
replaced by fp32 in the interpreter, whose bf16 conversions and bf16 dots are wrong in triton 3.6);
the GPU-marked tests check the asm paths. The persistent variants are skipped here: the
interpreter cannot run their run-time-bounded tile loop (see tests/_kernels_interp_checks.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

HELPER = Path(__file__).resolve().parent / "_kernels_interp_checks.py"


@pytest.fixture(scope="module")
def results() -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, str(HELPER), "7"], capture_output=True, text=True, timeout=600, env=env)
    if p.returncode != 0:
        pytest.fail(f"interpreter checks failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_every_variant_matches_the_dequantized_reference(results):
    errs = {k: v for k, v in results.items() if isinstance(v, float)}
    # 3 shapes x (4 int4 + 6 fp8 + w8a8 + act scale) + 2 gemv at M = 1 + 2 x 4 prefetching (K > 128)
    # + 3 shapes x (4 split-K int4 + 4 split-K GEMV + 3 split-K fp8 + 3 fp8 GEMV + the 2 dispatched defaults)
    # + 3 shapes x (4 int4 + 3 fp8 rows kernels at M = 1) + the 2 rows kernels at K = 384 (padded word tile)
    # + the CUDA kernel's config run through its fallback off the GPU, and with a Triton variant asked of it
    assert len(errs) == 3 * 12 + 2 + 8 + 3 * 16 + 3 * 7 + 2 + 2
    bad = {k: v for k, v in errs.items() if not k.startswith("act_scale") and not (v < 1e-2)}
    assert not bad, bad   # bf16 output rounding is ~3e-3; an indexing or packing bug gives O(1)


def test_every_family_is_covered(results):
    fams = {k.split("_H")[0] for k in results if k.startswith(("int4", "fp8", "w8a8"))}
    assert {"int4_dot_g128", "int4_dot_g128_zp", "int4_dot_g64", "int4_dot_g32_zp", "int4_gemv_g128",
            "int4_dotpf_g128", "int4_dotpf_g128_zp",
            "fp8_shuffled_g0", "fp8_shuffled_g128", "fp8_natural_g0", "w8a8",
            "int4_splitk_g128", "int4_splitk_g32_zp", "int4_gemvsk_g128", "int4_gemvsk_g64", "int4_gemvsk_g128_zp",
            "fp8_splitk_g0", "fp8_splitk_g128", "fp8_gemvsk_g0", "fp8_gemvsk_g64", "int4_auto", "fp8_auto",
            "int4_rows_g128", "int4_rows_g128_zp", "int4_rows_g32_zp", "fp8_rows_g0", "fp8_rows_g128"} <= fams


def test_the_cuda_kernel_falls_back_to_its_triton_config_off_the_gpu(results):
    assert results["int4_cudafb_g128_zp_H1_M1_K384_N16"] < 1e-2
    (msg,) = results["cuda_fallback_warnings"]
    assert "CUDA kernel cannot run (not on a CUDA device)" in msg and "Triton fallback" in msg
    assert results["cuda_without_fallback"] == "CudaKernelUnavailable: not on a CUDA device"


def test_untuned_shapes_run_the_heuristic_and_warn_once(results):
    """The CPU shapes are outside the H200 table: each family warns once, naming the variant it ran
    and the verb that measures it; K = 128 at M = 1 runs the GEMV, larger K is split."""
    warned = {k: v for k, v in results.items() if k.startswith("untuned_warnings_")}
    assert len(warned) == 3 and all(len(v) == 2 for v in warned.values())
    one = warned["untuned_warnings_H2_M1_K128_N64"]
    assert "INT4 W4A16: M=1 K=128 N=64" in one[0] and "gemv" in one[0]
    assert "kernelscope decode-gemm --shapes 128x64 --batch 1" in one[0] and "FP8 W8A16" in one[1]
    assert "splitk config (SPLIT=2)" in warned["untuned_warnings_H1_M20_K512_N32"][0]


def test_activation_scales_match_torch(results):
    assert all(results[k] < 1e-6 for k in results if k.startswith("act_scale"))


def test_persistent_variants_skip_with_a_reason(results):
    if isinstance(results["persistent"], str) and results["persistent"].startswith("skip"):
        pytest.skip(results["persistent"])
