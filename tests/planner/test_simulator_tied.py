"""The cost model's tied-embedding terms (planner/simulator/tied.py)."""
from __future__ import annotations

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
