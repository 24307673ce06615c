"""Tied input/output embeddings in the cost model (what the runtime does with ``plan.tie_embeddings``).

Memory: with one stage the LM head is the word embedding (no second matrix); with several stages the last
stage holds a copy of the word-embedding shard (Megatron's scheme), so it counts a full vocab x hidden / TP
matrix like an untied head. Time: after the stage gradient sync, the shared weight's gradient is summed
over the first and last stages' replicas (one rank per replica of each, per fine shard), ``2 D`` members, in
the mode of the plan's first stage (:func:`planner.layout.tied_embedding_sync_mode`, the rule the runtime's
groups follow): flat, a ring limited by its slowest link; hierarchical, priced exactly as a stage's
hierarchical sync (:func:`planner.simulator.time.zone_aware_sync`).
"""
from __future__ import annotations

from planner.model import ModelSpec
from planner.network import Endpoint
from planner.layout import tied_embedding_sync_mode
from planner.plan import Plan, Replica
from planner.simulator.settings import SimContext


def _vocab_shard_params(model: ModelSpec, tp: int) -> int:
    return model.padded_vocab_for_tp(tp) * model.hidden_size // tp


def head_params_for_plan(plan: Plan, model: ModelSpec, tp: int, profiled_hp: int | None) -> int:
    """Parameters of the last stage's final norm + LM head on one GPU under the plan's tie choice.

    ``profiled_hp``: what a profile measured (its probe head is untied: norm + vocab shard), or None.
    """
    norm = model.head_params(tp)[1]
    vocab = _vocab_shard_params(model, tp)
    needs_matrix = not (plan.tie_embeddings and plan.num_stages == 1)
    if profiled_hp is not None:
        return profiled_hp if needs_matrix else max(profiled_hp - vocab, 0)
    return norm + (vocab if needs_matrix else 0)


def tied_sync_seconds(plan: Plan, ctx: SimContext, stage0_mode: str | None = None
                      ) -> tuple[float, dict[tuple[str, str], float]]:
    """(seconds, cross-zone bytes per (src, dst) zone) of the shared weight's gradient all-reduce, in the mode
    :func:`planner.layout.tied_embedding_sync_mode` gives: stage 0's as the simulator models it
    (``stage0_mode``: what :func:`planner.simulator.time.stage_sync` chose for stage 0; None: resolved here)."""
    if not plan.tie_embeddings or plan.num_stages == 1:
        return 0.0, {}
    if stage0_mode is None:
        from planner.simulator.stage import all_replica_costs      # stage imports this module
        from planner.simulator.time import stage_sync
        stage0_mode = stage_sync(plan, ctx, 0, all_replica_costs(plan, ctx)[0]).mode
    return tied_sync_of_replicas(plan.stages[0].replicas, plan.stages[-1].replicas, ctx,
                                 tied_embedding_sync_mode((stage0_mode,)),
                                 plan.bytes_per_element if plan.distributed_optimizer else None)


def tied_sync_of_replicas(first: tuple[Replica, ...], last: tuple[Replica, ...], ctx: SimContext,
                          mode: str | None = "flat", param_bytes_per_element: int | None = None
                          ) -> tuple[float, dict[tuple[str, str], float]]:
    """:func:`tied_sync_seconds` of a several-stage tied plan whose first and last stages hold these replicas,
    synced in ``mode`` (``flat``, ``hierarchical``; anything else, e.g. stage 0's ``none``, prices flat: with
    one replica per stage both modes are the same two-member sum). The all-reduce depends on nothing else; the
    search calls this directly. Priced by :func:`planner.simulator.time.zone_aware_sync`, the stage syncs'
    function, on the first + last replicas: fp32 gradients of the word-embedding shard of the smallest TP.
    ``param_bytes_per_element``: the distributed optimizer's model dtype (None: a plain all-reduce): the
    runtime then reduce-scatters the fp32 gradient and all-gathers the updated weight in that dtype over the
    embedding group, priced as the stage syncs price it."""
    from planner.simulator.time import zone_aware_sync
    reps = tuple(first) + tuple(last)
    tp = min(r.tp for r in reps)
    shard = _vocab_shard_params(ctx.model, tp)
    nbytes = 4.0 * shard                                        # fp32 gradients
    made = {k: Endpoint(*k) for k in {(r.gpu_type, r.zone) for r in reps}}   # one object per (type, zone)
    ends = [made[(r.gpu_type, r.zone)] for r in reps]
    rule = mode if mode in ("flat", "hierarchical") else "flat"
    if param_bytes_per_element is None:
        sc = zone_aware_sync(ends, ctx, rule, nbytes, nbytes * tp, tp)
    else:           # reduce-scatter of fp32 gradients, all-gather of the model-dtype weight (stage_sync's rule)
        param_bytes = float(shard * param_bytes_per_element)
        sc = zone_aware_sync(ends, ctx, rule, nbytes, (nbytes + param_bytes) * tp / 2, tp, param_bytes)
    return sc.time_s, sc.cross_zone_bytes
