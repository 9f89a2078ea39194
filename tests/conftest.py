"""Shared test helpers: paths of the bundled real fixtures."""
from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRACES = FIXTURES / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    return TRACES
