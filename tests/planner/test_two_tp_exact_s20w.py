"""Two TP degrees per GPU type inside the exact search (``SearchSpace.two_tp = 2``, docs/PLANNER.md 10.7) against
s19t's independent brute force (``tests/planner/two_tp_pools_s19t.py``: every pipeline its own TP degree, free
per-zone counts, every composition of the layers, scored by ``simulate``).

With chain plans off (``chain_segments=1``), S <= 3 (the search's split list is then every composition) and
class links (the analytic ``bf`` model: by section 9's Theorem 2 water-filling is exact for one TP per type), the
search's optimum with ``two_tp=2`` must equal ``best_pool_plan(max_tps=2)`` and with ``two_tp=1`` (the default)
``best_pool_plan(max_tps=1)``. OPT-350 on Sailor's fitted links is checked on one-zone clusters only (with several
zones uneven one-TP spreads can beat water-filling: section 9). Every returned plan goes through ``plan_search``'s
verify path (``verify.check_candidates``: built, simulated, rel. 1e-9) and is re-simulated here.
"""
from __future__ import annotations

import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.cluster import parse_gpus
from planner.errors import InputError
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search.tasks import Tables, cluster_options, unit_tasks
from planner.search.twotp import two_tp_search
from planner.simulator import simulate
from tests.planner.test_planner_bruteforce import bf_ctx
from tests.planner.test_two_tp_pools_s19t import PIN_GBS, PIN_GPUS, pinned_plan
from tests.planner.test_two_tp_search_s19p import tps_used
from tests.planner.two_tp_pools_s19t import best_pool_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from two_tp_pools_s19t import BF_TYPES, OPT_TYPES, OPT_ZONES, opt350_ctx, random_cluster  # noqa: E402

MBS, TPS = (1, 2), (1, 2, 4)
SPACE = SearchSpace(max_stages=3, mbs_options=MBS, tp_options=TPS, recompute=(False,),
                    distributed_optimizer=(False,), chain_segments=1)
KINDS = ("throughput", "cost", "value")


def sim_key(ctx, cand, gbs, objective) -> float:
    est = simulate(build_plan(cand, ctx.model.num_layers, gbs, None), ctx)
    assert est.fits_in_memory
    return objective.key(est.iteration_time_s, est.cost_per_iteration_usd)


def check_equal(ctx, gpus: str, gbs: int, kind: str, space: SearchSpace, max_stages: int, memo: dict) -> None:
    """plan_search with two_tp 1 and 2 equals the brute force with max_tps 1 and 2 (rel. 1e-9), each best plan
    re-simulated to its key."""
    cluster = parse_gpus(gpus, ctx.catalog)
    objective = Objective(kind)
    for k in (1, 2):
        ours = plan_search(ctx, cluster, gbs, objective, replace(space, two_tp=k), top_k=3).best
        bf = best_pool_plan(ctx, cluster, gbs, objective, max_stages, MBS, TPS, max_tps=k, memo=memo)
        assert ours is not None and bf.plan is not None, (gpus, gbs, kind, k)
        assert ours.key == pytest.approx(bf.key, rel=1e-9), (gpus, gbs, kind, k, ours.pools, bf.pools)
        assert sim_key(ctx, ours, gbs, objective) == pytest.approx(bf.key, rel=1e-9)
        if k == 1:
            assert not ours.two_tp()


def test_pinned_case_the_search_finds_the_tp1_plus_tp2_plan():
    """H100-80@us-a=3, GBS 8 (the pin of docs/PLANNER.md 10.2): with two_tp=2 the search returns one TP-1 and one
    TP-2 pipeline at the pinned plan's time; with two_tp=1 its plan is the one-TP brute force's, > 5 % slower."""
    ctx, catalog = bf_ctx()
    cluster = parse_gpus(PIN_GPUS, catalog)
    objective = Objective("throughput")
    pinned = simulate(pinned_plan(), ctx).iteration_time_s
    two = plan_search(ctx, cluster, PIN_GBS, objective, replace(SPACE, two_tp=2)).best
    assert two.iteration_s == pytest.approx(pinned, rel=1e-9)
    assert sim_key(ctx, two, PIN_GBS, objective) == pytest.approx(pinned, rel=1e-9)
    assert tps_used(two) == {"H100-80": (1, 2)} and two.two_tp()
    assert sorted(two.microbatches) == [3, 5]
    one = plan_search(ctx, cluster, PIN_GBS, objective, SPACE).best
    bf1 = best_pool_plan(ctx, cluster, PIN_GBS, objective, 3, MBS, TPS, max_tps=1)
    assert one.key == pytest.approx(bf1.key, rel=1e-9) and not one.two_tp()
    assert two.key < one.key / 1.05
    # the default space (chain plans, recomputation, distributed optimizer) with two_tp=2 finds it too
    full = plan_search(ctx, cluster, PIN_GBS, objective, SearchSpace(mbs_options=MBS, tp_options=TPS,
                                                                      two_tp=2)).best
    assert full.key == pytest.approx(pinned, rel=1e-9) and full.two_tp()


def _bf_clusters(seed: int, n: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    return [random_cluster(rng, BF_TYPES, ("us-a", "us-b")) for _ in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_random_clusters_equal_the_brute_force(seed):
    """s19t's random small clusters (1-2 types, 1-2 zones, 2-12 GPUs per pool, GBS 8-32), 5 per seed, the ``bf``
    model, throughput and cost on the clusters of at most three pools, value on those of at most two (the brute
    force's structures grow as the product of the pools' count vectors, and under value it has no bound and scores
    every one: the others are in the slow test below): the search's optimum with one and with two TP degrees per
    type equals the brute force's."""
    ctx, _ = bf_ctx()
    memo: dict = {}
    for gpus, gbs in _bf_clusters(seed, 5):
        pools = gpus.count(",") + 1
        for kind in KINDS if pools <= 2 else KINDS[:2] if pools <= 3 else ():
            check_equal(ctx, gpus, gbs, kind, SPACE, 3, memo)


@pytest.mark.slow
@pytest.mark.parametrize("seed", list(range(6, 14)))
def test_random_clusters_equal_the_brute_force_every_objective(seed):
    """As above on 8 more seeds (40 clusters), all three objectives on every cluster (four pools included)."""
    ctx, _ = bf_ctx()
    memo: dict = {}
    for gpus, gbs in _bf_clusters(seed, 5):
        for kind in KINDS:
            check_equal(ctx, gpus, gbs, kind, SPACE, 3, memo)


@pytest.mark.skipif(opt350_ctx() is None, reason="needs ../shared/data/sailor (Sailor's OPT-350 profiles)")
def test_opt350_one_zone_clusters_equal_the_brute_force():
    """OPT-350 on Sailor's profiles and fitted links, S <= 2, one zone (6 seeded clusters), throughput and cost."""
    ctx = opt350_ctx()
    rng = random.Random(7)
    space = replace(SPACE, max_stages=2)
    memo: dict = {}
    for _ in range(6):
        gpus, gbs = random_cluster(rng, OPT_TYPES, OPT_ZONES[:1])
        for kind in ("throughput", "cost"):
            check_equal(ctx, gpus, gbs, kind, space, 2, memo)


@pytest.mark.parametrize("gpus,gbs", [("V100-16@us-a=9,V100-16@us-b=2", 16),      # s19t's 1.2168x case
                                      ("H100-80@us-a=3,A100-40@us-a=4", 8),
                                      ("A100-80@us-a=5,A100-80@us-b=3", 16)])
def test_with_the_distributed_optimizer_and_recomputation_searched(gpus, gbs):
    """The distributed optimizer and recomputation searched too (two-TP tasks are plain, one-TP tasks both; a plain
    two-TP task searches every row, since its distributed-optimizer twin is not searched): the optimum with
    two_tp=2 is the better of the one-TP search's and the exhaustive two-TP pool search's (``twotp.two_tp_search``,
    recomputation off and on, no distributed optimizer; equal to the brute force where both apply, s19p's tests),
    and the top 5 plans pass the verify path."""
    ctx, catalog = bf_ctx()
    cluster = parse_gpus(gpus, catalog)
    space = replace(SPACE, recompute=(False, True), distributed_optimizer=(False, True))
    for kind in ("throughput", "cost"):
        objective = Objective(kind)
        one = plan_search(ctx, cluster, gbs, objective, space).best
        two = plan_search(ctx, cluster, gbs, objective, replace(space, two_tp=2), top_k=5)
        ex = two_tp_search(ctx, cluster, gbs, objective, replace(space, distributed_optimizer=(False,)), max_tps=2)
        assert two.best.key == pytest.approx(min(one.key, ex.best.key), rel=1e-9), (gpus, kind)
        assert all(not c.distributed_optimizer for c in two.candidates if c.two_tp())


def test_two_tp_tasks_partition_the_plans():
    """Every unit's tasks with two_tp=2 are the two_tp=1 tasks (the same, in order, with the same bounds) plus
    tasks giving some type two distinct TP degrees (each once); distributed-optimizer units have no two-TP task;
    and the search's top 20 lists no plan twice."""
    ctx, catalog = bf_ctx()
    cluster = parse_gpus("A100-40@us-a=6,A100-40@us-b=4,H100-80@us-a=4", catalog)
    space = replace(SPACE, recompute=(False, True), distributed_optimizer=(False, True))
    two_space = replace(space, two_tp=2)
    options = cluster_options(ctx, cluster, space)
    n_two = 0
    for s_num in (1, 2, 3):
        for mbs in MBS:
            for rc in (False, True):
                for dist in (False, True):
                    args = (ctx, cluster, Tables(ctx, space, options, cluster), options, 16, Objective(), space,
                            s_num, mbs, rc, dist)
                    one = unit_tasks(*args)
                    two = unit_tasks(args[0], args[1], Tables(ctx, two_space, options, cluster), *args[3:6],
                                     two_space, *args[7:])
                    single = [t for t in two if len({g for g, _ in t.tps}) == len(t.tps)]
                    assert single == one
                    multi = [t for t in two if t not in single]
                    assert len({t.tps for t in multi}) == len(multi)
                    for t in multi:
                        assert not t.dist and list(t.tps) == sorted(set(t.tps))
                    n_two += len(multi)
    assert n_two > 0
    res = plan_search(ctx, cluster, 16, Objective(), two_space, top_k=20)
    shapes = [(c.num_stages, c.mbs, c.layers_per_stage, c.pools, c.microbatches, c.recompute,
               c.distributed_optimizer) for c in res.candidates]
    assert len(shapes) == 20 and len(set(shapes)) == 20


def test_two_tp_must_be_one_or_two():
    for bad in (0, 3, True, "2"):
        with pytest.raises(InputError):
            SearchSpace(two_tp=bad)


@pytest.mark.slow
def test_eight_pool_cluster_incumbent_path_equals_the_exhaustive_search():
    """A cluster of 8 (type, zone) pools takes the engine's incumbent path (coarse rows first, then the exact search,
    ``engine.INCUMBENT_MIN_POOLS``; under value the one-zone level): with two_tp=2 its optimum equals
    ``twotp.two_tp_search``'s exhaustive one, under all three objectives."""
    ctx, catalog = bf_ctx()
    cluster = parse_gpus("A100-40@us-a=3,A100-40@us-b=3,H100-80@us-a=3,H100-80@us-b=2,A100-80@us-a=2,"
                         "A100-80@us-b=3,GH-96@us-a=2,GH-96@us-b=3", catalog)
    space = replace(SPACE, max_stages=2)
    for kind in KINDS:
        objective = Objective(kind)
        ours = plan_search(ctx, cluster, 8, objective, replace(space, two_tp=2)).best
        ex = two_tp_search(ctx, cluster, 8, objective, space, max_tps=2)
        assert ours.key == pytest.approx(ex.best.key, rel=1e-9), kind
