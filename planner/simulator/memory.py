"""Peak memory of one GPU: model states, in-flight activations, transient buffers, runtime overhead.

- weights + gradients + optimizer states per parameter held (fp32: 4 + 4 + 8 for Adam; 16-bit mixed
  precision: 2 + 4 (fp32 main grad) + 4 (fp32 master) + 8); the distributed optimizer divides the master
  and Adam states by D; SGD keeps one momentum buffer;
- activations of in-flight micro-batches: 1F1B keeps ``min(S - s, m)`` on stage s (capped by the
  micro-batch count, unlike Sailor), times the allocator reserve factor;
- transient: one more layer's activations during backward (or the logits on the last stage) and the p2p
  receive/send buffers;
- a flat gradient bucket when the runtime uses one, and a constant overhead (context, communicators).
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.plan import Plan
from planner.simulator.settings import SimContext
from planner.simulator.stage import ReplicaCosts


@dataclass(frozen=True)
class MemoryBreakdown:
    weights_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    transient_bytes: float
    overhead_bytes: float

    @property
    def total_bytes(self) -> float:
        return (self.weights_bytes + self.grads_bytes + self.optimizer_bytes + self.activations_bytes
                + self.transient_bytes + self.overhead_bytes)


def state_bytes_per_param(plan: Plan) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per parameter, before distributed-optimizer sharding."""
    mixed = plan.precision != "fp32"
    weights = 2.0 if mixed else 4.0
    grads = 4.0
    opt = {"adamw": 8.0, "adam": 8.0, "sgd": 4.0}[plan.optimizer] + (4.0 if mixed else 0.0)
    return weights, grads, opt


def inflight_microbatches(plan: Plan, s: int, j: int) -> int:
    return min(plan.num_stages - s, plan.microbatch_counts[j])


def replica_memory(plan: Plan, ctx: SimContext, c: ReplicaCosts) -> MemoryBreakdown:
    w, g, o = state_bytes_per_param(plan)
    if plan.distributed_optimizer:
        o /= plan.dp_degree
    st = ctx.settings
    act = c.act_bytes_per_mb * inflight_microbatches(plan, c.stage, c.replica) * st.activation_reserve_factor
    boundary = ctx.model.boundary_activation_bytes(plan.micro_batch_size, plan.bytes_per_element)
    transient = c.max_layer_act_bytes + 2 * boundary
    bucket = 4.0 * min(c.params, st.grad_bucket_elems)
    return MemoryBreakdown(weights_bytes=w * c.params, grads_bytes=g * c.params + bucket,
                           optimizer_bytes=o * c.params, activations_bytes=act, transient_bytes=transient,
                           overhead_bytes=st.memory_overhead_bytes)


def usable_bytes(ctx: SimContext, gpu_type: str) -> float:
    return ctx.catalog.get(gpu_type).memory_bytes * (1.0 - ctx.settings.memory_headroom_fraction)
