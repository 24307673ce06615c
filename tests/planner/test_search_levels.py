"""formulas.period_levels (the levels as one array operation, since session 9) equals the loop over the levels it
replaced (frozen below) bit for bit, and the chain search's pool units (a buffered += per stage) equal
np.add.at's."""
from __future__ import annotations

import numpy as np
import pytest

from planner.simulator import formulas as F


def _levels_by_loop(busy_max, trips):
    """The loop version of formulas.period_levels before session 9 (the reference)."""
    busy_max = np.asarray(busy_max, dtype=float)
    trips = np.asarray(trips, dtype=float)
    s_num = trips.shape[-1] + 1
    out = np.repeat(busy_max[..., None], s_num + 1, axis=-1)
    if s_num < 2:
        return out
    sufmax = np.maximum.accumulate(trips[..., ::-1], axis=-1)[..., ::-1]     # max over k' >= k
    for m in range(2, s_num + 2):
        k0 = max(0, s_num - m + 1)
        if k0 <= s_num - 2:
            out[..., m - 1] = np.maximum(busy_max, sufmax[..., k0])
    return out


@pytest.mark.parametrize("seed", range(40))
def test_period_levels_equal_the_formula(seed: int) -> None:
    rng = np.random.default_rng(4400 + seed)
    s_num = int(rng.integers(1, 30))
    lead = [(), (int(rng.integers(1, 50)),), (3, int(rng.integers(1, 9)))][seed % 3]
    comp = rng.random(lead + (s_num,)) * 10 ** rng.uniform(-3, 1)
    if seed % 4 == 0:
        comp = np.round(comp, 2)        # ties between the busiest stage and the round trips
    p2p = float(rng.choice([0.0, 1e-4, 0.05, np.inf if seed % 10 == 3 else 0.01]))
    busy = F.busy_s(comp, p2p, bool(seed % 2))
    trips = F.round_trip_bounds(comp, p2p)
    new, old = F.period_levels(busy.max(axis=-1), trips), _levels_by_loop(busy.max(axis=-1), trips)
    assert new.shape == old.shape == lead + (s_num + 1,) and new.dtype == old.dtype
    assert np.array_equal(new, old, equal_nan=True)
    if s_num >= 3 and p2p == 0.0:
        assert (new[..., -1] >= new[..., 0]).all()


@pytest.mark.parametrize("seed", range(10))
def test_units_by_buffered_add_equal_add_at(seed: int) -> None:
    rng = np.random.default_rng(4500 + seed)
    c_num, s_num, n_g, n_p = int(rng.integers(1, 200)), int(rng.integers(2, 9)), int(rng.integers(2, 8)), 3
    pool, tp = rng.integers(0, n_p, size=n_g), rng.choice([1, 2, 4, 8], size=n_g)
    gs = rng.integers(0, n_g, size=(c_num, s_num))
    old = np.zeros((c_num, n_p), dtype=np.int64)
    new = np.zeros((c_num, n_p), dtype=np.int64)
    rows = np.arange(c_num)
    for s in range(s_num):
        np.add.at(old, (rows, pool[gs[:, s]]), tp[gs[:, s]])
        new[rows, pool[gs[:, s]]] += tp[gs[:, s]]
    assert np.array_equal(new, old) and old.sum() == tp[gs].sum()
