"""``rows.unique_inverse`` is ``np.unique(x, return_inverse=True)`` (inverse flattened): the same inverse, and the
values of ``np.unique(x)`` bit for bit (equal in value to the former's, which may keep -0.0 for a zero), on
integer and float arrays, empty, 2-D, repeats, -0.0 and 0.0, infinities and several nans; and it does not import
numpy.ma (neither does ``levelbatch.fresh_rows``, whose set difference test_level_batch_s14t.py checks)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from planner.search.rows import unique_inverse


@pytest.mark.parametrize("seed", range(20))
def test_unique_inverse_is_np_unique(seed: int) -> None:
    rng = np.random.default_rng(seed)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 2.5, -7.0])
    size = int(rng.integers(0, 80))
    mixed = np.where(rng.random(size) < 0.5, special[rng.integers(0, len(special), size)],
                     rng.integers(-4, 4, size) * 0.25)
    cases = [rng.integers(-3, 9, size), mixed, mixed.reshape(-1, 1), (rng.integers(0, 5, size) * 1000).astype(np.int32)]
    for x in cases:
        got_u, got_i = unique_inverse(x)
        want_i = np.unique(x, return_inverse=True)[1].reshape(-1)
        want_u = np.unique(x)       # (with return_inverse numpy's other sort may keep -0.0 for 0.0: same value)
        assert got_u.dtype == want_u.dtype and got_u.tobytes() == want_u.tobytes(), x
        assert np.array_equal(got_u, np.unique(x, return_inverse=True)[0], equal_nan=True)
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
