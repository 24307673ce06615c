"""Activation bytes of a stage's transformer layers under the plan's precision and recomputation, as the
megatron-sailor runtime keeps them (counted by benchmarks/memory_model.py with saved_tensors_hooks).

- 16-bit: megatron-core's attention softmax runs in fp32 (``attention_softmax_in_fp32``): its fp32 output
  is kept besides the 16-bit probabilities, 4 more bytes per attention-score element (``heads s^2 / tp``).
- selective recompute (``core_attn``): the score-sized tensors are not kept (recomputed in backward).
- full recompute: ``uniform`` keeps one input per group of ``n`` layers; ``block`` keeps the input of each
  of the first ``n`` layers and all activations of the others. Backward repeats the recomputed forwards.
"""
from __future__ import annotations

import math

from planner.model import ModelSpec
from planner.plan import Plan


def score_elems(model: ModelSpec, micro_batch: int, tp: int) -> float:
    return micro_batch * model.num_heads * model.seq_length ** 2 / tp


def layer_bytes(plan: Plan, model: ModelSpec, la: float, tp: int) -> float:
    """One layer's kept bytes per micro-batch, from the base estimate ``la`` (scores counted once, 16-bit)."""
    scores = score_elems(model, plan.micro_batch_size, tp)
    if plan.precision != "fp32":
        la += 4.0 * scores
    if plan.recompute[0] == "selective":
        la -= scores * (plan.bytes_per_element + (4.0 if plan.precision != "fp32" else 0.0))
    return la


def stage_layers_bytes(plan: Plan, model: ModelSpec, la: float, num_layers: int, tp: int) -> tuple[float, float]:
    """(kept bytes of the stage's layers per micro-batch, fraction of the forward recomputed in backward)."""
    granularity, method, group = plan.recompute
    per_layer = layer_bytes(plan, model, la, tp)
    if granularity != "full" or num_layers == 0:
        return per_layer * num_layers, 0.0
    boundary = model.boundary_activation_bytes(plan.micro_batch_size, plan.bytes_per_element)
    group = min(group, num_layers)
    if method == "uniform":
        return boundary * math.ceil(num_layers / group), 1.0
    return boundary * group + per_layer * (num_layers - group), group / num_layers
