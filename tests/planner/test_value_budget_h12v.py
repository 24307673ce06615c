"""The value unit floor's round-3 terms (docs/PLANNER.md 2.6, session 12 h12v): per segment count n, the mean
segment share as a pool-share bound (``chainfloor.iteration_levels(..., n_seg=n)``: a smaller D_max and a
Lagrangian weight 1 / n), the pool-budget floor (``chainbudget.budget_floor``) and its stage-0-coupled form
(``chainbudget.stage0_floor``), and the run-cover bound on D (``chainbudget.run_dmax``: at most n runs, each
within its pool's capacity). Brute force on random small
clusters (the h11v case family): for every fitting chain of n segments (every group per stage), its level's
D_max bound is >= the chain's largest D, its iteration bound is <= its iteration at every D, and the budget
floor is <= its best value key (``iterate_d``, every D); the unit floor is <= the best key of each segment count
(default and with the programme cut to one level); the search returns the same top 3 with the terms and
without; inflated terms fail the brute force."""
from __future__ import annotations

import numpy as np
import pytest

from planner.search import chainbudget, chainfloor
from tests.planner.test_value_floor_h11w import _n_runs, _units
from tests.planner.test_value_objective_h11v import VALUE, assert_same_top3


def _check_case(seed: int) -> int:
    """Returns chains checked; asserts the per-chain and per-segment-count claims above."""
    checked = 0
    for tab, grp, n_mb, s_num, gs, best in _units(seed):

        comp = np.where(tab.fits, tab.comp, np.inf)
        rate = grp.tp * grp.usd_per_s
        f_g = grp.tp / grp.caps[grp.pool]
        n_runs = np.array([_n_runs(r) for r in gs])
        t_chain = comp[gs, np.arange(s_num)].max(axis=1)
        units = np.zeros((len(gs), len(grp.caps)))
        for s in range(s_num):
            np.add.at(units, (np.arange(len(gs)), grp.pool[gs[:, s]]), grp.tp[gs[:, s]])
        d_chain = np.floor(np.min(np.where(units > 0, grp.caps[None] / np.maximum(units, 1), np.inf), axis=1))
        n_max = min(3, s_num)
        for n in range(2, n_max + 1):
            lv = chainfloor.iteration_levels(tab, grp, n_mb, n_seg=n)
            if lv is None:
                continue
            levels, it_k, d_max, fill_step = lv
            allowed = comp[None] <= levels[:, None, None]
            c_min = np.where(allowed, comp[None], np.inf).min(axis=1).sum(axis=1)
            rest = np.maximum(fill_step - np.maximum(levels, c_min), 0.0)
            it_f = np.where(np.isfinite(it_k), it_k, 0.0)
            sigma = None if tab.sync is None else chainfloor._suffix_sync(allowed[:, :, 0], tab.sync[:, 0, :])
            bf = chainbudget.budget_floor(levels, it_f, np.minimum(d_max, n_mb), rest, allowed, comp, rate, f_g,
                                          n, n_mb, sigma) * chainfloor.BUDGET
            if tab.sync is not None:
                s0 = chainbudget.stage0_floor(levels, it_f, np.minimum(d_max, n_mb), rest, allowed, comp, rate,
                                              f_g, n, n_mb, tab.sync[:, 0, :]) * chainfloor.STAGE0
                bf = np.maximum(bf, s0)
            sel = np.flatnonzero((n_runs == n) & np.isfinite(best))
            lvl = np.searchsorted(levels, t_chain[sel])
            for i, k in zip(sel, lvl):
                assert levels[k] == t_chain[i]
                assert min(d_chain[i], n_mb) <= d_max[k], (seed, n, gs[i], d_chain[i], d_max[k])
                assert bf[k] * chainfloor.SAFETY <= best[i] * (1 + 1e-12), (seed, n, gs[i], bf[k], best[i])
                checked += 1
            exact = float(best[n_runs == n].min(initial=np.inf))
            for t in (np.inf, exact):
                assert chainfloor.unit_floors(tab, grp, n_mb, VALUE, n_max, t)[n] <= exact * (1 + 1e-12)
    return checked




@pytest.mark.parametrize("seed", range(30))
def test_round3_terms_are_below_every_chain(seed, monkeypatch):
    monkeypatch.setattr(chainfloor, "MAX_LEVELS", 1)       # most levels keep their cheap bound
    _check_case(seed)


@pytest.mark.parametrize("seed", range(10))
def test_round3_default_levels(seed):
    _check_case(seed)


def test_run_dmax_matches_brute_force():
    """The largest D with a cut into <= n runs (each on one allowed group, D tp len <= cap) against every cut."""
    from itertools import combinations
    rng = np.random.default_rng(11)
    for _ in range(150):
        g_num, s_num, n = int(rng.integers(1, 4)), int(rng.integers(1, 7)), int(rng.integers(1, 4))
        allowed = rng.random((1, g_num, s_num)) < 0.7
        tp = rng.integers(1, 3, size=g_num)
        cap = rng.integers(1, 20, size=g_num)
        got = int(chainbudget.run_dmax(allowed, tp, cap, n, np.array([25.0]))[0])
        best = 0
        for d in range(1, 26):
            ok = False
            for k in range(1, min(n, s_num) + 1):
                for cuts in combinations(range(1, s_num), k - 1):
                    b = (0, *cuts, s_num)
                    if all(any(allowed[0, g, b[j]:b[j + 1]].all() and d * tp[g] * (b[j + 1] - b[j]) <= cap[g]
                               for g in range(g_num)) for j in range(k)):
                        ok = True
            if ok:
                best = d
        assert got == best, (allowed, tp, cap, n, got, best)


def test_round3_checked_something():
    assert sum(_check_case(seed) for seed in range(6)) > 50


def _fails(monkeypatch, name: str, value) -> bool:
    with monkeypatch.context() as m:
        m.setattr(chainfloor, name, value)
        for seed in range(30):
            try:
                _check_case(seed)
            except AssertionError:
                return True
    return False


def test_inflated_terms_fail(monkeypatch):
    assert _fails(monkeypatch, "SEG_SLACK", 0.5)     # u >= 2 x the mean segment share: false
    assert _fails(monkeypatch, "BUDGET", 1.5)
    assert _fails(monkeypatch, "STAGE0", 1.5)
    assert _fails(monkeypatch, "RUNS", 0.5)          # half the run-cover D bound: false


def _off(m):
    m.setattr(chainfloor, "SEG_FLOOR", False)
    m.setattr(chainfloor, "BUDGET", 0.0)
    m.setattr(chainfloor, "STAGE0", 0.0)
    m.setattr(chainfloor, "RUN_COVER", False)


@pytest.mark.parametrize("seed", range(12))
def test_search_same_with_and_without_round3(seed, monkeypatch):
    assert_same_top3(seed, monkeypatch, _off)
