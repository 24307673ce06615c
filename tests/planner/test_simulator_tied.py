"""The cost model's tied-embedding terms (planner/simulator/tied.py)."""
from __future__ import annotations

import pytest

from planner.simulator import simulate
from tests.planner.test_simulator import TINY, ctx_with, plan

VOCAB_SHARD = TINY.padded_vocab_for_tp(1) * TINY.hidden_size


def _weights(est, s: int) -> float:
    return est.stages[s].peak_memory_bytes


def test_one_stage_tied_holds_one_matrix_fewer() -> None:
    ctx = ctx_with()
    untied = simulate(plan(split=(4,)), ctx)
    tied = simulate(plan(split=(4,), tie_embeddings=True), ctx)
    # fp32 AdamW: 4 (weight) + 4 (grad) + 8 (states) bytes per parameter of the dropped LM head
    assert _weights(untied, 0) - _weights(tied, 0) == 16 * VOCAB_SHARD
    assert tied.iteration_time_s == untied.iteration_time_s           # nothing to sync with one stage


def test_several_stages_tied_keep_a_copy_and_pay_its_sync() -> None:
    ctx = ctx_with()
    untied = simulate(plan(split=(2, 2), d=2, gbs=4, zones=["z-a", "z-b"]), ctx)
    tied = simulate(plan(split=(2, 2), d=2, gbs=4, zones=["z-a", "z-b"], tie_embeddings=True), ctx)
    assert _weights(tied, 1) == _weights(untied, 1)                   # the last stage's copy
    assert tied.sync_s > untied.sync_s                                # the embedding group's all-reduce
    assert tied.cross_zone_bytes_per_iteration > untied.cross_zone_bytes_per_iteration


def _two_zone_tied(stage0_mode: str):
    """4 replicas per stage, two in each zone; stage 0 carries ``stage0_mode``."""
    from dataclasses import replace
    p = plan(split=(2, 2), d=4, gbs=4, zones=["z-a", "z-a", "z-b", "z-b"], tie_embeddings=True)
    return replace(p, stages=(replace(p.stages[0], grad_sync=stage0_mode), p.stages[1]))


def test_tied_sync_follows_stage_zeros_mode_flat_or_hierarchical() -> None:
    """The embedding group (4 + 4 replicas, two zones) syncs in stage 0's mode; hand-computed prices with
    1e9 B/s inside a zone and 5e8 B/s across (no latency): flat, one ring of 8 at the cross-zone link;
    hierarchical, 1.5 rings of 4 inside each zone, then a ring of the 2 zone leaders."""
    from planner.simulator.tied import tied_sync_seconds
    ctx = ctx_with()
    nbytes = 4.0 * VOCAB_SHARD
    flat_s, flat_b = tied_sync_seconds(_two_zone_tied("flat"), ctx)
    hier_s, hier_b = tied_sync_seconds(_two_zone_tied("hierarchical"), ctx)
    assert flat_s == pytest.approx(2 * 7 * (nbytes / 8) / 5e8, rel=1e-9)
    assert hier_s == pytest.approx(1.5 * 2 * 3 * (nbytes / 4) / 1e9 + 2 * 1 * (nbytes / 2) / 5e8, rel=1e-9)
    assert set(flat_b) == set(hier_b) == {("z-a", "z-b"), ("z-b", "z-a")}
    for edge in flat_b:
        assert flat_b[edge] == pytest.approx(2 * 7 / 8 * nbytes, rel=1e-12)
        assert hier_b[edge] == pytest.approx(nbytes, rel=1e-12)
        assert hier_b[edge] < flat_b[edge]


def test_simulate_prices_tied_sync_in_stage_zeros_mode() -> None:
    """simulate adds the tied all-reduce in stage 0's mode: tied minus untied sync time is that price."""
    from dataclasses import replace
    from planner.simulator.tied import tied_sync_seconds
    ctx = ctx_with()
    for mode in ("flat", "hierarchical"):
        tied = _two_zone_tied(mode)
        est_t, est_u = simulate(tied, ctx), simulate(replace(tied, tie_embeddings=False), ctx)
        assert est_t.sync_s - est_u.sync_s == pytest.approx(tied_sync_seconds(tied, ctx)[0], rel=1e-9)
        assert est_t.cross_zone_bytes_per_iteration - est_u.cross_zone_bytes_per_iteration == \
            pytest.approx(sum(tied_sync_seconds(tied, ctx)[1].values()), rel=1e-9)


def test_distributed_optimizer_tied_sync_is_reduce_scatter_plus_all_gather() -> None:
    """With the distributed optimizer the runtime reduce-scatters the tied weight's fp32 gradient and
    all-gathers the updated weight in the model dtype over the embedding group (runtime/dist_optimizer.py);
    bf16, flat ring of 8 at the 5e8 B/s cross-zone link: 7 steps of (4 + 2) x shard / 8 bytes, and each
    cross-zone edge carries 2 x 7/8 of the half-and-half bytes (4 + 2) x shard / 2."""
    from dataclasses import replace
    from planner.simulator.tied import tied_sync_seconds
    ctx = ctx_with()
    base = replace(_two_zone_tied("flat"), precision="bf16")
    plain_s, _ = tied_sync_seconds(base, ctx)
    dist_s, dist_b = tied_sync_seconds(replace(base, distributed_optimizer=True), ctx)
    assert plain_s == pytest.approx(2 * 7 * (4.0 * VOCAB_SHARD / 8) / 5e8, rel=1e-9)
    assert dist_s == pytest.approx(7 * (4.0 + 2.0) * VOCAB_SHARD / 8 / 5e8, rel=1e-9)
    assert dist_s < plain_s
    for edge in dist_b:
        assert dist_b[edge] == pytest.approx(2 * 7 / 8 * (4.0 + 2.0) * VOCAB_SHARD / 2, rel=1e-12)
