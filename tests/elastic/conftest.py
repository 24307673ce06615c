"""The session-wide uninterrupted reference run of the elastic slow tests (tests/elastic/reference.py)."""
from __future__ import annotations

import pytest

from tests.elastic.reference import run_reference


@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_reference(tmp_path_factory.mktemp("ref"))
