"""Per-row reductions over a block of rows, computed once per block and reused by every layer split.

Contract: a :class:`RowBlock` holds rows ``D`` ([R, P] pipelines per pool) and answers, bit for bit, what
the array expressions named in each method's docstring return for them; it only avoids numpy's slow
reductions along a short last axis and work that does not depend on the split. Two facts make that exact:
numpy sums fewer than 8 values per row left to right (so adding the columns in order gives the same bits;
from 8 on it sums pairwise, and the block falls back to ``sum(axis=1)``), and a maximum does not depend on
the order of its operands (so a row's maximum over its used pools is a lookup in a table over the distinct
patterns of used pools). ``tests/planner/test_search_rowblock.py`` checks every method against the
expression it replaces.
"""
from __future__ import annotations

import numpy as np

from planner.search.rows import unique_first

SEQUENTIAL_MAX = 8      # numpy's row sums over fewer columns than this add them left to right
PATTERN_BITS = 62       # used-pool patterns are coded in one int64 up to this many pools


def col_sum(cols: list[np.ndarray]) -> np.ndarray:
    """``np.column_stack(cols).sum(axis=1)`` for fewer than :data:`SEQUENTIAL_MAX` columns: left to right."""
    out = cols[0]
    for c in cols[1:]:
        out = out + c
    return out


def weighted_row_sum(D: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``(D * w[None, :]).sum(axis=1)`` (``w`` float)."""
    if not 0 < D.shape[1] < SEQUENTIAL_MAX:
        return (D * w[None, :]).sum(axis=1)
    return col_sum([D[:, j] * w[j] for j in range(D.shape[1])])


def used_max_by_columns(D: np.ndarray, vals: np.ndarray, fill: float) -> np.ndarray:
    """``np.where(D > 0, vals, fill).max(axis=1)`` column by column (``vals``: [P] or [R, P])."""
    if D.shape[1] == 0:
        return np.where(D > 0, vals, fill).max(axis=1)
    v = vals if np.ndim(vals) == 2 else np.broadcast_to(vals, D.shape)
    out = np.where(D[:, 0] > 0, v[:, 0], fill)
    for j in range(1, D.shape[1]):
        out = np.maximum(out, np.where(D[:, j] > 0, v[:, j], fill))
    return out


class RowBlock:
    """Rows ``D`` and what every split's pass over them shares (column floats, totals, used-pool patterns)."""

    def __init__(self, D: np.ndarray) -> None:
        self.D = D
        n_cols = D.shape[1]
        self.sequential = 0 < n_cols < SEQUENTIAL_MAX
        self.cols = [D[:, j].astype(float) for j in range(n_cols)] if self.sequential else None
        self.total = D.sum(axis=1)                                  # int64, exact
        self.total_min1 = np.maximum(self.total, 1)
        self._pattern_inv = self._used = None
        if 0 < n_cols <= PATTERN_BITS:
            code = (D > 0).astype(np.int64) @ (np.int64(1) << np.arange(n_cols, dtype=np.int64))
            first, inv = unique_first(code)
            self._used = D[first] > 0                               # [U, P] the distinct patterns
            self._pattern_inv = inv

    def take(self, keep: np.ndarray) -> "RowBlock":
        """The block of rows ``D[keep]`` (the same values, selected rather than recomputed)."""
        out = RowBlock.__new__(RowBlock)
        out.D, out.sequential = self.D[keep], self.sequential
        out.cols = None if self.cols is None else [c[keep] for c in self.cols]
        out.total, out.total_min1 = self.total[keep], self.total_min1[keep]
        out._used = self._used
        out._pattern_inv = None if self._pattern_inv is None else self._pattern_inv[keep]
        return out

    def used_max(self, vals: np.ndarray, fill: float) -> np.ndarray:
        """``np.where(D > 0, vals[None, :], fill).max(axis=1)``."""
        if self._used is None:
            return np.where(self.D > 0, vals[None, :], fill).max(axis=1)
        return np.where(self._used, vals[None, :], fill).max(axis=1)[self._pattern_inv]

    def weighted_sum(self, w: np.ndarray) -> np.ndarray:
        """``(D * w[None, :]).sum(axis=1)`` (``w`` float)."""
        if not self.sequential:
            return (self.D * w[None, :]).sum(axis=1)
        return col_sum([c * x for c, x in zip(self.cols, w)])

    def relaxed_lower_bound(self, M: np.ndarray, F: np.ndarray, n: int) -> np.ndarray:
        """:func:`planner.search.makespan.relaxed_lower_bound` of these rows."""
        if not self.sequential:
            from planner.search.makespan import relaxed_lower_bound
            return relaxed_lower_bound(self.D, M, F, n)
        inv = [c / m for c, m in zip(self.cols, M)]
        t = ((n - self.total) + col_sum([x * f for x, f in zip(inv, F)])) / np.maximum(col_sum(inv), 1e-300)
        return np.maximum(t, self.used_max(F, -np.inf))
