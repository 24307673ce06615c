"""The two-TP pool plan search (:mod:`planner.search.twotp`) against s19t's independent brute force.

``tests/planner/two_tp_pools_s19t.py`` (``best_pool_plan``) enumerates pool plans in which every pipeline picks
its own TP, with free per-zone counts and every composition of the layers, and scores them with ``simulate``.
``two_tp_search`` enumerates (type, TP) columns sharing each pool under a joint cap and scores them with the
search's row scorer, its best candidate checked against ``simulate`` (rel. 1e-9). With S <= 3 the search's split
list is every composition, so the two spaces are the same and the optima must agree.
"""
from __future__ import annotations

import sys
from itertools import combinations, product
from pathlib import Path

import numpy as np
import pytest

from planner.cluster import parse_gpus
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search.twotp import pool_caps, task_rows, two_tp_search, type_rows, TwoTpTask
from planner.simulator import simulate
from tests.planner.test_planner_bruteforce import bf_ctx
from tests.planner.test_two_tp_pools_s19t import CASES, PIN_GBS, PIN_GPUS, pinned_plan
from tests.planner.two_tp_pools_s19t import best_pool_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
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


def brute_type_rows(caps, tps, max_total, minority=None, minority_total=None):
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
        if minority_total is not None and len(tps) == 2 and per.sum(axis=0).min() > minority_total:
            continue
        out.append(tuple(x))
    return sorted(out)


@pytest.mark.parametrize("caps,tps,max_total,minority,minority_total", [
    ((5,), (1, 2), 8, None, None), ((5,), (1, 2), 3, None, None), ((4, 3), (1, 4), 9, None, None),
    ((6, 2), (2, 4), 5, None, None), ((7, 4), (1, 2), 20, 1, None), ((7,), (1, 2), 20, 0, None),
    ((3, 3, 2), (1,), 5, None, 1), ((8, 5), (1, 2), 11, 2, None), ((6, 5), (1, 2), 12, None, 1),
    ((6, 5, 4), (2, 4), 12, 1, 2)])
def test_type_rows_is_every_vector_under_the_joint_caps(caps, tps, max_total, minority, minority_total):
    got = sorted(tuple(int(v) for v in r) for r in type_rows(caps, tps, max_total, minority, minority_total))
    assert got == brute_type_rows(caps, tps, max_total, minority, minority_total)
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


def greedy_fill(caps, subset, d):
    """Water-filling by its definition: one more pipeline at a time to the chosen zone with the fewest (the
    earlier zone on ties) that has room; None where the subset cannot take d (each chosen zone >= 1)."""
    x = [0] * len(caps)
    for _ in range(d):
        room = [i for i in subset if x[i] < caps[i]]
        if not room:
            return None
        x[min(room, key=lambda i: (x[i], i))] += 1
    return tuple(x) if all(x[i] >= 1 for i in subset) else None


def wf_set(units, t, n):
    caps = [u // t for u in units]
    out = set()
    for size in range(1, len(units) + 1):
        for subset in combinations(range(len(units)), size):
            if all(caps[i] >= 1 for i in subset):
                for d in range(size, n + 1):
                    v = greedy_fill(caps, subset, d)
                    if v is not None:
                        out.add(v)
    return out


@pytest.mark.parametrize("units,t1,t2,n", [((5,), 1, 2, 6), ((6, 3), 1, 2, 9), ((8, 4, 5), 2, 4, 7),
                                           ((4, 4), 1, 4, 3), ((7, 2, 3), 1, 2, 12)])
def test_row_counts_of_the_benchmark_match_their_definitions(units, t1, t2, n):
    """benchmarks/two_tp_rows_s19p.py: the ``pairs``, ``r1`` and ``r1z`` row counts per total against sets built from
    the rules' definitions (greedy water-filling, every minority indicator)."""
    from two_tp_rows_s19p import pair_hist, r1_hist
    cap = np.array(units)
    w1, w2 = wf_set(units, t1, n), wf_set(units, t2, n)
    pairs = {(u, v) for u in w1 for v in w2 if (np.array(u) * t1 + np.array(v) * t2 <= cap).all()
             and sum(u) + sum(v) <= n}
    want = [sum(1 for u, v in pairs if sum(u) + sum(v) == d) for d in range(n + 1)]
    got, exact = pair_hist(units, t1, t2, n, 10 ** 9)
    assert exact and got == want
    bound, exact = pair_hist(units, t1, t2, n, 0)
    assert not exact and all(b >= w for b, w in zip(bound, want))
    for top in (None, 1):               # r1, then r1z (the minority's pipeline in one zone)
        r1 = set()
        for ta, tb, flip in ((t1, t2, False), (t2, t1, True)):
            for size in range(1, (top or len(units)) + 1):
                for m in combinations(range(len(units)), size):
                    if any(units[i] < tb for i in m):
                        continue
                    minor = tuple(1 if i in m else 0 for i in range(len(units)))
                    left = tuple(units[i] - tb * minor[i] for i in range(len(units)))
                    for major in wf_set(left, ta, n):
                        if sum(major) + size <= n:
                            r1.add((minor, major) if flip else (major, minor))
        want = [sum(1 for u, v in r1 if sum(u) + sum(v) == d) for d in range(n + 1)]
        assert r1_hist(units, t1, t2, n, top) == want


@pytest.mark.parametrize("gpus,gbs", [("H100-80@us-a=3", 8), ("A100-40@us-a=7,A100-40@us-b=5", 8),
                                      ("V100-16@us-a=9,V100-16@us-b=2", 16), ("A100-40@z-a=6,V100-16@z-a=5", 16)])
def test_search_task_bounds_hold_on_two_tp_tasks(gpus, gbs):
    """Evidence for the wiring (docs/PLANNER.md 10.6.3): the search's task bounds, given a two-TP task as a
    combo of (type, TP) pseudo-types (``TwoTpTask.pairs``), stay <= the task's exhaustive optimum, under the
    throughput and the cost objective. Not a proof: the bounds were proved for one TP per type."""
    from planner.search.netvec import LinkCache
    from planner.search.taskbound import cheap_bounds, task_bound
    from planner.search.tasks import Tables, cluster_options
    from planner.search.twotp import enumerate_two_tp_tasks, task_best
    ctx, catalog = bf_ctx()
    cluster = parse_gpus(gpus, catalog)
    checked = 0
    for objective in (Objective("throughput"), Objective("cost")):
        options = cluster_options(ctx, cluster, SPACE)
        tables, cache = Tables(ctx, SPACE, options, cluster), LinkCache(ctx)
        for task in enumerate_two_tp_tasks(ctx, cluster, tables, options, gbs, SPACE, 2):
            if all(len(ts) == 1 for _, ts in task.tps):
                continue
            cand, _ = task_best(ctx, cluster, tables, cache, task, gbs, objective, SPACE)
            if cand is None:
                continue
            combo, n_mb = task.pairs(), gbs // task.mbs
            full = task_bound(ctx, cluster, tables, combo, task.num_stages, task.mbs, n_mb, objective, cache,
                              recompute=task.recompute)
            cheap = cheap_bounds(ctx, cluster, tables, [combo], task.num_stages, task.mbs, n_mb, objective,
                                 task.recompute)[0]
            assert cheap <= full * (1 + 1e-12) and full <= cand.key, (task, cheap, full, cand.key)
            checked += 1
    assert checked >= 4


@pytest.mark.parametrize("caps,tps,max_total,minority,minority_total", [
    ((5,), (1,), 8, None, None), ((6, 3), (2,), 9, None, None), ((6, 3), (1, 2), 9, None, None),
    ((8, 4, 5), (2, 4), 7, None, None), ((7, 2, 3), (1, 2), 12, 1, None), ((7, 4), (1, 4), 12, None, 1)])
def test_water_filled_type_rows_are_pairs_of_water_filled_rows_under_the_joint_caps(caps, tps, max_total, minority,
                                                                                    minority_total):
    got = sorted(tuple(int(v) for v in r) for r in type_rows(caps, tps, max_total, minority, minority_total,
                                                             water_filled=True))
    per_tp = [sorted(wf_set(caps, t, max_total)) for t in tps]
    want = []
    for pick in product(*per_tp):
        per = np.array(pick).T                           # [zone, TP]
        if (per @ np.array(tps) > np.array(caps)).any() or per.sum() > max_total:
            continue
        if minority is not None and len(tps) == 2 and (per.min(axis=1) > minority).any():
            continue
        if minority_total is not None and len(tps) == 2 and per.sum(axis=0).min() > minority_total:
            continue
        want.append(tuple(int(v) for v in per.reshape(-1)))
    assert got == sorted(want) and len(got) > 0


@pytest.mark.parametrize("gpus,gbs", [("A100-40@us-a=7,A100-40@us-b=5", 8), ("H100-80@us-a=6,A100-40@us-b=4", 8)])
def test_water_filled_one_tp_rows_give_the_search_optimum(gpus, gbs):
    """With one TP per type and water-filled rows, twotp's space is the search's pool space: equal optima."""
    ctx, catalog = bf_ctx()
    cluster = parse_gpus(gpus, catalog)
    objective = Objective("throughput")
    one = two_tp_search(ctx, cluster, gbs, objective, SPACE, max_tps=1, water_filled=True)
    ours = plan_search(ctx, cluster, gbs, objective, SPACE).best
    assert one.best.key == pytest.approx(ours.key, rel=1e-9)


@pytest.mark.parametrize("gpus,gbs,objective", [(PIN_GPUS, PIN_GBS, Objective("throughput")),
                                                ("V100-16@us-a=9,V100-16@us-b=2", 16, Objective("throughput")),
                                                ("A100-40@z-a=6,V100-16@z-a=5", 16, Objective("throughput")),
                                                ("H100-80@us-a=6,A100-40@us-b=4", 8, Objective("cost"))])
def test_two_tp_improve_equals_the_exhaustive_search(gpus, gbs, objective):
    """The bound-pruned pass from the one-TP optimum finds the exhaustive two-TP optimum where it beats one TP,
    and nothing where it does not."""
    from planner.search.twotp import two_tp_improve
    ctx, catalog = bf_ctx()
    cluster = parse_gpus(gpus, catalog)
    one = two_tp_search(ctx, cluster, gbs, objective, SPACE, max_tps=1).best.key
    full = two_tp_search(ctx, cluster, gbs, objective, SPACE).best.key
    got = two_tp_improve(ctx, cluster, gbs, one, objective, SPACE)
    if full < one * (1 - 1e-9):
        assert got.best is not None and got.best.key == pytest.approx(full, rel=1e-12)
    else:
        assert got.best is None
