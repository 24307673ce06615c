"""The search's memory is the simulator's: on many seeded random small heterogeneous setups (several models,
recomputation on and off, fp32 and bf16, tied embeddings (planned tied and untied), chain plans included) every plan the search returns has, GPU by GPU,
the peak memory simulate() predicts (relative 1e-9: the causal mask and the recompute keep bytes included)
and fits per simulate(), and its iteration time and $/iteration equal simulate()'s (tied plans: the shared
weight's all-reduce included); the production check catches a search that forgets the mask."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from planner.cluster import parse_gpus
from planner.errors import InternalError
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import NetworkModel
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search import tables as T
from planner.search.verify import check_candidates, search_replica_peaks
from planner.simulator import simulate
from planner.simulator.tied import tied_sync_of_replicas, tied_sync_seconds
from planner.simulator.settings import OURS, SimContext

TYPES = ("A100-40", "V100-16", "RTX-3090", "GH-96")
ZONES = ("us-a", "us-b")


def _model(rng: random.Random, i: int) -> ModelSpec:
    heads = rng.choice((4, 8, 16))
    hidden = heads * rng.choice((64, 128))
    return ModelSpec(f"m{i}", num_layers=rng.randint(3, 7), hidden_size=hidden, num_heads=heads,
                     ffn_hidden_size=4 * hidden, seq_length=rng.choice((1024, 2048, 4096)),
                     vocab_size=rng.choice((4096, 32000)), max_position_embeddings=4096,
                     tied_embeddings=rng.random() < 0.5)


def _setup(seed: int):
    rng = random.Random(seed)
    model = _model(rng, seed)
    precision = rng.choice(("fp32", "bf16"))
    cat = GPUCatalog()
    settings = OURS.with_(activation_reserve_factor=rng.choice((1.0, 1.2)),
                          memory_headroom_fraction=rng.choice((0.0, 0.1)))
    ctx = SimContext(model, ProfileStore(model, cat, precision=precision), NetworkModel(cat), cat, settings)
    pools = {}
    for _ in range(rng.randint(2, 3)):
        pools[(rng.choice(TYPES), rng.choice(ZONES))] = rng.choice((2, 4, 6, 8))
    cluster = parse_gpus(",".join(f"{g}@{z}={n}" for (g, z), n in sorted(pools.items())), cat)
    space = SearchSpace(max_stages=4, precision=precision, recompute=rng.choice(((False,), (True,), (False, True))),
                        tie_embeddings=model.tied_embeddings and rng.random() < 0.8)
    gbs = rng.choice((16, 32, 64))
    # the distributed optimizer: off, searched, or forced on (its memory depends on the plan's D)
    space = replace(space, distributed_optimizer=((False,), (False, True), (True,))[seed % 3])
    return ctx, cluster, gbs, space


def _check_returned(ctx, cluster, gbs, space, objective) -> tuple[int, int, int, int, int, int]:
    """Asserts on every returned plan; returns (plans, chain plans, plans whose stages keep a mask, tied
    pool plans with an all-reduce, tied chain plans)."""
    res = plan_search(ctx, cluster, gbs, objective, space, top_k=8, verify=False)
    n = chains = masked = tied_pools = tied_chains = dist = 0
    for c in res.candidates:
        plan = build_plan(c, ctx.model.num_layers, gbs, None, precision=space.precision)
        assert plan.tie_embeddings == space.tie_embeddings
        est = simulate(plan, ctx)
        if tied_sync_seconds(plan, ctx)[0] > 0:
            tied_pools, tied_chains = tied_pools + (not c.chain), tied_chains + bool(c.chain)
        assert est.fits_in_memory
        assert est.iteration_time_s == pytest.approx(c.iteration_s, rel=1e-9, abs=0)
        assert est.cost_per_iteration_usd == pytest.approx(c.cost_usd, rel=1e-9, abs=0)
        peaks = search_replica_peaks(ctx, c, plan)
        for s, row in enumerate(peaks):
            assert row == pytest.approx(list(est.stages[s].replica_peak_bytes), rel=1e-9, abs=0)
            assert max(row) == pytest.approx(est.stages[s].peak_memory_bytes, rel=1e-9, abs=0)
            assert all(b <= cap for b, cap in zip(row, est.stages[s].replica_capacity_bytes))
        n += 1
        dist += plan.distributed_optimizer and plan.dp_degree > 1
        chains += bool(c.chain)
        masked += T.build_type_table(ctx, plan.stages[0].replicas[0].gpu_type, plan.stages[0].replicas[0].tp,
                                     c.mbs, c.precision).mask_bytes > 0
    return n, chains, masked, tied_pools, tied_chains, dist


def test_returned_plans_have_the_simulators_memory_on_random_setups():
    plans = chains = masked = recompute = bf16 = tied_pools = tied_chains = dist = 0
    for seed in range(24):
        ctx, cluster, gbs, space = _setup(seed)
        for objective in (Objective("throughput"), Objective("cost")):
            n, c, m, tp_, tc, do = _check_returned(ctx, cluster, gbs, space, objective)
            dist += do
            plans, chains, masked = plans + n, chains + c, masked + m
            tied_pools, tied_chains = tied_pools + tp_, tied_chains + tc
            recompute += n if space.recompute == (True,) else 0
            bf16 += n if space.precision == "bf16" else 0
    # the sample is not vacuous: many plans, chain plans among them, recomputation, bf16 and tied exercised
    assert plans >= 150 and chains >= 5 and masked == plans and recompute >= 20 and bf16 >= 20, \
        (plans, chains, masked, recompute, bf16)
    assert tied_pools >= 5 and tied_chains >= 10 and dist >= 50, (tied_pools, tied_chains, dist)


def test_search_memory_includes_the_causal_mask_and_keep_bytes():
    """The search's per-stage memory grows by exactly the mask per in-flight micro-batch (times the reserve)."""
    ctx, cluster, gbs, space = _setup(3)
    tt = T.build_type_table(ctx, "A100-40", 1, 1, space.precision)
    assert tt.mask_bytes == ctx.model.seq_length ** 2
    counts = T.split_family(ctx.model.num_layers, 2)[:1]
    with_mask = T.stage_arrays(ctx, tt, counts, space.precision, space.optimizer).memory_bytes
    without = T.stage_arrays(ctx, replace(tt, mask_bytes=0.0), counts, space.precision, space.optimizer).memory_bytes
    reserve = ctx.settings.activation_reserve_factor
    assert list(with_mask[0] - without[0]) == pytest.approx([2 * tt.mask_bytes * reserve, tt.mask_bytes * reserve],
                                                           rel=1e-12)
    quiet = replace(tt, recompute_live_bytes=0.0)     # without the short-lived peak of recomputed forwards
    rc = T.stage_arrays(ctx, quiet, counts, space.precision, space.optimizer, recompute=True).memory_bytes
    rc0 = T.stage_arrays(ctx, replace(quiet, keep_bytes=0.0), counts, space.precision, space.optimizer,
                         recompute=True).memory_bytes
    assert list(rc[0] - rc0[0]) == pytest.approx(list(counts[0] * tt.keep_bytes * reserve * [2, 1]), rel=1e-12)
    assert tt.keep_bytes > 0


def test_search_memory_includes_the_recompute_peak():
    """With dropout (the preset's 0.1) each recomputed layer's forward holds its two bias-dropout-add masks
    until it returns: on a first stage of a layers (not last) the peak rises by 2 sbhe - sbhe (- s^2 if a == 1)
    above the kept bytes, once (the last in-flight micro-batch's forward), times the reserve."""
    ctx, cluster, gbs, space = _setup(3)
    tt = T.build_type_table(ctx, "A100-40", 1, 1, space.precision)
    m = ctx.model
    sbhe = m.seq_length * m.hidden_size * (4 if space.precision == "fp32" else 2)
    assert tt.recompute_live_bytes == 2 * sbhe and tt.keep_bytes == sbhe
    counts = T.split_family(m.num_layers, 2)[:2]             # first stage of 1 and of 2 layers
    rc = T.stage_arrays(ctx, tt, counts, space.precision, space.optimizer, recompute=True).memory_bytes
    quiet = replace(tt, recompute_live_bytes=0.0)
    rc0 = T.stage_arrays(ctx, quiet, counts, space.precision, space.optimizer, recompute=True).memory_bytes
    reserve = ctx.settings.activation_reserve_factor
    first = [max(0.0, 2 * sbhe - sbhe - (m.seq_length ** 2 if a == 1 else 0)) for a in counts[:, 0]]
    assert list(rc[:, 0] - rc0[:, 0]) == pytest.approx([f * reserve for f in first], rel=1e-12)
    assert first[1] > 0


def test_production_check_rejects_a_search_that_forgets_the_mask(monkeypatch):
    ctx = _setup(5)[0]
    cluster = parse_gpus("A100-40@us-a=4,V100-16@us-b=4", ctx.catalog)
    space = SearchSpace(max_stages=3, precision="fp32")
    res = plan_search(ctx, cluster, 32, Objective("throughput"), space, top_k=3)   # verify on: passes
    assert res.candidates
    real = T.build_type_table

    def no_mask(*a, **k):
        return replace(real(*a, **k), mask_bytes=0.0)

    import planner.search.verify as V
    monkeypatch.setattr(V, "build_type_table", no_mask)
    with pytest.raises(InternalError, match="peak memory"):
        check_candidates(ctx, res.candidates[:1], 32)


def test_api_plans_a_tied_model_as_tied_plans():
    """sailor-plan's API plans a model that ties its embeddings as tied plans (simulated as such, with the
    shared weight's all-reduce when there are several stages) and keeps untied models untied."""
    from planner import api
    cat = GPUCatalog()
    base = ModelSpec("t", num_layers=6, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=1024,
                     vocab_size=32000, max_position_embeddings=1024)
    cluster = parse_gpus("A100-40@us-a=4,V100-16@us-b=4", cat)
    for tied in (False, True):
        model = replace(base, tied_embeddings=tied)
        ctx = SimContext(model, ProfileStore(model, cat), NetworkModel(cat), cat, OURS)
        report = api.plan(api.PlanRequest(cluster=cluster, global_batch_size=32, top_k=3, max_stages=3), ctx)
        for plan, est in ((report.plan, report.estimate), *report.alternatives):
            assert plan.tie_embeddings is tied
            assert est == simulate(plan, api.context_for(ctx, cluster))
        if tied and report.plan.num_stages > 1:
            assert tied_sync_seconds(report.plan, api.context_for(ctx, cluster))[0] > 0


@pytest.mark.parametrize("rule", ["hierarchical", "auto"])
def test_search_prices_the_tied_all_reduce_in_stage_zeros_mode(rule):
    """Tied pool plans (no chain plans) over two zones: the search prices the shared weight's all-reduce in
    stage 0's mode (the one written into the plan), so the plan sailor-plan writes simulates to the search's
    time and cost; under the hierarchical rule the sample holds plans whose tied sync is hierarchical and priced unlike a flat ring."""
    from planner.simulator import with_chosen_sync_modes
    cat = GPUCatalog()
    # ~2.7e9 parameters: no TP-1 GPU holds them, so every plan has several stages
    model = ModelSpec("t", num_layers=24, hidden_size=3072, num_heads=24, ffn_hidden_size=4 * 3072,
                      seq_length=1024, vocab_size=32000, max_position_embeddings=1024, tied_embeddings=True)
    ctx = SimContext(model, ProfileStore(model, cat), NetworkModel(cat), cat, OURS.with_(grad_sync=rule))
    cluster = parse_gpus("A100-40@us-a=8,A100-40@us-b=8", cat)
    res = plan_search(ctx, cluster, 32, Objective("throughput"),
                      SearchSpace(max_stages=3, tp_options=(1,), tie_embeddings=True, chain_segments=1), top_k=8,
                      verify=True)
    hier = 0
    for c in res.candidates:
        plan = with_chosen_sync_modes(build_plan(c, model.num_layers, 32, None), ctx)
        est = simulate(plan, ctx)
        assert est.iteration_time_s == pytest.approx(c.iteration_s, rel=1e-9, abs=0)
        assert est.cost_per_iteration_usd == pytest.approx(c.cost_usd, rel=1e-9, abs=0)
        if plan.num_stages > 1 and plan.stages[0].grad_sync == "hierarchical":
            flat = tied_sync_of_replicas(plan.stages[0].replicas, plan.stages[-1].replicas, ctx, "flat")[0]
            hier += 0 < tied_sync_seconds(plan, ctx)[0] != flat       # a price the flat rule would miss
    if rule == "hierarchical":                   # under auto the flat ring is the faster here
        assert hier > 0, res.candidates
