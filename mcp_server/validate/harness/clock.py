"""The harness's timers, captured when the child starts: before torch, long before any user code.

A candidate that replaces ``time.perf_counter_ns`` (tests/fixtures/validate/cand_patch_timer.py) changes the
``time`` module's attribute, not these; ``tamper`` watches these names too.
"""
from __future__ import annotations

import time as _time

perf_ns = _time.perf_counter_ns
monotonic = _time.monotonic
