"""Every middle total of one depth at once: :func:`planner.search.midlevels.level_splits`' higher middle levels
and their first and last stage sizes, computed for all totals R in one batch of array operations instead of one
pass per R (docs/PLANNER.md 2.3, "Session 14").

Contract: :func:`higher_middles_batch` is :func:`planner.search.midlevels.higher_middles_arrays` with a total per
row; :func:`level_rows` gives, unsorted, the splits and needs :func:`~planner.search.midlevels.level_splits`
lists before it removes the known rows and sorts. The lowest level that fits is found by bisection: the room
``sum_j min(cap_j, M)`` is non-decreasing in the level M, so the smallest M in ``ceil(R / n) .. R - n + 1`` with
room >= R is the first true of a monotone test, and some level fits iff the highest does. Pure arithmetic on
integer arrays.
"""
from __future__ import annotations

import numpy as np

from planner.search.rows import unique_inverse

TOL = 1e-9


def _front_loaded_rows(totals: np.ndarray, caps: np.ndarray, level: np.ndarray) -> np.ndarray:
    """The front-loaded middle of row i: ``totals[i]`` layers under ``caps[i]`` at ``level[i]`` (undefined where
    none exists; the caller masks those rows)."""
    n = caps.shape[1]
    # stage-major ([n, V]): the prefix sums one add per stage over every row (np.cumsum along either axis of a
    # short-and-wide array runs a slow loop per column); integers, so the same values as np.cumsum, returned as
    # the [V, n] view
    room = np.minimum(caps.T, level[None, :])
    used = room.copy()
    for s in range(1, n):
        np.add(used[s - 1], room[s], out=used[s])
    np.minimum(used, totals[None, :] - (n - 1 - np.arange(n))[:, None], out=used)
    out = np.empty_like(used)
    out[:1] = used[:1]
    np.subtract(used[1:], used[:-1], out=out[1:])
    return out.T


def higher_middles_batch(totals: np.ndarray, arr: np.ndarray,
                         slack: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """([V] the lowest level's largest middle stage (0 where no middle fits), [E] the row of each higher middle,
    [E, n] the higher middles) of every row of ``arr`` ([V, n] caps) at its own total ``totals[i]`` (>= n),
    each row's middles in level order: what :func:`planner.search.midlevels.higher_middles_arrays` gives row by
    row."""
    n = arr.shape[1]
    t = np.asarray(totals, dtype=np.int64)
    lo, hi = -(-t // n), t - n + 1

    def room(level: np.ndarray) -> np.ndarray:
        return np.minimum(arr, level[:, None]).sum(axis=1)

    ok = (arr.min(axis=1) >= 1) & (arr.sum(axis=1) >= t) & (t >= n)
    ok &= room(hi) >= t
    a, b = lo.copy(), hi.copy()
    while True:                                 # the smallest level with room >= total (ok rows)
        act = a < b
        if not act.any():
            break
        mid = (a + b) // 2
        good = room(mid) >= t
        b = np.where(act & good, mid, b)
        a = np.where(act & ~good, mid + 1, a)
    low_level = np.where(ok, a, lo)
    prev = _front_loaded_rows(t, arr, low_level)
    low_max = np.where(ok, prev.max(axis=1), 0)
    bound = low_max + slack
    bound_tol = bound + TOL * np.maximum(1.0, np.abs(np.where(np.isfinite(bound), bound, 0.0)))
    top = np.minimum(hi, arr.max(axis=1))
    width = int(t.max()) if len(t) else 0
    lv = low_level[:, None] + np.arange(1, width + 1)[None, :]
    active = ok[:, None] & (lv <= top[:, None]) & (lv < bound_tol[:, None])      # a prefix of each row
    depth = int(active.sum(axis=1).max()) if len(arr) else 0
    if depth == 0:
        return low_max, np.zeros(0, dtype=np.int64), np.zeros((0, n), dtype=np.int64)
    # the middles at the active (row, level) entries only, row-major (the order np.nonzero gives): each row's
    # entries are consecutive from its first level on (a prefix), so an entry's predecessor level is the entry
    # before it, or the lowest level's middle at a row's first entry
    r, d = np.nonzero(active[:, :depth])
    cur = _front_loaded_rows(t[r], arr[r], lv[r, d])
    before = np.empty_like(cur)
    before[1:] = cur[:-1]
    first = d == 0
    before[first] = prev[r[first]]
    new = (cur != before).any(axis=1)
    return low_max, r[new], cur[new]


def unique_rows(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the distinct rows of ``arr`` ([V, k] integers), sorted; [V] the index of each row among them; the
    lexicographic order of ``arr``'s rows)."""
    if not len(arr):
        return arr, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if arr.shape[1] and 0 <= arr.min() and arr.max() < 255:
        # one byte a column, plus one (numpy's bytes ignore trailing zero bytes): bytes order is the rows' order
        key = np.ascontiguousarray(arr + 1, dtype=np.uint8).view(f"S{arr.shape[1]}").ravel()
        order = np.argsort(key, kind="stable")
        srt_key = key[order]
        srt = arr[order]
        start = np.ones(len(arr), dtype=bool)
        start[1:] = srt_key[1:] != srt_key[:-1]
    else:
        order = np.lexsort(arr.T[::-1])
        srt = arr[order]
        start = np.ones(len(arr), dtype=bool)
        start[1:] = (srt[1:] != srt[:-1]).any(axis=1)
    inv = np.empty(len(arr), dtype=np.int64)
    inv[order] = np.cumsum(start) - 1
    return srt[start], inv, order


def _last_below_each(values: np.ndarray, slack: float, last_below) -> np.ndarray:
    """``last_below(x + slack)`` of every x of ``values`` (integers), once per distinct value."""
    ux, back = unique_inverse(values)
    return np.array([last_below(x + slack) for x in ux.tolist()], dtype=np.int64)[back.reshape(-1)]


def level_rows(num_layers: int, n: int, vec: np.ndarray, slack, last_below) -> tuple[np.ndarray, np.ndarray]:
    """([K, n + 2] every split of :func:`planner.search.midlevels.level_splits` before the known rows are
    removed, each once, unsorted; [K, 3] integer needs) for the cap vectors ``vec`` ([V, n + 2]) at every middle
    total R = n .. L - 2; ``last_below``: :func:`planner.search.midlevels._last_below`."""
    L = num_layers
    totals = np.arange(n, L - 1)
    V = len(vec)
    empty = np.zeros((0, n + 2), dtype=np.int64), np.zeros((0, 3), dtype=np.int64)
    if not len(totals) or not V:
        return empty
    tv = np.repeat(totals, V)                                          # pair p = (total, vector), total-major
    mids = np.minimum(np.tile(vec[:, 1:-1], (len(totals), 1)), (tv - n + 1)[:, None])
    uniq, inv, order = unique_rows(np.column_stack([tv, mids]))        # groups: (total, clipped middle caps)
    g_tot = uniq[:, 0]
    low_max, at, hm = higher_middles_batch(g_tot, uniq[:, 1:], slack.middle)
    if not len(at):
        return empty
    a_top = _last_below_each(low_max, slack.first, last_below)
    c_top = _last_below_each(low_max, slack.last, last_below)
    ends = L - tv
    a_cap, c_cap = np.tile(vec[:, 0], len(totals)), np.tile(vec[:, -1], len(totals))
    lo = np.maximum(1, ends - np.minimum(c_cap, c_top[inv]))
    hi = np.minimum(np.minimum(ends - 1, a_cap), a_top[inv])
    a_all = np.arange(1, L - n)                                        # every first stage size any total allows
    per = (a_all[None, :] >= lo[:, None]) & (a_all[None, :] <= hi[:, None])
    # per group, the first stage sizes some vector of the group allows: the pairs sorted by group, OR-reduced
    starts = np.flatnonzero(np.r_[True, np.diff(inv[order]) != 0])
    firsts = np.logical_or.reduceat(per[order], starts, axis=0)
    # per distinct higher middle (its total is its sum) and first stage size a: allowed where some group giving
    # that middle allows a, and the largest max(low) of those groups (each part of the need is least there)
    mu, minv, morder = unique_rows(hm)
    # (entries in middle order; the lows as int32 with -1 where not allowed: the maxima read below are at allowed
    # entries only, each some group's largest lowest-level stage, 1 .. L)
    allow = firsts[at[morder]]                                         # [E, A], by middle
    lows = np.where(allow, low_max[at[morder]].astype(np.int32)[:, None], np.int32(-1))
    mstarts = np.flatnonzero(np.r_[True, np.diff(minv[morder]) != 0])
    allowed = np.logical_or.reduceat(allow, mstarts, axis=0)  # [M, A]
    best_all = np.maximum.reduceat(lows, mstarts, axis=0)
    m_idx, a_idx = np.nonzero(allowed)
    if not len(m_idx):
        return empty
    a = a_all[a_idx]
    rows = np.column_stack([a, mu[m_idx], L - mu[m_idx].sum(axis=1) - a])
    best = best_all[m_idx, a_idx]
    need = np.column_stack([rows[:, 1:-1].max(axis=1) - best, rows[:, 0] - best, rows[:, -1] - best])
    return rows, need


def lowest_rows(num_layers: int, n: int, vec: np.ndarray) -> np.ndarray:
    """[K, n + 2] every split of :func:`planner.search.midcaps.cap_bound_splits` (with ``LOWEST_ONLY``) before
    the family's rows are removed, each once, sorted, for the cap vectors ``vec`` ([V, n + 2]) at every middle
    total R = n .. L - 2: per (R, vector) whose family staircase (level ``ceil(R / n)``) does not fit under the
    middle caps (at most R - n + 1) and some middle does, the front-loaded middle at the lowest level that fits
    (bisection as in :func:`higher_middles_batch`), with every first stage size a in
    ``max(1, ends - last cap) .. min(ends - 1, first cap)`` (ends = L - R) and last ends - a."""
    L = num_layers
    totals = np.arange(n, L - 1)
    V = len(vec)
    if not len(totals) or not V:
        return np.zeros((0, n + 2), dtype=np.int64)
    tv = np.repeat(totals, V)
    caps = np.minimum(np.tile(vec[:, 1:-1], (len(totals), 1)), (tv - n + 1)[:, None])
    a_cap, c_cap = np.tile(vec[:, 0], len(totals)), np.tile(vec[:, -1], len(totals))
    m0 = -(-tv // n)
    stair = _front_loaded_rows(tv, np.broadcast_to(tv[:, None], caps.shape), m0)
    need = ~(caps >= stair).all(axis=1) & (caps.min(axis=1) >= 1) & (caps.sum(axis=1) >= tv)
    tv, caps, a_cap, c_cap, m0 = tv[need], caps[need], a_cap[need], c_cap[need], m0[need]
    if not len(tv):
        return np.zeros((0, n + 2), dtype=np.int64)
    a, b = m0.copy(), tv - n + 1                # room at R - n + 1 is sum(caps) >= R: some level fits
    while True:
        act = a < b
        if not act.any():
            break
        mid = (a + b) // 2
        good = np.minimum(caps, mid[:, None]).sum(axis=1) >= tv
        b = np.where(act & good, mid, b)
        a = np.where(act & ~good, mid + 1, a)
    mids = _front_loaded_rows(tv, caps, a)
    ends = L - tv
    lo, hi = np.maximum(1, ends - c_cap), np.minimum(ends - 1, a_cap)
    a_all = np.arange(1, L - n)
    p_idx, a_idx = np.nonzero((a_all[None, :] >= lo[:, None]) & (a_all[None, :] <= hi[:, None]))
    first = a_all[a_idx]
    rows = np.column_stack([first, mids[p_idx], ends[p_idx] - first])
    return unique_rows(rows)[0].reshape(-1, n + 2)


def fresh_rows(rows: np.ndarray, have: np.ndarray) -> np.ndarray:
    """[K] whether each row of ``rows`` ([K, S] integers) is not a row of ``have`` ([H, S]): one bytes key per
    row where every value is in 0 .. 254, else a set of tuples."""
    if not len(rows) or not len(have):
        return np.ones(len(rows), dtype=bool)
    both = (rows.min(), rows.max(), have.min(), have.max())
    if rows.shape[1] and min(both) >= 0 and max(both) < 255:
        width = f"S{rows.shape[1]}"
        key = np.ascontiguousarray(rows + 1, dtype=np.uint8).view(width).ravel()
        known = np.sort(np.ascontiguousarray(have + 1, dtype=np.uint8).view(width).ravel())
        # membership by binary search in the sorted keys (``~np.isin(key, known)``, whose np.unique imports
        # numpy.ma on a process's first call)
        at = np.minimum(np.searchsorted(known, key), len(known) - 1)
        return known[at] != key
    known_set = {tuple(r) for r in have.tolist()}
    return np.array([tuple(r) not in known_set for r in rows.tolist()], dtype=bool)
