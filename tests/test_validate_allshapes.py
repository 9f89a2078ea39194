"""The speedup over all shapes agrees with the per-shape speedups (validate --mode aa showed per-shape 1.0085
and 1.0030 but 'all shapes 1.0825': the median of per-round sums is not made of the per-shape medians)."""
from __future__ import annotations

import numpy as np
from conftest import FIXTURES

from mcp_server.validate.stats import ratio_of_medians_ci, summed_medians_ci


def _skewed(rng, base, n):
    """Per-call times with the right-skewed noise of a shared machine: mostly quiet, sometimes 2-3x."""
    return base * (1 + 0.01 * rng.standard_normal(n) + (rng.random(n) < 0.45) * rng.uniform(0.5, 2.0, n))


def test_the_median_of_round_sums_can_leave_the_per_shape_range_the_summed_medians_cannot():
    rng = np.random.default_rng(7)
    escaped = 0
    for _ in range(200):
        n = int(rng.integers(10, 40))
        a = [_skewed(rng, 2.0, n), _skewed(rng, 7.0, n)]
        b = [_skewed(rng, 2.0, n), _skewed(rng, 7.0, n)]
        per = [float(np.median(x) / np.median(y)) for x, y in zip(a, b)]
        lo, hi = min(per), max(per)
        old = ratio_of_medians_ci(a[0] + a[1], b[0] + b[1], n_boot=200).median
        new = summed_medians_ci(a, b, n_boot=200)
        escaped += not (lo - 1e-12 <= old <= hi + 1e-12)
        assert lo - 1e-12 <= new.median <= hi + 1e-12  # a baseline-weighted average of the per-shape ratios
        assert new.ci_low <= new.median <= new.ci_high
    assert escaped > 10  # the old statistic disagrees with its own per-shape rows on such data


def test_one_shape_is_the_ratio_of_medians():
    rng = np.random.default_rng(1)
    a, b = _skewed(rng, 3.0, 25), _skewed(rng, 3.0, 25)
    one = summed_medians_ci([a], [b], seed=4, n_boot=500)
    ref = ratio_of_medians_ci(a, b, seed=4, n_boot=500)
    assert (one.median, one.ci_low, one.ci_high) == (ref.median, ref.ci_low, ref.ci_high)


def test_an_aa_run_on_two_shapes_reports_an_all_shapes_row_between_them(capsys):
    """The real harness (CPU): the all-shapes row is the summed per-shape medians and the deciding speedup."""
    import pytest

    pytest.importorskip("torch")
    from mcp_server.validate.engine import validate_candidate

    res = validate_candidate(str(FIXTURES / "validate" / "cpu.toml"), mode="aa", time_budget_s=0.5, seeds=2,
                             other_cache=False)
    tm = res.timing
    assert tm is not None and res.speedup is not None and len(tm.per_shape) == 2
    ratios = [ps.speedup for ps in tm.per_shape]
    assert min(ratios) - 1e-9 <= res.speedup.median <= max(ratios) + 1e-9
    base = sum(ps.baseline_us.median for ps in tm.per_shape)
    cand = sum(ps.candidate_us.median for ps in tm.per_shape)
    assert abs(res.speedup.median - base / cand) < 1e-9
