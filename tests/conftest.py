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
