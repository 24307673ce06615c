"""The proven bound on Sailor's whole space (planner/search/mixbound.py, docs/PLANNER.md section 7): on seeded
random small clusters it is <= the exact optimum of the independent enumeration (benchmarks/sailor_full_space.py),
<= the search's comparator (b'), and <= every random plan of Sailor's space that fits (stages mixing chains, any
counts); its pricing programs against brute force over every chain; and it is not trivially loose."""
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

from sailor_full_space import (_search_key, _valid, contexts, even_last_split, random_cases,  # noqa: E402
                               sailor_full_space_best, sailor_plan_of)

from planner.baselines.spaces import PLANNERS  # noqa: E402
from planner.cluster import parse_gpus  # noqa: E402
from planner.search import Objective  # noqa: E402
from planner.search.mixbound import sailor_space_bound  # noqa: E402
from planner.search.mixdp import fill_table  # noqa: E402
from planner.search.mixprice import Priced, _program, levels as unit_levels  # noqa: E402
from planner.search.mixtab import MixUnit  # noqa: E402
from planner.search.chaintab import ChainGroups  # noqa: E402
from planner.simulator import simulate  # noqa: E402

REL = 1e-9
SPACE = replace(PLANNERS["sailor-space"], max_stages=3, mbs_options=(1, 2), tp_options=(1, 2))
# measured on the cases below (seeds 1 and 3, 2026-12-02): (b') / bound at most 1.150 (a single pipeline
# across two zones whose 1F1B period is set by the round trip over the cross-zone link, which the bound drops:
# it keeps only period >= the largest compute); elsewhere within 1.4 %
LOOSEST = 1.16
# the slow cases (seeds 1 and 3, commit cdc8781): at most 1.159 (seed 3 r6, 4 + 4 A100 in two zones, GBS 8;
# 1.355 before the sync floor learnt that a stage needing more GPUs than one zone holds spans zones)
LOOSEST_SLOW = 1.17


@pytest.fixture(scope="module")
def ctxs():
    return contexts(None)


def _cases(n: int, seed: int):
    return [c for c in random_cases(n, seed, False)]


def _bound(ctx, cluster, gbs):
    return sailor_space_bound(ctx, cluster, gbs, SPACE, time_limit_s=None)


def random_compositions(rng: random.Random, total: int, parts: int) -> list[int]:
    """A random composition of ``total`` into ``parts`` positive parts."""
    cuts = sorted(rng.sample(range(1, total), parts - 1)) if parts > 1 else []
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def random_pipelines(ctx, cluster, gbs, rng: random.Random, draws: int):
    """(S, b, N, pipelines) of random plans: S <= 3, b in {1, 2}, D <= 4 <= N, every replica a random (type,
    zone, TP) group of the cluster (stages mix chains), the pools' capacities and one TP per (stage, type)
    respected; the caller draws the rest from ``rng`` between yields."""
    groups = [(p.gpu_type, p.zone, t) for p in cluster.pools for t in (1, 2)
              if t <= p.count and t <= ctx.node_size(p.gpu_type) and ctx.model.num_heads % t == 0]
    for _ in range(draws):
        s_num, mbs, d = rng.choice((1, 2, 2, 3, 3)), rng.choice((1, 2)), rng.randint(1, 4)
        n_mb = gbs // mbs
        if d > n_mb or s_num > ctx.model.num_layers:
            continue
        pipes = tuple(tuple(rng.choice(groups) for _ in range(s_num)) for _ in range(d))
        if _valid(cluster, pipes):
            yield s_num, mbs, n_mb, pipes


def _random_plans(ctx, cluster, gbs, rng: random.Random, draws: int):
    """Random plans of Sailor's space (:func:`random_pipelines` on Sailor's split), random positive counts."""
    for s_num, mbs, n_mb, pipes in random_pipelines(ctx, cluster, gbs, rng, draws):
        counts = random_compositions(rng, n_mb, len(pipes))
        yield sailor_plan_of(even_last_split(ctx.model.num_layers, s_num), pipes, mbs, gbs, counts)


def _check_against_the_enumeration(ctxs, case, max_d: int, loosest: float) -> None:
    """bound <= the exact (b) of the enumeration (D <= ``max_d``; the bound covers every D) and <= (b'),
    within ``loosest`` of (b')."""
    ctx = ctxs[case.ctx_name]
    cluster = parse_gpus(case.gpus, ctx.catalog)
    obj = Objective("throughput")
    bd = _bound(ctx, cluster, case.gbs)
    b, plan, _ = sailor_full_space_best(ctx, cluster, case.gbs, obj, 3, (1, 2), (1, 2), max_d=max_d)
    b1 = _search_key(ctx, cluster, case.gbs, obj, SPACE)
    if bd is None:
        assert plan is None and b1 == float("inf")
        return
    assert bd.iteration_s <= b * (1 + REL)
    assert bd.iteration_s <= b1 * (1 + REL)
    assert b1 <= bd.iteration_s * loosest


@pytest.mark.parametrize("case", _cases(6, 1), ids=lambda c: c.name)
def test_bound_below_the_exact_b_and_the_comparator(ctxs, case):
    _check_against_the_enumeration(ctxs, case, 2, LOOSEST)


@pytest.mark.slow
@pytest.mark.parametrize("case", _cases(16, 1)[6:] + _cases(8, 3), ids=lambda c: c.name)
def test_bound_below_the_exact_b_more(ctxs, case):
    _check_against_the_enumeration(ctxs, case, 3, LOOSEST_SLOW)


def check_random_plans(ctxs, case_seed: int, rng: random.Random) -> None:
    """Hundreds of random plans (stages mixing chains, random counts) on the 4 clusters of ``case_seed``: every
    one that fits iterates in at least the bound; enough of them fit and mix chains for the test to mean
    something."""
    fitted = mixed = 0
    for case in _cases(4, case_seed):
        ctx = ctxs[case.ctx_name]
        cluster = parse_gpus(case.gpus, ctx.catalog)
        bd = _bound(ctx, cluster, case.gbs)
        for plan in _random_plans(ctx, cluster, case.gbs, rng, 300):
            est = simulate(plan, ctx)
            if not est.fits_in_memory:
                continue
            fitted += 1
            pipes = {plan.pipeline(j) for j in range(plan.dp_degree)}
            mixed += len(pipes) > 1 and any(len(set(p)) > 1 for p in pipes)
            assert bd is not None
            assert est.iteration_time_s >= bd.iteration_s * (1 - REL), (plan, est.iteration_time_s, bd)
    assert fitted >= 40 and mixed >= 2, (fitted, mixed)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_random_plan_of_sailors_space_beats_the_bound(ctxs, seed):
    check_random_plans(ctxs, 10 + seed, random.Random(seed))


def _unit(rng: np.random.Generator, n_g: int, s_num: int) -> MixUnit:
    pools = rng.integers(0, 2, n_g)
    grp = ChainGroups([(f"g{i}", "z", 1) for i in range(n_g)], pools, np.array([4, 4]), rng.integers(1, 3, n_g),
                      np.ones(n_g))
    comp = rng.choice([1.0, 2.0, 3.0], size=(n_g, s_num)) * rng.uniform(0.9, 1.1, (n_g, 1))
    kmax = np.where(rng.random((n_g, s_num)) < 0.8, s_num - np.arange(s_num), 0)
    kmax[0] = s_num - np.arange(s_num)
    p2p = rng.uniform(0.0, 0.3, (n_g, n_g))
    return MixUnit(s_num, 1, 8, grp, comp, kmax, p2p, np.zeros(9), 0.0, 8)


def _chains(unit: MixUnit):
    n_g, s_num = unit.comp.shape
    for ch in product(range(n_g), repeat=s_num):
        ch = np.array(ch)
        if (unit.kmax[ch, np.arange(s_num)] >= 1).all():
            yield ch


@pytest.mark.parametrize("seed", range(6))
def test_programs_against_every_chain(seed):
    """The two-state program (chains whose largest compute is the level) and the fill table are lower bounds on
    (and the program equal to) the minimum over every chain, enumerated."""
    rng = np.random.default_rng(seed)
    unit = _unit(rng, 3, 3)
    y = rng.uniform(0, 2, 2)
    w = y[unit.grp.pool] * unit.grp.tp
    levels = unit_levels(unit)          # the usable cells' computes
    rows = [(ch, unit.comp[ch, np.arange(3)], float(w[ch].sum()),
             float(unit.comp[ch, np.arange(3)].sum() + 2 * unit.p2p[ch[:-1], ch[1:]].sum())) for ch in _chains(unit)]
    lam = 0.7
    node = np.where(unit.kmax >= 1, w[:, None] + lam * unit.comp, np.inf)
    for v in levels:
        node_v = np.where(unit.comp <= v, node, np.inf)[None]
        hit = (unit.comp >= v)[None]
        got, ch = _program(node_v, (2 * lam * unit.p2p)[None], hit)
        want = min((c + lam * f for _, cp, c, f in rows if cp.max() == v), default=np.inf)
        assert got[0] == pytest.approx(want, rel=1e-12, abs=1e-12)
    pr = Priced(y, np.zeros((1, len(levels), 1)), np.zeros((1, len(levels))), np.zeros((1, 3), dtype=int))
    tab = fill_table(unit, pr, 2.0, 12.0)
    for vi, v in enumerate(levels):
        for i in range(0, tab.c.shape[-1], 7):
            budget = i * tab.step
            want = min((c for _, cp, c, f in rows if cp.max() == v and f <= budget), default=np.inf)
            assert tab.c[0, vi, i] <= want + 1e-12
