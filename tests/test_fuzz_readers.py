"""Property/fuzz tests of the file readers (issue 14): every mutated input derived from the real fixtures
gives a result whose JSON form is finite, or one typed error line naming the file (tests/fuzz_cases.py).

Fixed seed (hypothesis ``derandomize``), bounded budgets: about 30 s for all of them on this machine.
The longer run is bench/bench_fuzz.py (child processes, crashes, hangs and peak RSS counted).
"""
from __future__ import annotations

import random
import tempfile
from pathlib import Path

import fuzz_cases as F
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

BUDGET = {"trace": 300, "xlsx": 200, "recategorize": 80, "timeline": 200, "rules_csv": 300}


def _check(parser: str, seed: int) -> None:
    make, run = F.PARSERS[parser]
    with tempfile.TemporaryDirectory() as t:
        path = make(random.Random(seed), Path(t))
        F.contract(run, path)  # raises ContractBroken (an AssertionError) when the contract breaks


def _fuzz(parser: str):
    @settings(max_examples=BUDGET[parser], derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(seed=st.integers(min_value=0, max_value=2**32 - 1))
    def test(seed: int) -> None:
        _check(parser, seed)

    test.__name__ = f"test_fuzz_{parser}"
    return test


test_fuzz_trace = _fuzz("trace")
test_fuzz_xlsx = _fuzz("xlsx")
test_fuzz_recategorize = _fuzz("recategorize")
test_fuzz_timeline = _fuzz("timeline")
test_fuzz_rules_csv = _fuzz("rules_csv")


@pytest.mark.parametrize("parser", sorted(F.PARSERS))
def test_the_fuzzers_reach_both_outcomes(parser):
    """A fuzzer that only ever produces errors (or only results) tests little: both must occur."""
    make, run = F.PARSERS[parser]
    seen = set()
    with tempfile.TemporaryDirectory() as t:
        for seed in range(40):
            seen.add(F.contract(run, make(random.Random(seed), Path(t))))
            if len(seen) == 2:
                break
    assert seen == {"ok", "error"}
