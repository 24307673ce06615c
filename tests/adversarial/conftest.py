"""Counts the generated cases of the property tests and prints them at the end of the session."""
from __future__ import annotations

import pytest

COUNTS: dict[str, int] = {}


@pytest.fixture
def generated() -> dict[str, int]:
    return COUNTS


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if COUNTS:
        total = sum(COUNTS.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(COUNTS.items()))
        terminalreporter.write_line(f"adversarial generated cases: {total} ({parts})")
