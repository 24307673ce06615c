"""Peak memory of one GPU: model states, in-flight activations, transient buffers, runtime overhead.

- weights + gradients + optimizer states per parameter held (fp32: 4 + 4 + 8 for Adam; 16-bit mixed
  precision: 2 + 4 (fp32 main grad) + 4 (fp32 master) + 8); the distributed optimizer divides the master
  and Adam states by D (a rank holding several fine shards shards the replicated parameters once per
  shard: :func:`optimizer_params`); SGD keeps one momentum buffer;
- activations of in-flight micro-batches: 1F1B keeps ``min(S - s, m)`` on stage s (capped by the
  micro-batch count, unlike Sailor), plus the short-lived peak of the last one's forward under full
  recomputation (:func:`activation_peak_bytes`), times the allocator reserve factor;
- transient: one more layer's activations during backward (or the logits on the last stage) and the p2p
  receive/send buffers;
- a flat gradient bucket when the runtime uses one, and a constant overhead (context, communicators).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from planner.plan import Plan
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext
from planner.simulator.stage import MEMO_MAX, ReplicaCosts


@dataclass(frozen=True)
class MemoryBreakdown:
    """One GPU's peak memory, by kind (:func:`replica_memory`)."""

    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    transient_bytes: float
    overhead_bytes: float

    @property
    def total_bytes(self) -> float:
        return F.memory_total((self.weights_bytes, self.grads_bytes, self.optimizer_bytes, self.activations_bytes,
                               self.transient_bytes, self.overhead_bytes))


def state_bytes_per_param(plan: Plan) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per parameter, before distributed-optimizer sharding."""
    return F.state_bytes_per_param(plan.precision, plan.optimizer)


def inflight_microbatches(plan: Plan, s: int, j: int) -> int:
    return min(plan.num_stages - s, plan.microbatch_counts[j])


def activation_peak_bytes(plan: Plan, c: ReplicaCosts) -> float:
    """Peak bytes saved for backward on one GPU (before the allocator reserve): what the runtime's
    saved-tensor counter reports as ``peak_saved_activation_bytes``."""
    return float(F.activation_peak_bytes(c.act_bytes_per_mb, inflight_microbatches(plan, c.stage, c.replica),
                                         c.act_peak_extra_bytes))


def optimizer_params(plan: Plan, ctx: SimContext, c: ReplicaCosts) -> float:
    """Parameters whose optimizer state one GPU shards: its own, and, under the distributed optimizer, the
    stage's replicated parameters (norms, row-parallel biases, position embeddings) once more for every extra
    fine shard it holds (a TP-t rank of a stage whose TP degrees have least common multiple L holds L/t fine
    shards, and the runtime packs the replicated parameters into each: runtime/dist_optimizer.py)."""
    if not plan.distributed_optimizer:
        return float(c.params)
    tps = [r.tp for r in plan.stages[c.stage].replicas]
    k = math.lcm(*tps) // c.tp
    if k == 1:
        return float(c.params)
    m, st = ctx.model, plan.stages[c.stage]
    replicated = m.layer_params(c.tp)[1] * st.num_layers
    replicated += m.embedding_params(c.tp)[1] if c.stage == 0 else 0
    replicated += m.head_params(c.tp)[1] if c.stage == plan.num_stages - 1 else 0
    return float(c.params + (k - 1) * replicated)


def replica_memory(plan: Plan, ctx: SimContext, c: ReplicaCosts) -> MemoryBreakdown:
    """One GPU's peak memory, kept in ``ctx.memo`` under everything it reads, by value (as
    :func:`planner.simulator.stage.replica_costs` keeps a replica's costs)."""
    st = plan.stages[c.stage]
    key = ("replica_memory", plan.precision, plan.optimizer, plan.dp_degree, plan.distributed_optimizer,
           plan.micro_batch_size, plan.num_stages, c.stage, st.num_layers,
           tuple(r.tp for r in st.replicas) if plan.distributed_optimizer else (), c.tp, c.params,
           c.act_bytes_per_mb, c.max_layer_act_bytes, c.act_peak_extra_bytes,
           inflight_microbatches(plan, c.stage, c.replica), ctx.model, ctx.settings)
    memo = ctx.memo
    mem = memo.get(key)
    if mem is None:
        if len(memo) >= MEMO_MAX:
            memo.clear()
        mem = memo[key] = _replica_memory(plan, ctx, c)
    return mem


def _replica_memory(plan: Plan, ctx: SimContext, c: ReplicaCosts) -> MemoryBreakdown:
    w, g, o = state_bytes_per_param(plan)
    o = F.sharded_optimizer_bytes(o, plan.dp_degree, plan.distributed_optimizer) * \
        (optimizer_params(plan, ctx, c) / c.params if c.params else 1.0)
    st = ctx.settings
    boundary = ctx.model.boundary_activation_bytes(plan.micro_batch_size, plan.bytes_per_element)
    terms = F.memory_terms(c.params, c.act_bytes_per_mb, inflight_microbatches(plan, c.stage, c.replica),
                           c.max_layer_act_bytes, boundary, (w, g, o), st.activation_reserve_factor,
                           st.grad_bucket_elems, st.memory_overhead_bytes, c.act_peak_extra_bytes)
    return MemoryBreakdown(*(float(t) for t in terms))


def usable_bytes(ctx: SimContext, gpu_type: str) -> float:
    return F.usable_bytes(ctx.catalog.get(gpu_type).memory_bytes, ctx.settings.memory_headroom_fraction)
