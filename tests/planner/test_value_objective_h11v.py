"""The value objective's joint chain bounds (docs/PLANNER.md 2.6): the closed-form minima are <= D a(D)^2 on a
grid of D (and equal to its minimum); on random small clusters the value unit floor (``chainfloor.unit_floors``),
the rest floor (``chainrest.rest_floor``), the segment table and the chain bound (``chains.segment_table`` / ``segment_lower_keys``) and the per-chain bound
(``chains.chain_lower_keys``) are <= the value key (``iterate_d``, every D) of every fitting chain of the unit
(every group per stage, brute force); the search returns the same candidates with the joint bounds and with
them switched off; and ``iterate_d``'s tied-embedding skip keeps every key at or below its threshold."""
from __future__ import annotations

from dataclasses import replace
from itertools import product

import numpy as np
import pytest

from planner.model import ModelSpec
from planner.search import Objective, SearchSpace, plan_search
from planner.search import chainfloor, chains
from planner.search.chaintab import range_tab, stage_tab
from planner.search.chainrest import rest_floor
from planner.search.chainvalue import min_d_a2, min_d_seg2
from planner.search.netvec import LinkCache
from planner.search.tasks import Tables, cluster_options
from tests.planner.chain_cases import random_chain_case

MODEL = ModelSpec("valfloor", num_layers=5, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=2048,
                  vocab_size=1024, max_position_embeddings=2048)
SPACE = SearchSpace(max_stages=4, mbs_options=(1, 2), tp_options=(1, 2), recompute=(False, True),
                    distributed_optimizer=(False, True), chain_segments=3)
VALUE = Objective("value")


def test_closed_forms_are_below_the_grid():
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, b, hi = rng.uniform(0, 10), rng.uniform(-1, 5), rng.uniform(1, 300)
        c, v = rng.uniform(0, 3), rng.uniform(0, 2)
        extra = [x for x in (a / c if c else 0, a / v if v else 0, a / abs(b) if b else 0) if 1 <= x <= hi]
        d = np.sort(np.concatenate([np.linspace(1.0, hi, 4001), extra]))      # the grid and the breakpoints
        ad = a / d + b
        if (ad >= 0).all():
            assert min_d_a2(a, b, hi) <= (d * ad ** 2).min() * (1 + 1e-9) + 1e-12
        seg = d * (np.maximum(a / d, c) + v) ** 2
        assert min_d_seg2(a, c, v, hi) <= seg.min() * (1 + 1e-9) + 1e-12
        assert min_d_seg2(a, c, v, hi) >= seg.min() * (1 - 1e-9) - 1e-12      # tight: the minimum itself


def _runs(row: np.ndarray) -> tuple[list[int], list[int]]:
    bounds, seq = [0], [int(row[0])]
    for s in range(1, len(row)):
        if row[s] != row[s - 1]:
            bounds.append(s)
            seq.append(int(row[s]))
    return bounds + [len(row)], seq


def multi_segment_chains(tab, grp, s_num: int) -> np.ndarray:
    """[C, S]: every chain (a group per stage) of >= 2 segments whose every stage fits."""
    gs = np.array(list(product(range(len(grp.names)), repeat=s_num)), dtype=np.int64).reshape(-1, s_num)
    gs = gs[tab.fits[gs, np.arange(s_num)].all(axis=1)]
    return gs[(gs[:, 1:] != gs[:, :-1]).any(axis=1)] if s_num > 1 else gs[:0]


def best_value_keys(ctx, sc, tab, n_mb: int, s_num: int, dist: bool) -> np.ndarray:
    """[C]: each scored chain's smallest value key over every D that ``iterate_d`` scores (D >= 1)."""
    best = np.full(len(sc.gs), np.inf)
    for d, sel, _, _, _, keys in chains.iterate_d(ctx, sc, tab, n_mb, s_num, VALUE, False):
        if dist and d < 1:
            continue
        best[sel] = np.minimum(best[sel], keys)
    return best


def _check_case(seed: int, unit_min: list | None = None) -> int:
    ctx, cluster, gbs, _ = random_chain_case(MODEL, 7000 + seed, 9, (4, 8, 16, 32, 64))
    tables, cache = Tables(ctx, SPACE), LinkCache(ctx)
    options = cluster_options(ctx, cluster, SPACE)
    checked = 0
    for s_num, counts, mbs, n_mb, grp, d_cap, rc, dist in chains.chain_units(ctx, cluster, options, gbs, SPACE):
        tab = stage_tab(ctx, cache, tables, grp, mbs, counts, rc, d_cap, SPACE.precision, dist)
        gs = multi_segment_chains(tab, grp, s_num)
        if unit_min is not None:
            unit_min.append(np.inf)
        if len(gs) == 0:
            continue
        sc = chains.score_chains(ctx, tab, grp, gs, n_mb)
        best = best_value_keys(ctx, sc, tab, n_mb, s_num, dist)
        if unit_min is not None:
            unit_min[-1] = float(best[np.array([len(_runs(r)[1]) <= SPACE.chain_segments for r in gs])].min())
        lb = chains.chain_lower_keys(sc, n_mb, s_num, VALUE, dist)
        assert (lb <= best * (1 + 1e-12)).all()
        rt = range_tab(tab)
        single = chains.segment_table(rt, grp, n_mb, VALUE)
        n_seg = np.array([len(_runs(r)[1]) for r in gs])
        n_max = min(SPACE.chain_segments, s_num)
        exact = {n: float(best[n_seg == n].min(initial=np.inf)) for n in range(2, n_max + 1)}
        for t, tb in product((np.inf, 0.0, *exact.values()), (replace(tab, sync=None), tab)):
            floors = chainfloor.unit_floors(tb, grp, n_mb, VALUE, n_max, t)
            for n in range(2, n_max + 1):
                assert floors[n] <= exact[n] * (1 + 1e-12), (seed, s_num, n, floors[n], exact[n])
        for row, key, n in zip(gs, best, n_seg):
            if n < 2 or n > n_max or not np.isfinite(key):
                continue
            b, q = _runs(row)
            seg_lb = chains.segment_lower_keys(tab, rt, grp, np.array([b]), np.array([q]), n_mb, VALUE, True)[0]
            assert seg_lb <= key * (1 + 1e-12), (seed, row, seg_lb, key)
            for i in range(len(q)):
                assert single[b[i], b[i + 1], q[i]] <= key * (1 + 1e-12)
            checked += 1
    return checked


@pytest.mark.parametrize("seed", range(30))
def test_value_bounds_are_below_every_chain(seed):
    _check_case(seed)


@pytest.mark.parametrize("seed", range(10))
def test_rest_floor_is_below_every_unsearched_chain(seed):
    unit_min: list[float] = []
    _check_case(seed, unit_min)
    ctx, cluster, gbs, _ = random_chain_case(MODEL, 7000 + seed, 9, (4, 8, 16, 32, 64))
    options = cluster_options(ctx, cluster, SPACE)
    for start in range(0, len(unit_min) + 1, 3):
        rest = rest_floor(ctx, cluster, Tables(ctx, SPACE), LinkCache(ctx), options, gbs, VALUE, SPACE, start)
        assert rest <= min(unit_min[start:], default=np.inf) * (1 + 1e-12)


def test_value_bounds_checked_something():
    assert sum(_check_case(seed) for seed in range(6)) > 50


def _off(monkeypatch):
    monkeypatch.setattr(chains, "segment_value_keys", lambda *a, **k: -np.inf)
    monkeypatch.setattr(chains, "chain_value_keys", lambda *a, **k: -np.inf)
    monkeypatch.setattr(chainfloor, "_value_floors", lambda *a, **k: -np.inf)


def assert_same_top3(seed: int, monkeypatch, switch_off) -> None:
    """``plan_search`` under ``value`` returns the same top 3 on random case ``seed`` with the bounds that
    ``switch_off(monkeypatch context)`` disables as without them."""
    ctx, cluster, gbs, _ = random_chain_case(MODEL, 8000 + seed, 9, (4, 8, 16, 32))
    space = SearchSpace(max_stages=4, mbs_options=(1, 2), tp_options=(1, 2), chain_segments=3)
    on = plan_search(ctx, cluster, gbs, VALUE, space, top_k=3)
    with monkeypatch.context() as m:
        switch_off(m)
        off = plan_search(ctx, cluster, gbs, VALUE, space, top_k=3)
    assert [(c.key, c.chain, c.pools, c.microbatches) for c in on.candidates] == \
        [(c.key, c.chain, c.pools, c.microbatches) for c in off.candidates]


@pytest.mark.parametrize("seed", range(12))
def test_search_same_with_and_without_value_bounds(seed, monkeypatch):
    assert_same_top3(seed, monkeypatch, _off)


@pytest.mark.parametrize("seed", range(12))
def test_tied_skip_keeps_every_key_at_or_below_the_threshold(seed):
    ctx, cluster, gbs, objective = random_chain_case(MODEL, 9000 + seed, 9, (4, 8, 16, 32))
    tables, cache = Tables(ctx, SPACE), LinkCache(ctx)
    options = cluster_options(ctx, cluster, SPACE)
    compared = 0
    for s_num, counts, mbs, n_mb, grp, d_cap, rc, dist in chains.chain_units(ctx, cluster, options, gbs, SPACE):
        tab = stage_tab(ctx, cache, tables, grp, mbs, counts, rc, d_cap, SPACE.precision, dist)
        gs = np.array(list(product(range(len(grp.names)), repeat=s_num)), dtype=np.int64).reshape(-1, s_num)
        gs = gs[tab.fits[gs, np.arange(s_num)].all(axis=1)]
        if len(gs) == 0:
            continue
        sc = chains.score_chains(ctx, tab, grp, gs, n_mb)
        tied = (cache.tied, grp.names)
        full = {d: keys for d, _, _, _, _, keys in chains.iterate_d(ctx, sc, tab, n_mb, s_num, objective, False, tied)}
        finite = np.concatenate([k[np.isfinite(k)] for k in full.values()] + [np.zeros(0)])
        for thr in ([float(np.median(finite)), float(finite.min())] if len(finite) else [1.0]):
            for d, _, _, _, _, keys in chains.iterate_d(ctx, sc, tab, n_mb, s_num, objective, False, tied,
                                                        lambda: thr):
                low = full[d] <= thr
                assert np.array_equal(keys[low], full[d][low])
                assert not (keys[~low] <= thr).any()
                compared += int(low.sum())
    assert compared > 0 or not len(cluster.pools)
