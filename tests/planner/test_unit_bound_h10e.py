"""The unit bound (docs/PLANNER.md 2.3, *Unit bound*; planner/search/unitbound.py) against the brute force, and the
lazy task list (planner/search/taskqueue.py) against the full one.

On random small clusters (1-3 types, 1-3 zones) of small models (4 or 6 layers, untied or tied), under random
runtime constants (per-micro-batch overhead, compute and optimizer scales, profile offset) and both presets,
every pool plan with *every* contiguous layer split (not only the declared family), every TP and pipeline
count per pool and every micro-batch assignment is scored by ``simulate``; per unit (S, micro-batch size,
recomputation, distributed optimizer) the bound must be <= the best objective key of the unit's plans, for the
throughput, cost and value objectives and under constraints (the bound is also inf only where no plan of the
unit meets them). It must come close somewhere (not vacuous), and 5 % above it must fail somewhere.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

import planner.search.taskqueue as taskqueue
from planner.cluster import parse_gpus
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import NetworkModel
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, plan_search
from planner.search.netvec import LinkCache
from planner.search.tasks import Tables, cluster_options, enumerate_tasks, unit_tasks
from planner.search.unitbound import Unit, slot_root, task_floors, unit_bounds
from planner.simulator import simulate
from planner.simulator.settings import OURS, SAILOR_DEEPSPEED, SimContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks.uneven_middle import compositions  # noqa: E402
from test_planner_bruteforce import _plan, _pool_choices, count_splits  # noqa: E402

TYPES = ("A100-40", "V100-16", "GH-96")
ZONES = ("us-a", "us-b", "eu-c")
GIB = 1024 ** 3
MODELS = (ModelSpec("u4", num_layers=4, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=2048,
                    vocab_size=8192, max_position_embeddings=4096),
          ModelSpec("u6t", num_layers=6, hidden_size=256, num_heads=4, ffn_hidden_size=1024, seq_length=1024,
                    vocab_size=16384, max_position_embeddings=2048, tied_embeddings=True))


def _ctx(rng: random.Random) -> SimContext:
    model = rng.choice(MODELS)
    base = rng.choice((OURS, SAILOR_DEEPSPEED))
    settings = base.with_(per_microbatch_overhead_s=rng.choice((0.0, 2e-4, 3e-3)),
                          compute_scale=rng.choice((1.0, 1.37)), update_scale=rng.choice((1.0, 2.5)),
                          profile_offset_s=rng.choice((0.0, 1e-5, 1e-3)))
    catalog = GPUCatalog()
    if rng.random() < 0.4:
        catalog = catalog.with_entries({"V100-16": {"memory_bytes": int(3.5 * GIB)},
                                        "A100-40": {"memory_bytes": int(4.0 * GIB)}})
    return SimContext(model, ProfileStore(model, catalog), NetworkModel(catalog), catalog, settings)


def _gpus(rng: random.Random, max_gpus: int) -> str:
    pools = rng.sample([(g, z) for g in TYPES for z in ZONES], rng.randint(2, 4))
    counts = [rng.randint(2, 5) for _ in pools]
    while sum(counts) > max_gpus:
        counts[counts.index(max(counts))] -= 1
    return ",".join(f"{g}@{z}={n}" for (g, z), n in zip(pools, counts) if n > 0)


def _unit_plans(ctx, cluster, gbs, max_stages, space) -> dict[tuple, list[tuple]]:
    """{(S, mbs, recompute, dist): [(iteration s, $/iteration, GPUs, TP per used type)]} of every pool plan whose
    memory fits, with
    every contiguous split (tests/planner/test_planner_bruteforce.py's pools and micro-batch assignments)."""
    out: dict[tuple, list] = {}
    types = cluster.gpu_types()
    zones = {g: sorted(p.zone for p in cluster.pools if p.gpu_type == g and p.count > 0) for g in types}
    from itertools import product
    for s_num in range(1, max_stages + 1):
        for split in compositions(ctx.model.num_layers, s_num):
            for mbs, rc, dist in product(space.mbs_options, space.recompute, space.distributed_optimizer):
                if gbs % mbs:
                    continue
                for tps in product(*[[0] + [t for t in space.tp_options if t <= ctx.node_size(g)] for g in types]):
                    if not any(tps):
                        continue
                    for _, _, pools, replicas in _pool_choices(ctx, cluster, gbs, s_num, split, mbs,
                                                               dict(zip(types, tps)), zones, rc, dist,
                                                               space.precision):
                        for per_pool in count_splits(gbs // mbs, [p[3] for p in pools]):
                            counts = [m for seq in per_pool for m in seq]
                            plan = _plan(split, replicas, mbs, gbs, counts, rc, dist, space.precision)
                            if ctx.model.tied_embeddings:
                                from dataclasses import replace
                                plan = replace(plan, tie_embeddings=True)
                            est = simulate(plan, ctx)
                            combo = tuple(sorted({(g, t) for g, _, t, _ in pools}))
                            out.setdefault((s_num, mbs, rc, dist), []).append(
                                (est.iteration_time_s, est.cost_per_iteration_usd, est.num_gpus, combo))
    return out


def _objectives(plans: list[tuple]) -> list[Objective]:
    """The three objectives bare and with constraints at the median plan's figures."""
    its = sorted(p[0] for p in plans)
    usd = sorted(p[1] for p in plans)
    gpus = sorted(p[2] for p in plans)
    mid = len(plans) // 2
    return [Objective("throughput"), Objective("cost"), Objective("value"),
            Objective("cost", min_throughput_iters_per_s=1.0 / its[mid]),
            Objective("throughput", max_cost_per_iter_usd=usd[mid]),
            Objective("value", max_gpus=gpus[mid])]


def _check(seed: int, max_stages: int, max_gpus: int) -> tuple[list[float], int]:
    rng = random.Random(7000 + seed)
    ctx = _ctx(rng)
    cluster = parse_gpus(_gpus(rng, max_gpus), ctx.catalog)
    gbs = rng.choice((4, 8))
    precision = rng.choice(("fp32", "bf16"))
    space = SearchSpace(max_stages=max_stages, mbs_options=(1, 2), tp_options=(1, 2), recompute=(False, True),
                        distributed_optimizer=(False, True), precision=precision,
                        tie_embeddings=ctx.model.tied_embeddings)
    by_unit = _unit_plans(ctx, cluster, gbs, max_stages, space)
    tables = Tables(ctx, space)
    options = cluster_options(ctx, cluster, space)
    all_plans = [p for v in by_unit.values() for p in v]
    ratios, checked = [], 0
    for objective in _objectives(all_plans) if all_plans else [Objective()]:
        units = {(u.num_stages, u.mbs, u.recompute, u.dist): u
                 for u in unit_bounds(ctx, cluster, tables, options, gbs, objective, space)}
        for key, plans in by_unit.items():
            ok = [objective.key(it, usd) for it, usd, g, _ in plans if objective.allows(it, usd, g)]
            bound = units[key].bound
            if not ok:
                continue
            best = min(ok)
            assert bound <= best * (1 + 1e-12), (seed, objective, key, bound, best)
            ratios.append(bound / best)
            checked += 1
            # the capacity floor of every task of the unit, against the best plan of its TPs
            tasks = unit_tasks(ctx, cluster, tables, options, gbs, objective, space, *key)
            for task, floor in zip(tasks, task_floors(ctx, cluster, tables, tasks, gbs, objective)):
                mine = [objective.key(it, usd) for it, usd, g, combo in plans
                        if combo == task.tps and objective.allows(it, usd, g)]
                if mine:
                    assert floor <= min(mine) * (1 + 1e-12), (seed, objective, task, floor, min(mine))
                    ratios.append(floor / min(mine))
    return ratios, checked


# seeds whose random cluster has plans that fit (seeds 1, 8 and 10 have none); about 1 s each in the fast
# suite, up to 10 s each under -m slow (seeds 2, 6, 9 and 11 of 3 stages, 25-50 s each on a loaded machine, ran
# under -m slow until the tracker's CI of stop 30 took 3,465 s of its 1,800 s budget)
CASES = [pytest.param(seed, 3, 10) for seed in (0, 3, 4, 5, 7)] + \
        [pytest.param(100 + seed, 4, 8, marks=() if seed in (0, 3) else pytest.mark.slow) for seed in range(4)]


@pytest.mark.parametrize("seed,max_stages,max_gpus", CASES)
def test_unit_bound_is_below_every_plan_of_the_unit(seed: int, max_stages: int, max_gpus: int) -> None:
    ratios, checked = _check(seed, max_stages, max_gpus)
    assert checked > 0
    # not vacuous: close to the unit's best plan somewhere, and 5 % more would cut a plan somewhere
    assert max(ratios) > 0.6, max(ratios)


def test_unit_bound_is_tight_enough_that_five_percent_more_fails() -> None:
    """Over the fast cases, some unit's bound times 1.05 exceeds that unit's best plan (the brute-force check
    above would catch a bound inflated by 5 %)."""
    worst = max(max(_check(seed, 3, 10)[0]) for seed in (0, 3))
    assert worst * 1.05 > 1.0, worst


def _shape(c):
    return (c.key, c.num_stages, c.mbs, c.layers_per_stage, c.pools, c.chain, c.recompute, c.distributed_optimizer,
            c.microbatches)


@pytest.mark.parametrize("seed", range(6))
def test_lazy_units_return_what_the_full_task_list_returns(monkeypatch, seed: int) -> None:
    """plan_search with the unit bounds and task floors returns the same top-K (keys, plans, order) as with
    every unit and task floor at -inf, which builds every task and visits them by their cheap bounds alone, as
    the engine did before."""
    rng = random.Random(300 + seed)
    ctx = _ctx(rng)
    cluster = parse_gpus(_gpus(rng, 12), ctx.catalog)
    objective = rng.choice([Objective("throughput"), Objective("cost"), Objective("value"),
                            Objective("throughput", max_gpus=4), Objective("cost", min_throughput_iters_per_s=2.0)])
    space = SearchSpace(max_stages=4, mbs_options=(1, 2), tp_options=(1, 2),
                        tie_embeddings=ctx.model.tied_embeddings)
    top_k = rng.choice((1, 3))
    lazy = plan_search(ctx, cluster, 8, objective, space, top_k=top_k)
    real = taskqueue.unit_bounds
    monkeypatch.setattr(taskqueue, "unit_bounds",
                        lambda *a: [Unit(u.num_stages, u.mbs, u.recompute, u.dist, -np.inf, u.order) for u in real(*a)])
    monkeypatch.setattr(taskqueue, "task_floors", lambda ctx, cluster, tables, tasks, *a: [-np.inf] * len(tasks))
    full = plan_search(ctx, cluster, 8, objective, space, top_k=top_k)
    assert [_shape(c) for c in lazy.candidates] == [_shape(c) for c in full.candidates]
    assert lazy.stats.tasks <= full.stats.tasks


def test_unit_tasks_make_up_the_task_list() -> None:
    """enumerate_tasks is the units' tasks in loop order, sorted by cheap bound (the engine's lazy list builds
    the same tasks)."""
    rng = random.Random(5)
    ctx = _ctx(rng)
    cluster = parse_gpus("A100-40@us-a=4,V100-16@us-b=4,GH-96@us-a=2", ctx.catalog)
    space = SearchSpace(max_stages=4, mbs_options=(1, 2), tp_options=(1, 2))
    tables = Tables(ctx, space)
    options = cluster_options(ctx, cluster, space)
    units = unit_bounds(ctx, cluster, tables, options, 8, Objective(), space)
    parts = [t for u in units for t in unit_tasks(ctx, cluster, tables, options, 8, Objective(), space,
                                                 u.num_stages, u.mbs, u.recompute, u.dist)]
    whole = enumerate_tasks(ctx, cluster, tables, options, 8, Objective(), space, LinkCache(ctx))
    assert whole == sorted(parts, key=lambda t: (t.bound, t.num_stages, t.mbs)) and len(whole) > 10


def test_empty_result_reports_the_memory_shortfall_of_every_unit() -> None:
    """A constraint no unit can meet leaves every unit unbuilt; the memory shortfall an empty result reports is
    still the one over every unit's splits (as when every task was built)."""
    catalog = GPUCatalog().with_entries({"A100-40": {"memory_bytes": int(0.5 * GIB)}})
    model = MODELS[0]
    ctx = SimContext(model, ProfileStore(model, catalog), NetworkModel(catalog), catalog, OURS)
    cluster = parse_gpus("A100-40@us-a=4", catalog)
    space = SearchSpace(max_stages=3, mbs_options=(1, 2), tp_options=(1, 2))
    res = plan_search(ctx, cluster, 8, Objective("throughput", max_gpus=1), space)
    free = plan_search(ctx, cluster, 8, Objective("throughput"), space)
    assert res.best is None and free.best is None
    assert res.stats.memory_shortfall_bytes == free.stats.memory_shortfall_bytes > 0


def test_slot_root_is_the_smallest_iteration_whose_slots_hold_the_batch() -> None:
    """slot_root against a fine scan of the piecewise-linear capacity (jumps at every fill C)."""
    rng = np.random.default_rng(4)
    for _ in range(200):
        slots = [(int(rng.integers(1, 4)), float(c), float(c * rng.uniform(0.05, 1.0)))
                 for c in rng.uniform(0.5, 3.0, size=int(rng.integers(1, 5)))]
        n_mb = int(rng.integers(1, 40))
        root = slot_root(slots, n_mb)

        def phi(it: float) -> float:
            return sum(cap * ((it - c) / m + 1) for cap, c, m in slots if it >= c)

        assert phi(root * (1 + 1e-9)) >= n_mb - 1e-9
        assert root == min(c for _, c, _ in slots) or phi(root * (1 - 1e-9)) < n_mb
    assert slot_root([], 3) == np.inf
