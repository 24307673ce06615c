"""The simulator's fast paths give exactly what the slow ones give.

- formulas' one-pipeline twins on Python floats (``*_1d``) against their numpy functions, bit for bit (repr,
  so -0.0 is told from 0.0), on random values with ties and zeros;
- the scalar ``np.where`` shortcut against numpy on the same numbers;
- ``simulate`` with every cache (``SimContext.memo`` and the per-stage ``lru_cache``s) emptied before each plan
  against ``simulate`` with the caches warm from other plans (a key missing an input would hand one plan
  another's figures): every field equal.
"""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from benchmarks.simulate_identity_s17s import canon, contexts, random_plan
from planner.errors import InputError
from planner.plan import Plan
from planner.simulator import formulas as F
from planner.simulator import simulate
from planner.simulator import stage as stage_mod


def _values(rng: random.Random, n: int) -> list[float]:
    pool = [0.0, -0.0, 1.5, 2.0, 1e-3, float("nan")] if rng.random() < 0.2 else [0.0, -0.0, 1.5, 2.0, 1e-3]
    return [rng.choice(pool) if rng.random() < 0.3 else rng.uniform(0, 3) * 10 ** rng.randint(-4, 1)
            for _ in range(n)]


def test_one_pipeline_twins_match_numpy_bit_for_bit():
    rng = random.Random(5)
    for _ in range(600):
        n = rng.randint(1, 11)
        comp, p2p = _values(rng, n), _values(rng, n - 1)
        ca, pa = np.array(comp), np.array(p2p, dtype=float)
        for blocking in (False, True):
            assert repr(F.busy_s_1d(comp, p2p, blocking)) == repr(F.busy_s(ca, pa, blocking).tolist())
        busy = F.busy_s_1d(comp, p2p, True)
        trips = F.round_trip_bounds_1d(comp, p2p)
        assert repr(trips) == repr(F.round_trip_bounds(ca, pa).tolist())
        assert repr(F.max_1d(busy)) == repr(float(np.max(np.array(busy))))
        assert repr(F.min_1d(busy)) == repr(float(np.min(np.array(busy))))
        bm = F.max_1d(busy)
        assert repr(F.period_levels_1d(bm, trips)) == repr(F.period_levels(bm, np.array(trips)).tolist())
        assert repr(F.fill_drain_s_1d(comp, p2p)) == repr(float(F.fill_drain_s(ca, pa)))
        many = _values(rng, rng.randint(0, 40))                   # numpy pairs the terms of 8 or more
        assert repr(F.sum_1d(many)) == repr(float(np.sum(np.array(many, dtype=float))))
        # ties: which of two equal values numpy keeps (-0.0 or 0.0), and its nan
        ties = [rng.choice((0.0, -0.0, 1.0, float("nan"))) for _ in range(rng.randint(1, 9))]
        for vals in (many, ties) if many else (ties,):
            assert repr(F.max_1d(vals)) == repr(float(np.max(np.array(vals))))
            assert repr(F.min_1d(vals)) == repr(float(np.min(np.array(vals))))


def test_scalar_where_matches_numpy():
    rng = random.Random(6)
    for _ in range(300):
        a, b, n = rng.uniform(0, 1e9), rng.uniform(0, 1e9), rng.randint(0, 6)
        for flag in (False, True):
            pairs = [(F.layer_activation_bytes(n, a, b, flag), F.layer_activation_bytes(n, np.float64(a), b, flag)),
                     (F.recompute_bwd_s(a, b, flag), F.recompute_bwd_s(np.float64(a), b, flag)),
                     (F.model_flops_per_sample(n, a, b, flag), F.model_flops_per_sample(n, a, np.float64(b), flag))]
            for fast, slow in pairs:
                assert type(fast) is float and repr(fast) == repr(float(slow))
        assert repr(F.stage_mask_bytes(n, a)) == repr(float(F.stage_mask_bytes(np.int64(n), a)))


def _neighbours(p: Plan) -> list[Plan]:
    """``p`` and plans sharing its stages but for one plan-wide field: what a cache key must tell apart."""
    counts = p.microbatch_counts + p.microbatch_counts[:1]      # one more pipeline, the others as they were
    wider = tuple(replace(st, replicas=st.replicas + st.replicas[:1]) for st in p.stages)
    changes = [{}, {"distributed_optimizer": not p.distributed_optimizer}, {"tie_embeddings": not p.tie_embeddings},
               {"precision": "bf16" if p.precision == "fp32" else "fp32"},
               {"micro_batch_size": 2 * p.micro_batch_size, "global_batch_size": 2 * p.global_batch_size},
               {"stages": wider, "microbatches_per_pipeline": counts,
                "global_batch_size": p.micro_batch_size * sum(counts)}]
    if p.recompute_granularity is None:
        changes.append({"recompute_activations": not p.recompute_activations})
    out = []
    for change in changes:
        try:
            out.append(replace(p, **change))
        except InputError:
            pass
    return out


def _clear_caches(ctx) -> None:
    ctx.memo.clear()
    for f in (stage_mod._core_terms, stage_mod._offset_sum_s, stage_mod._peak_excess_bytes):
        f.cache_clear()


@pytest.mark.parametrize("which", [0, 1])
def test_warm_caches_give_what_cold_ones_give(which):
    """Context 0: the megatron-sailor preset (megatron-core activations, dropout); 1: sailor-deepspeed
    (Korthikanti, blocking p2p), both on the small attention-heavy model."""
    name, ctx, zones, allowed = contexts(None)[which]
    rng = random.Random(f"warm/{name}")
    plans = []
    while len(plans) < 90:
        p = random_plan(rng, ctx, zones, allowed)
        if p is not None:
            plans += _neighbours(p)

    def run(p):
        try:
            return canon(simulate(p, ctx).to_dict())
        except Exception as e:          # the same refusal either way
            return f"{type(e).__name__}: {e}"

    cold = []
    for p in plans:
        _clear_caches(ctx)
        cold.append(run(p))
    order = list(range(len(plans)))
    random.Random(1).shuffle(order)
    warm = {i: run(plans[i]) for i in order}           # caches filled by the other plans first
    assert [warm[i] for i in range(len(plans))] == cold


def test_replaced_settings_model_or_profiles_are_not_served_stale_figures():
    """``ctx.memo`` keys hold the settings, model and profile entry by value: a context whose settings are
    replaced after simulating gives what a fresh context with those settings gives."""
    name, ctx, zones, allowed = contexts(None)[0]
    rng = random.Random("stale")
    plans = []
    while len(plans) < 10:
        p = random_plan(rng, ctx, zones, allowed)
        if p is not None:
            plans.append(p)
    for p in plans:
        simulate(p, ctx)
    for change in ({"compute_scale": 1.7}, {"update_scale": 0.5}, {"profile_offset_s": 1e-4},
                   {"hidden_dropout": 0.0}):
        ctx.settings = ctx.settings.with_(**change)
        fresh = replace(ctx)                      # a new context: empty memo
        assert not fresh.memo
        for p in plans:
            assert canon(simulate(p, ctx).to_dict()) == canon(simulate(p, fresh).to_dict())
