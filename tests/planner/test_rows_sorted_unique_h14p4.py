"""``rows.sorted_unique`` is ``np.unique`` (no options) bit for bit: integer and float arrays, empty, 2-D
(flattened), with repeats, -0.0 and 0.0, infinities and several nans; and it does not need numpy.ma."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from planner.search.rows import sorted_unique


@pytest.mark.parametrize("seed", range(30))
def test_sorted_unique_is_np_unique(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    ints = rng.integers(-3, 6, size=n)
    floats = rng.choice(np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 3e-300, 7.25]), size=n)
    floats = floats + (rng.random(n) < 0.3) * rng.integers(0, 3, size=n) * 0.5
    for x in (ints, floats, floats.reshape(-1, 1) if n else floats, ints.astype(np.int32)):
        got, want = sorted_unique(x), np.unique(x)
        assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes(), (x, got)


def test_sorted_unique_does_not_import_numpy_ma() -> None:
    code = ("import sys, numpy as np\nfrom planner.search.rows import sorted_unique\n"
            "sorted_unique(np.array([2.0, 1.0, 2.0])); sorted_unique(np.array([3, 1]))\n"
            "print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
