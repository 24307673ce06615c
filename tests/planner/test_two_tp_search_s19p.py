"""The two-TP pool plan search (:mod:`planner.search.twotp`) against s19t's independent brute force.

``tests/planner/two_tp_pools_s19t.py`` (``best_pool_plan``) enumerates pool plans in which every pipeline picks
its own TP, with free per-zone counts and every composition of the layers, and scores them with ``simulate``.
``two_tp_search`` enumerates (type, TP) columns sharing each pool under a joint cap and scores them with the
search's row scorer, its best candidate checked against ``simulate`` (rel. 1e-9). With S <= 3 the search's split
list is every composition, so the two spaces are the same and the optima must agree.
"""
from __future__ import annotations

from itertools import product

import numpy as np
import pytest

from planner.cluster import parse_gpus
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search.twotp import pool_caps, task_rows, two_tp_search, type_rows, TwoTpTask
from planner.simulator import simulate
from tests.planner.test_planner_bruteforce import bf_ctx
from tests.planner.test_two_tp_pools_s19t import CASES, PIN_GBS, PIN_GPUS, pinned_plan
from tests.planner.two_tp_pools_s19t import best_pool_plan

MBS, TPS = (1, 2), (1, 2, 4)
SPACE = SearchSpace(max_stages=3, mbs_options=MBS, tp_options=TPS, recompute=(False,),
                    distributed_optimizer=(False,), chain_segments=1)


def sim_key(ctx, cand, gbs, objective):
    est = simulate(build_plan(cand, ctx.model.num_layers, gbs, None), ctx)
    return objective.key(est.iteration_time_s, est.cost_per_iteration_usd)


def tps_used(cand) -> dict[str, tuple[int, ...]]:
    out: dict[str, set[int]] = {}
    for p in cand.pools:
        out.setdefault(p.gpu_type, set()).add(p.tp)
    return {g: tuple(sorted(t)) for g, t in out.items()}


def test_pinned_case_two_tp_search_finds_the_pinned_plan():
    """H100-80@us-a=3, GBS 8: the search with two TP degrees per type returns the pinned plan's time (the brute
    force's two-TP optimum), one TP-1 and one TP-2 pipeline; with one TP it returns the search's optimum."""
    ctx, catalog = bf_ctx()
    cluster = parse_gpus(PIN_GPUS, catalog)
    objective = Objective("throughput")
    pinned = simulate(pinned_plan(), ctx).iteration_time_s
    two = two_tp_search(ctx, cluster, PIN_GBS, objective, SPACE, max_tps=2)
    assert two.best.iteration_s == pytest.approx(pinned, rel=1e-9)
    assert sim_key(ctx, two.best, PIN_GBS, objective) == pytest.approx(pinned, rel=1e-9)
    assert tps_used(two.best) == {"H100-80": (1, 2)}
    one = two_tp_search(ctx, cluster, PIN_GBS, objective, SPACE, max_tps=1)
    ours = plan_search(ctx, cluster, PIN_GBS, objective, SPACE).best
    assert one.best.key == pytest.approx(ours.key, rel=1e-9)
    assert two.best.key < one.best.key / 1.05
    r1 = two_tp_search(ctx, cluster, PIN_GBS, objective, SPACE, max_tps=2, minority=1)
    assert r1.best.key == pytest.approx(two.best.key, rel=1e-12)


EXTRA = [("V100-16@us-a=9,V100-16@us-b=2", 16, Objective("throughput")),     # s19t's 1.2168x case (seed 1)
         ("GH-96@us-a=3", 8, Objective("throughput")),                       # s19t's 1.0879x case (seed 0)
         ("A100-40@us-a=4,V100-16@us-a=5", 8, Objective("cost"))]


@pytest.mark.parametrize("gpus,gbs,objective", CASES + EXTRA)
def test_two_tp_search_equals_the_brute_force(gpus, gbs, objective):
    """For one and two TP degrees per type, the exhaustive search's optimum equals the brute force's (rel.
    1e-9; its best plan re-simulated gives the same key)."""
    ctx, catalog = bf_ctx()
    cluster = parse_gpus(gpus, catalog)
    memo: dict = {}
    for max_tps in (1, 2):
        ours = two_tp_search(ctx, cluster, gbs, objective, SPACE, max_tps=max_tps)
        bf = best_pool_plan(ctx, cluster, gbs, objective, 3, MBS, TPS, max_tps=max_tps, memo=memo)
        assert ours.best is not None and bf.plan is not None
        assert ours.best.key == pytest.approx(bf.key, rel=1e-9), (gpus, max_tps, ours.best.pools, bf.pools)
        assert sim_key(ctx, ours.best, gbs, objective) == pytest.approx(bf.key, rel=1e-9)
        assert all(len(t) <= max_tps for t in tps_used(ours.best).values())


def brute_type_rows(caps, tps, max_total, minority=None):
    """Every vector by itertools over the full box, filtered by the rules (independent of type_rows)."""
    out = []
    box = [range(c // t + 1) for c in caps for t in tps]
    for x in product(*box):
        per = np.array(x).reshape(len(caps), len(tps))
        if any(int(per[z] @ np.array(tps)) > caps[z] for z in range(len(caps))):
            continue
        if (per.sum(axis=0) == 0).any() or per.sum() > max_total:
            continue
        if minority is not None and len(tps) == 2 and (per.min(axis=1) > minority).any():
            continue
        out.append(tuple(x))
    return sorted(out)


@pytest.mark.parametrize("caps,tps,max_total,minority", [
    ((5,), (1, 2), 8, None), ((5,), (1, 2), 3, None), ((4, 3), (1, 4), 9, None), ((6, 2), (2, 4), 5, None),
    ((7, 4), (1, 2), 20, 1), ((7,), (1, 2), 20, 0), ((3, 3, 2), (1,), 5, None), ((8, 5), (1, 2), 11, 2)])
def test_type_rows_is_every_vector_under_the_joint_caps(caps, tps, max_total, minority):
    got = sorted(tuple(int(v) for v in r) for r in type_rows(caps, tps, max_total, minority))
    assert got == brute_type_rows(caps, tps, max_total, minority)
    assert len(set(got)) == len(got)


def test_task_rows_columns_are_sorted_and_respect_every_pool():
    ctx, catalog = bf_ctx()
    cluster = parse_gpus("A100-40@us-a=7,A100-40@us-b=5,V100-16@us-a=6", catalog)
    task = TwoTpTask(2, 1, False, (("A100-40", (1, 2)), ("V100-16", (2,))))
    D, cols = task_rows(cluster, task, 6)
    assert cols == sorted(cols) and len(D) > 0
    assert (D.sum(axis=1) <= 6).all()
    for g, _ in task.tps:
        for z, cap in pool_caps(cluster, g, 2):
            used = sum(D[:, j] * t for j, (zz, gg, t) in enumerate(cols) if (zz, gg) == (z, g))
            assert (used <= cap).all() and cap == cluster.count(g, z) // 2
    # every TP of the task is used in every row
    for g, ts in task.tps:
        for t in ts:
            assert (sum(D[:, j] for j, c in enumerate(cols) if c[1:] == (g, t)) > 0).all()
