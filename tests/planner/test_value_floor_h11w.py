"""The value unit floor's round-2 terms (docs/PLANNER.md 2.6, session 11 round 2): the level's iteration bound
it_T as a floor on a_T(D) (``chainfloor._min_d_a2_floor``, the sync and Cauchy-Schwarz terms), the Hoelder term
(``chainfloor._holder``). Brute force on random small
clusters: per level, each term is <= the value key (``iterate_d``, every D) of every fitting chain of that level
(every group per stage); the unit floor (default and with the programme cut to one level) is <= the
best key of each segment count; the search returns the same top 3 with the terms and without; inflated terms
fail the brute force."""
from __future__ import annotations

from dataclasses import replace
from itertools import product

import numpy as np
import pytest

from planner.search import chainfloor, chains
from planner.search.chaintab import stage_tab
from planner.search.chainvalue import min_d_a2
from planner.search.netvec import LinkCache
from planner.search.tasks import Tables, cluster_options
from tests.planner.chain_cases import random_chain_case

from tests.planner.test_value_objective_h11v import (MODEL, SPACE, VALUE, assert_same_top3,  # one case family
                                                      best_value_keys, multi_segment_chains)


def test_min_d_a2_floor_is_below_the_grid():
    rng = np.random.default_rng(1)
    for _ in range(400):
        a, b, hi, it = rng.uniform(0, 10), rng.uniform(0, 3), rng.uniform(1, 300), rng.uniform(0, 8)
        d = np.sort(np.concatenate([np.linspace(1.0, hi, 4001), [x for x in [a / (it - b) if it > b else 0]
                                                                  if 1 <= x <= hi]]))
        f = d * np.maximum(a / d + b, it) ** 2
        got = float(chainfloor._min_d_a2_floor(np.array([a]), np.array([b]), np.array([hi]), np.array([it]))[0])
        assert got <= f.min() * (1 + 1e-9) + 1e-12
        assert got >= float(min_d_a2(a, b, hi)) * (1 - 1e-12) - 1e-12      # never below the round-1 term
        assert got >= f.min() * (1 - 1e-3) - 1e-9                         # tight: the minimum (grid error)


def _units(seed: int):
    ctx, cluster, gbs, _ = random_chain_case(MODEL, 7000 + seed, 9, (4, 8, 16, 32, 64))
    tables, cache = Tables(ctx, SPACE), LinkCache(ctx)
    options = cluster_options(ctx, cluster, SPACE)
    for s_num, counts, mbs, n_mb, grp, d_cap, rc, dist in chains.chain_units(ctx, cluster, options, gbs, SPACE):
        tab = stage_tab(ctx, cache, tables, grp, mbs, counts, rc, d_cap, SPACE.precision, dist)
        gs = multi_segment_chains(tab, grp, s_num)
        if len(gs) == 0:
            continue
        sc = chains.score_chains(ctx, tab, grp, gs, n_mb)
        best = best_value_keys(ctx, sc, tab, n_mb, s_num, dist)
        yield tab, grp, n_mb, s_num, gs, best


def _n_runs(row: np.ndarray) -> int:
    return 1 + int((row[1:] != row[:-1]).sum())


def _check_case(seed: int) -> int:
    """Per level and per chain of the level: the round-2 terms <= the chain's best key; the unit floor (with
    and without ``extra``) <= the best key per segment count. Returns chains checked."""
    checked = 0
    for tab, grp, n_mb, s_num, gs, best in _units(seed):
        lv = chainfloor.iteration_levels(tab, grp, n_mb)
        if lv is None:
            continue
        levels, it_k, d_max, fill_step = lv
        comp = np.where(tab.fits, tab.comp, np.inf)
        allowed = comp[None] <= levels[:, None, None]
        rate = grp.tp * grp.usd_per_s
        cheap_r = np.where(allowed, rate[None, :, None], np.inf).min(axis=1).sum(axis=1)
        it_f = chainfloor.IT_FLOOR * np.where(np.isfinite(it_k), it_k, 0.0)
        g_f = chainfloor._min_d_a2_floor(n_mb * levels, fill_step - levels, np.minimum(d_max, n_mb), it_f)
        terms = [cheap_r * g_f, chainfloor._holder(levels, d_max, allowed, comp, rate, n_mb),
                 chainfloor._cauchy_schwarz(levels, fill_step, d_max, allowed, comp, rate, n_mb, it_f=it_f,
                                            cheap_r=cheap_r)]
        if tab.sync is not None:
            terms.append(cheap_r * chainfloor._min_d_sync(levels, fill_step, d_max, allowed[:, :, 0],
                                                          tab.sync[:, 0, :], n_mb, it_f))
        t_chain = comp[gs, np.arange(s_num)].max(axis=1)
        lvl = np.searchsorted(levels, t_chain)
        for i in np.flatnonzero(np.isfinite(best)):
            assert levels[lvl[i]] == t_chain[i]
            for j, term in enumerate(terms):
                assert term[lvl[i]] * chainfloor.SAFETY <= best[i] * (1 + 1e-12), (seed, j, gs[i], term[lvl[i]],
                                                                                  best[i])
            checked += 1
        n_max = min(SPACE.chain_segments, s_num)
        n_seg = np.array([_n_runs(r) for r in gs])
        exact = {n: float(best[n_seg == n].min(initial=np.inf)) for n in range(2, n_max + 1)}
        for t, tb, extra in product((np.inf, *exact.values()), (replace(tab, sync=None), tab), (False, True)):
            floors = chainfloor.unit_floors(tb, grp, n_mb, VALUE, n_max, t, extra)
            for n in range(2, n_max + 1):
                assert floors[n] <= exact[n] * (1 + 1e-12), (seed, s_num, n, floors[n], exact[n])
    return checked


@pytest.mark.parametrize("seed", range(30))
def test_round2_terms_are_below_every_chain(seed, monkeypatch):
    monkeypatch.setattr(chainfloor, "MAX_LEVELS", 1)       # most levels keep their cheap bound
    _check_case(seed)


@pytest.mark.parametrize("seed", range(10))
def test_round2_unit_floor_default_levels(seed):
    _check_case(seed)


def test_round2_checked_something():
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
    holder = chainfloor._holder
    assert _fails(monkeypatch, "_holder", lambda *a, **k: 1.5 * holder(*a, **k))
    assert _fails(monkeypatch, "IT_FLOOR", 1.3)


def _off(m):
    m.setattr(chainfloor, "IT_FLOOR", 0.0)
    m.setattr(chainfloor, "_holder", lambda levels, *a, **k: np.full(len(levels), -np.inf))


@pytest.mark.parametrize("seed", range(12))
def test_search_same_with_and_without_round2(seed, monkeypatch):
    assert_same_top3(seed, monkeypatch, _off)
