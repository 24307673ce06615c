"""The exact usage-indexed pricing of the bound on Sailor's whole space (planner/search/mixexact.py, docs/PLANNER.md
7.2 item 7): its table equals the minimum fill over every chain enumerated, its counts are every chain's most
micro-batches under the relaxed makespan, and the bound with it is <= the exact (b) of the independent enumeration
(benchmarks/sailor_full_space.py), <= every random plan of Sailor's space that fits, and >= the bound without it."""
from __future__ import annotations

import random
import sys
from dataclasses import replace
from itertools import product
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "planner"))

from sailor_full_space import _search_key, contexts, random_cases, sailor_full_space_best  # noqa: E402
from test_mix_bound_h11b import check_random_plans  # noqa: E402

import planner.search.mixbound as MB  # noqa: E402
from planner.baselines.spaces import PLANNERS  # noqa: E402
from planner.cluster import parse_gpus  # noqa: E402
from planner.search import Objective  # noqa: E402
from planner.search.chaintab import ChainGroups  # noqa: E402
from planner.search.mixexact import counts, dual_bound, lp_value, usage_table  # noqa: E402
from planner.search.mixprice import classes, levels  # noqa: E402
from planner.search.mixtab import MixUnit  # noqa: E402

REL = 1e-9
BISECT = 1.1e-5
SPACE = replace(PLANNERS["sailor-space"], max_stages=3, mbs_options=(1, 2), tp_options=(1, 2))


def _unit(rng: np.random.Generator, n_g: int, s_num: int, n_mb: int = 8) -> MixUnit:
    pools = rng.integers(0, 2, n_g)
    pools[0], pools[-1] = 0, 1
    grp = ChainGroups([(f"g{i}", "z", 1) for i in range(n_g)], pools, np.array([4, 5]), rng.integers(1, 3, n_g),
                      np.ones(n_g))
    comp = rng.choice([1.0, 2.0, 3.0], size=(n_g, s_num)) * rng.uniform(0.9, 1.1, (n_g, 1))
    left = s_num - np.arange(s_num)
    kmax = np.where(rng.random((n_g, s_num)) < 0.8, np.minimum(left, rng.integers(1, s_num + 1, (n_g, s_num))), 0)
    kmax[0] = left
    p2p = rng.uniform(0.0, 0.3, (n_g, n_g))
    return MixUnit(s_num, 1, n_mb, grp, comp, kmax, p2p, np.zeros(n_mb + 1), 0.0, n_mb)


def _chains(unit: MixUnit):
    """(chain, usage, level, fill, class mask ok per class) for every chain of usable replicas."""
    n_g, s_num = unit.comp.shape
    masks, _ = classes(unit)
    st = np.arange(s_num)
    for ch in product(range(n_g), repeat=s_num):
        ch = np.array(ch)
        u = np.zeros(2, dtype=int)
        np.add.at(u, unit.grp.pool[ch], unit.grp.tp[ch])
        fill = float(unit.comp[ch, st].sum() + 2 * unit.p2p[ch[:-1], ch[1:]].sum())
        yield ch, u, float(unit.comp[ch, st].max()), fill, [bool(mk[ch, st].all()) for mk in masks]


@pytest.mark.parametrize("seed", range(8))
def test_usage_table_is_the_minimum_over_every_chain(seed):
    rng = np.random.default_rng(seed)
    unit = _unit(rng, 3, 3 + seed % 2)
    tab = usage_table(unit)
    lv = levels(unit)
    want = np.full(tab.fill.shape, np.inf)
    for _, u, top, fill, ok in _chains(unit):
        if (u >= np.array(tab.dims)).any():
            continue            # more than a pool holds: in no plan
        vi = int(np.argmin(np.abs(lv - top)))
        for k, good in enumerate(ok):
            if good:
                want[k, vi, u[0], u[1]] = min(want[k, vi, u[0], u[1]], fill)
    fin = np.isfinite(want)
    assert (np.isfinite(tab.fill) == fin).all()
    assert np.allclose(tab.fill[fin], want[fin], rtol=1e-12, atol=1e-12)
    assert fin.sum() >= 4


@pytest.mark.parametrize("seed", range(8))
def test_counts_cover_every_chain_and_are_attained(seed):
    """m_u(T') is >= the most micro-batches of every chain using u (period >= largest compute and, above S
    micro-batches, >= fill / S; class by the count), and equal to one chain's."""
    rng = np.random.default_rng(100 + seed)
    unit = _unit(rng, 3, 3, n_mb=int(rng.integers(2, 12)))
    tab = usage_table(unit)
    _, cls = classes(unit)
    s_num = unit.s_num
    rows = list(_chains(unit))
    for t in rng.uniform(2.0, 30.0, 6):
        got = counts(unit, tab, t)
        want = np.zeros(got.shape)
        for _, u, top, fill, ok in rows:
            if (u >= np.array(tab.dims)).any():
                continue
            for m in range(1, unit.n_mb + 1):
                period = max(top, fill / s_num) if m > s_num else top
                if ok[cls[min(m, s_num) - 1]] and (m - 1) * period + fill <= t:
                    want[u[0], u[1]] = max(want[u[0], u[1]], m)
        assert (got >= want).all()
        assert (got == want).all()


@pytest.mark.parametrize("seed", range(4))
def test_dual_bound_is_weak_duality(seed):
    """At any y >= 0 the dual bound is >= the LP optimum (which any plan's counts are a feasible point of)."""
    rng = np.random.default_rng(200 + seed)
    unit = _unit(rng, 3, 3)
    tab = usage_table(unit)
    for t in (4.0, 9.0, 20.0):
        val, y, _, _ = lp_value(unit, tab, t, 1, 3)
        if y is not None:
            assert dual_bound(unit, tab, t, y, 1, 3) >= val - 1e-9 * abs(val) - 1e-9
        for _ in range(5):
            assert dual_bound(unit, tab, t, rng.uniform(0, 3, 2), 1, 3) >= val - 1e-9 * abs(val) - 1e-9


@pytest.fixture(scope="module")
def ctxs():
    return contexts(None)


def _bounds(ctx, cluster, gbs):
    old = MB.EXACT
    try:
        MB.EXACT = False
        without = MB.sailor_space_bound(ctx, cluster, gbs, SPACE, time_limit_s=None)
        MB.EXACT = True
        with_ = MB.sailor_space_bound(ctx, cluster, gbs, SPACE, time_limit_s=None)
    finally:
        MB.EXACT = old
    return without, with_


@pytest.mark.parametrize("case", random_cases(8, 21, False), ids=lambda c: c.name)
def test_exact_bound_below_the_exact_b_and_above_the_old(ctxs, case):
    ctx = ctxs[case.ctx_name]
    cluster = parse_gpus(case.gpus, ctx.catalog)
    old, new = _bounds(ctx, cluster, case.gbs)
    if check_below_exact_b(ctx, cluster, case.gbs, new, old):
        # the exact floor's bisection stops at relative 1e-5 (mixexact.node_floor_exact)
        assert new.iteration_s >= old.iteration_s * (1 - BISECT)


def check_below_exact_b(ctx, cluster, gbs: int, bound, other) -> bool:
    """A bound of Sailor's space on a small cluster against the enumeration's exact (b) (D <= 2) and (b'): None
    only where ``other`` (another bound of the same cluster) is None too and the enumeration finds no plan; else
    complete and <= both (rel. 1e-9). Returns whether there is a bound to compare further."""
    obj = Objective("throughput")
    b, plan, _ = sailor_full_space_best(ctx, cluster, gbs, obj, 3, (1, 2), (1, 2), max_d=2)
    b1 = _search_key(ctx, cluster, gbs, obj, SPACE)
    if bound is None:
        assert other is None and plan is None
        return False
    assert bound.complete
    assert bound.iteration_s <= b * (1 + REL)
    assert bound.iteration_s <= b1 * (1 + REL)
    return True


@pytest.mark.parametrize("seed", [0, 1])
def test_no_random_plan_beats_the_exact_bound(ctxs, seed):
    """More clusters and draws for the exact pricing (mixbound.EXACT, on by default) than the h11b test."""
    assert MB.EXACT
    check_random_plans(ctxs, 30 + seed, random.Random(50 + seed))
