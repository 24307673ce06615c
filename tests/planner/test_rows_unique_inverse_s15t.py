"""``rows.unique_inverse`` is ``np.unique(x, return_inverse=True)`` (inverse flattened) bit for bit: integer and
float arrays, empty, 2-D, repeats, -0.0 and 0.0, infinities and several nans; and it does not import numpy.ma
(neither does ``levelbatch.fresh_rows``, whose set difference test_level_batch_s14t.py checks)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from planner.search.rows import unique_inverse


@pytest.mark.parametrize("seed", range(20))
def test_unique_inverse_is_np_unique(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 80))
    ints = rng.integers(-3, 9, size=n)
    floats = rng.choice(np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 3e-300, 7.25]), size=n)
    floats = floats + (rng.random(n) < 0.3) * rng.integers(0, 3, size=n) * 0.5
    for x in (ints, floats, floats.reshape(-1, 1) if n else floats, ints.astype(np.int32) * 1000):
        got_u, got_i = unique_inverse(x)
        want_u, want_i = np.unique(x, return_inverse=True)
        want_i = want_i.reshape(-1)
        assert got_u.dtype == want_u.dtype and got_u.tobytes() == want_u.tobytes(), x
        assert got_i.shape == want_i.shape and np.array_equal(got_i, want_i), x
        flat = np.asarray(x).reshape(-1)
        assert np.array_equal(got_u[got_i], flat, equal_nan=True)      # the inverse rebuilds the input


def test_no_numpy_ma() -> None:
    code = ("import sys, numpy as np\nfrom planner.search.rows import unique_inverse\n"
            "from planner.search.levelbatch import fresh_rows\n"
            "unique_inverse(np.array([2.0, 1.0, 2.0])); unique_inverse(np.array([3, 1]))\n"
            "fresh_rows(np.array([[1, 2], [3, 4]]), np.array([[3, 4]]))\n"
            "print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
