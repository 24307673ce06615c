"""Optimal micro-batch counts per pipeline: the smallest pipeline makespan for a set of pipeline classes.

A pipeline of class p with m micro-batches takes ``T_p(m) = (m - 1) * period_p(m) + F_p`` (1F1B; the steady
period may grow with m, see :func:`planner.simulator.time.steady_period_s`), non-decreasing in m. Given D_p
pipelines of each class and N micro-batches in all (each pipeline >= 1), the smallest achievable max over
pipelines is the smallest value ``t`` among all ``T_p(m)`` at which the capacity
``sum_p D_p * #{m : T_p(m) <= t}`` reaches N and every used class can take one micro-batch (water-filling;
exact because capacity is monotone in t and changes only at those values).
"""
from __future__ import annotations

import numpy as np

from planner.search.rows import int_row_sum, sorted_unique

REL_EPS = 1e-12


def _count_le(times: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.searchsorted(times, t * (1 + REL_EPS), side="right")


def capacity(t: np.ndarray, D: np.ndarray, T: list[np.ndarray]) -> np.ndarray:
    """Micro-batches rows ``D`` ([R, P]) can run within ``t`` ([R]); -1 where a used class cannot run one.
    ``T[p]`` lists ``T_p(m)`` for m = 1..N."""
    total = np.zeros(len(t), dtype=np.int64)
    bad = np.zeros(len(t), dtype=bool)
    for j, tp in enumerate(T):          # column by column: integers, so the sum is exact in any order
        per = _count_le(tp, t)
        d = D[:, j]
        bad |= (d > 0) & (per < 1)
        total += d * per
    return np.where(bad, -1, total)


def relaxed_lower_bound(D: np.ndarray, M: np.ndarray, F: np.ndarray, n: int) -> np.ndarray:
    """A lower bound on the makespan from ``T_p(m) >= (m - 1) M_p + F_p`` with floors dropped, and at least
    the largest fill/drain of a used class."""
    inv = D / M[None, :]
    t = (n - D.sum(axis=1) + (inv * F[None, :]).sum(axis=1)) / np.maximum(inv.sum(axis=1), 1e-300)
    fmax = np.where(D > 0, F[None, :], -np.inf).max(axis=1)
    return np.maximum(t, fmax)


def min_makespan(D: np.ndarray, T: list[np.ndarray], n: int) -> np.ndarray:
    """Exact smallest makespan per row (inf where the rows' pipelines cannot take n micro-batches).

    The bisection only asks :func:`capacity` at breakpoints ``bps[i]``, so each class's count of times within
    ``bps[i]`` is looked up in a per-class table of :func:`_count_le` at every breakpoint (the same integers,
    one gather per column instead of a binary search per row), with each column and its used mask taken once."""
    bps = sorted_unique(np.concatenate(T))
    r = D.shape[0]
    cols = [np.ascontiguousarray(D[:, j]) for j in range(len(T))]
    used = [c > 0 for c in cols]
    counts = [_count_le(tp, bps) for tp in T]           # [len(bps)] per class
    empty = [c < 1 for c in counts]

    def enough(i: np.ndarray) -> np.ndarray:
        """``capacity(bps[i], D, T) >= n``."""
        total = np.zeros(len(i), dtype=np.int64)
        bad = np.zeros(len(i), dtype=bool)
        for c, u, cnt, e in zip(cols, used, counts, empty):
            bad |= u & e.take(i)
            total += c * cnt.take(i)
        return np.where(bad, -1, total) >= n

    lo = np.zeros(r, dtype=np.int64)
    hi = np.full(r, len(bps) - 1, dtype=np.int64)
    ok_top = enough(hi)
    while True:
        active = lo < hi
        if not np.any(active):
            break
        mid = (lo + hi) // 2
        good = enough(mid)
        hi = np.where(active & good, mid, hi)
        lo = np.where(active & ~good, mid + 1, lo)
    return np.where(ok_top & (int_row_sum(D) <= n), bps[lo], np.inf)


def assign_counts(D: list[int], T: list[np.ndarray], n: int, t: float) -> list[list[int]]:
    """Micro-batch counts per pipeline (per class a list of D_p counts) achieving makespan ``t``."""
    out = []
    for d, tp in zip(D, T):
        per = int(_count_le(tp, np.array([t]))[0]) if d else 0
        out.append([max(per, 1)] * d)
    surplus = sum(map(sum, out)) - n
    for counts in reversed(out):          # take the surplus back from the last pipelines, keeping >= 1
        for j in range(len(counts) - 1, -1, -1):
            if surplus <= 0:
                break
            take = min(surplus, counts[j] - 1)
            counts[j] -= take
            surplus -= take
    if surplus != 0:
        raise ValueError(f"cannot place {n} micro-batches at makespan {t}")
    return out
