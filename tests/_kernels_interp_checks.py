"""Run by tests/test_kernels_interpret.py in a subprocess with TRITON_INTERPRET=1 (the variable must
be set before the kernels are imported): every kernel variant on small CPU shapes against the
dequantized reference. Prints one JSON object {case: relative error or "skip: reason"}."""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from mcp_server.kernels import quant, tuning  # noqa: E402
from mcp_server.kernels.w4a16 import w4a16_bmm  # noqa: E402
from mcp_server.kernels.w8a16 import act_quant_fp8, w8a8_launch, w8a16_bmm  # noqa: E402


def rel(a, b) -> float:
    return float((a.float() - b).norm() / b.norm())


def main() -> None:
    g = torch.Generator().manual_seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    out: dict = {}
    for (H, M, K, N) in ((2, 1, 128, 64), (2, 3, 256, 32), (1, 20, 512, 32)):
        w = (torch.randn(H, K, N, generator=g) * 0.05).to(torch.bfloat16)
        x = torch.randn(H, M, K, generator=g).to(torch.bfloat16)
        tag = f"H{H}_M{M}_K{K}_N{N}"
        for zp, grp in ((False, 128), (True, 128), (False, 64), (True, 32)):
            qw = quant.quantize_int4(w, group=grp, zero_point=zp)
            ref = x.float() @ quant.dequantize_int4(qw)
            cfg = {"BLOCK_N": 32, "BLOCK_M": 16}
            out[f"int4_dot_g{grp}{'_zp' if zp else ''}_{tag}"] = rel(w4a16_bmm(x, qw, config=cfg), ref)
            if K > 128:   # scales prefetched a block ahead
                out[f"int4_dotpf_g{grp}{'_zp' if zp else ''}_{tag}"] = rel(
                    w4a16_bmm(x, qw, config={**cfg, "PF": True}), ref)
            if M == 1 and not zp:
                out[f"int4_gemv_g{grp}_{tag}"] = rel(w4a16_bmm(x, qw, config=cfg, variant="gemv"), ref)
            # split-K (the last program of a tile reduces the partials), SUB blocks per step
            split = 2 if K >= 256 else 1
            sk = {"variant": "splitk", "BLOCK_N": 32, "BLOCK_M": 16, "SPLIT": split, "SUB": 2 if K >= 512 else 1}
            out[f"int4_splitk_g{grp}{'_zp' if zp else ''}_{tag}"] = rel(w4a16_bmm(x, qw, config=sk), ref)
            # the M = 1 GEMV split along K (on the first token of each shape)
            x1 = x[:, :1].contiguous()
            gv = {"variant": "gemv", "BLOCK_N": 16, "SPLIT": K // 128, "SUB": 1}
            out[f"int4_gemvsk_g{grp}{'_zp' if zp else ''}_{tag}"] = rel(
                w4a16_bmm(x1, qw, config=gv), x1.float() @ quant.dequantize_int4(qw))
            # the M = 1 rows kernel: whole K per program, no split (K = 256 pads KWP 32 -> 32, 512 -> 64)
            out[f"int4_rows_g{grp}{'_zp' if zp else ''}_{tag}"] = rel(
                w4a16_bmm(x1, qw, config={"variant": "rows", "BLOCK_N": 4}), x1.float() @ quant.dequantize_int4(qw))
        for grp in (0, 64, 128):
            fw = quant.quantize_fp8(w, group=grp)
            ref = x.float() @ quant.dequantize_fp8(fw)
            out[f"fp8_shuffled_g{grp}_{tag}"] = rel(w8a16_bmm(x, fw, config={"BLOCK_N": 32, "SUB": 1}), ref)
            out[f"fp8_splitk_g{grp}_{tag}"] = rel(w8a16_bmm(x, fw, config={
                "BLOCK_N": 32, "SUB": 2, "SPLIT": K // 128}), ref)
            x1 = x[:, :1].contiguous()
            out[f"fp8_gemvsk_g{grp}_{tag}"] = rel(w8a16_bmm(x1, fw, config={
                "variant": "gemv", "BLOCK_N": 16, "SUB": 1, "SPLIT": K // 64}), x1.float() @ quant.dequantize_fp8(fw))
            out[f"fp8_rows_g{grp}_{tag}"] = rel(w8a16_bmm(x1, fw, config={"variant": "rows", "BLOCK_N": 2}),
                                                x1.float() @ quant.dequantize_fp8(fw))
            nat = quant.quantize_fp8(w, group=grp, layout="natural")
            out[f"fp8_natural_g{grp}_{tag}"] = rel(
                w8a16_bmm(x, nat, config={"BLOCK_N": 32, "BLOCK_K": 64 if not grp or grp % 64 == 0 else 32}), ref)
        # no config: the shape dispatch (these CPU shapes are not in the table: one warning each)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            qw = quant.quantize_int4(w)
            out[f"int4_auto_{tag}"] = rel(w4a16_bmm(x, qw), x.float() @ quant.dequantize_int4(qw))
            fw = quant.quantize_fp8(w)
            out[f"fp8_auto_{tag}"] = rel(w8a16_bmm(x, fw), x.float() @ quant.dequantize_fp8(fw))
        out[f"untuned_warnings_{tag}"] = [str(m.message) for m in seen if m.category is tuning.UntunedShapeWarning]
        nat = quant.quantize_fp8(w, layout="natural")
        x8, xs = quant.quantize_act_fp8(x)
        ref = (x8.float() * xs[..., None]) @ quant.dequantize_fp8(nat)
        out[f"w8a8_{tag}"] = rel(w8a8_launch(x8, xs, nat, config={"BLOCK_N": 32, "BLOCK_K": 64})[1], ref)
        k8, ks = act_quant_fp8(x)
        out[f"act_scale_{tag}"] = float((ks - xs).abs().max() / xs.abs().max())
    # K = 384: the rows kernels' word tile pads 48 words to 64 and masks the rest (as 7168 on the H200)
    w = (torch.randn(1, 384, 16, generator=g) * 0.05).to(torch.bfloat16)
    x1 = torch.randn(1, 1, 384, generator=g).to(torch.bfloat16)
    qw, fw = quant.quantize_int4(w, group=128, zero_point=True), quant.quantize_fp8(w)
    out["int4_rows_g128_zp_H1_M1_K384_N16"] = rel(w4a16_bmm(x1, qw, config={"variant": "rows", "BLOCK_N": 2}),
                                                  x1.float() @ quant.dequantize_int4(qw))
    out["fp8_rows_g0_H1_M1_K384_N16"] = rel(w8a16_bmm(x1, fw, config={"variant": "rows", "BLOCK_N": 4}),
                                            x1.float() @ quant.dequantize_fp8(fw))
    # the CUDA kernel's config off a CUDA device: its Triton fallback runs (one RuntimeWarning); with no
    # fallback the typed error names why the CUDA kernel cannot run
    from mcp_server.kernels.w4a16_cuda import CudaKernelUnavailable

    cu = {"variant": "cuda", "NT": 1, "WARPS": 1, "KB": 3, "fallback": {"variant": "rows", "BLOCK_N": 2}}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out["int4_cudafb_g128_zp_H1_M1_K384_N16"] = rel(w4a16_bmm(x1, qw, config=cu),
                                                        x1.float() @ quant.dequantize_int4(qw))
    out["cuda_fallback_warnings"] = [str(m.message) for m in seen if m.category is RuntimeWarning]
    # a Triton variant asked of a CUDA config runs with its fallback's parameters
    out["int4_cudavar_g128_zp_H1_M1_K384_N16"] = rel(w4a16_bmm(x1, qw, config=cu, variant="rows"),
                                                     x1.float() @ quant.dequantize_int4(qw))
    try:
        w4a16_bmm(x1, qw, config={k: v for k, v in cu.items() if k != "fallback"})
        out["cuda_without_fallback"] = "ran"
    except CudaKernelUnavailable as exc:
        out["cuda_without_fallback"] = f"CudaKernelUnavailable: {exc}"
    out["persistent"] = ("skip: the persistent kernels loop over range(pid, tiles, nprog) with run-time bounds, "
                         "which triton 3.6's interpreter cannot run under numpy 2.x")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
