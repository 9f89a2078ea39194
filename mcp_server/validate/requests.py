"""Request model of validate_candidate: a spec file path and/or the spec's fields as overrides.

Function references (``path/to/file.py:function``) take the path bound; ``flops`` and ``bytes`` too, so that
an expression over spec.EXPR_CHARS still gets the spec's own message naming its bound."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from mcp_server.core.argbounds import LIST_ITEMS, NameArg, PathArg
from mcp_server.core.operation import Request


class ValidateRequest(Request):
    spec_path: PathArg | None = Field(None, description=(
        "TOML spec file (baseline, candidate, inputs, shapes, dtype, device, ...); paths inside it are "
        "relative to the file. Every other field overrides the file's value when given"))
    baseline: PathArg | None = Field(None, description="'path/to/base.py:function' or 'package.module:function'")
    candidate: PathArg | None = Field(None, description="the function to judge, same forms as baseline (not needed "
                                                    "with mode='aa')")
    inputs: PathArg | None = Field(None, description=(
        "make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple of tensors; "
        "must return random data that changes with the seed"))
    shapes: list[dict[str, Any]] | None = Field(None, max_length=LIST_ITEMS, description=(
        "shapes passed to make_inputs, e.g. [{\"M\": 1, \"K\": 128, \"N\": 512}]"))
    dtype: Literal["float16", "bfloat16", "float32", "float64"] | None = Field(
        None, description="dtype of the inputs and the required output dtype (default bfloat16)")
    device: NameArg | None = Field(None, description="'cuda' (default), 'cuda:N' or 'cpu' (same checks, CPU timers)")
    rtol: float | None = Field(None, ge=0, description="relative tolerance (default per dtype: bf16 1.6e-2, "
                                                       "fp16 2e-3, fp32 1e-4, fp64 1e-7)")
    atol: float | None = Field(None, ge=0, description="absolute tolerance (default per dtype: bf16 1e-2, "
                                                       "fp16 1e-3, fp32 1e-5, fp64 1e-9)")
    min_gain: float | None = Field(None, description="accept only if the speedup's lower confidence bound "
                                                     "exceeds 1 + min_gain (default 0.03)")
    time_budget_s: float | None = Field(None, gt=0, description="seconds of timing rounds at most (default 30)")
    mode: Literal["ab", "aa"] | None = Field(None, description="'ab' baseline vs candidate (default); 'aa' "
                                                               "baseline vs itself, to check the harness")
    cache: Literal["cold", "warm"] | None = Field(None, description=(
        "which cache mode decides (default cold: rotated input copies several times the L2); the other "
        "is measured with fewer rounds and reported"))
    seeds: int | None = Field(None, ge=2, le=20, description="input seeds per shape for correctness (default 3; "
                                                             "the second reuses the first's addresses)")
    seed: int | None = Field(None, ge=0, description="base seed (default random, reported in settings)")
    confidence: float | None = Field(None, gt=0.5, lt=1, description="confidence of the interval (default 0.95)")
    ci_half_width: float | None = Field(None, gt=0, description="stop sampling once the interval's relative "
                                                                "half-width is below this (default 0.01)")
    min_rounds: int | None = Field(None, ge=3, description="interleaved rounds before the first stop check "
                                                           "(default 20)")
    max_rounds: int | None = Field(None, ge=3, description="interleaved rounds at most (default 2000)")
    graphs: Literal["auto", "on", "off"] | None = Field(None, description=(
        "CUDA graphs for the timed batches: auto (default) uses them for calls under 200 us when both "
        "functions can be captured and a replay is > 3 % faster than a launch loop (launch-bound calls)"))
    flops: PathArg | None = Field(None, description="FLOPs per call as arithmetic over the shape keys, e.g. "
                                                "'2*M*N*K'; enables the compute roofline check")
    bytes: PathArg | None = Field(None, description="minimum DRAM bytes per call over the shape keys ('elem' = bytes "
                                                "per element), e.g. '(M*K + K*N + M*N)*elem'; makes the "
                                                "roofline check decide")
    other_cache: bool | None = Field(None, description="also measure the other cache mode (default true)")
    threads: int | None = Field(None, ge=0, description="CPU device only: torch intra-op threads in the harness "
                                                        "(default 1, steadier timings; 0 keeps torch's default)")
    timeout_s: float | None = Field(None, gt=0, le=7200, description=(
        "hard limit for the whole run (the harness process group is killed; default 2 x time_budget_s "
        "+ 120)"))
