"""Every test, test file and benchmark a doc cites exists: a doc sentence that cites one is backed by it.

Scans README.md and docs/*.md for names of the form ``test_<name>`` and paths ``benchmarks/<file>.py|.sh`` and
``tests/<path>.py``; each test name must be a test function (``def test_...``) or a test file's stem under
``tests/``, each path an existing file. A renamed or deleted test then fails here instead of leaving a doc
sentence that cites nothing.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
_TEST_NAME = re.compile(r"\b(test_[A-Za-z0-9_]{3,})\b")
_PATH = re.compile(r"\b((?:benchmarks|tests)/[A-Za-z0-9_/]+\.(?:py|sh))\b")


def _defined_tests() -> set[str]:
    names = set()
    for path in (ROOT / "tests").rglob("*.py"):
        names.add(path.stem)
        names.update(re.findall(r"^\s*(?:async\s+)?def (test_[A-Za-z0-9_]+)", path.read_text(), re.M))
    return names


def test_the_scan_finds_citations() -> None:
    cited = {m for doc in DOCS for m in _TEST_NAME.findall(doc.read_text())}
    assert len(cited) >= 20, sorted(cited)      # the docs cite tests; an empty scan would pass vacuously


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_cited_test_exists(doc: Path) -> None:
    defined = _defined_tests()
    missing = sorted(set(_TEST_NAME.findall(doc.read_text())) - defined)
    assert not missing, f"{doc.name} cites tests that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_cited_benchmark_and_test_file_exists(doc: Path) -> None:
    missing = sorted(p for p in set(_PATH.findall(doc.read_text())) if not (ROOT / p).is_file())
    assert not missing, f"{doc.name} cites files that do not exist: {missing}"
