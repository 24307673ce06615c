"""benchmarks/runtime_overhead.py: the statistics of its report (the benchmark itself times things and is run
by hand / by the README test): the ratio of medians and its block-bootstrap confidence interval."""
from __future__ import annotations

import random
import sys

import pytest

from tests.helpers.launch import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import runtime_overhead as ro  # noqa: E402


def _blocks(rng: random.Random, n_blocks: int, scale: float, drift: list[float]) -> list[list[float]]:
    """Iteration times of ``n_blocks`` blocks: 0.1 s x ``scale`` x the block's load factor x +-20% noise."""
    return [[0.1 * scale * drift[b] * rng.uniform(0.8, 1.2) for _ in range(ro.ITERS_PER_BLOCK)]
            for b in range(n_blocks)]


def _drift(rng: random.Random, n_blocks: int) -> list[float]:
    return [rng.choice((1.0, 1.0, 1.5, 2.5)) for _ in range(n_blocks)]   # other jobs come and go


def test_interval_holds_the_true_ratio_and_narrows_with_more_blocks() -> None:
    rng = random.Random(3)
    widths = []
    for n_blocks in (10, 160):
        drift = _drift(rng, n_blocks)
        ours, theirs = _blocks(rng, n_blocks, 1.10, drift), _blocks(rng, n_blocks, 1.0, drift)
        lo, hi = ro.ratio_ci(ours, theirs)
        assert lo <= ro.ratio_of_medians(ours, theirs) <= hi
        assert lo < 1.10 < hi, (n_blocks, lo, hi)
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 2
    assert widths[1] < 0.05          # 800 iterations a side: a 10% overhead is told apart from 1.05


def test_identical_sides_give_an_interval_around_one_and_bad_shapes_are_refused() -> None:
    rng = random.Random(5)
    drift = _drift(rng, 80)
    lo, hi = ro.ratio_ci(_blocks(rng, 80, 1.0, drift), _blocks(rng, 80, 1.0, drift))
    assert lo < 1.0 < hi and hi - lo < 0.1
    with pytest.raises(ValueError):
        ro.ratio_ci([[0.1] * 5] * 3, [[0.1] * 5] * 2)
