"""GPU checks of the MLA kernels (need CUDA, torch and triton; skipped elsewhere): correctness of
every variant (asm unpack, persistent loops) against the dequantized reference on the real
DeepSeek shapes, and a speed sanity check on the 8-layer stack (128 MiB BF16) streaming cold."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here")]


def _rel(a, b):
    return float((a.float() - b).norm() / b.norm())


@pytest.mark.parametrize("K,N", [(128, 512), (512, 128)])
@pytest.mark.parametrize("M", [1, 8, 64, 100])
def test_kernels_match_the_dequantized_reference(K, N, M):
    from mcp_server.kernels import quant
    from mcp_server.kernels.w4a16 import w4a16_bmm
    from mcp_server.kernels.w8a16 import w8a16_bmm

    g = torch.Generator(device="cuda").manual_seed(K + M)
    w = (torch.randn(128, K, N, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    x = torch.randn(128, M, K, device="cuda", generator=g).to(torch.bfloat16)
    for zp in (False, True):
        qw = quant.quantize_int4(w, zero_point=zp)
        ref = x.float() @ quant.dequantize_int4(qw)
        for variant, cfg in (("dot", {"BLOCK_N": 128}), ("dot", {"BLOCK_N": 128, "DEP": True, "PF": True}),
                             ("dot", {"BLOCK_N": 64, "DEP": True, "PF": True, "num_stages": 3}),
                             ("persistent", {"BLOCK_N": 64, "CTAS_PER_SM": 1, "num_stages": 2})):
            out = torch.full((128, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            w4 = w4a16_bmm(x, qw, out=out, config=cfg, variant=variant)
            assert not w4.isnan().any() and _rel(w4, ref) < 1e-2, (variant, zp)
    fw = quant.quantize_fp8(w)
    ref = x.float() @ quant.dequantize_fp8(fw)
    for cfg in ({"BLOCK_N": 128, "SUB": 2}, {"BLOCK_N": 64, "persistent": True, "CTAS_PER_SM": 1, "num_stages": 2}):
        out = torch.full((128, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        f8 = w8a16_bmm(x, fw, out=out, config=cfg)
        assert not f8.isnan().any() and _rel(f8, ref) < 1e-2, cfg


def test_tuned_kernels_beat_bf16_when_weights_stream_from_hbm():
    from mcp_server.kernels import bench

    buf = bench.ShapeBuffers(1024, 1, 128, 512, "cold")
    bf16 = bench.time_launches(buf.bf16_fns())
    int4 = bench.time_launches(buf.int4_fns())
    fp8 = bench.time_launches(buf.fp8_fns())
    # measured on the H200: ~2.3-2.6x and ~1.5-1.7x (bench/RESULTS.md); a regression shows here
    assert bf16 / int4 > 1.8 and bf16 / fp8 > 1.25, (bf16, int4, fp8)
