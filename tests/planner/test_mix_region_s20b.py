"""Session 20 (helper s20b): the sync floor of plans too large for one region per stage
(planner/search/mixregion.py, docs/PLANNER.md 7.1 item 11, 7.2 item 11), on small clusters over two regions
(us-central1 and us-west1).

Every random plan of Sailor's space that fits (stages mixing chains, random counts) has ``simulate``'s own
``sync_s`` >= the region floor of its (S, b, smallest TP) unit at its D, and iterates in at least the bound; the
floor is positive on some of them (not vacuous); the bound with it is complete, <= the exact (b) of the
independent enumeration (benchmarks/sailor_full_space.py, D <= 2) and <= (b'), and >= the bound without it
(within the exact floor's bisection)."""
from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "planner"))

from sailor_full_space import Case, contexts, even_last_split, sailor_plan_of  # noqa: E402
from test_mix_bound_h11b import _random_plans, random_compositions  # noqa: E402
from test_mix_exact_s14b import BISECT, REL, SPACE, check_below_exact_b  # noqa: E402

import planner.search.mixbound as MB  # noqa: E402
from planner.cluster import parse_gpus  # noqa: E402
from planner.search.mixregion import region_sync, stages_fit_regions  # noqa: E402
from planner.search.mixtab import MixMemo, mix_unit  # noqa: E402
from planner.search.tasks import Tables, cluster_options  # noqa: E402
from planner.simulator import simulate  # noqa: E402

C, W = "us-central1-a", "us-west1-b"
CASES = [Case("g0", "small", f"A100-40@{C}=2,A100-40@us-central1-b=2,A100-40@{W}=2", 8, "throughput"),
         Case("g1", "small", f"A100-40@{C}=4,V100-16@{W}=2", 8, "throughput"),
         Case("g2", "small", f"A100-40@{C}=2,V100-16@us-central1-b=2,A100-40@{W}=2", 4, "throughput"),
         Case("g3", "small", f"V100-16@{C}=2,V100-16@{W}=4", 8, "throughput"),
         Case("g4", "small-mem", f"A100-40@{C}=2,A100-40@us-central1-b=2,V100-16@{W}=2", 8, "throughput")]


@pytest.fixture(scope="module")
def ctxs():
    return contexts(None)


def test_stages_fit_regions():
    """Regions of 4 (us-central1) and 2 (us-west1) GPUs: S stages of D x tau GPUs each fit one region each
    while sum floor(C_r / (D tau)) >= S."""
    import numpy as np
    ctx = contexts(None)["small"]
    cluster = parse_gpus(f"A100-40@{C}=4,A100-40@{W}=2", ctx.catalog)
    tables = Tables(ctx, replace(SPACE, recompute=(False,), distributed_optimizer=(False,)))
    options = cluster_options(ctx, cluster, SPACE)
    tab = mix_unit(ctx, cluster, tables, options, 8, 2, 1, SPACE.precision, 1, MixMemo())
    d = np.arange(1, 4)
    # D 1: 4 + 2 stages; D 2: 2 + 1; D 3: 1 + 0 < 2
    assert stages_fit_regions(tab, d, 1).tolist() == [True, True, False]
    assert stages_fit_regions(tab, d, 2).tolist() == [True, False, False]


def _spanning_plans(ctx, cluster, gbs, rng: random.Random, draws: int):
    """Random plans of Sailor's space with S in {2, 3} and S x D near the cluster's GPUs (TP 1, each stage's D
    replicas a random draw of the GPUs left, so stages mix chains and often regions), random counts."""
    slots = [(p.gpu_type, p.zone) for p in cluster.pools for _ in range(p.count)]
    for _ in range(draws):
        s_num, mbs = rng.choice((2, 3)), rng.choice((1, 2))
        n_mb = gbs // mbs
        d = rng.randint(max(1, len(slots) // s_num - 1), min(n_mb, len(slots) // s_num))
        rng.shuffle(slots)
        pipes = tuple(tuple(slots[s * d + j] + (1,) for s in range(s_num)) for j in range(d))
        yield sailor_plan_of(even_last_split(ctx.model.num_layers, s_num), pipes, mbs, gbs,
                             random_compositions(rng, n_mb, d))


@pytest.mark.parametrize("seed", [0, 1])
def test_region_floor_below_every_random_plans_sync(ctxs, seed):
    rng = random.Random(300 + seed)
    fitted = raised = 0
    for case in CASES:
        ctx = ctxs[case.ctx_name]
        cluster = parse_gpus(case.gpus, ctx.catalog)
        tables = Tables(ctx, replace(SPACE, recompute=(False,), distributed_optimizer=(False,)))
        options, memo = cluster_options(ctx, cluster, SPACE), MixMemo()
        plans = list(_random_plans(ctx, cluster, case.gbs, rng, 150)) + list(_spanning_plans(ctx, cluster, case.gbs,
                                                                                             rng, 60))
        for plan in plans:
            est = simulate(plan, ctx)
            if not est.fits_in_memory:
                continue
            tau = min(r.tp for st in plan.stages for r in st.replicas)
            tab = mix_unit(ctx, cluster, tables, options, case.gbs, plan.num_stages, plan.micro_batch_size,
                           SPACE.precision, tau, memo)
            assert tab is not None
            floor = region_sync(ctx, cluster, tab, memo.core[(plan.num_stages, plan.micro_batch_size)][0].params,
                                memo.rings)
            d = plan.dp_degree
            fitted += 1
            assert est.sync_s >= floor[d] * (1 - REL), (plan, est.sync_s, floor[d])
            raised += floor[d] > tab.sync[d] * (1 + 1e-6)
    assert fitted >= 60 and raised >= 10, (fitted, raised)


def _bounds(ctx, cluster, gbs):
    """(without, with) the region floor and the region split (the defaults)."""
    assert MB.REGIONS and MB.REGION_SPLIT
    new = MB.sailor_space_bound(ctx, cluster, gbs, SPACE, time_limit_s=None)
    try:
        MB.REGIONS = MB.REGION_SPLIT = False
        old = MB.sailor_space_bound(ctx, cluster, gbs, SPACE, time_limit_s=None)
    finally:
        MB.REGIONS = MB.REGION_SPLIT = True
    return old, new


def test_region_patterns_are_every_fitting_assignment():
    """On random masks and capacities, region_patterns lists exactly the assignments of stages to regions where
    each stage has a usable kept group of its region and the regions' kept pools hold D x tau per stage."""
    import itertools
    import numpy as np
    from planner.search.chaintab import ChainGroups
    from planner.search.mixregion import pattern_kmax, region_patterns
    from planner.search.mixtab import MixUnit
    rng = np.random.default_rng(3)
    names = [("A", "r-a", 1), ("A", "r-b", 1), ("V", "s-a", 1), ("A", "s-a", 2), ("V", "t-c", 1)]
    pools = np.array([0, 1, 2, 3, 4])
    for _ in range(30):
        s_num, d = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        grp = ChainGroups(names, pools, rng.integers(1, 9, 5), np.array([1, 1, 1, 2, 1]), np.ones(5))
        kmax = (rng.random((5, s_num)) < 0.7).astype(int)
        tab = MixUnit(s_num, 1, 8, grp, np.ones((5, s_num)), kmax, np.zeros((5, 5)), np.zeros(9), 0.0, 8)
        keep = rng.random(5) < 0.8
        got = region_patterns(tab, keep, d, 10 ** 6)
        reg = ["r", "r", "s", "s", "t"]
        regions = sorted({reg[g] for g in range(5) if keep[g]})
        if len(regions) < 2 or not kmax.any():
            assert got is None
            continue
        tau = int(grp.tp[kmax.any(axis=1)].min())
        want = []
        for pat in itertools.product(regions, repeat=s_num):
            ok = all(any(kmax[g, s] and keep[g] and reg[g] == pat[s] for g in range(5)) for s in range(s_num))
            for r in regions:
                cap = sum(int(grp.caps[g]) for g in range(5) if keep[g] and reg[g] == r)
                ok = ok and pat.count(r) * d * tau <= cap
            if ok:
                want.append(pat)
        assert got == want
        for pat in got:
            km = pattern_kmax(tab, pat)
            assert all((km[g, s] == 0) == (kmax[g, s] == 0 or reg[g] != pat[s]) for g in range(5)
                       for s in range(s_num))
        if len(want) > 1:
            assert region_patterns(tab, keep, d, len(want) - 1) is None


@pytest.mark.parametrize("i", [2, 3])
def test_region_split_raises_the_bound(ctxs, i):
    """On two of the cases the region split raises the bound by >= 20 % (measured: g2 0.0201 -> 0.0299 s,
    g3 0.2118 -> 0.2755 s), so the tests above check a different bound than h11b's."""
    case = CASES[i]
    ctx = ctxs[case.ctx_name]
    old, new = _bounds(ctx, parse_gpus(case.gpus, ctx.catalog), case.gbs)
    assert new.iteration_s >= 1.2 * old.iteration_s and new.regions


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_region_bound_below_the_exact_b(ctxs, case):
    ctx = ctxs[case.ctx_name]
    cluster = parse_gpus(case.gpus, ctx.catalog)
    old, new = _bounds(ctx, cluster, case.gbs)
    if check_below_exact_b(ctx, cluster, case.gbs, new, old):
        assert new.iteration_s >= old.iteration_s * (1 - BISECT)


def test_no_random_plan_beats_the_region_bound(ctxs):
    rng = random.Random(11)
    fitted = 0
    for case in CASES:
        ctx = ctxs[case.ctx_name]
        cluster = parse_gpus(case.gpus, ctx.catalog)
        bd = MB.sailor_space_bound(ctx, cluster, case.gbs, SPACE, time_limit_s=None)
        for plan in list(_random_plans(ctx, cluster, case.gbs, rng, 150)) + list(_spanning_plans(
                ctx, cluster, case.gbs, rng, 60)):
            est = simulate(plan, ctx)
            if not est.fits_in_memory:
                continue
            fitted += 1
            assert bd is not None
            assert est.iteration_time_s >= bd.iteration_s * (1 - REL), (plan, est.iteration_time_s, bd)
    assert fitted >= 60, fitted


def test_spanning_floors_below_every_random_plans_sync(ctxs):
    """The floors of the "spans" children (mixbound.region_children): a random plan whose every stage has
    replicas in two regions syncs in >= the largest stage's ``spanning_stages`` floor; one with a stage s0 in
    one region and another spanning, in >= the smallest over the other stages' (both occur, >= 10 times)."""
    import numpy as np
    from planner.plan import region_of
    from planner.search.mixregion import spanning_stages
    rng = random.Random(21)
    every = some = 0
    for case in CASES:
        ctx = ctxs[case.ctx_name]
        cluster = parse_gpus(case.gpus, ctx.catalog)
        tables = Tables(ctx, replace(SPACE, recompute=(False,), distributed_optimizer=(False,)))
        options, memo = cluster_options(ctx, cluster, SPACE), MixMemo()
        for plan in list(_spanning_plans(ctx, cluster, case.gbs, rng, 80)) + list(_random_plans(ctx, cluster,
                                                                                                case.gbs, rng, 150)):
            est = simulate(plan, ctx)
            if not est.fits_in_memory or plan.dp_degree < 2:
                continue
            tau = min(r.tp for st in plan.stages for r in st.replicas)
            tab = mix_unit(ctx, cluster, tables, options, case.gbs, plan.num_stages, plan.micro_batch_size,
                           SPACE.precision, tau, memo)
            span = spanning_stages(ctx, cluster, tab, memo.core[(plan.num_stages, plan.micro_batch_size)][0].params,
                                   memo.rings)
            d = plan.dp_degree
            spans = [len({region_of(r.zone) for r in st.replicas}) > 1 for st in plan.stages]
            if all(spans):
                every += 1
                assert est.sync_s >= span[:, d].max() * (1 - REL), (plan, est.sync_s, span[:, d])
            elif any(spans):
                for s0 in np.nonzero(~np.array(spans))[0]:
                    some += 1
                    other = np.delete(span[:, d], s0).min()
                    assert est.sync_s >= other * (1 - REL), (plan, est.sync_s, other)
    assert every >= 10 and some >= 10, (every, some)
