"""Chain plans with segment splits (docs/PLANNER.md 1.1, ``SearchSpace.chain_splits == "segment"``): the search
equals an independent brute force over every chain x every segment split x D x micro-batch counts, is never
worse than with Sailor's even split, and scores a hand-built Fig8b plan as ``simulate`` does."""
from __future__ import annotations

import random
import sys
from itertools import product
from pathlib import Path

import pytest

from planner.cluster import parse_gpus
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import NetworkModel
from planner.plan import Plan, Replica, Stage
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search.chains import score_chain
from planner.search.chainseq import segment_splits
from planner.search.netvec import LinkCache
from planner.search.tasks import Tables
from planner.simulator import simulate
from planner.simulator.settings import OURS, SimContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_planner_bruteforce import GIB, brute_force_best, chain_count_choices  # noqa: E402
from test_planner_bruteforce import sailor_ctx as sailor_opt  # noqa: E402,F401 - the OPT-350 fixture

A, V = "A100-40", "V100-16"


def _runs(seq) -> list[int]:
    """The lengths of the runs of equal entries of ``seq``."""
    out = [1]
    for a, b in zip(seq, seq[1:]):
        if a == b:
            out[-1] += 1
        else:
            out.append(1)
    return out


def _splits_by_hand(num_layers: int, runs: list[int]):
    """Every per-stage split: run i gets a total t_i >= its length (the totals sum to L), spread with
    divmod, the extra layers on the run's last stages."""
    for tot in product(range(1, num_layers + 1), repeat=len(runs)):
        if sum(tot) != num_layers or any(t < n for t, n in zip(tot, runs)):
            continue
        split = []
        for n, t in zip(runs, tot):
            split += [t // n] * (n - t % n) + [t // n + 1] * (t % n)
        yield tuple(split)


def _plan(split, seq, d, mbs, gbs, counts, rc=False, dist=False) -> Plan:
    stages, first = [], 0
    for n, (g, t, z) in zip(split, seq):
        stages.append(Stage(first, n, (Replica(g, t, z),) * d))
        first += n
    return Plan(num_layers=sum(split), stages=tuple(stages), micro_batch_size=mbs, global_batch_size=gbs,
                microbatches_per_pipeline=tuple(counts), recompute_activations=rc, distributed_optimizer=dist)


def chain_brute_force(ctx, cluster, gbs, objective, max_stages, tp_opts, max_segments, dist_opts):
    """min objective key over every chain of 2..max_segments runs x every segment split x D x micro-batch
    counts (micro-batch 1, no recomputation), each scored by ``simulate``."""
    L = ctx.model.num_layers
    groups = [(p.gpu_type, t, p.zone) for p in cluster.pools for t in tp_opts
              if t <= ctx.node_size(p.gpu_type) and t <= p.count]
    best = float("inf")
    for s_num in range(2, min(L, max_stages) + 1):
        for seq in product(groups, repeat=s_num):
            runs = _runs(seq)
            if not 2 <= len(runs) <= max_segments:
                continue
            need: dict[tuple[str, str], int] = {}
            for g, t, z in seq:
                need[(g, z)] = need.get((g, z), 0) + t
            d_max = min(min(cluster.count(g, z) // n for (g, z), n in need.items()), gbs)
            for split, dist, d in product(_splits_by_hand(L, runs), dist_opts, range(1, d_max + 1)):
                for counts in chain_count_choices(gbs, d):
                    est = simulate(_plan(split, seq, d, 1, gbs, counts, False, dist), ctx)
                    if est.fits_in_memory and objective.allows(est.iteration_time_s, est.cost_per_iteration_usd,
                                                               est.num_gpus):
                        best = min(best, objective.key(est.iteration_time_s, est.cost_per_iteration_usd))
    return best


# 6 layers, activation-heavy: A100 and V100 stages of unequal speed, some memory-bound (1 GiB runtime overhead pinned)
SPLIT_MODEL = ModelSpec("split6", num_layers=6, hidden_size=1024, num_heads=8, ffn_hidden_size=4096, seq_length=1024,
                        vocab_size=1024, max_position_embeddings=1024)


def _case(seed: int):
    rng = random.Random(seed)
    catalog = GPUCatalog().with_entries({V: {"memory_bytes": int(rng.choice([1.6, 2.0, 16.0]) * GIB)},
                                         A: {"memory_bytes": int(rng.choice([2.0, 3.0, 40.0]) * GIB)}})
    zones = rng.sample(["us-a", "eu-b"], rng.randint(1, 2))
    pools = {}
    for _ in range(rng.randint(2, 3)):
        pools[(rng.choice([A, V]), rng.choice(zones))] = rng.randint(1, 3)
    gpus = ",".join(f"{g}@{z}={n}" for (g, z), n in pools.items())
    objective = rng.choice([Objective("throughput"), Objective("cost"), Objective("value")])
    ctx = SimContext(SPLIT_MODEL, ProfileStore(SPLIT_MODEL, catalog), NetworkModel(catalog), catalog,
                     OURS.with_(memory_overhead_bytes=1.0 * GIB))
    return ctx, parse_gpus(gpus, catalog), rng.choice([2, 4]), objective, rng.choice([(False,), (False, True)])


def test_segment_splits_enumeration_matches_hand_rule():
    """``segment_splits`` of every cut lists exactly the per-run splits written by hand, once each."""
    for s_num, L in [(2, 4), (3, 4), (4, 24), (5, 9)]:
        for cut in [(1,), (s_num - 1,), tuple(range(1, min(3, s_num)))]:
            bounds = (0,) + cut + (s_num,)
            runs = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
            got = [tuple(int(x) for x in s[0]) for s in segment_splits(L, bounds)]
            assert sorted(got) == sorted(_splits_by_hand(L, runs)) and len(set(got)) == len(got)
    q, r = divmod(24, 4)      # Sailor's even split is one of them
    assert tuple([q] * (4 - r) + [q + 1] * r) in {tuple(s[0]) for s in segment_splits(24, (0, 3, 4))}


@pytest.mark.parametrize("seed,seg_wins", [(0, False), (2, True), (5, True), (9, False), (11, True), (25, True)])
def test_segment_search_equals_brute_force(seed, seg_wins):
    """Seeded random clusters: the search with segment splits returns the optimum of the brute force over the
    homogeneous pipelines and even-split chains (:func:`brute_force_best`) and every segment-split chain
    (:func:`chain_brute_force`), re-scored by ``simulate``; never worse than with even splits, strictly better
    where ``seg_wins`` (the cases exercise the new plans)."""
    ctx, cluster, gbs, objective, dist = _case(seed)
    kw = dict(max_stages=3, mbs_options=(1,), tp_options=(1, 2), recompute=(False,), distributed_optimizer=dist)
    seg = plan_search(ctx, cluster, gbs, objective, SearchSpace(chain_splits="segment", **kw)).best
    even = plan_search(ctx, cluster, gbs, objective, SearchSpace(**kw)).best
    pools_best, _, _ = brute_force_best(ctx, cluster, gbs, objective, 3, (1,), (1, 2), (False,), dist_opts=dist)
    want = min(pools_best, chain_brute_force(ctx, cluster, gbs, objective, 3, (1, 2), 3, dist))
    if want == float("inf"):
        assert seg is None and even is None
        return
    assert seg is not None
    est = simulate(build_plan(seg, ctx.model.num_layers, gbs, None), ctx)
    assert est.fits_in_memory
    assert objective.key(est.iteration_time_s, est.cost_per_iteration_usd) == pytest.approx(want, rel=1e-9)
    assert even is None or seg.key <= even.key * (1 + 1e-12)
    assert seg_wins == (even is None or seg.key < even.key * (1 - 1e-9))


def test_fig8b_witness_scored_as_simulate(sailor_opt):
    """Fig8b 32+96 (OPT-350, GBS 1024): 32 pipelines V100 (4 layers) x 3 -> A100 (12), TP 1, micro-batch 1,
    distributed optimizer (docs/PLANNER.md 7.6): the chain evaluator with that split equals ``simulate``."""
    ctx, z, gbs, d = sailor_opt, "us-central1-a", 1024, 32
    cluster = parse_gpus(f"{A}@{z}=32,{V}@{z}=96", ctx.catalog)
    chain, split = ((V, z, 1),) * 3 + ((A, z, 1),), (4, 4, 4, 12)
    space = SearchSpace(max_stages=4, mbs_options=(1,))
    cand = score_chain(ctx, cluster, Tables(ctx, space), LinkCache(ctx), chain, d, 1, gbs,
                       distributed_optimizer=True, layers=split)
    assert cand is not None and cand.layers_per_stage == split
    est = simulate(_plan(split, [(g, t, zz) for g, zz, t in chain], d, 1, gbs, [gbs // d] * d, dist=True), ctx)
    assert est.fits_in_memory
    assert cand.iteration_s == pytest.approx(est.iteration_time_s, rel=1e-9)
    assert cand.cost_usd == pytest.approx(est.cost_per_iteration_usd, rel=1e-9)
    built = build_plan(cand, ctx.model.num_layers, gbs, None)
    assert [s.num_layers for s in built.stages] == list(split)
    assert simulate(built, ctx).iteration_time_s == pytest.approx(est.iteration_time_s, rel=1e-9)


def test_chain_splits_value_is_checked():
    """A bad ``chain_splits`` is an InputError in the space and the request (the CLI's one line, exit 2)."""
    from planner.api import PlanRequest
    from planner.errors import InputError
    with pytest.raises(InputError, match="chain_splits"):
        SearchSpace(chain_splits="uneven")
    with pytest.raises(InputError, match="--chain-splits"):
        PlanRequest(cluster=parse_gpus(f"{A}@z=2", GPUCatalog()), global_batch_size=4, chain_splits="uneven")
    assert SearchSpace().chain_splits == "even"
