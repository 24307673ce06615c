"""Activation bytes a stage keeps for backward, as the megatron-sailor runtime keeps them.

Two sources, per (GPU type, micro-batch, TP):

- a profile's measured ``layer_act_bytes`` / ``embedding_act_bytes`` / ``head_act_bytes`` (``sailor-profile``
  counts them with the runtime's saved-tensor counter) when the profile has them;
- otherwise, under the ``megatron-sailor`` preset (``RuntimeSettings.activation_model == "megatron-core"``),
  :func:`megatron_core_terms`: every tensor megatron-core 0.16.1's local GPT layer spec (the runtime's) saves
  for backward, term by term (docs/SIMULATOR.md "Activations" lists them, and what each was checked
  against); under ``sailor-deepspeed``, Korthikanti et al.'s estimate (:meth:`ModelSpec.layer_activation_bytes`).

Recomputation (megatron-core's, per plan): ``selective`` (core attention) drops the score-sized tensors of
every layer; ``full`` ``uniform`` keeps one input per group of ``n`` layers, ``block`` keeps the input of each of
the first ``n`` layers and everything of the others. Backward repeats the recomputed forwards. The causal
mask (``s^2`` booleans) is kept once per micro-batch by a stage with at least one layer, whatever recomputes.

Short-lived peak of full recomputation (:func:`recompute_peak_excess_bytes`): megatron-core runs each layer's
bias-dropout-adds under ``torch.enable_grad`` even inside a checkpointed (``no_grad``) forward, so with hidden
dropout and linear biases each recomputed layer saves its two dropout masks; they stay alive, chained through
the residual, until the group's forward returns, and the group's inputs are saved only after that. The
micro-batch in its forward can therefore pass through a peak above what it keeps until backward.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.model import ModelSpec
from planner.plan import Plan

INDEX_BYTES = 8          # int64 token ids, position ids and labels
MASK_TYPE_BYTES = 4      # selective recompute: megatron-core saves the attention-mask type as an int32 tensor
SOFTMAX_BYTES = 4        # megatron-core computes the attention softmax in fp32 (attention_softmax_in_fp32)
LOGIT_BYTES = 4          # the runtime's vocab-parallel cross entropy keeps fp32 logits


@dataclass(frozen=True)
class ActivationTerms:
    """Bytes kept per micro-batch on one GPU of a TP-``tp`` replica."""

    layer: float         # one transformer layer, nothing recomputed
    scores: float        # the part of ``layer`` that selective recomputation does not keep
    group_input: float   # what one full-recompute group keeps: its input
    mask: float          # the causal mask, once per micro-batch on a stage with >= 1 layer
    embedding: float     # first stage: token and position ids (+ the embedding-dropout mask)
    head: float          # last stage: final norm, fp32 logits, labels
    recompute_live: float = 0.0   # saved inside a recomputed layer's forward, alive until its group returns
    selective_keep: float = 0.0   # what selective recomputation keeps per layer besides ``layer - scores``


def megatron_core_terms(model: ModelSpec, mbs: int, tp: int, elem_bytes: int, hidden_dropout: bool = False,
                        attention_dropout: bool = False) -> ActivationTerms:
    """What megatron-core 0.16.1 (local spec, no sequence parallelism, unfused softmax/bias-gelu, the
    runtime's dropout and cross entropy) saves for backward, per micro-batch, on one of ``tp`` ranks.

    Per layer, with ``e`` bytes per element, ``sb = mbs * seq``: the inputs and outputs of both norms
    (``4 sb h e``, replicated over TP) and their mean/rstd (``4 sb e``); the QKV output, the attention
    context, the FC1 output and the activation output (``sb (qkv + h + fc1 + ffn) e / tp``); the fp32 softmax
    output (``mbs heads s^2 / tp`` x 4) plus its 16-bit copy that the attention matmul keeps (16-bit only);
    with attention dropout its mask and the dropped probabilities (which replace the 16-bit copy); with
    hidden dropout the two bias-dropout-add masks (``2 sb h e``). TP > 1: the vocab-parallel embedding keeps
    its out-of-range token mask (``sb`` booleans). Inside a recomputed forward (``recompute_live``): the two
    bias-dropout-add masks again, when there is hidden dropout and the linear layers have biases (without a
    bias the masked tensor does not require grad under the checkpoint's ``no_grad``, and nothing is saved).
    """
    e = elem_bytes
    s, h, b = model.seq_length, model.hidden_size, mbs
    sb = b * s
    qkv = h + 2 * model.kv_heads * model.head_dim
    fc1 = (2 if model.gated_mlp else 1) * model.ffn_hidden_size
    score_elems = b * model.num_heads * s * s / tp
    score_bytes = SOFTMAX_BYTES + (e if (e != SOFTMAX_BYTES or attention_dropout) else 0) \
        + (e if attention_dropout else 0)
    scores = score_elems * score_bytes
    layer = e * sb * (4 * h + (qkv + h + fc1 + model.ffn_hidden_size) / tp) + 4 * sb * e + scores \
        + (2 * sb * h * e if hidden_dropout else 0)
    embedding = INDEX_BYTES * (sb + s) + (sb * h * e if hidden_dropout else 0) + (sb if tp > 1 else 0)
    vocab = model.padded_vocab_for_tp(tp) / tp
    head = 2 * sb * h * e + 2 * sb * e + LOGIT_BYTES * sb * vocab + sb + INDEX_BYTES * sb
    live = 2 * sb * h * e if hidden_dropout and model.bias else 0
    return ActivationTerms(layer=float(layer), scores=float(scores),
                           group_input=float(sb * h * e), mask=float(s * s),
                           embedding=float(embedding), head=float(head), recompute_live=float(live),
                           selective_keep=float(MASK_TYPE_BYTES))


def score_elems(model: ModelSpec, micro_batch: int, tp: int) -> float:
    return micro_batch * model.num_heads * model.seq_length ** 2 / tp


def layer_bytes(plan: Plan, model: ModelSpec, la: float, tp: int, scores: float | None = None,
                selective_keep: float = 0.0) -> float:
    """One layer's kept bytes per micro-batch from the full-layer figure ``la``; selective recomputation drops
    ``scores`` (the score-sized tensors; estimated when not given: the 16-bit probabilities and, in 16-bit,
    the fp32 softmax output) and keeps ``selective_keep`` (the checkpoint's int32 mask-type tensor)."""
    if plan.recompute[0] != "selective":
        return la
    if scores is None:
        e = plan.bytes_per_element
        scores = score_elems(model, plan.micro_batch_size, tp) * (e + (4.0 if e != 4 else 0.0))
    return la - scores + selective_keep


def stage_layers_bytes(plan: Plan, model: ModelSpec, la: float, num_layers: int, tp: int,
                       scores: float | None = None, group_input: float | None = None,
                       selective_keep: float = 0.0) -> tuple[float, float]:
    """(kept bytes of the stage's layers per micro-batch, fraction of the forward recomputed in backward).

    ``group_input``: what one full-recompute group keeps (default: the boundary activation)."""
    granularity, method, group = plan.recompute
    per_layer = layer_bytes(plan, model, la, tp, scores, selective_keep)
    if granularity != "full" or num_layers == 0:
        return per_layer * num_layers, 0.0
    keep = group_input if group_input is not None else \
        model.boundary_activation_bytes(plan.micro_batch_size, plan.bytes_per_element)
    group = min(group, num_layers)
    if method == "uniform":
        return keep * math.ceil(num_layers / group), 1.0
    return keep * group + per_layer * (num_layers - group), group / num_layers


def recompute_peak_excess_bytes(num_layers, recompute: tuple[str | None, str | None, int | None],
                                live_per_layer: float, group_input: float, mask: float, layer: float,
                                after=0.0):
    """Bytes by which one micro-batch's forward on a stage of ``num_layers`` layers peaks above what it keeps
    until backward (>= 0); vectorised over ``num_layers`` and ``after``.

    Only full recomputation with ``live_per_layer`` > 0 (:attr:`ActivationTerms.recompute_live`) has such a
    peak. With ``n = min(recompute_num_layers, L)``: ``uniform`` runs groups of ``n`` layers (the last
    ``L - (G - 1) n``; megatron-core 0.16.1 itself fails when ``n`` does not divide ``L``), ``block`` one
    checkpointed layer at each of the first ``n`` positions, then ``L - n`` stored layers of ``layer`` bytes.
    Counting from what the micro-batch held before its layers (it cancels): group ``g`` (from 0, ``n_g``
    layers) starts with ``g`` group inputs and, from ``g >= 1`` on, the causal ``mask`` kept, and ends holding
    ``n_g live_per_layer`` more before its inputs are saved; the forward ends with ``G`` group inputs, the
    mask, the stored layers and ``after`` (the last stage's head). Excess = max over groups of the former
    minus the latter, floored at 0.
    """
    granularity, method, group = recompute
    L = np.asarray(num_layers, dtype=float)
    zero = 0.0 * L + 0.0 * np.asarray(after, dtype=float)
    if granularity != "full" or live_per_layer <= 0 or not group:
        return zero
    T, I, M = float(live_per_layer), float(group_input), float(mask)
    n = np.maximum(np.minimum(float(group), L), 1.0)
    if method == "block":
        peak = (n - 1) * I + np.where(n > 1, M, 0.0) + T
        kept = n * I + M + (L - n) * layer + after
    else:
        groups = np.ceil(L / n)
        last_n = L - (groups - 1) * n
        peak = np.maximum((groups - 1) * I + np.where(groups > 1, M, 0.0) + last_n * T,
                          np.where(groups > 1, (groups - 2) * I + np.where(groups > 2, M, 0.0) + n * T, 0.0))
        kept = groups * I + M + after
    return zero + np.where(L > 0, np.maximum(peak - kept, 0.0), 0.0)
