"""grids.GatheredRows: a gather done where it is read equals the whole gather read there, element for element."""
from __future__ import annotations

import numpy as np

from planner.search.grids import GatheredRows


def test_gathered_rows_equal_the_whole_gather_under_every_kind_of_index():
    rng = np.random.default_rng(14)
    grid = rng.standard_normal((4, 9, 9))
    index = rng.integers(0, grid.size, size=(37, 5))
    whole = np.take(grid, index)
    lazy = GatheredRows(grid, index)
    assert lazy.shape == whole.shape and lazy.dtype == whole.dtype and lazy.ndim == 2 and len(lazy) == 37
    mask = rng.random(37) < 0.4
    for key in (0, 36, -1, slice(3, 4), slice(None), mask, np.array([5, 2, 5]), (7, 3), (slice(1, 9, 2), 4)):
        got = lazy[key]
        assert np.shape(got) == np.shape(whole[key]) and np.array_equal(got, whole[key]), key
    assert np.array_equal(np.asarray(lazy), whole) and np.asarray(lazy).dtype == whole.dtype
    assert np.asarray(lazy, dtype=np.float32).dtype == np.float32
    assert not np.array_equal(lazy[0], whole[1])      # the rows differ (the equalities above can fail)
