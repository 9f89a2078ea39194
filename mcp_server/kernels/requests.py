"""Request models of the kernels engine's operations (one per operation)."""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, StringConstraints, field_validator

from mcp_server.core.argbounds import LIST_ITEMS, PATH_CHARS, PathArg
from mcp_server.core.operation import WritesOutputs

#: a list given as comma-separated text ('1,8,64', '4096x4096,7168x2048'), bounded like the event-names text
ListText = Annotated[str, StringConstraints(max_length=PATH_CHARS)]
IntList = Annotated[list[int], Field(max_length=LIST_ITEMS)]
#: K x N pairs
ShapeList = Annotated[list[Annotated[list[int], Field(min_length=2, max_length=2)]], Field(max_length=LIST_ITEMS)]


def _short_text(value, name: str):
    """``value``; text longer than the bound is refused before it is split."""
    if isinstance(value, str) and len(value) > PATH_CHARS:
        raise ValueError(f"{name}: {len(value):,} characters; at most {PATH_CHARS} are accepted")
    return value


def _few(values: list, name: str) -> list:
    """``values`` unless they are more than a list field holds (given as a list or as text)."""
    if len(values) > LIST_ITEMS:
        raise ValueError(f"{name}: {len(values):,} values; at most {LIST_ITEMS} are accepted")
    return values


def _int_list(value, name: str, lo: int, hi: int):
    value = _short_text(value, name)
    if isinstance(value, str):
        try:
            value = [int(v) for v in value.replace(" ", "").split(",") if v]
        except ValueError:
            raise ValueError(f"{name}: a comma-separated list of integers, e.g. 1,8,64") from None
    if value is None:
        return value
    if not value:
        raise ValueError(f"{name}: give at least one value")
    _few(value, name)
    bad = [v for v in value if not lo <= int(v) <= hi]
    if bad:
        raise ValueError(f"{name}: {bad} outside {lo}..{hi}")
    return [int(v) for v in value]


class MlaBenchRequest(WritesOutputs):
    model: Literal["deepseek-v3", "deepseek-v2"] = Field(default="deepseek-v3", description=(
        "Model whose absorbed-MLA reconstruction BMMs (W_UK, W_UV) are timed"))
    batch: Union[IntList, ListText] = Field(default=[1, 8, 64], description=(
        "Decode batch sizes M (1..256), a list or comma-separated, e.g. 1,8,64"))
    layers: Union[IntList, ListText] = Field(default=[1, 8, 32], description=(
        "Layers stacked into one BMM (1 = one layer, 16 MiB BF16; 8 = 128 MiB; 32 = 512 MiB)"))
    cache: Literal["both", "warm", "cold"] = Field(default="both", description=(
        "warm: one weight set re-read (L2-resident when it fits); cold: weight sets rotated so every launch "
        "streams from HBM; both"))
    group: int = Field(default=128, description="INT4 group size along K (16, 32, 64 or a multiple of 128)")
    check: bool = Field(default=True, description="Check correctness on random inputs for the one-layer shapes")
    cupti: bool = Field(default=False, description=(
        "Also time every format by CUPTI kernel durations (torch.profiler), beside the CUDA-graph wall time"))
    json_path: Optional[PathArg] = Field(default=None, description="Also write the full result as JSON here")
    timeout_s: float = Field(default=900.0, gt=0, description=(
        "Stop starting new shapes after this many seconds (rows so far are returned with a 'timeout' warning)"))

    @field_validator("batch", mode="before")
    @classmethod
    def _batch(cls, v):
        return _int_list(v, "batch", 1, 256)

    @field_validator("layers", mode="before")
    @classmethod
    def _layers(cls, v):
        return _int_list(v, "layers", 1, 60)


class L2SweepRequest(WritesOutputs):
    heads: Optional[Union[IntList, ListText]] = Field(default=None, description=(
        "BMM batch sizes (heads of the 128x512 W_UK matrix, 128 KiB BF16 each); default 32..4096 "
        "(4 MB..537 MB), dense around the L2 size"))
    batch: int = Field(default=1, ge=1, le=256, description="Decode batch M")
    json_path: Optional[PathArg] = Field(default=None, description="Write the sweep as JSON here")
    png_path: Optional[PathArg] = Field(default=None, description=(
        "Write a PNG (latency and speedup against weight MB, L2 size and measured boundary marked)"))
    timeout_s: float = Field(default=600.0, gt=0, description=(
        "Stop starting new sizes after this many seconds (a 'timeout' warning says so)"))

    @field_validator("heads", mode="before")
    @classmethod
    def _heads(cls, v):
        return _int_list(v, "heads", 1, 65536)


def _shape_list(value):
    value = _short_text(value, "shapes")
    if value is None:
        return value
    items = value.replace(" ", "").split(",") if isinstance(value, str) else list(value)
    out = []
    for it in items:
        if not it:
            continue
        if isinstance(it, str):
            k, sep, n = it.lower().partition("x")
            try:
                K, N = int(k), int(n)
            except ValueError:
                raise ValueError(f"shapes: {it!r} is not KxN (e.g. 4096x4096)") from None
            if not sep:
                raise ValueError(f"shapes: {it!r} is not KxN (e.g. 4096x4096)")
        else:
            K, N = (int(v) for v in it)
        if K % 128 or not 128 <= K <= 65536:
            raise ValueError(f"shapes: K={K} must be a multiple of 128 in 128..65536")
        if N % 16 or not 16 <= N <= 65536:
            raise ValueError(f"shapes: N={N} must be a multiple of 16 in 16..65536")
        out.append([K, N])
    if not out:
        raise ValueError("shapes: give at least one KxN")
    return _few(out, "shapes")


class DecodeGemmRequest(WritesOutputs):
    shapes: Optional[Union[ShapeList, ListText]] = Field(default=None, description=(
        "Linear shapes KxN (x[M, K] @ W[K, N]), comma-separated, e.g. 4096x4096,7168x2048; default "
        "4096x4096, 8192x8192, 7168x2048, 2048x7168"))
    batch: Union[IntList, ListText] = Field(default=[1, 8, 16], description=(
        "Decode batch sizes M (1..256), a list or comma-separated"))
    group: int = Field(default=128, description="INT4 group size along K (128: the size tinygemm is also timed with)")
    check: bool = Field(default=True, description=(
        "Check both kernels on quantized real-valued weights against the dequantized reference (and repeatability)"))
    cupti: bool = Field(default=True, description=(
        "Also time every format by CUPTI kernel durations (torch.profiler), beside the CUDA-graph wall time"))
    json_path: Optional[PathArg] = Field(default=None, description="Also write the full result as JSON here")
    timeout_s: float = Field(default=600.0, gt=0, description=(
        "Stop starting new shapes after this many seconds (rows so far are returned with a 'timeout' warning)"))

    @field_validator("batch", mode="before")
    @classmethod
    def _batch(cls, v):
        return _int_list(v, "batch", 1, 256)

    @field_validator("shapes", mode="before")
    @classmethod
    def _shapes(cls, v):
        return _shape_list(v)
