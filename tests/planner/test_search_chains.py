"""Chain plans (pipelines that change GPU type, TP and zone along their stages; docs/PLANNER.md 1.1): Sailor's
real plans are in the space and scored exactly as the simulator does, the search finds plans at least as good,
and the search is exact against the brute force on small cases (chains win some of them)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.cluster import parse_gpus
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import NetworkModel
from planner.plan import Plan, Replica, Stage
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search.chains import score_chain
from planner.search.netvec import LinkCache
from planner.search.tasks import Tables
from planner.simulator import simulate
from planner.simulator.settings import OURS, SimContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_planner_bruteforce import BF_MODEL, GIB, check_exact  # noqa: E402
from test_planner_bruteforce import sailor_ctx as sailor_opt  # noqa: E402,F401 - the OPT-350 fixture

A, V = "A100-40", "V100-16"
ZA, ZB = "us-central1-a", "us-central1-b"




def sailor_plan(ctx: SimContext, chain, d: int, gbs: int) -> Plan:
    """Sailor's plan shape written by hand: L split evenly with the extra layers last, stage s of every one of
    the d pipelines on chain[s], micro-batch 1, equal micro-batch counts."""
    s_num, L = len(chain), ctx.model.num_layers
    q, r = divmod(L, s_num)
    stages, first = [], 0
    for n, (g, z, tp) in zip([q] * (s_num - r) + [q + 1] * r, chain):
        stages.append(Stage(first, n, (Replica(g, tp, z),) * d))
        first += n
    return Plan(num_layers=L, stages=tuple(stages), micro_batch_size=1, global_batch_size=gbs)


@pytest.mark.parametrize("gpus,chain,d", [
    # 128 A100 + 384 V100: 7 stages x 32 pipelines, V100 (TP 4) -> four A100 (TP 1) -> two V100 (TP 4)
    (f"{A}@{ZA}=128,{V}@{ZA}=384", [(V, ZA, 4)] + [(A, ZA, 1)] * 4 + [(V, ZA, 4)] * 2, 32),
    # 5 zones x 128 A100: 2 stages x 64 pipelines, the two stages in two zones
    (",".join(f"{A}@{z}=128" for z in (ZA, ZB, "us-central1-c", "us-central1-f", "us-west1-b")),
     [(A, ZA, 2), (A, ZB, 2)], 64),
])
def test_sailor_real_plans_are_in_the_space_and_beaten(sailor_opt, gpus, chain, d):
    ctx = sailor_opt
    cluster = parse_gpus(gpus, ctx.catalog)
    gbs = 1024
    space = SearchSpace(max_stages=len(chain), mbs_options=(1,))
    cand = score_chain(ctx, cluster, Tables(ctx, space), LinkCache(ctx), tuple(chain), d, 1, gbs)
    assert cand is not None
    built = build_plan(cand, ctx.model.num_layers, gbs, None)
    plan = sailor_plan(ctx, chain, d, gbs)
    assert [s.replicas for s in built.stages] == [s.replicas for s in plan.stages]
    assert [s.num_layers for s in built.stages] == [s.num_layers for s in plan.stages]
    est = simulate(plan, ctx)
    assert est.fits_in_memory
    assert cand.iteration_s == pytest.approx(est.iteration_time_s, rel=1e-9)
    assert cand.cost_usd == pytest.approx(est.cost_per_iteration_usd, rel=1e-9)
    best = plan_search(ctx, cluster, gbs, Objective("throughput"), space).best
    assert best.iteration_s <= est.iteration_time_s * (1 + 1e-12)


# parameter-heavy, activation-light: a whole model does not fit one small GPU, and a zone holds too few GPUs for a
# pool pipeline; a chain across two zones (its stages sync inside their zone), with two TP degrees, does
CHAIN_MODEL = ModelSpec("chainwin", num_layers=4, hidden_size=1024, num_heads=8, ffn_hidden_size=4096,
                        seq_length=256, vocab_size=1024, max_position_embeddings=256)


@pytest.mark.parametrize("gpus,gbs,objective", [
    ("V100-16@us-a=3,V100-16@eu-b=2", 4, Objective("throughput")),
    ("V100-16@us-a=2,V100-16@eu-b=2", 2, Objective("cost")),
])
def test_search_matches_brute_force_where_a_chain_wins(gpus, gbs, objective):
    catalog = GPUCatalog().with_entries({V: {"memory_bytes": int(1.35 * GIB)}})
    # 1 GiB runtime overhead pinned (the preset's own comes from the machine's constants file)
    ctx = SimContext(CHAIN_MODEL, ProfileStore(CHAIN_MODEL, catalog), NetworkModel(catalog), catalog,
                     OURS.with_(memory_overhead_bytes=1.0 * GIB))
    cluster = parse_gpus(gpus, catalog)
    space = SearchSpace(max_stages=3, mbs_options=(1,), tp_options=(1, 2))
    with_chains = plan_search(ctx, cluster, gbs, objective, space).best
    without = plan_search(ctx, cluster, gbs, objective, SearchSpace(max_stages=3, mbs_options=(1,),
                                                                    tp_options=(1, 2), chain_segments=1)).best
    assert with_chains.chain and len({z for _, z, _ in with_chains.chain}) == 2
    assert without is None or with_chains.key < without.key
    check_exact(ctx, cluster, gbs, objective, max_stages=3, mbs_opts=(1,), tp_opts=(1, 2))


def test_nothing_fits_returns_no_plan():
    """Chains are filtered by memory even before any plan sets a threshold (a regression: an infinite bound
    once passed an infinite threshold)."""
    catalog = GPUCatalog().with_entries({V: {"memory_bytes": int(0.5 * GIB)}})
    # 1 GiB runtime overhead pinned (the preset's own comes from the machine's constants file)
    ctx = SimContext(CHAIN_MODEL, ProfileStore(CHAIN_MODEL, catalog), NetworkModel(catalog), catalog,
                     OURS.with_(memory_overhead_bytes=1.0 * GIB))
    cluster = parse_gpus("V100-16@us-a=2,V100-16@eu-b=2", catalog)
    assert plan_search(ctx, cluster, 2, Objective("throughput"), SearchSpace(max_stages=3)).best is None


def _random_case(seed: int):
    rng = random.Random(seed)
    catalog = GPUCatalog().with_entries({V: {"memory_bytes": int(rng.choice([2.5, 3.2, 4.0, 16.0]) * GIB)},
                                         A: {"memory_bytes": int(rng.choice([3.0, 3.6, 5.0, 40.0]) * GIB)}})
    zones = rng.sample(["us-a", "us-b", "eu-b"], rng.randint(1, 2))
    pools = {}
    for _ in range(rng.randint(2, 3)):
        pools[(rng.choice([A, V]), rng.choice(zones))] = rng.randint(1, 4)
    gpus = ",".join(f"{g}@{z}={n}" for (g, z), n in pools.items())
    objective = rng.choice([Objective("throughput"), Objective("cost"), Objective("value"),
                            Objective("throughput", max_gpus=3)])
    return catalog, gpus, rng.choice([2, 4, 8]), objective


@pytest.mark.parametrize("seed", range(6))
def test_search_matches_brute_force_random_small_cases(seed):
    """Seeded random clusters (1-2 zones, 2-3 pools, unequal GPUs per zone, memory-bound or not): the search
    (homogeneous pipelines and chains, every pruning rule on) equals the independent brute force."""
    catalog, gpus, gbs, objective = _random_case(seed)
    ctx = SimContext(BF_MODEL, ProfileStore(BF_MODEL, catalog), NetworkModel(catalog), catalog, OURS)
    check_exact(ctx, parse_gpus(gpus, catalog), gbs, objective, max_stages=3, mbs_opts=(1,), tp_opts=(1, 2))


def test_chain_bounds_keep_the_optimum(sailor_opt, monkeypatch):
    """The segment and cut bounds (docs/PLANNER.md 2.1, chain bound) and the pre-filter in front of the segment
    bound (2.3) return the same optimum as no bound."""
    import planner.search.chains as chains
    ctx = sailor_opt
    cluster = parse_gpus(f"{A}@{ZA}=16,{V}@{ZA}=24,{A}@{ZB}=8", ctx.catalog)
    space = SearchSpace(max_stages=6, mbs_options=(1,), chain_segments=3)
    for objective in (Objective("throughput"), Objective("cost", min_throughput_iters_per_s=0.05)):
        fast = plan_search(ctx, cluster, 256, objective, space).best
        with monkeypatch.context() as m:
            m.setattr(chains, "segment_table", lambda rt, *a: np.where(rt.fits, -np.inf, np.inf))
            m.setattr(chains, "segment_lower_keys", lambda tab, rt, grp, b, seqs, *a: np.full(len(seqs), -np.inf))
            m.setattr(chains, "pair_prefilter", lambda *a: None)      # the segment bound's pre-filter too
            m.setattr(chains, "chain_lower_keys", lambda sc, *a: np.full(len(sc.gs), -np.inf))
            full = plan_search(ctx, cluster, 256, objective, space).best
        assert fast.key == pytest.approx(full.key, rel=1e-12)
