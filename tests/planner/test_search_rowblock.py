"""planner.search.rowblock: every method equals, bit for bit, the array expression it replaces."""
from __future__ import annotations

import numpy as np
import pytest

from planner.search.makespan import capacity, relaxed_lower_bound
from planner.search.rowblock import RowBlock


def _rows(rng: np.random.Generator, n_cols: int) -> np.ndarray:
    D = rng.integers(0, 40, size=(3000, n_cols))
    D[rng.random(D.shape) < 0.4] = 0
    return D.astype(np.int64)


@pytest.mark.parametrize("n_cols", [1, 2, 3, 5, 7, 8, 9, 16])
def test_rowblock_equals_the_array_expressions(n_cols: int) -> None:
    rng = np.random.default_rng(n_cols)
    D = _rows(rng, n_cols)
    block = RowBlock(D)
    M = rng.random(n_cols) * 10.0 ** rng.integers(-4, 3, n_cols)
    F = rng.random(n_cols) * 10.0 ** rng.integers(-4, 3, n_cols)
    w = rng.random(n_cols) * 10.0 ** rng.integers(-6, 6, n_cols)
    np.testing.assert_array_equal(block.relaxed_lower_bound(M, F, 977), relaxed_lower_bound(D, M, F, 977))
    np.testing.assert_array_equal(block.used_max(F, -np.inf), np.where(D > 0, F[None, :], -np.inf).max(axis=1))
    np.testing.assert_array_equal(block.used_max(w, 0.0), np.where(D > 0, w[None, :], 0.0).max(axis=1))
    np.testing.assert_array_equal(block.weighted_sum(w), (D * w[None, :]).sum(axis=1))
    np.testing.assert_array_equal(block.total_min1, np.maximum(D.sum(axis=1), 1))
    keep = rng.random(len(D)) < 0.5
    taken, fresh = block.take(keep), RowBlock(D[keep])
    np.testing.assert_array_equal(taken.used_max(w, 0.0), fresh.used_max(w, 0.0))
    np.testing.assert_array_equal(taken.relaxed_lower_bound(M, F, 977), fresh.relaxed_lower_bound(M, F, 977))
    np.testing.assert_array_equal(taken.weighted_sum(w), fresh.weighted_sum(w))
    np.testing.assert_array_equal(taken.total_min1, fresh.total_min1)


def test_capacity_equals_the_dense_expression() -> None:
    rng = np.random.default_rng(7)
    D = _rows(rng, 4)
    T = [np.sort(rng.random(50) * 10) for _ in range(4)]
    t = rng.random(len(D)) * 10
    per = np.column_stack([np.searchsorted(tp, t * (1 + 1e-12), side="right") for tp in T])
    want = np.where(np.any((D > 0) & (per < 1), axis=1), -1, (D * per).sum(axis=1))
    np.testing.assert_array_equal(capacity(t, D, T), want)


@pytest.mark.parametrize("n_cols", [1, 3, 7, 9])
def test_column_helpers_equal_the_row_reductions(n_cols: int) -> None:
    from planner.search.rowblock import used_max_by_columns, weighted_row_sum
    from planner.search.rows import int_row_sum
    rng = np.random.default_rng(10 + n_cols)
    D = _rows(rng, n_cols)
    w = rng.random(n_cols) * 10.0 ** rng.integers(-6, 6, n_cols)
    tm = rng.random(D.shape) * 10.0 ** rng.integers(-3, 3, D.shape)
    np.testing.assert_array_equal(int_row_sum(D), D.sum(axis=1))
    np.testing.assert_array_equal(weighted_row_sum(D, w), (D * w[None, :]).sum(axis=1))
    np.testing.assert_array_equal(used_max_by_columns(D, w, 0.0), np.where(D > 0, w[None, :], 0.0).max(axis=1))
    np.testing.assert_array_equal(used_max_by_columns(D, tm, -np.inf), np.where(D > 0, tm, -np.inf).max(axis=1))


def test_product_rows_equal_the_filtered_cartesian_product() -> None:
    from itertools import product

    from planner.search.rows import product_rows
    rng = np.random.default_rng(3)
    options = [rng.integers(0, 6, size=(n, c)) for n, c in ((7, 2), (5, 1), (6, 3))]
    want = np.array([np.concatenate(r) for r in product(*options) if sum(map(int, np.concatenate(r))) <= 14])
    got = np.concatenate(list(product_rows(options, 14, chunk=40)), axis=0)
    np.testing.assert_array_equal(got, want)
