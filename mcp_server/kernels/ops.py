"""Operations of the kernels engine, declared once (the MCP tools and CLI verbs are generated from them)."""
from __future__ import annotations

from mcp_server.core.operation import Hints, Operation
from mcp_server.kernels.models import DecodeGemmResult, L2SweepResult, MlaBenchResult
from mcp_server.kernels.requests import DecodeGemmRequest, L2SweepRequest, MlaBenchRequest

#: They run GPU code and may write files: not read-only, not idempotent (timings vary), closed world.
RUNS_GPU = Hints(read_only=False, destructive=False, idempotent=False, open_world=False, runs_code=True)

OPERATIONS = [
    Operation(
        tool="bench_mla", verb="mla", title="Time the MLA reconstruction BMMs: BF16 vs INT4 vs FP8",
        help="DeepSeek MLA W_UK/W_UV BMMs: cuBLAS BF16 vs INT4 W4A16 vs FP8 W8A16, warm and cold, on this GPU",
        description=(
            "Time the absorbed-MLA decode reconstruction BMMs of DeepSeek-V2/V3 (W_UK: per head 128x512, W_UV: "
            "512x128, H = heads x stacked layers, decode batch M) with cuBLAS BF16 torch.bmm, kernelscope's INT4 "
            "W4A16 and FP8 W8A16 kernels (Triton, and a CUDA kernel built by NVRTC where it measured faster; each "
            "row names the kernel that ran), warm (weights L2-resident when they fit) and cold (weight sets "
            "rotated so every launch streams from HBM), CUDA-graph timed in one run: microseconds, achieved TB/s, "
            "speedup over BF16 (optionally the CUPTI kernel time beside), correctness and quantization error, "
            "and the issue-11 and issue-26 targets met or missed. "
            "Needs a CUDA GPU with torch and triton (typed error otherwise). Runs GPU code for minutes."),
        request=MlaBenchRequest, result=MlaBenchResult,
        engine="mcp_server.kernels.engine:mla_bench", render="mcp_server.kernels.render:render_mla",
        hints=RUNS_GPU, progress=True, aliases={"json_path": ("--json-out",)}, outputs={"json_path": "json"},
    ),
    Operation(
        tool="bench_decode_gemm", verb="decode-gemm",
        title="Time decode Linear layers: BF16 vs tinygemm vs INT4 vs FP8",
        help="Ordinary Linear shapes at decode (H = 1): cuBLAS BF16 vs torch's tinygemm vs INT4 W4A16 vs FP8 W8A16",
        description=(
            "Time x[M, K] @ W[K, N] at decode batch M (default K x N = 4096x4096, 8192x8192, 7168x2048, 2048x7168; "
            "M = 1, 8, 16) with cuBLAS BF16 F.linear, PyTorch's own W4A16 kernel (_weight_int4pack_mm, 'tinygemm', "
            "where this torch has it) and kernelscope's INT4 W4A16 and FP8 W8A16 kernels (Triton split-K, a CUDA-core "
            "GEMV at M = 1, or the NVRTC-built CUDA kernel, as recorded per shape; each row names the config that "
            "ran), cold (weight sets rotated through >= 512 MiB), CUDA-graph wall time and CUPTI kernel time "
            "side by side, the INT4 share of the copy bandwidth measured in the same run, correctness on quantized "
            "real-valued weights, the issue-26 targets, and warnings where INT4 loses to both baselines or a shape "
            "ran untuned. Needs a CUDA GPU with torch and triton (typed error otherwise)."),
        request=DecodeGemmRequest, result=DecodeGemmResult,
        engine="mcp_server.kernels.engine:decode_gemm", render="mcp_server.kernels.render:render_decode",
        hints=RUNS_GPU, progress=True, aliases={"json_path": ("--json-out",)}, outputs={"json_path": "json"},
    ),
    Operation(
        tool="sweep_l2", verb="l2-sweep", title="Sweep weight bytes across the L2: where quantization starts to win",
        help="BF16/INT4/FP8 latency vs weight MB across the L2 size; effective L2 boundary and crossover",
        description=(
            "Time BF16 cuBLAS, INT4 W4A16 and FP8 W8A16 on the MLA W_UK head matrix with the weight bytes swept "
            "from a few MB to ~512 MB (warm: the same weights every launch; BF16 also cold), and report the "
            "measured effective L2 residency boundary (largest size at which warm BF16 is still >= 15 % faster "
            "than cold) and the size from which each quantized format stays faster. Optional JSON and PNG "
            "(latency and speedup against weight MB, L2 size and boundary marked). Needs a CUDA GPU."),
        request=L2SweepRequest, result=L2SweepResult,
        engine="mcp_server.kernels.engine:l2_sweep", render="mcp_server.kernels.render:render_l2",
        hints=RUNS_GPU, progress=True, aliases={"json_path": ("--json-out",), "png_path": ("--png",)},
        outputs={"json_path": "json", "png_path": "png"},
    ),
]
