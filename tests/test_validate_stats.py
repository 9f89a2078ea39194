"""The statistics of validate_candidate: the bootstrap interval and the adaptive stopping rule.

The calibration here is the CPU version of bench/bench_validate.py: decisions on simulated
timings (seeded, deterministic) with the noise seen on real machines: per-sample log-normal
jitter, slow drift shared by the two members of a round, and rare slow outliers. It checks
the decision rule itself, A/A accepted at most 1 %, 3 % slower never, 3 % faster >= 95 %.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from mcp_server.validate.stats import (
    Interval,
    decide,
    fraction_faster,
    ratio_of_medians_ci,
    sample_adaptively,
    summary_us,
)


def _simulated_decision(true_ratio: float, trial: int, *, min_gain: float = 0.01, jitter: float = 0.02,
                        budget_rounds: int = 400) -> tuple[bool, Interval, int]:
    """One decision on simulated timings; ``true_ratio`` = baseline time / candidate time."""
    rng = np.random.default_rng(1_000_003 * trial + int(true_ratio * 1e4))
    base_us = 10.0
    phase = rng.uniform(0, 2 * math.pi)
    clock = [0.0]

    def one_round(i: int) -> tuple[float, float]:
        drift = 1.0 + 0.03 * math.sin(phase + i / 17.0)      # clocks/temperature: both sides
        a = base_us * drift * math.exp(rng.normal(0, jitter))
        b = base_us / true_ratio * drift * math.exp(rng.normal(0, jitter))
        if rng.random() < 0.03:
            a *= 1.3                                          # a preempted batch
        if rng.random() < 0.03:
            b *= 1.3
        clock[0] += 1.0
        return a, b

    s = sample_adaptively(one_round, budget_s=budget_rounds, target_half_width=0.01, min_rounds=10,
                          check_every=5, confidence=0.95, seed=trial, clock=lambda: clock[0],
                          n_boot_final=2000)
    return decide(s.interval, min_gain), s.interval, len(s.baseline)


def test_interval_is_deterministic_and_brackets_the_ratio():
    rng = np.random.default_rng(0)
    a = 10.0 * np.exp(rng.normal(0, 0.02, 200))
    b = 5.0 * np.exp(rng.normal(0, 0.02, 200))
    i1 = ratio_of_medians_ci(a, b, seed=3)
    i2 = ratio_of_medians_ci(a, b, seed=3)
    assert i1 == i2
    assert i1.ci_low < i1.median < i1.ci_high
    assert i1.ci_low < 2.0 < i1.ci_high
    assert i1.half_width < 0.01
    assert fraction_faster(a, b) == 1.0


def test_tiny_samples_give_an_unbounded_interval():
    iv = ratio_of_medians_ci([1.0, 1.0], [0.5, 0.5])
    assert iv.median == 2.0 and iv.ci_low == -math.inf and not decide(iv, 0.0)
    with pytest.raises(ValueError):
        ratio_of_medians_ci([1.0, 2.0], [1.0])


def test_summary_in_microseconds():
    s = summary_us([1e-6, 2e-6, 3e-6])
    assert s["median"] == pytest.approx(2.0) and s["min"] == pytest.approx(1.0) and s["n"] == 3


def test_stopping_rule_stops_on_width_or_budget():
    clock = [0.0]

    def steady(i):
        clock[0] += 1
        return 2.0, 1.0

    s = sample_adaptively(steady, budget_s=1e9, min_rounds=10, clock=lambda: clock[0])
    assert s.stop == "ci_narrow" and len(s.baseline) == 10 and s.interval.median == 2.0
    rng = np.random.default_rng(5)

    def noisy(i):
        clock[0] += 1
        return float(np.exp(rng.normal(0, 0.5))), float(np.exp(rng.normal(0, 0.5)))

    clock[0] = 0.0
    s = sample_adaptively(noisy, budget_s=30, min_rounds=10, clock=lambda: clock[0])
    assert s.stop == "budget" and len(s.baseline) == 30 and s.interval.half_width > 0.01


def test_calibration_aa_slower_faster():
    """100 A/A decisions accept <= 1 %; 3 % slower never; 3 % faster >= 95 % (min_gain 0.01)."""
    aa = [_simulated_decision(1.0, t) for t in range(100)]
    slower = [_simulated_decision(0.97, t) for t in range(50)]
    faster = [_simulated_decision(1 / 0.97, t) for t in range(50)]
    aa_acc = sum(d[0] for d in aa)
    assert aa_acc <= 1, f"A/A accepted {aa_acc}/100"
    assert not any(d[0] for d in slower)
    fast_acc = sum(d[0] for d in faster)
    assert fast_acc >= 48, f"3 % faster accepted only {fast_acc}/50"
    # the interval covers the true ratio in the A/A runs (a 95 % interval: allow sampling error)
    covered = sum(d[1].ci_low <= 1.0 <= d[1].ci_high for d in aa)
    assert covered >= 88
    # sampling stopped on width, not at the budget, for this noise level
    assert max(d[2] for d in aa) < 400
