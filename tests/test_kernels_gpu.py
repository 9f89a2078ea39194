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
        if M <= 64:       # the TMA-fed persistent kernel (tensor descriptor, pipelined tile loop)
            out = torch.full((128, M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            w4 = w4a16_bmm(x, qw, out=out, config={"variant": "tma", "BLOCK_N": 64, "NS": 2, "CTAS_PER_SM": 2})
            assert not w4.isnan().any() and _rel(w4, ref) < 1e-2, ("tma", zp)
    fw = quant.quantize_fp8(w)
    ref = x.float() @ quant.dequantize_fp8(fw)
    cfgs = [{"BLOCK_N": 128, "SUB": 2}, {"BLOCK_N": 64, "persistent": True, "CTAS_PER_SM": 1, "num_stages": 2}]
    if M <= 16:     # the TMA-fed FP8 kernel as STACKED runs it (at M = 64, K = 512 its 3 stages exceed shared memory)
        cfgs.append({"variant": "tma", "BLOCK_N": 128, "NS": 3, "CTAS_PER_SM": 4})
    for cfg in cfgs:
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


@pytest.mark.parametrize("K,N", [(4096, 4096), (7168, 2048), (2048, 7168)])
def test_decode_gemm_dispatch_is_correct_repeatable_and_not_slower_than_bf16(K, N):
    """Issue 26: the tuned decode configs (GEMV at M = 1, split-K above) on quantized real weights
    match the dequantized reference, give the same bits twice, and beat cuBLAS BF16 cold."""
    from mcp_server.kernels import bench, decode

    for M in (1, 8, 16):
        c = decode.check_decode(M, K, N)
        assert c["int4_rel_err"] < 3e-3 and c["fp8_rel_err"] < 3e-3, c
        assert c["int4_repeatable"] and c["fp8_repeatable"] and not c["int4_nan"] and not c["fp8_nan"], c
    buf = decode.DecodeBuffers(1, K, N, formats=("bf16", "int4"))
    bf16 = bench.time_launches(buf.fns("bf16"))
    int4 = bench.time_launches(buf.fns("int4"))
    # measured on the H200: 1.41-1.80x at M = 1 (bench/RESULTS.md, "decode GEMM")
    assert bf16 / int4 > 1.2, (bf16, int4)


def test_split_k_variants_on_every_group_layout():
    """Split-K tensor-core, split-K GEMV and split-K FP8 with zero points and small groups."""
    from mcp_server.kernels import quant
    from mcp_server.kernels.w4a16 import w4a16_bmm
    from mcp_server.kernels.w8a16 import w8a16_bmm

    g = torch.Generator(device="cuda").manual_seed(3)
    w = (torch.randn(2, 2048, 384, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    for M in (1, 5, 16, 40):
        x = torch.randn(2, M, 2048, device="cuda", generator=g).to(torch.bfloat16)
        for zp, grp in ((False, 128), (True, 128), (True, 32), (False, 256)):
            qw = quant.quantize_int4(w, group=grp, zero_point=zp)
            ref = x.float() @ quant.dequantize_int4(qw)
            cfgs = [{"variant": "splitk", "BLOCK_N": 64, "SPLIT": 8, "SUB": 2},
                    {"variant": "splitk", "BLOCK_N": 32, "SPLIT": 4, "SUB": 2, "num_warps": 1, "num_stages": 1}]
            if M == 1:
                cfgs.append({"variant": "gemv", "BLOCK_N": 128, "SPLIT": 16, "SUB": 1, "num_stages": 1})
            for cfg in cfgs:
                out = torch.full((2, M, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
                o = w4a16_bmm(x, qw, out=out, config=cfg)
                assert not o.isnan().any() and _rel(o, ref) < 1e-2, (M, zp, grp, cfg)
        for grp in (0, 128):
            fw = quant.quantize_fp8(w, group=grp)
            out = torch.full((2, M, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
            o = w8a16_bmm(x, fw, out=out, config={"BLOCK_N": 128, "SUB": 2, "SPLIT": 16, "num_stages": 1})
            assert not o.isnan().any() and _rel(o, x.float() @ quant.dequantize_fp8(fw)) < 1e-2, (M, grp)
            if M == 1:      # the FP8 CUDA-core GEMV (the M = 1 heuristic's)
                out = torch.full((2, 1, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
                o = w8a16_bmm(x, fw, out=out, config={"variant": "gemv", "BLOCK_N": 128, "SUB": 1, "SPLIT": 32})
                assert not o.isnan().any() and _rel(o, x.float() @ quant.dequantize_fp8(fw)) < 1e-2, grp


@pytest.mark.parametrize("K", [1792, 2048])
def test_rows_kernels_on_every_group_layout(K):
    """The M = 1 rows kernels (whole K per program): K / 8 = 224 words in a padded, masked tile of 256,
    and 256 words; zero points, small groups, the register cap."""
    from mcp_server.kernels import quant
    from mcp_server.kernels.w4a16 import w4a16_bmm
    from mcp_server.kernels.w8a16 import w8a16_bmm

    g = torch.Generator(device="cuda").manual_seed(K)
    w = (torch.randn(2, K, 384, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    x = torch.randn(2, 1, K, device="cuda", generator=g).to(torch.bfloat16)
    for zp, grp in ((False, 128), (True, 128), (True, 32), (False, 256)):
        qw = quant.quantize_int4(w, group=grp, zero_point=zp)
        ref = x.float() @ quant.dequantize_int4(qw)
        for cfg in ({"variant": "rows", "BLOCK_N": 4}, {"variant": "rows", "BLOCK_N": 8, "num_warps": 8},
                    {"variant": "rows", "BLOCK_N": 4, "num_warps": 4, "maxnreg": 64}):
            out = torch.full((2, 1, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
            o = w4a16_bmm(x, qw, out=out, config=cfg)
            assert not o.isnan().any() and _rel(o, ref) < 1e-2, (zp, grp, cfg)
    for grp in (0, 128):
        fw = quant.quantize_fp8(w, group=grp)
        for cfg in ({"variant": "rows", "BLOCK_N": 2, "num_warps": 1}, {"variant": "rows", "BLOCK_N": 8, "num_warps": 8}):
            out = torch.full((2, 1, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
            o = w8a16_bmm(x, fw, out=out, config=cfg)
            assert not o.isnan().any() and _rel(o, x.float() @ quant.dequantize_fp8(fw)) < 1e-2, (grp, cfg)
