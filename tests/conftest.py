"""Shared fixtures: the repo root on sys.path and the Sailor data folder (skips visibly when absent)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SAILOR_DATA = ROOT.parent / "shared" / "data" / "sailor"


@pytest.fixture(scope="session")
def sailor_data_dir() -> Path:
    if not (SAILOR_DATA / "sailor" / "Planner").is_dir():
        pytest.skip(f"Sailor data folder not found at {SAILOR_DATA} (CI has it beside the checkout)")
    return SAILOR_DATA


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every multi-process test (a ``slow`` test outside tests/planner/, whose slow tests are single-process
    brute forces) joins one pytest-xdist group. Under the README's test command (``-n 2 --dist loadgroup``)
    the group runs on one worker, one test at a time, while the other worker takes the single-process tests:
    two torchrun jobs at once on a 2-core machine would only slow each other towards their time-outs. Runs
    before xdist's own hook, which turns the marker into the scheduling group; without xdist it is inert."""
    planner_tests = Path(__file__).resolve().parent / "planner"
    for item in items:
        if item.get_closest_marker("slow") and planner_tests not in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.xdist_group("multiprocess"))
