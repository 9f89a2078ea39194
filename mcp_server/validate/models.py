"""Result model of ``validate_candidate`` (the JSON contract of issue 10, plus extra fields)."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from mcp_server.core.models import Model, Warning_


class Check(Model):
    name: str = Field(description="inputs_random, baseline_within_tolerance, output_structure, shape, dtype, "
                                  "device, layout, finite, values, same_address_new_values, inputs_unchanged, "
                                  "stream_complete (cuda), no_patching")
    passed: bool
    detail: str = Field("", description="the first failure (shape, seed, element), or empty")
    failures: int = Field(0, description="how many (shape, seed, output) cases failed this check")


class Offender(Model):
    shape: dict[str, Any]
    seed: int
    output: int = Field(description="index of the output tensor")
    index: list[int]
    candidate: float | None
    reference: float | None
    abs_err: float | None


class Correctness(Model):
    passed: bool
    checks: list[Check] = Field(default_factory=list)
    max_abs_err: float | None = None
    max_rel_err: float | None = Field(None, description="max |c-r|/|r| over elements with |r| > atol")
    worst: list[Offender] = Field(default_factory=list, description="worst elements outside tolerance")
    shapes: int = 0
    seeds: int = 0


class Speedup(Model):
    median: float | None = Field(description="median(baseline time) / median(candidate time); > 1: faster")
    ci_low: float | None
    ci_high: float | None
    confidence: float
    half_width: float | None = Field(None, description="relative half-width of the interval")
    fraction_faster: float | None = Field(None, description="share of paired rounds the candidate won")


class TimeSummary(Model):
    median: float
    mean: float
    min: float
    max: float
    p10: float
    p90: float
    std: float
    mad: float
    n: int


class ShapeTiming(Model):
    shape: dict[str, Any]
    baseline_us: TimeSummary
    candidate_us: TimeSummary
    speedup: float = Field(description="ratio of medians for this shape")
    floor_us: float | None = Field(None, description="speed-of-light time for this shape (roofline), if known")
    floor_basis: str | None = None


class CacheTiming(Model):
    cache: Literal["cold", "warm"]
    baseline_us: TimeSummary
    candidate_us: TimeSummary
    rounds: int
    speedup: Speedup


class Timing(Model):
    baseline_us: TimeSummary = Field(description="per-call time summed over the shapes, per round (µs)")
    candidate_us: TimeSummary
    samples: int = Field(description="timed batches per side (rounds x shapes)")
    rounds: int = Field(description="interleaved rounds (each times every shape, A/B order randomised)")
    cache: Literal["cold", "warm"] = Field(description="the cache mode that decides")
    method: str = Field(description="cuda_graph | launch_loop | cpu_loop")
    calls_per_sample: list[int] = Field(description="per shape: calls in one timed batch (reps x input copies)")
    input_copies: list[int] = Field(description="per shape: rotated input copies (cold mode)")
    stop: str = Field(description="ci_narrow | budget | max_rounds")
    elapsed_s: float = Field(description="wall time of the deciding rounds")
    sync_overhead_us: float = Field(0.0, description="empty timed region (subtracted from every batch)")
    graph_check: list[dict[str, float]] | None = Field(None, description=(
        "per shape: per-call us replaying a CUDA graph and in a launch loop, the baseline's (graph_us, loop_us) "
        "and the candidate's (candidate_graph_us, candidate_loop_us); graphs='auto' uses graphs when either "
        "side's loop is > 3 % slower"))
    per_shape: list[ShapeTiming] = Field(default_factory=list)
    other_cache: CacheTiming | None = Field(None, description="the other cache mode, fewer rounds; reported, "
                                                              "never decides")


class DeviceInfo(Model):
    kind: Literal["cuda", "cpu"]
    name: str
    clocks_mhz: dict[str, float] | None = None
    driver: str | None = None
    l2_bytes: int | None = None
    torch: str | None = None


class Roofline(Model):
    checked: bool
    source: str | None = Field(None, description="gpu_specs.toml entry and whether datasheet or measured")
    basis: str | None = Field(None, description="spec (flops/bytes given) or inferred (input+output bytes)")
    detail: str = ""
    implausible: bool = False


class Patch(Model):
    name: str
    by: Literal["baseline", "candidate"]
    stage: str


class ValidationResult(Model):
    accepted: bool
    verdict: Literal["accepted", "rejected", "not_faster", "error"]
    reasons: list[str] = Field(default_factory=list)
    correctness: Correctness
    speedup: Speedup | None = None
    mode: Literal["ab", "aa"]
    timing: Timing | None = None
    device: DeviceInfo | None = None
    roofline: Roofline | None = None
    patched: list[Patch] = Field(default_factory=list, description="functions replaced by user code (put back)")
    settings: dict[str, Any] = Field(default_factory=dict)
    wall_s: dict[str, float] = Field(default_factory=dict, description="import, correctness, timing, total (s)")
    stderr_tail: str | None = Field(None, description="last lines the child wrote to stderr, on error")
    stopped_by: Literal["memory", "time"] | None = Field(None, description=(
        "the harness was killed by its memory limit (KERNELSCOPE_VALIDATE_MEMORY) or its time limit (timeout_s)"))
    warnings: list[Warning_] = Field(default_factory=list)

    def exit_code(self) -> int:
        """The CLI's exit status: 0 accepted, 3 rejected or not faster, 2 when the harness could not decide."""
        from mcp_server.core.vocab import ExitCode

        if self.verdict == "accepted":
            return ExitCode.ok
        return ExitCode.bad_input if self.verdict == "error" else ExitCode.not_accepted
