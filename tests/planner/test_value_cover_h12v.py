"""The value rate-cover floor of a pool task (docs/PLANNER.md 2.6, round 3, session 12 h12v;
:func:`planner.search.valuetask.rate_cover_keys` inside :func:`planner.search.costfloor.objective_task_floor`)
against the brute force of tests/planner/test_search_bounds_h13y.py (every pool plan of random small clusters
scored by ``simulate``): per task and pipeline count d the rate-cover key is <= the value key of every plan of
the task with d pipelines, and the objective task floor is <= the task's best value key (bare and constrained);
:func:`cover_cost` equals the best fractional cover found by brute force over integer counts plus one fraction;
a floor inflated by 10% exceeds some plan (the test would fail); the search returns the same top 3 with the
floor and without."""
from __future__ import annotations

import random
import sys
from itertools import product
from pathlib import Path

import numpy as np
import pytest

from planner.search import Objective, valuetask
from planner.search.caps import task_dmax
from planner.search.costfloor import objective_task_floor
from planner.search.taskbound import task_bound
from planner.search.taskfloor import SLACK, task_floor_parts
from planner.search.tasks import Task
from planner.simulator.settings import OURS, SAILOR_DEEPSPEED

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor_cases import assert_same_top3, random_pools  # noqa: E402
from test_search_bounds_h13c import _objectives  # noqa: E402
from test_search_bounds_h13y import _ctx, _gpus, task_setup  # noqa: E402

REL = 1e-9
# the two settings test_rate_cover_on_several_zones_and_tight does not run (it runs OURS without the small
# memory on seeds 0 and 1); 9 cases until the tracker's CI of stop 30 took 3,465 s of its 1,800 s budget
CASES = [(1, OURS, True), (1, SAILOR_DEEPSPEED, False)]


def _check(ctx, gpus: str, seed: int) -> list[float]:
    """Asserts the per-d and per-task claims; returns the ratios rate-cover key / plan key (plans with a finite
    key)."""
    cluster, gbs, space, tables, cache, by_task = task_setup(ctx, gpus, seed)
    objectives = [o for o in _objectives([p for v in by_task.values() for p in v]) if o.kind == "value"]
    ratios = []
    for (s_num, mbs, combo, dist), plans in by_task.items():
        n_mb = gbs // mbs
        task = Task(s_num, mbs, combo, 0.0, False, dist, task_dmax(cluster, combo, s_num, n_mb) if dist else 0)
        out: dict = {}
        task_bound(ctx, cluster, tables, combo, s_num, mbs, n_mb, Objective("value"), cache, sync_out=out, dist=dist)
        parts = task_floor_parts(ctx, cluster, tables, cache, task, gbs, space, out.get("by_d"))
        if parts is not None:
            rate = np.array([s_num * tp * ctx.catalog.get(g).usd_per_s for g, tp in combo])
            rc = valuetask.rate_cover_keys(parts, rate, n_mb) * (1 - SLACK)
            for plan, e in plans:
                d = sum(len(st.replicas) for st in plan.stages[:1])
                key = e.iteration_time_s * e.cost_per_iteration_usd
                i = np.searchsorted(parts.d, d)
                assert i < len(parts.d) and parts.d[i] == d, (combo, d, parts.d)
                assert rc[i] <= key * (1 + REL), (combo, s_num, mbs, dist, d, rc[i], key)
                ratios.append(rc[i] / key)
        for objective in objectives:
            keys = [objective.key(e.iteration_time_s, e.cost_per_iteration_usd) for _, e in plans
                    if objective.allows(e.iteration_time_s, e.cost_per_iteration_usd, e.num_gpus)]
            fl = objective_task_floor(ctx, cluster, tables, cache, task, gbs, space, out.get("by_d"), objective)
            assert fl <= min(keys, default=np.inf) * (1 + REL), (combo, s_num, mbs, dist, objective, fl)
    return ratios


@pytest.mark.parametrize("seed,settings,small", CASES)
def test_rate_cover_is_below_every_plan(seed, settings, small):
    _check(_ctx(settings, small), _gpus(random.Random(3000 + seed)), seed)


def test_rate_cover_on_several_zones_and_tight():
    ratios = _check(_ctx(OURS, False), "A100-40@us-a=4,V100-16@us-b=4,GH-96@eu-c=2", 1)
    for seed in range(2):
        ratios += _check(_ctx(OURS, False), _gpus(random.Random(3000 + seed)), seed)
    assert len(ratios) > 100
    assert max(ratios) * 1.10 > 1 + REL, max(ratios)      # a floor 10% higher would fail the test


def test_cover_cost_matches_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(200):
        q = int(rng.integers(1, 4))
        phi = rng.integers(0, 5, size=(q, 1))
        rate = rng.random(q) + 0.1
        caps = rng.integers(1, 4, size=q)
        n_mb = int(rng.integers(1, 12))
        got = float(valuetask.cover_cost(phi, rate, caps, n_mb)[0])
        best = np.inf
        for counts in product(*[range(int(c) + 1) for c in caps]):   # integer counts, then one fraction
            runs = sum(c * int(phi[j, 0]) for j, c in enumerate(counts))
            cost = sum(c * rate[j] for j, c in enumerate(counts))
            if runs >= n_mb:
                best = min(best, cost)
            for j in range(q):
                if counts[j] < caps[j] and phi[j, 0] > 0 and runs < n_mb <= runs + phi[j, 0]:
                    best = min(best, cost + rate[j] * (n_mb - runs) / phi[j, 0])
        assert got <= best * (1 + 1e-12) + 1e-12, (phi, rate, caps, n_mb, got, best)
        assert got >= best * (1 - 1e-9) - 1e-12 or not np.isfinite(best), (phi, rate, caps, n_mb, got, best)


@pytest.mark.parametrize("seed", range(12))
def test_search_same_with_and_without_rate_cover(seed, monkeypatch):
    """8-9 pools (the engine's floored exact pass starts at 8) over 4 zones, the value objective."""
    from planner.search import costfloor
    gpus = random_pools(random.Random(4000 + seed), ("us-a", "us-b", "us-c", "eu-c"), 8, 9)
    assert_same_top3(_ctx(OURS, seed % 2 == 1), gpus, Objective("value"), monkeypatch, [(costfloor, "RATE_COVER")])
