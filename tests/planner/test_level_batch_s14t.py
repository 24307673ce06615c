"""Session 14 (helper s14t): :func:`planner.search.midlevels.level_splits` computes every middle total of a depth
in one batch (:mod:`planner.search.levelbatch`); it must list exactly the splits and needs of the per-total
loop it replaced (sessions 13), kept here as the reference, on random cap sets, slacks and known rows."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from planner.search import midlevels as ML
from planner.search.levelbatch import higher_middles_batch, unique_rows
from planner.search.midlevels import Slack


def _unique_rows(arr):
    srt, inv, _ = unique_rows(arr)
    return srt, inv


def reference_level_splits(num_layers: int, s_num: int, caps: set[tuple[int, ...]], slack: Slack,
                 have: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`planner.search.midlevels.level_splits` as it was before session 14 (one middle total at a time):
    the reference the batched version must equal."""
    L, n = num_layers, s_num - 2
    if n < 2 or not slack.middle > 0:
        return np.zeros((0, s_num), dtype=np.int64), np.zeros((0, 3))
    top = L - s_num + 1
    vec = np.array(sorted(set(caps) | {(top,) * s_num}), dtype=np.int64)
    a_cap, c_cap = vec[:, 0], vec[:, -1]
    out_rows: list[np.ndarray] = []
    out_need: list[np.ndarray] = []
    for total in range(n, L - 1):
        ends = L - total
        uniq, inv = _unique_rows(np.minimum(vec[:, 1:-1], total - n + 1))
        low_max, at, mids = ML.higher_middles_arrays(total, uniq, slack.middle)
        if not len(at):
            continue
        # per cap group, the first stage sizes a (1 .. ends - 1) some vector of the group allows:
        # max(1, ends - min(c_cap, c_top)) <= a <= min(ends - 1, a_cap, a_top), a < max(low) + first, c likewise
        a_top = np.array([ML._last_below(x + slack.first) for x in low_max.tolist()], dtype=np.int64)
        c_top = np.array([ML._last_below(x + slack.last) for x in low_max.tolist()], dtype=np.int64)
        lo = np.maximum(1, ends - np.minimum(c_cap, c_top[inv]))
        hi = np.minimum(np.minimum(ends - 1, a_cap), a_top[inv])
        a_all = np.arange(1, ends)
        per_vec = (a_all[None, :] >= lo[:, None]) & (a_all[None, :] <= hi[:, None])      # [V, ends - 1]
        firsts = np.zeros((len(uniq), ends - 1), dtype=bool)
        np.logical_or.at(firsts, inv, per_vec)
        e_idx, a_idx = np.nonzero(firsts[at])
        if not len(e_idx):
            continue
        a = a_all[a_idx]
        rows = np.column_stack([a, mids[e_idx], ends - a])
        low = low_max[at[e_idx]]
        # the same split from several groups: each part of the need is least at the largest max(low)
        rows, back = _unique_rows(rows)
        best = np.full(len(rows), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(best, back, low)
        out_rows.append(rows)
        out_need.append(np.column_stack([rows[:, 1:-1].max(axis=1) - best, rows[:, 0] - best,
                                         rows[:, -1] - best]))
    if not out_rows:
        return np.zeros((0, s_num), dtype=np.int64), np.zeros((0, 3))
    rows, need = np.concatenate(out_rows), np.concatenate(out_need)
    have = np.asarray(have, dtype=np.int64).reshape(-1, s_num)
    if len(have):
        known = {tuple(r) for r in have.tolist()}
        fresh = np.array([tuple(r) not in known for r in rows.tolist()], dtype=bool)
        rows, need = rows[fresh], need[fresh]
    order = np.lexsort(rows.T[::-1])
    return rows[order].reshape(-1, s_num), need[order].astype(float).reshape(-1, 3)


def _random_slack(rng: random.Random) -> Slack:
    pick = rng.random()
    if pick < 0.15:
        return ML.EVERY
    if pick < 0.2:
        return ML.NONE
    mid = rng.choice([0.5, 1.0, 2.0, 3.5, 6.0, rng.uniform(0.1, 12.0)])
    return Slack(mid, rng.uniform(-3.0, 6.0), rng.uniform(-3.0, 6.0))


def _random_caps(rng: random.Random, s_min: int = 3, short: int = 0) -> tuple[int, int, set[tuple[int, ...]]]:
    """(layers L, depth S in s_min .. min(L - short, 24), a random set of cap vectors of length S, 5 % of
    entries 0)."""
    L = rng.randint(6, 40)
    S = rng.randint(s_min, min(L - short, 24))
    top = L - S + 1
    return L, S, {tuple(rng.randint(0 if rng.random() < 0.05 else 1, top) for _ in range(S))
                  for _ in range(rng.randint(0, 40))}


@pytest.mark.parametrize("seed", range(60))
def test_batched_level_splits_equal_the_per_total_loop(seed):
    rng = random.Random(seed)
    L, S, caps = _random_caps(rng)
    slack = _random_slack(rng)
    fam = np.array(sorted({tuple(int(x) for x in np.diff(np.r_[0, np.sort(rng.sample(range(1, L), S - 1)), L]))
                           for _ in range(rng.randint(0, 30))}), dtype=np.int64).reshape(-1, S)
    want_rows, want_need = reference_level_splits(L, S, caps, slack, fam)
    got_rows, got_need = ML.level_splits(L, S, caps, slack, fam)
    assert got_rows.shape == want_rows.shape and (got_rows == want_rows).all(), (seed, L, S)
    assert got_need.dtype == want_need.dtype and np.array_equal(got_need, want_need), (seed, L, S)
    # the batch drops what is known: a second call with its own rows known lists none of them
    if len(got_rows):
        again, _ = ML.level_splits(L, S, caps, slack, np.concatenate([fam, got_rows]))
        assert len(again) == 0


def test_the_random_cases_list_higher_levels():
    """Not vacuous: most random cases list some split."""
    listed = 0
    for seed in range(60):
        rng = random.Random(seed)
        L, S, caps = _random_caps(rng)
        listed += len(ML.level_splits(L, S, caps, _random_slack(rng), np.zeros((0, S)))[0]) > 0
    assert listed >= 30


def test_higher_middles_batch_equals_the_row_rule_at_mixed_totals():
    rng = random.Random(5)
    for _ in range(200):
        n = rng.randint(1, 7)
        totals = [rng.randint(n, 24) for _ in range(rng.randint(1, 12))]
        arr = np.array([[min(rng.randint(0, 24), t - n + 1) for _ in range(n)] for t in totals], dtype=np.int64)
        slack = rng.choice([math.inf, 0.5, 1.0, 2.5, rng.uniform(0.0, 9.0)])
        low_max, at, mids = higher_middles_batch(np.array(totals), arr, slack)
        for i, t in enumerate(totals):
            want = ML.higher_middles(t, tuple(arr[i].tolist()), slack)     # caps at most total - n + 1
            assert int(low_max[i]) == want[0]
            assert tuple(map(tuple, mids[at == i].tolist())) == want[1]


def reference_cap_bound_splits(num_layers, s_num, caps, family):
    """The per-total loop of sessions 12-13 (``LOWEST_ONLY``)."""
    from planner.search.midcaps import lowest_middles
    L, n = num_layers, s_num - 2
    if not caps:
        return np.zeros((0, s_num), dtype=np.int64)
    have = {tuple(r) for r in family.tolist()}
    arr = np.array(sorted(caps), dtype=np.int64)
    rows = set()
    for total in range(n, L - 1):
        ends = L - total
        mids, at = lowest_middles(total, arr[:, 1:-1])
        for m, a_cap, c_cap in set(zip(map(tuple, mids.tolist()), arr[at, 0].tolist(), arr[at, -1].tolist())):
            for a in range(max(1, ends - c_cap), min(ends - 1, a_cap) + 1):
                row = (a,) + m + (ends - a,)
                if row not in have:
                    rows.add(row)
    return np.array(sorted(rows), dtype=np.int64).reshape(-1, s_num)


@pytest.mark.parametrize("seed", range(60))
def test_batched_cap_bound_splits_equal_the_per_total_loop(seed):
    from planner.search.midcaps import cap_bound_splits
    from planner.search.tables import split_family
    L, S, caps = _random_caps(random.Random(100 + seed), 4, 1)
    fam = split_family(L, S)
    want = reference_cap_bound_splits(L, S, caps, fam)
    got = cap_bound_splits(L, S, caps, fam)
    assert got.shape == want.shape and (got == want).all(), (seed, L, S)
    if seed == 0:
        listed = sum(len(reference_cap_bound_splits(*c)) > 0 for c in _cases_for_cap_bound())
        assert listed >= 20


def _cases_for_cap_bound():
    from planner.search.tables import split_family
    for seed in range(60):
        L, S, caps = _random_caps(random.Random(100 + seed), 4, 1)
        yield L, S, caps, split_family(L, S)


def test_unique_rows_equal_a_lexsort_on_small_and_large_values():
    rng = np.random.default_rng(3)
    for hi in (2, 5, 40, 254, 255, 1000):
        for k in (1, 2, 7, 30):
            arr = rng.integers(0, hi + 1, size=(int(rng.integers(1, 400)), k))
            srt, inv, order = unique_rows(arr)
            want_order = np.lexsort(arr.T[::-1])
            assert np.array_equal(order, want_order)
            want = np.unique(arr, axis=0)
            assert np.array_equal(srt, want) and np.array_equal(srt[inv], arr)


def test_fresh_rows_equal_a_set_difference():
    from planner.search.levelbatch import fresh_rows
    rng = np.random.default_rng(4)
    for hi in (3, 30, 254, 255, 600):
        for k in (1, 3, 12):
            rows = rng.integers(0, hi + 1, size=(int(rng.integers(0, 300)), k))
            have = np.concatenate([rows[: len(rows) // 3], rng.integers(0, hi + 1, size=(50, k))])
            known = {tuple(r) for r in have.tolist()}
            want = np.array([tuple(r) not in known for r in rows.tolist()], dtype=bool)
            assert np.array_equal(fresh_rows(rows, have), want)
            assert fresh_rows(rows, have[:0]).all()
