"""Statistics of the A/B decision: bootstrap CI of the ratio of medians, and adaptive sampling.

Imports only numpy and the standard library: the harness child process uses it to decide
when to stop sampling, the parent recomputes the final interval from the raw samples (so a
candidate running inside the child cannot change the decision), and the calibration test
drives ``sample_adaptively`` with a simulated timer.

Speedup convention: ``baseline_time / candidate_time`` (> 1 means the candidate is faster).
Rounds are paired (one baseline and one candidate sample per round, interleaved in a
randomised order), so the bootstrap resamples whole rounds: slow drift of clocks or
temperature moves both members of a pair and cancels in the ratio.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

#: Bootstrap resamples for the intermediate stopping checks and for the final interval.
N_BOOT_CHECK = 1000
N_BOOT_FINAL = 10000


@dataclass(frozen=True)
class Interval:
    median: float          # point estimate: median(baseline) / median(candidate)
    ci_low: float
    ci_high: float
    confidence: float

    @property
    def half_width(self) -> float:
        """Relative half-width of the interval (0.01 = +-1 %)."""
        if not (self.median > 0) or not math.isfinite(self.ci_high - self.ci_low):
            return math.inf
        return (self.ci_high - self.ci_low) / 2.0 / self.median


def ratio_of_medians_ci(baseline: Sequence[float], candidate: Sequence[float], *,
                        confidence: float = 0.95, n_boot: int = N_BOOT_FINAL,
                        seed: int = 0) -> Interval:
    """Paired percentile-bootstrap interval of median(baseline) / median(candidate): the summed medians of one
    shape (``summed_medians_ci``).

    Seeded: the same samples and seed always give the same interval.
    """
    return summed_medians_ci([baseline], [candidate], confidence=confidence, n_boot=n_boot, seed=seed)


def summed_medians_ci(baseline: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]], *,
                      confidence: float = 0.95, n_boot: int = N_BOOT_FINAL, seed: int = 0) -> Interval:
    """Paired percentile-bootstrap interval of sum_s median(baseline_s) / sum_s median(candidate_s) over
    several shapes, each a list of per-round per-call times (rounds resampled together, so the pairing holds).

    The speedup over all shapes then agrees with the per-shape speedups (it is their average weighted by
    the baseline's time) and with the per-shape medians shown beside it. The median of per-round *sums*
    does not: noise of different shapes in one round adds up, so with skewed timing noise it can lie
    outside every per-shape ratio. With one shape both are median(baseline) / median(candidate).
    """
    a = [np.asarray(x, dtype=np.float64) for x in baseline]
    b = [np.asarray(x, dtype=np.float64) for x in candidate]
    if not a or len(a) != len(b) or any(x.ndim != 1 or x.shape != a[0].shape or y.shape != x.shape
                                         for x, y in zip(a, b)):
        raise ValueError("baseline and candidate need the same shapes, each with one sample per round")
    n = a[0].size
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, confidence)
    point = float(sum(np.median(x) for x in a) / sum(np.median(y) for y in b))
    if n < 3:
        return Interval(point, -math.inf, math.inf, confidence)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    num = np.zeros(n_boot)
    den = np.zeros(n_boot)
    for x, y in zip(a, b):  # one shape at a time: the peak stays one (n_boot, n) array
        num += np.median(x[idx], axis=1)
        den += np.median(y[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(num / den, [alpha, 1.0 - alpha])
    return Interval(point, float(lo), float(hi), confidence)


def fraction_faster(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    """Share of paired rounds in which the candidate was faster (a sign-test summary)."""
    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(candidate, dtype=np.float64)
    return float(np.mean(b < a)) if a.size else math.nan


def decide(interval: Interval, min_gain: float) -> bool:
    """Faster with confidence: the interval's lower bound clears ``1 + min_gain``."""
    return bool(interval.ci_low > 1.0 + min_gain)


def summary_us(samples_s: Sequence[float]) -> dict[str, float]:
    """Median, mean, min, max, p10, p90, std and MAD (microseconds) of per-call times in seconds."""
    x = np.asarray(samples_s, dtype=np.float64) * 1e6
    if x.size == 0:
        return {}
    med = float(np.median(x))
    return {
        "median": med, "mean": float(x.mean()), "min": float(x.min()), "max": float(x.max()),
        "p10": float(np.quantile(x, 0.1)), "p90": float(np.quantile(x, 0.9)),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "mad": float(np.median(np.abs(x - med))), "n": int(x.size),
    }


@dataclass
class Sampling:
    baseline: list[float]
    candidate: list[float]
    stop: str               # "ci_narrow" | "budget" | "max_rounds"
    interval: Interval
    elapsed_s: float


def sample_adaptively(round_fn: Callable[[int], tuple[float, float]], *,
                      budget_s: float, target_half_width: float = 0.01,
                      min_rounds: int = 10, max_rounds: int = 2000, check_every: int = 5,
                      confidence: float = 0.95, seed: int = 0,
                      clock: Callable[[], float] = time.perf_counter, n_boot_final: int = N_BOOT_FINAL,
                      on_round: Callable[[int, Interval | None], None] | None = None) -> Sampling:
    """Call ``round_fn(i)`` -> (baseline_s, candidate_s) until the speedup's interval is narrow.

    Stops when the relative half-width is below ``target_half_width`` (checked every
    ``check_every`` rounds once ``min_rounds`` are in), when ``budget_s`` of ``clock`` has
    passed, or at ``max_rounds``. The stopping rule looks only at the width, never at which side of
    ``1 + min_gain`` the interval lies, so sampling until the answer looks good is impossible.
    """
    a: list[float] = []
    b: list[float] = []
    t0 = clock()
    stop = "max_rounds"
    for i in range(max_rounds):
        x, y = round_fn(i)
        a.append(x)
        b.append(y)
        n = i + 1
        checked = None
        if n >= min_rounds and (n - min_rounds) % check_every == 0:
            checked = ratio_of_medians_ci(a, b, confidence=confidence, n_boot=N_BOOT_CHECK, seed=seed + n)
        if on_round:
            on_round(n, checked)
        if checked is not None and checked.half_width < target_half_width:
            stop = "ci_narrow"
            break
        if clock() - t0 >= budget_s:
            stop = "budget"
            break
    final = ratio_of_medians_ci(a, b, confidence=confidence, n_boot=n_boot_final, seed=seed)
    return Sampling(a, b, stop, final, clock() - t0)
