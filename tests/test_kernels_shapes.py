"""Facts of the MLA shapes, the packed layouts, the tuning table and the kernels' faces (CPU only)."""
from __future__ import annotations

from pathlib import Path

import pytest

from mcp_server.kernels import configs, tuning


def test_deepseek_configs_are_the_published_ones():
    v3, v2 = configs.get_model("deepseek-v3"), configs.get_model("DeepSeek-V2")
    def dims(c):
        return (c.num_heads, c.kv_lora_rank, c.qk_nope_head_dim, c.v_head_dim, c.num_layers)
    assert dims(v3) == (128, 512, 128, 128, 61)
    assert dims(v2) == (128, 512, 128, 128, 60)
    with pytest.raises(KeyError, match="known: deepseek-v2, deepseek-v3"):
        configs.get_model("llama")


def test_absorbed_shapes_and_sizes():
    uk, uv = configs.reconstruction_shapes(configs.get_model("deepseek-v3"), M=1)
    assert (uk.weight, uk.H, uk.K, uk.N) == ("W_UK", 128, 128, 512)   # q_nope @ W_UK -> latent
    assert (uv.weight, uv.H, uv.K, uv.N) == ("W_UV", 128, 512, 128)   # latent @ W_UV -> v
    assert uk.weight_bytes_bf16 == 16 * 2**20 == uv.weight_bytes_bf16  # one layer: 16 MiB, fits a 60 MB L2
    st = configs.reconstruction_shapes(configs.get_model("deepseek-v3"), M=8, layers=8)[0]
    assert st.H == 1024 and st.weight_mb == pytest.approx(134.2, abs=0.1)   # 8 stacked layers: >= 128 MB
    assert st.flops == 2 * 1024 * 8 * 128 * 512
    shapes = configs.mla_shapes("deepseek-v3")
    assert len(shapes) == 3 * 3 * 2 and shapes[0].layers == 1 and shapes[-1].layers == 32
    with pytest.raises(ValueError, match="outside 1..256"):
        configs.reconstruction_shapes(configs.get_model("deepseek-v3"), M=257)


def test_int4_packing_layout_and_roundtrip():
    torch = pytest.importorskip("torch")
    from mcp_server.kernels import quant

    codes = torch.randint(0, 16, (2, 256, 8))
    packed = quant.pack_int4(codes)
    assert packed.shape == (2, 8, 32) and packed.dtype == torch.int32
    assert torch.equal(quant.unpack_int4(packed, 256), codes.int())
    # word i of a 128-k block holds k = 16 j + i in nibble j (the kernel's dot-ready layout)
    h, n, blk, i, j = 1, 3, 1, 5, 6
    word = int(packed[h, n, blk * 16 + i]) & 0xFFFFFFFF
    assert (word >> (4 * j)) & 0xF == int(codes[h, blk * 128 + 16 * j + i, n])


def test_int4_quantization_error_and_zero_points():
    torch = pytest.importorskip("torch")
    from mcp_server.kernels import quant

    w = torch.randn(2, 256, 16, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    for zp in (False, True):
        q = quant.quantize_int4(w, group=128, zero_point=zp)
        err = float((quant.dequantize_int4(q) - w.float()).norm() / w.float().norm())
        assert 0.03 < err < 0.15            # 4 bits of a Gaussian: ~9 % (symmetric), less with zeros
        assert (q.zeros is not None) == zp and q.scales.shape == (2, 2, 16)
    with pytest.raises(ValueError, match="group=48"):
        quant.quantize_int4(w, group=48)


def test_fp8_shuffle_roundtrip_and_layout():
    torch = pytest.importorskip("torch")
    from mcp_server.kernels import quant

    w = torch.randn(1, 128, 4, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    nat = quant.quantize_fp8(w, layout="natural")
    sh = quant.quantize_fp8(w)
    assert sh.layout == "shuffled" and torch.equal(quant.unshuffle_fp8(sh.weight).view(torch.uint8),
                                                   nat.weight.view(torch.uint8))
    # byte j of word i (block of 64 k) holds k = 16 j + i
    u = sh.weight.view(torch.uint8)
    i, j = 3, 2
    assert int(u[0, 1, 4 * i + j]) == int(nat.weight.view(torch.uint8)[0, 1, 16 * j + i])
    err = float((quant.dequantize_fp8(sh) - w.float()).norm() / w.float().norm())
    assert err < 0.05


def test_tuning_table_covers_the_bench_families():
    for kind in ("int4", "fp8"):
        for M in (1, 8, 64):
            for K, N in ((128, 512), (512, 128)):
                assert (kind, tuning.bucket(M), K, N) in tuning.TABLE, (kind, M, K, N)
    assert tuning.bucket(5) == 8 and tuning.bucket(200) == 256
    cfg = tuning.config_for("int4", 1, 128, 512)
    cfg["BLOCK_N"] = -1
    assert tuning.config_for("int4", 1, 128, 512)["BLOCK_N"] != -1   # a copy
    # STACKED first once the H matrices hold >= 64 MiB of BF16 (4+ layers of 128 heads): FP8 W_UK
    # through the TMA-fed kernel at 8 layers, the word-tile kernel at one layer; INT4 at M <= 8 through the
    # CUDA kernel when stacked, its one-layer Triton config as the fallback and at one layer
    for M, K, N, fb in ((1, 128, 512, "tma"), (8, 128, 512, "tma"), (1, 512, 128, "asm"), (8, 512, 128, "asm")):
        cfg = tuning.config_for("fp8", M, K, N, 512)                # the CUDA kernel's e4m3 streaming form
        assert (cfg["variant"], cfg["STAGES"], cfg["fallback"]["variant"]) == ("cuda", 2, fb), (M, K, N)
    assert tuning.config_for("fp8", 16, 128, 512, 512)["variant"] == "tma"
    assert tuning.config_for("fp8", 1, 128, 512, 128)["variant"] == "asm"
    assert tuning.config_for("fp8", 64, 128, 512, 1024)["num_stages"] == 3
    assert tuning.config_for("fp8", 64, 128, 512, 128)["num_stages"] == 2
    for M, K, N in ((1, 128, 512), (1, 512, 128), (8, 128, 512), (8, 512, 128)):
        stacked, one = tuning.config_for("int4", M, K, N, 1024), tuning.config_for("int4", M, K, N, 128)
        assert stacked["variant"] == "cuda" and one["variant"] == "dot" and stacked["fallback"] == one
        # the streaming form (a ring of STAGES slots) everywhere but W_UK at M = 8 (the persistent mma.sync grid)
        assert ("STAGES" in stacked) == ((M, K) != (8, 128)) and ("PROGS" in stacked) == ((M, K) == (8, 128))
    # every M = 64 family stays on Triton (the CUDA kernel lost there)
    assert tuning.config_for("int4", 64, 128, 512, 1024)["variant"] == "dot"
    assert tuning.config_for("int4", 64, 512, 128, 1024)["variant"] == "dot"
    stacked = tuning.config_for("int4", 1, 128, 512, 1024)
    stacked["fallback"]["BLOCK_N"] = -1
    assert tuning.config_for("int4", 1, 128, 512, 1024)["fallback"]["BLOCK_N"] != -1   # a deep enough copy


def test_requests_parse_comma_lists_and_refuse_bad_values():
    from pydantic import ValidationError

    from mcp_server.kernels.requests import L2SweepRequest, MlaBenchRequest

    assert MlaBenchRequest(batch="1, 8,64").batch == [1, 8, 64]
    assert MlaBenchRequest(batch=[2]).batch == [2]
    for bad in ("0,8", "1,x", "300"):
        with pytest.raises(ValidationError):
            MlaBenchRequest(batch=bad)
    with pytest.raises(ValidationError):
        MlaBenchRequest(unknown=1)
    assert L2SweepRequest().heads is None and L2SweepRequest(heads="32,64").heads == [32, 64]


def test_operations_are_declared_and_not_read_only():
    from mcp_server.faces.registry import operations
    ops = {o.tool: o for o in operations()}
    for tool, verb in (("bench_mla", "mla"), ("sweep_l2", "l2-sweep"), ("bench_decode_gemm", "decode-gemm")):
        op = ops[tool]
        assert op.verb == verb and op.progress and not op.hints.read_only
        assert "timeout_s" in op.field_names


def test_without_a_gpu_the_engines_raise_a_typed_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from mcp_server.core.errors import ToolMissingError
    from mcp_server.kernels.engine import decode_gemm, l2_sweep, mla_bench

    with pytest.raises(ToolMissingError, match="no CUDA GPU"):
        mla_bench()
    with pytest.raises(ToolMissingError, match="bench_decode_gemm: no CUDA GPU"):
        decode_gemm()
    with pytest.raises(ToolMissingError, match="no CUDA GPU"):
        l2_sweep()


def test_decode_gemm_families_are_tuned_and_other_shapes_get_a_valid_plan():
    from mcp_server.kernels import decode

    for kind in ("int4", "fp8"):
        for K, N in decode.DECODE_SHAPES:
            for M in decode.DECODE_BATCHES:
                assert tuning.is_tuned(kind, M, K, N), (kind, M, K, N)
    # measured at M = 1: the rows kernel (whole K per program, no split-K) where it won; at 7168x2048 the
    # CUDA kernel split 14 ways (4 blocks per program), the CUDA-core GEMV it replaced as its fallback
    assert tuning.config_for("int4", 1, 4096, 4096)["variant"] == "rows"
    assert tuning.config_for("int4", 1, 7168, 2048) == {
        "variant": "cuda", "NT": 1, "WARPS": 2, "KB": 4, "SPLIT": 14, "fallback": {
            "variant": "gemv", "BLOCK_N": 128, "SPLIT": 56, "SUB": 1, "num_warps": 4, "num_stages": 1}}
    assert tuning.config_for("int4", 8, 7168, 2048)["fallback"]["SPLIT"] == 14
    for M, K, N in ((8, 4096, 4096), (16, 4096, 4096), (8, 8192, 8192), (8, 2048, 7168)):
        c = tuning.config_for("int4", M, K, N)
        assert c["variant"] == "cuda" and K == c["KB"] * 128 * c["SPLIT"] and N % (16 * c["NT"] * c["WARPS"]) == 0
    # untuned shapes: K divisible by SPLIT x 128 x SUB (64 for fp8), N by BLOCK_N, a few programs per SM
    for K, N in ((4096, 11008), (11008, 4096), (5120, 640), (1024, 1024), (14336, 4096), (256, 48)):
        for M in (1, 4, 16, 48, 200):
            assert not tuning.is_tuned("int4", M, K, N)
            c = tuning.config_for("int4", M, K, N)
            assert N % c["BLOCK_N"] == 0 and K % (c.get("SPLIT", 1) * 128 * c.get("SUB", 1)) == 0, (K, N, M, c)
            assert c["variant"] == ("gemv" if M == 1 else "splitk")
            f = tuning.config_for("fp8", M, K, N)
            assert f["variant"] == ("gemv" if M == 1 else "asm")      # FP8 at M = 1: the CUDA-core GEMV
            assert N % f["BLOCK_N"] == 0 and K % (f["SPLIT"] * 64 * f["SUB"]) == 0, (K, N, M, f)
            if M == 1:
                progs = (N // c["BLOCK_N"]) * c["SPLIT"]
                assert progs >= 132 or c["SPLIT"] == K // 128     # fills the SMs unless K runs out
    assert tuning.config_for("int4", 1, 11008, 4096)["SPLIT"] == 43     # 86 blocks: a divisor, not a power of 2
    assert tuning.config_for("int4", 8, 4096, 11008)["SPLIT"] == 4      # 172 tiles x 4: nearest 4 per SM
    with pytest.raises(ValueError, match="multiple of 128"):
        tuning.config_for("int4", 1, 200, 64)
    with pytest.raises(ValueError, match="multiple of 16"):
        tuning.config_for("int4", 1, 256, 40)


def test_decode_gemm_request_parses_shapes_and_refuses_bad_ones():
    from pydantic import ValidationError

    from mcp_server.kernels.requests import DecodeGemmRequest

    r = DecodeGemmRequest(shapes="4096x4096, 7168X2048", batch="1,8")
    assert r.shapes == [[4096, 4096], [7168, 2048]] and r.batch == [1, 8]
    assert DecodeGemmRequest().shapes is None and DecodeGemmRequest().batch == [1, 8, 16]
    assert DecodeGemmRequest(shapes=[[256, 48]]).shapes == [[256, 48]]
    for bad, msg in (("4096", "is not KxN"), ("4000x4096", "K=4000 must be a multiple of 128"),
                     ("4096x100", "N=100 must be a multiple of 16"), ("axb", "is not KxN"), (",", "at least one")):
        with pytest.raises(ValidationError, match=msg):
            DecodeGemmRequest(shapes=bad)


def test_the_cuda_kernel_plans_its_grid_and_refuses_what_it_cannot_run():
    """``w4a16_cuda.plan`` (no GPU needed): grid, threads and shared memory of a launch, and a typed refusal
    naming the reason for shapes, groups and combinations the kernel does not handle."""
    from mcp_server.kernels.w4a16_cuda import CudaKernelUnavailable, plan, supports_group

    # W_UV at 8 layers, M = 1: one program (8 warps x 16 rows) per head, K = 4 blocks, x staged as 8 rows
    mc, grid, threads, smem = plan({"NT": 1, "WARPS": 8, "KB": 4}, 1024, 1, 512, 128, 128, False)
    assert grid == (1, 1024, 1) and threads == 256 and smem == 8 * (512 + 8) * 2
    assert (mc["MT"], mc["SPLIT"], mc["PF"], mc["ZP"]) == (1, 1, 0, 0)
    # M = 20 needs 3 m-tiles of 8; MT = 2 covers 16 rows per program, so two m-programs per n block
    mc, grid, _, smem = plan({"NT": 2, "WARPS": 4, "KB": 1, "MT": 2}, 16, 20, 128, 512, 64, True)
    assert grid == (4 * 2, 16, 1) and mc["ZP"] == 1 and smem == 16 * (128 + 8) * 2
    # split-K on a decode GEMM, K split in 14 slices of 4 blocks; warps splitting K add a reduction buffer
    _, grid, threads, smem = plan({"NT": 1, "WARPS": 2, "KB": 4, "SPLIT": 14}, 1, 1, 7168, 2048, 128, False)
    assert grid == (64, 1, 14) and threads == 64
    _, _, threads, smem = plan({"NT": 2, "WARPS": 2, "KB": 2, "KWARP": 2}, 1024, 8, 512, 128, 128, False)
    assert threads == 128 and smem == 8 * (512 + 8) * 2 + 1 * 2 * 2 * 1 * 4 * 32 * 4
    # the persistent grid: PROGS programs per SM over the heads, never more programs than heads
    mc, grid, _, _ = plan({"NT": 4, "WARPS": 2, "KB": 1, "PROGS": 6}, 1024, 8, 128, 512, 128, False, sms=132)
    assert mc["PF"] == 1 and grid == (4, 6 * 132 // 4, 1)
    assert plan({"NT": 4, "WARPS": 2, "KB": 1, "PROGS": 6}, 16, 8, 128, 512, 128, False)[1][1] == 16
    for cfg, shape, why in (
            ({"NT": 4, "WARPS": 4}, (8, 1, 128, 96), "N=96 is not a multiple of 16\\*NT\\*WARPS=256"),
            ({"KB": 2}, (8, 1, 512, 128), "K=512 != KB\\*128\\*KWARP\\*SPLIT=256"),
            ({"KB": 1, "SPLIT": 4, "PROGS": 2}, (8, 1, 512, 128), "do not combine")):
        with pytest.raises(CudaKernelUnavailable, match=why):
            plan(cfg, *shape, 128, False)
    with pytest.raises(CudaKernelUnavailable, match="group=16"):
        plan({}, 1, 1, 128, 64, 16, False)
    # the streaming form: a persistent grid of CPS programs per SM (never more than the units), a producer warp
    # beside the WARPS consumers, STAGES slots of (words, scales, activations) after 128 bytes of mbarriers
    st = {"NT": 2, "WARPS": 4, "KB": 4, "STAGES": 2, "CPS": 2, "DYN": 1}
    mc, grid, threads, smem = plan(st, 1024, 1, 512, 128, 128, False, sms=132)
    assert (mc["STREAM"], mc["STAGES"], mc["DYN"], grid, threads) == (1, 2, 1, (264, 1, 1), 160)
    assert smem == 128 + 2 * (128 * 64 * 4 + 4 * 128 * 2 + 8 * (512 + 8) * 2)
    assert plan(st, 100, 8, 512, 128, 64, True)[1] == (100, 1, 1)           # 100 units (one head each)
    zp = plan(dict(st, XONE=1), 8, 3, 512, 128, 64, True)[3]                  # 8 groups, zero points, rows unpadded
    assert zp == 128 + 2 * (128 * 64 * 4 + 2 * 8 * 128 * 2 + 8 * 512 * 2)
    assert plan({"NT": 8, "WARPS": 4, "KB": 1, "STAGES": 2}, 1024, 1, 128, 512, 128, False)[1] == (132, 1, 1)
    for cfg, shape, why in (
            (dict(st, SPLIT=2), (8, 1, 512, 128), "takes no SPLIT"),
            (dict(st, KB=2), (8, 1, 512, 128), "a unit holds all of K"),
            (dict(st, MT=1), (8, 9, 512, 128), "M=9 > 8\\*MT=8"),
            (dict(st, STAGES=6), (8, 1, 512, 128), "exceed 226 KiB"),
            (dict(st, PADW=2), (8, 1, 512, 128), "PADW=2")):
        with pytest.raises(CudaKernelUnavailable, match=why):
            plan(cfg, *shape, 128, False)
    # the e4m3 form streams too: 64-k blocks, per-channel fp32 scales (R floats a slot)
    _, grid, _, smem = plan(dict(st, NT=1, KB=8), 1024, 8, 512, 128, 0, False, sms=132, fp8=True)
    assert grid == (264, 1, 1) and smem == 128 + 2 * (64 * 128 * 4 + 64 * 4 + 8 * (512 + 8) * 2)
    with pytest.raises(CudaKernelUnavailable, match="K=512 != KB\\*64=256"):
        plan(dict(st, KB=4), 8, 1, 512, 128, 0, False, fp8=True)
    assert [g for g in (16, 32, 64, 96, 128, 256, 384) if supports_group(g)] == [32, 64, 128, 256, 384]


def test_the_cuda_kernel_options_gate_and_are_all_named_in_the_source():
    """ERL runs only where its registers hold the unit's scales (the INT4 streaming form, groups of 128+); CG consumer
    groups must divide the slots and add their warps to the block; every compile-time parameter is listed in the
    source's header."""
    from mcp_server.kernels.w4a16_cuda import CudaKernelUnavailable, macros, plan, source

    st = {"NT": 2, "WARPS": 4, "KB": 4, "STAGES": 2, "CPS": 2, "DYN": 1}
    assert macros(dict(st, ERL=1), 8, 128, False)["ERL"] == 1
    assert macros(dict(st, ERL=1), 8, 256, True)["ERL"] == 1
    assert macros(dict(st, ERL=1), 8, 64, True)["ERL"] == 0                    # 16 groups: too many to hold
    assert macros(dict(st, ERL=1, KB=8), 8, 0, False, fp8=True)["ERL"] == 0     # the e4m3 form has no ERL path
    assert macros({"NT": 1, "WARPS": 4, "KB": 4, "SPLIT": 8, "ERL": 1}, 8, 128, False)["ERL"] == 0
    assert plan(dict(st, CG=2), 300, 8, 512, 128, 128, False)[2] == 32 * (2 * 4 + 1)
    assert plan(st, 300, 8, 512, 128, 128, False)[2] == 32 * 5
    with pytest.raises(CudaKernelUnavailable, match="CG=3"):
        plan(dict(st, CG=3), 300, 8, 512, 128, 128, False)
    header = source().split("No headers")[0]
    assert all(k in header.split() or f"{k}." in header.split() for k in macros(st, 8, 128, False)), header


def test_the_cuda_source_ships_and_builds_offline_where_nvrtc_is_installed():
    """The kernel's CUDA C++ is package data (``kernels/cuda/w4a16_mma.cu``); where the NVRTC library of the
    ``nvidia-cuda-nvrtc-cu12`` wheel is installed (no GPU needed), every form compiles for sm_90 with no spills."""
    import ctypes
    import importlib.util

    from mcp_server.kernels import w4a16_cuda

    src = w4a16_cuda.source()
    assert 'extern "C" __global__ void BOUNDS' in src and "w4a16_mma(" in src
    spec = importlib.util.find_spec("nvidia.cuda_nvrtc")
    libs = [p for loc in (spec.submodule_search_locations if spec else []) for p in Path(loc).glob("lib/libnvrtc.so*")]
    if not libs:
        pytest.skip("no NVRTC library here (pip install nvidia-cuda-nvrtc-cu12)")
    lib = ctypes.CDLL(str(sorted(libs)[0]))
    forms = [({"NT": 4, "WARPS": 2, "KB": 1}, 1, 128, False, False), ({"NT": 1, "WARPS": 8, "KB": 4}, 8, 64, True, False),
             ({"NT": 2, "WARPS": 2, "KB": 2, "KWARP": 2, "PROGS": 3}, 1, 32, False, False),
             ({"NT": 1, "WARPS": 4, "KB": 4, "SPLIT": 8}, 16, 256, True, False),
             ({"NT": 1, "WARPS": 4, "KB": 2}, 1, 0, False, True), ({"NT": 2, "WARPS": 2, "KB": 4, "KWARP": 2}, 8, 0, False, True),
             # the streaming form as recorded (tuning._STREAM), with zero points and unpadded activations
             ({"NT": 8, "WARPS": 4, "KB": 1, **tuning._STREAM}, 1, 128, False, False),
             ({"NT": 2, "WARPS": 4, "KB": 4, **tuning._STREAM}, 8, 128, False, False),
             ({"NT": 2, "WARPS": 4, "KB": 4, "STAGES": 3, "DYN": 1, "XONE": 1}, 5, 64, True, False),
             ({"NT": 4, "WARPS": 4, "KB": 2, **tuning._STREAM}, 8, 0, False, True),
             ({"NT": 2, "WARPS": 4, "KB": 4, **tuning._STREAM, "SWZ": 1}, 1, 128, False, False),
             ({"NT": 8, "WARPS": 4, "KB": 1, **tuning._STREAM, "SWZ": 1}, 8, 64, True, False),
             # the unpack's options (MHI: shifts as IMADs; SXC: 128 + z off after the MMA), streaming and not
             ({"NT": 8, "WARPS": 4, "KB": 1, **tuning._STREAM, "MHI": 1, "SXC": 1}, 1, 32, True, False),
             ({"NT": 2, "WARPS": 4, "KB": 4, **tuning._STREAM, "MHI": 1, "SXC": 1}, 8, 64, True, False),
             ({"NT": 4, "WARPS": 2, "KB": 1, "PROGS": 6, "MHI": 1, "SXC": 1}, 8, 128, False, False),
             ({"NT": 1, "WARPS": 4, "KB": 4, "SPLIT": 8, "MHI": 1}, 16, 128, False, False),
             # the slot freed before the multiply (ERL), as recorded and with zero points
             ({"NT": 8, "WARPS": 4, "KB": 1, **tuning._STREAM, "ERL": 1, "SXC": 1}, 1, 128, False, False),
             ({"NT": 2, "WARPS": 4, "KB": 4, **tuning._STREAM, "ERL": 1, "SXC": 1}, 8, 256, True, False),
             ({"NT": 2, "WARPS": 4, "KB": 4, **tuning._STREAM, "ERL": 1}, 8, 128, True, False),
             # one consumer group per slot (CG)
             ({"NT": 8, "WARPS": 4, "KB": 1, **tuning._STREAM, "CG": 2}, 1, 128, True, False),
             ({"NT": 2, "WARPS": 4, "KB": 4, **tuning._STREAM, "CG": 2, "SXC": 1}, 8, 64, False, False)]
    for cfg, M, group, zp, fp8 in forms:
        mc = w4a16_cuda.macros(cfg, M, group, zp, fp8)
        prog = ctypes.c_void_p()
        assert lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None) == 0
        opts = ["--gpu-architecture=sm_90", "--ptxas-options=-v", "-std=c++17"] + [f"-D{k}={v}" for k, v in mc.items()]
        arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, log)
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
        text = log.value.decode()
        assert rc == 0, (mc, text[-2000:])
        assert "0 bytes spill stores" in text and "registers" in text, (mc, text[-500:])
