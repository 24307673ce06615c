"""Tied input/output embeddings in the cost model (what the runtime does with ``plan.tie_embeddings``).

Memory: with one stage the LM head is the word embedding (no second matrix); with several stages the last
stage holds a copy of the word-embedding shard (Megatron's scheme), so it counts a full vocab x hidden / TP
matrix like an untied head. Time: after the stage gradient sync, the shared weight's gradient is summed
over the first and last stages' replicas (one rank per replica of each, per fine shard): a ring all-reduce
of the word-embedding shard over ``2 D`` members, limited by the slowest link among them.
"""
from __future__ import annotations

from planner.model import ModelSpec
from planner.network import Endpoint
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


def tied_sync_seconds(plan: Plan, ctx: SimContext) -> tuple[float, dict[tuple[str, str], float]]:
    """(seconds, cross-zone bytes per (src, dst) zone) of the shared weight's gradient all-reduce."""
    if not plan.tie_embeddings or plan.num_stages == 1:
        return 0.0, {}
    return tied_sync_of_replicas(plan.stages[0].replicas, plan.stages[-1].replicas, ctx)


def tied_sync_of_replicas(first: tuple[Replica, ...], last: tuple[Replica, ...], ctx: SimContext
                          ) -> tuple[float, dict[tuple[str, str], float]]:
    """:func:`tied_sync_seconds` of a several-stage tied plan whose first and last stages hold these replicas
    (the all-reduce depends on nothing else; the search calls this directly)."""
    reps = tuple(first) + tuple(last)
    n = len(reps)
    tp = min(r.tp for r in reps)
    nbytes = 4.0 * _vocab_shard_params(ctx.model, tp)          # fp32 gradients
    ends = [Endpoint(r.gpu_type, r.zone) for r in reps]
    links = [ctx.network.link(ends[i], ends[(i + 1) % n], concurrent=tp) for i in range(n)]
    link = min(links, key=lambda l: l.bandwidth_bytes_per_s(nbytes / n))
    time_s = 2 * (n - 1) * link.time_s(nbytes / n)
    zones = sorted({r.zone for r in reps})
    if len(zones) < 2:
        return time_s, {}
    per_edge = 2 * (n - 1) / n * nbytes * tp
    return time_s, {(zones[i], zones[(i + 1) % len(zones)]): per_edge for i in range(len(zones))}
