"""The throughput bound (planner/search/bound.py, docs/PLANNER.md 6) is never beaten: not by the exact optimum
of the declared space (the independent brute force), not by the planner's plan, and not by random plans far
outside the declared space (uneven splits, stages mixing types and TP degrees, recomputation variants, the
distributed optimizer, arbitrary micro-batch counts)."""
from __future__ import annotations

import random

import numpy as np
import pytest

from planner.cluster import parse_gpus
from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.network import NetworkModel
from planner.plan import Plan, Replica, Stage
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search.bound import dual_point, dual_value, throughput_bound
from planner.simulator import simulate
from planner.simulator.settings import OURS, SAILOR_DEEPSPEED, SimContext
from tests.planner.test_planner_bruteforce import BF_MODEL, GIB, brute_force_best, sailor_ctx  # noqa: F401

REL = 1e-9     # the bound may equal a plan's time up to float rounding, never exceed it more


def _ctx(mem_gib: float | None, settings=OURS) -> SimContext:
    catalog = GPUCatalog()
    if mem_gib is not None:
        catalog = catalog.with_entries({"V100-16": {"memory_bytes": int(mem_gib * GIB)},
                                        "A100-40": {"memory_bytes": int((mem_gib + 0.5) * GIB)}})
    return SimContext(BF_MODEL, ProfileStore(BF_MODEL, catalog), NetworkModel(catalog), catalog, settings)


def _random_cluster(rng: random.Random) -> str:
    pools = []
    for g in rng.sample(["A100-40", "V100-16", "GH-96"], rng.randint(1, 2)):
        for z in rng.sample(["us-a", "us-b"], rng.randint(1, 2)):
            pools.append(f"{g}@{z}={rng.randint(1, 4)}")
    return ",".join(pools)


# four cases in the fast suite, four more (the brute force of a 12-GPU case takes minutes) in the slow one;
# seeds 2 and 4 were dropped from the slow suite to keep CI under 30 minutes
# seed 0 (about 100 s of the slow suite on a loaded machine) ran until session 16 cut CI time
RANDOM_CASES = [pytest.param(seed, mem, marks=[] if seed in (1, 5) else [pytest.mark.slow])
                for seed in (1, 3, 5) for mem in (None, 3.4)]


@pytest.mark.parametrize("seed,mem", RANDOM_CASES)
def test_bound_holds_against_the_brute_force_and_the_planner(seed, mem):
    rng = random.Random(seed)
    ctx = _ctx(mem, SAILOR_DEEPSPEED if seed == 5 else OURS)
    cluster = parse_gpus(_random_cluster(rng), ctx.catalog)
    gbs = rng.choice([8, 16])
    bound = throughput_bound(ctx, cluster, gbs)
    for kind in ("throughput", "cost"):
        best, plan, n = brute_force_best(ctx, cluster, gbs, Objective(kind), 3, (1, 2), (1, 2))
        assert n > 0
        if plan is None:
            continue
        assert bound is not None
        floor = bound.iteration_s if kind == "throughput" else bound.cost_usd
        assert floor <= best * (1 + REL), (kind, cluster.describe(), bound, best)
    res = plan_search(ctx, cluster, gbs, Objective("throughput"), SearchSpace(max_stages=4)).best
    if res is not None:
        est = simulate(build_plan(res, BF_MODEL.num_layers, gbs, None), ctx)
        assert bound.iteration_s <= est.iteration_time_s * (1 + REL)
        assert bound.cost_usd <= est.cost_per_iteration_usd * (1 + REL)


def _random_plan(rng: random.Random, pools: list[tuple[str, str, int]], gbs: int) -> Plan | None:
    """A plan drawn from far outside the declared space (None when the draw exceeds a pool)."""
    L = BF_MODEL.num_layers
    s_num = rng.randint(1, L)
    cuts = sorted(rng.sample(range(1, L), s_num - 1))
    split = [b - a for a, b in zip([0] + cuts, cuts + [L])]
    d = rng.randint(1, 4)
    left = {(g, z): n for g, z, n in pools}
    stages, first = [], 0
    for n_layers in split:
        reps = []
        for _ in range(d):
            g, z, _ = rng.choice(pools)
            tp = rng.choice([1, 2, 4])
            if left[(g, z)] < tp:
                return None
            left[(g, z)] -= tp
            reps.append(Replica(g, tp, z))
        stages.append(Stage(first, n_layers, tuple(reps)))
        first += n_layers
    mbs = rng.choice([m for m in (1, 2, 4) if gbs % m == 0 and gbs // m >= d])
    n_mb = gbs // mbs
    cuts = sorted(rng.sample(range(1, n_mb), d - 1))
    counts = tuple(b - a for a, b in zip([0] + cuts, cuts + [n_mb]))
    rc = rng.choice([None, "act", "selective", "block"])
    extra = {"act": {"recompute_activations": True}, "selective": {"recompute_granularity": "selective"},
             "block": {"recompute_granularity": "full", "recompute_method": "block",
                       "recompute_num_layers": 1}}.get(rc, {})
    return Plan(num_layers=L, stages=tuple(stages), micro_batch_size=mbs, global_batch_size=gbs,
                microbatches_per_pipeline=counts, distributed_optimizer=rng.random() < 0.5,
                tie_embeddings=rng.random() < 0.3, **extra)


@pytest.mark.parametrize("seed", range(4))
def test_bound_holds_for_random_plans_outside_the_declared_space(seed):
    rng = random.Random(100 + seed)
    ctx = _ctx(3.4 if seed % 2 else None)
    text = "A100-40@us-a=6,V100-16@us-a=4,V100-16@us-b=6,GH-96@us-b=2"
    pools = [(p.gpu_type, p.zone, p.count) for p in parse_gpus(text, ctx.catalog).pools]
    cluster = parse_gpus(text, ctx.catalog)
    gbs = 16
    bound = throughput_bound(ctx, cluster, gbs)
    assert bound is not None
    fitting = 0
    for _ in range(400):
        plan = _random_plan(rng, pools, gbs)
        if plan is None:
            continue
        try:
            est = simulate(plan, ctx)
        except InputError:
            continue
        if not est.fits_in_memory:
            continue
        fitting += 1
        assert bound.iteration_s <= est.iteration_time_s * (1 + REL), plan
        assert bound.cost_usd <= est.cost_per_iteration_usd * (1 + REL), plan
    assert fitting >= 20


def test_bound_holds_on_sailor_profiles(sailor_ctx):  # noqa: F811
    """OPT-350 on the Sailor artifact's measured profiles and network fits."""
    for gpus in ("A100-40@us-central1-a=2,V100-16@us-central1-a=4", "A100-40@us-central1-a=2,A100-40@us-west1-b=2"):
        cluster = parse_gpus(gpus, sailor_ctx.catalog)
        bound = throughput_bound(sailor_ctx, cluster, 6)
        best, plan, _ = brute_force_best(sailor_ctx, cluster, 6, Objective("throughput"), 2, (1,), (1, 2))
        assert plan is not None and bound.iteration_s <= best * (1 + REL)


def _exact_two_type_lp(e: np.ndarray, gpus: np.ndarray) -> float:
    """U for two types, exactly: the dual is concave piecewise linear in y_0 on [0, 1/gpus_0]; its maximum
    sits at an end or where y_0 e_0i = y_1 e_1i for some item."""
    cands = [0.0, 1.0 / gpus[0]]
    for i in range(e.shape[1]):
        # y0 e0 = y1 e1 with y1 = (1 - gpus0 y0) / gpus1
        den = e[0, i] + gpus[0] * e[1, i] / gpus[1]
        cands.append(e[1, i] / gpus[1] / den)
    return max(sum(min(y0 * e[0, i], (1 - gpus[0] * y0) / gpus[1] * e[1, i]) for i in range(e.shape[1]))
               for y0 in cands)


@pytest.mark.parametrize("seed", range(5))
def test_dual_point_is_near_the_exact_lp(seed):
    """The ascent's dual value is the exact LP optimum within 0.1 % on random two-type instances (the bound is
    sound for any dual point; this checks it is also tight), and one type gives sum e / gpus exactly."""
    rng = np.random.default_rng(seed)
    e = rng.uniform(0.5, 3.0, size=(2, 12))
    gpus = rng.integers(1, 20, size=2).astype(float)
    exact = _exact_two_type_lp(e, gpus)
    got = dual_value(e, dual_point(e, gpus))
    assert got <= exact * (1 + 1e-12)
    assert got >= exact * (1 - 1e-3)
    one = dual_value(e[:1], dual_point(e[:1], gpus[:1]))
    assert one == pytest.approx(e[0].sum() / gpus[0], rel=1e-12)


def test_a_type_that_holds_nothing_adds_no_throughput():
    """V100s with too little memory for any layer: the bound equals the one of the A100s alone."""
    catalog = GPUCatalog().with_entries({"V100-16": {"memory_bytes": int(0.3 * GIB)}})
    ctx = SimContext(BF_MODEL, ProfileStore(BF_MODEL, catalog), NetworkModel(catalog), catalog, OURS)
    both = throughput_bound(ctx, parse_gpus("A100-40@us-a=4,V100-16@us-a=8", catalog), 16)
    alone = throughput_bound(ctx, parse_gpus("A100-40@us-a=4", catalog), 16)
    assert both.iteration_s == pytest.approx(alone.iteration_s, rel=1e-9)
