"""The cost and value task bounds against the brute force (docs/PLANNER.md 2.1: *Cost work bound*, *Cost task
floor*): on random small clusters of a model that ties its embeddings (tests/planner/test_search_bounds_h13y.py's
clusters and independent enumeration of every pool plan, scored by ``simulate``), per task

- the objective task floor (:func:`planner.search.costfloor.objective_task_floor`) is <= the best key of the
  task's feasible plans under the cost and value objectives, with and without constraints (budget, throughput
  floor, GPU cap), and inf only where no plan is feasible;
- the task bound and the cheap task bound (both with the work bound) are <= the same;
- the bounds are tight somewhere: inflated by 5% the floor exceeds some task's best plan (so the test would
  fail on a bound 5% too high), and so is the cheap task bound (its work bound) under the cost objective.

Tolerance: relative 1e-9 (float rounding only)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.search import Objective
from planner.search.caps import task_dmax
from planner.search.costfloor import cheapest_sums, objective_task_floor
from planner.search.taskbound import task_bound
from planner.search.tasks import Task
from planner.simulator.settings import OURS, SAILOR_DEEPSPEED

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_search_bounds_h13y import _ctx, _gpus, task_setup  # noqa: E402

REL = 1e-9
INFLATE = 1.05

# 3 random cases, both presets. Until session 16, 9 (the other 6 under -m slow; 4 more seeds until the CI run of
# 2026-12-02 took 29 min 20 s of its 30 min): the tracker's CI of stop 30 took 3,465 s of its 1,800 s budget.
CASES = [(0, OURS, False), (2, OURS, True), (2, SAILOR_DEEPSPEED, False)]


@pytest.mark.parametrize("seed,settings,small", CASES)
def test_cost_floors_are_below_every_plan_of_the_task(seed, settings, small) -> None:
    rng = random.Random(2000 + seed)
    _check(_ctx(settings, small), _gpus(rng), seed)


def test_cost_floors_on_several_zones() -> None:
    tasks, plans = _check(_ctx(OURS, False), "A100-40@us-a=4,V100-16@us-b=4,GH-96@eu-c=2", 1)
    assert tasks > 10 and plans > 100


def _objectives(plans) -> list[Objective]:
    """Cost and value, bare and with constraints that cut some of the plans (the median plan's figures)."""
    its = sorted(e.iteration_time_s for _, e in plans)
    usd = sorted(e.cost_per_iteration_usd for _, e in plans)
    gpus = sorted(e.num_gpus for _, e in plans)
    mid = len(plans) // 2
    out = []
    for kind in ("cost", "value"):
        out += [Objective(kind), Objective(kind, max_cost_per_iter_usd=usd[mid]),
                Objective(kind, min_throughput_iters_per_s=1.0 / its[mid]), Objective(kind, max_gpus=gpus[mid])]
    return out


def _check(ctx, gpus: str, seed: int) -> tuple[int, int]:
    cluster, gbs, space, tables, cache, by_task = task_setup(ctx, gpus, seed)
    every = [p for plans in by_task.values() for p in plans]
    objectives = _objectives(every)
    floor_ratios, work_ratios, checked = [], [], 0
    for (s_num, mbs, combo, dist), plans in by_task.items():
        n_mb = gbs // mbs
        task = Task(s_num, mbs, combo, 0.0, False, dist, task_dmax(cluster, combo, s_num, n_mb) if dist else 0)
        for objective in objectives:
            keys = [objective.key(e.iteration_time_s, e.cost_per_iteration_usd) for _, e in plans
                    if objective.allows(e.iteration_time_s, e.cost_per_iteration_usd, e.num_gpus)]
            best = min(keys, default=np.inf)
            out: dict = {}
            b = task_bound(ctx, cluster, tables, combo, s_num, mbs, n_mb, objective, cache, sync_out=out, dist=dist)
            cheap = task_bound(ctx, cluster, tables, combo, s_num, mbs, n_mb, objective, cache, with_sync=False,
                               dist=dist)
            fl = objective_task_floor(ctx, cluster, tables, cache, task, gbs, space, out.get("by_d"), objective)
            for name, v in (("task bound", b), ("cheap bound", cheap), ("floor", fl)):
                assert v <= best * (1 + REL), (name, combo, s_num, mbs, dist, objective, v, best)
            checked += 1
            if np.isfinite(best):
                floor_ratios.append(fl / best)
                if objective == Objective("cost"):
                    work_ratios.append(cheap / best)
    assert checked > 0
    # not vacuous: a floor 5% higher would exceed some task's best plan (the test above would fail)
    assert max(floor_ratios) * INFLATE > 1 + REL, max(floor_ratios)
    assert max(work_ratios) * INFLATE > 1 + REL, max(work_ratios)
    return len(by_task), len(every)


def test_cheapest_sums_match_brute_force() -> None:
    """The cheapest sum over d pipelines with >= 1 of every type and <= caps of each, against every count
    vector."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(1, 4))
        unit = rng.random(n) * 3
        caps = rng.integers(1, 4, size=n)
        d = np.arange(n, int(caps.sum()) + 2)
        got = cheapest_sums(unit, caps, d)
        for k, dd in enumerate(d):
            best = np.inf
            for counts in np.ndindex(*[int(c) + 1 for c in caps]):
                c = np.array(counts)
                if c.sum() == dd and (c >= 1).all():
                    best = min(best, float((c * unit).sum()))
            assert got[k] == pytest.approx(best, rel=1e-12) if np.isfinite(best) else got[k] == np.inf
