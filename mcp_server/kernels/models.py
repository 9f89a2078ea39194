"""Result models of the kernels engine (MLA bench, L2 sweep)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from mcp_server.core.models import Model, Warning_


class DeviceInfo(Model):
    name: str
    sm_count: int
    l2_mb: float = Field(description="L2 size the driver reports, MB (10^6 bytes)")
    capability: str
    torch: str
    triton: str
    cuda: Optional[str] = None


class MlaRow(Model):
    """One shape x cache state: BF16 cuBLAS vs INT4 W4A16 vs FP8 W8A16, same run."""

    model: str
    weight: Literal["W_UK", "W_UV"]
    layers: int = Field(description="Layers stacked into the BMM batch (H = heads x layers)")
    H: int
    M: int
    K: int
    N: int
    weight_mb: float = Field(description="BF16 weight bytes, MB")
    cache: Literal["warm", "cold"]
    bf16_us: float
    int4_us: float
    fp8_us: float
    int4_speedup: float
    fp8_speedup: float
    int4_tbps: float = Field(description="INT4 bytes moved (packed weights, scales, activations, output) / time")
    bf16_tbps: float
    fp8_tbps: float
    bf16_cupti_us: Optional[float] = Field(default=None, description="CUPTI kernel time per launch (with cupti)")
    int4_cupti_us: Optional[float] = None
    fp8_cupti_us: Optional[float] = None
    int4_cupti_speedup: Optional[float] = None
    fp8_cupti_speedup: Optional[float] = None
    int4_kernel: Optional[str] = Field(default=None, description=(
        "The INT4 kernel that ran: the config's variant ('cuda': the NVRTC-built CUDA kernel; 'dot', 'tma', ...: "
        "Triton), its Triton fallback's where the CUDA kernel does not build here"))
    fp8_kernel: Optional[str] = Field(default=None, description="The FP8 kernel that ran, as int4_kernel")


class MlaCheck(Model):
    """Correctness on random inputs (relative Frobenius norm errors)."""

    shape: str
    M: int
    int4_kernel_err: float = Field(description="INT4 kernel vs the dequantized-weight reference")
    fp8_kernel_err: float
    int4_quant_err: float = Field(description="INT4 result vs the BF16 product: the quantization error")
    fp8_quant_err: float
    bf16_err: float = Field(description="cuBLAS BF16 vs the fp32 product (rounding floor)")


class TargetCheck(Model):
    """One performance target of issue 11, judged on the rows."""

    target: str
    rows: int = Field(description="Rows the target applies to")
    worst: Optional[float] = Field(default=None, description="Worst speedup among those rows")
    goal: float
    met: Optional[bool] = Field(default=None, description="None when no row applies")


class MlaBenchResult(Model):
    model: str
    device: DeviceInfo
    copy_tbps: float = Field(description="Device-to-device copy of 4 GiB, bytes read + written / time (events)")
    read_tbps: Optional[float] = Field(default=None, description="Read-only bandwidth (amax over 4 GiB), TB/s")
    rows: list[MlaRow]
    checks: list[MlaCheck]
    targets: list[TargetCheck]
    json_path: Optional[str] = None
    warnings: list[Warning_] = Field(default_factory=list)


class L2Point(Model):
    H: int
    weight_mb: float
    bf16_us: float
    int4_us: float
    fp8_us: float
    bf16_cold_us: float
    int4_speedup: float
    fp8_speedup: float
    warm_over_cold: float = Field(description="BF16 warm / cold latency: < 1 while the weights stay in L2")


class L2SweepResult(Model):
    device: DeviceInfo
    K: int
    N: int
    M: int
    l2_mb: float
    effective_l2_mb: Optional[float] = Field(description=(
        "Largest BF16 weight size still L2-resident (warm at least 15 % faster than cold), interpolated"))
    int4_crossover_mb: Optional[float] = Field(description=(
        "Smallest size from which INT4 stays faster than BF16 (warm)"))
    fp8_crossover_mb: Optional[float]
    points: list[L2Point]
    json_path: Optional[str] = None
    png_path: Optional[str] = None
    warnings: list[Warning_] = Field(default_factory=list)


class DecodeGemmRow(Model):
    """One Linear shape and decode batch, cold, all formats in the same run: CUDA-graph wall time per
    launch (``*_us``) and CUPTI kernel time (``*_cupti_us``), µs; speedups over cuBLAS BF16."""

    M: int
    K: int
    N: int
    bf16_mb: float = Field(description="BF16 weight bytes, MB")
    bf16_us: float
    tinygemm_us: Optional[float] = Field(default=None, description=(
        "torch.ops.aten._weight_int4pack_mm (W4A16, group 128); None where this torch lacks it"))
    int4_us: float
    fp8_us: float
    tinygemm_speedup: Optional[float] = None
    int4_speedup: float
    fp8_speedup: float
    bf16_cupti_us: Optional[float] = None
    tinygemm_cupti_us: Optional[float] = None
    int4_cupti_us: Optional[float] = None
    fp8_cupti_us: Optional[float] = None
    int4_cupti_speedup: Optional[float] = None
    fp8_cupti_speedup: Optional[float] = None
    int4_tbps: float = Field(description="INT4 bytes (packed weights, scales, activations, output) / graph time")
    int4_cupti_tbps: Optional[float] = Field(default=None, description="The same bytes over the CUPTI kernel time")
    int4_roof_pct: Optional[float] = Field(default=None, description=(
        "int4_cupti_tbps (else int4_tbps) as a percentage of the copy bandwidth measured in the same run"))
    int4_below_floor: bool = Field(description="INT4 slower than the slower of tinygemm and cuBLAS BF16 (2 % margin)")
    int4_config: dict = Field(description="The config the INT4 kernel ran (tuning table or shape heuristic)")
    fp8_config: dict
    tuned: bool = Field(description="Whether this shape family is in the measured table")


class DecodeGemmCheck(Model):
    """Both kernels on a quantized real-valued bf16 matrix vs x @ dequantized W (fp32), run twice."""

    M: int
    K: int
    N: int
    int4_rel_err: float
    int4_max_rel_err: float = Field(description="max |out - ref| / max |ref|")
    int4_repeatable: bool = Field(description="Two runs gave the same bits (split-K reduces in a fixed order)")
    fp8_rel_err: float
    fp8_max_rel_err: float
    fp8_repeatable: bool
    bf16_rel_err: float = Field(description="cuBLAS BF16 vs the fp32 product (the rounding floor)")


class DecodeGemmResult(Model):
    device: DeviceInfo
    copy_tbps: float = Field(description="Device-to-device copy of 4 GiB, bytes read + written / time (events)")
    tinygemm: bool = Field(description="Whether this torch has tinygemm (_weight_int4pack_mm)")
    rows: list[DecodeGemmRow]
    checks: list[DecodeGemmCheck]
    targets: list[TargetCheck]
    json_path: Optional[str] = None
    warnings: list[Warning_] = Field(default_factory=list)
