"""The cost model's shared formulas: one expression of every term the simulator and the search both use.

Every function here works on Python floats and on numpy arrays alike (elementwise, the stage axis last),
so :func:`planner.simulator.simulate` (one plan, scalars) and the search's vectorised evaluator
(``planner/search``, thousands of splits and rows at once) evaluate the same expression, in the same order
of floating-point operations where the shapes allow it. Nothing here knows about plans or contexts: inputs
are plain numbers (seconds, bytes, parameter counts) and flags.

Terms:
- precision and optimizer: bytes per element, bytes per parameter of weights / gradients / optimizer states;
- per-stage time: offset-adjusted profiled layer times, recomputation, busy time per micro-batch with
  blocking p2p, the 1F1B steady-state period (round-trip bounds), fill/drain, one pipeline's makespan;
- memory: the six terms of a GPU's peak (weights, gradients + bucket, optimizer states, in-flight
  activations, transient buffers, runtime overhead);
- optimizer step and ring all-reduce time.
"""
from __future__ import annotations

import numpy as np

from planner.plan import PRECISION_BYTES

OPTIMIZER_STATE_BYTES = {"adamw": 8.0, "adam": 8.0, "sgd": 4.0}   # fp32 moments per parameter
GRAD_BYTES_PER_PARAM = 4.0             # gradients are kept and reduced in fp32 (main grads)


# --- precision and optimizer ----------------------------------------------------------------------------

def bytes_per_element(precision: str) -> int:
    """Bytes of one activation / weight element in ``precision``."""
    return PRECISION_BYTES[precision]


def state_bytes_per_param(precision: str, optimizer: str) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per parameter held, before distributed-optimizer sharding.

    fp32: 4 + 4 + 8 (Adam); 16-bit mixed precision: 2 + 4 (fp32 main grad) + (8 + 4 fp32 master copy);
    SGD keeps one momentum buffer (4).
    """
    mixed = precision != "fp32"
    weights = 2.0 if mixed else 4.0
    opt = OPTIMIZER_STATE_BYTES[optimizer] + (4.0 if mixed else 0.0)
    return weights, GRAD_BYTES_PER_PARAM, opt


def sharded_optimizer_bytes(opt_bytes_per_param, dp, distributed: bool):
    """Optimizer bytes per parameter on one GPU: the distributed optimizer splits them over ``dp`` replicas."""
    return opt_bytes_per_param / dp if distributed else opt_bytes_per_param


def grad_bytes(params):
    """Bytes of the gradient of ``params`` parameters as reduced across replicas."""
    return params * GRAD_BYTES_PER_PARAM


# --- compute --------------------------------------------------------------------------------------------

def offset_adjusted(layer_s, offset_s: float):
    """A profiled per-layer time with the per-call overhead a full schedule hides: t -> max(t - o, o)."""
    return np.maximum(np.asarray(layer_s, dtype=float) - offset_s, offset_s)


def _where(cond, a, b):
    """``np.where(cond, a, b)``; for a Python bool and two Python floats (one plan), the chosen float itself (the
    value ``np.where`` holds, without building an array)."""
    if type(cond) is bool and type(a) is float and type(b) is float:
        return a if cond else b
    return np.where(cond, a, b)


def recompute_bwd_s(layers_fwd_s, layers_bwd_s, recompute):
    """Backward seconds of a stage's transformer layers; full recomputation replays their forward."""
    return layers_bwd_s + _where(recompute, layers_fwd_s, 0.0)


def layer_activation_bytes(num_layers, layer_act_bytes, boundary_bytes, recompute):
    """Activations one micro-batch keeps for backward in ``num_layers`` layers (full recomputation keeps
    only each layer's input, ``boundary_bytes``: :func:`planner.simulator.stage.recompute_keep_and_mask`)."""
    return _where(recompute, boundary_bytes, layer_act_bytes) * num_layers


def stage_mask_bytes(num_layers, mask_bytes):
    """The causal mask a stage keeps once per micro-batch when it holds at least one layer."""
    return _where(num_layers > 0 if type(num_layers) is int else np.asarray(num_layers) > 0, mask_bytes, 0.0)


def compute_s(fwd_s, bwd_s, overhead_s: float):
    """Seconds one stage computes per micro-batch (forward + backward + per-micro-batch overhead)."""
    return fwd_s + bwd_s + overhead_s


def _pad(p2p_s, n_stages: int, shape: tuple[int, ...]):
    p = np.broadcast_to(np.asarray(p2p_s, dtype=float), shape[:-1] + (n_stages - 1,))
    zero = np.zeros(shape[:-1] + (1,))
    return np.concatenate([zero, p], axis=-1), np.concatenate([p, zero], axis=-1)


def busy_s(compute, p2p_s, blocking: bool):
    """Steady-state busy seconds per micro-batch of every stage ([..., S]).

    ``compute`` [..., S] from :func:`compute_s`; ``p2p_s`` one transfer across each boundary ([..., S-1] or a
    scalar for every boundary). With blocking p2p a stage also holds its two transfers (activation and
    gradient) on each adjacent boundary.
    """
    compute = np.asarray(compute, dtype=float)
    if not blocking or compute.shape[-1] < 2:
        return compute
    before, after = _pad(p2p_s, compute.shape[-1], compute.shape)
    return compute + 2 * before + 2 * after


def round_trip_bounds(compute, p2p_s):
    """``round_trip_k / (S - k)`` for k = 0..S-2 ([..., S-1]): stage k keeps at most S - k micro-batches in
    flight, so once more run, a round trip from k to the last stage and back (compute of stages >= k and two
    transfers per boundary after k) is shared by S - k micro-batches."""
    compute = np.asarray(compute, dtype=float)
    s_num = compute.shape[-1]
    if s_num < 2:
        return compute[..., :0]
    p = np.broadcast_to(np.asarray(p2p_s, dtype=float), compute.shape[:-1] + (s_num - 1,))
    comp_suffix = np.cumsum(compute[..., ::-1], axis=-1)[..., ::-1][..., :s_num - 1]
    p2p_suffix = np.cumsum(p[..., ::-1], axis=-1)[..., ::-1]
    return (comp_suffix + 2 * p2p_suffix) / (s_num - np.arange(s_num - 1))


def period_levels(busy_max, trips):
    """Steady period per micro-batch-count level ([..., S+1]: m = 1..S, then m > S).

    period(m) = max(busiest stage, max of the round-trip bounds of the stages k with m > S - k): levels 1 and
    2 are the busiest stage; level m >= 3 (index m - 1) adds the suffix maximum of the round trips from
    k = S - m + 1, i.e. the suffix maxima read backwards (one array operation for every level).
    """
    busy_max = np.asarray(busy_max, dtype=float)
    trips = np.asarray(trips, dtype=float)
    s_num = trips.shape[-1] + 1
    out = np.repeat(busy_max[..., None], s_num + 1, axis=-1)
    if s_num < 2:
        return out
    sufmax = np.maximum.accumulate(trips[..., ::-1], axis=-1)        # suffix maxima, from k = S - 2 down to 0
    out[..., 2:] = np.maximum(busy_max[..., None], sufmax)
    return out
    sufmax = np.maximum.accumulate(trips[..., ::-1], axis=-1)[..., ::-1]     # max over k' >= k
    for m in range(2, s_num + 2):
        k0 = max(0, s_num - m + 1)
        if k0 <= s_num - 2:
            out[..., m - 1] = np.maximum(busy_max, sufmax[..., k0])
    return out


def steady_period_s(busy, trips, m: int) -> float:
    """Seconds per micro-batch in the 1F1B steady state of one pipeline running ``m`` micro-batches."""
    levels = period_levels(np.max(busy), trips)
    return float(levels[min(m, len(levels)) - 1])


def fill_drain_s(compute, p2p_s):
    """One micro-batch through every stage forward and backward, across every boundary twice ([...])."""
    compute = np.asarray(compute, dtype=float)
    s_num = compute.shape[-1]
    p = np.broadcast_to(np.asarray(p2p_s, dtype=float), compute.shape[:-1] + (max(s_num - 1, 0),))
    return compute.sum(axis=-1) + 2 * p.sum(axis=-1)


def pipeline_s(m, period_s, fill_s):
    """1F1B makespan of one pipeline: ``(m - 1) * period(m) + fill/drain``."""
    return (m - 1) * period_s + fill_s


def pipeline_s_of_m(levels, fill_s: float, n_mb: int) -> np.ndarray:
    """:func:`pipeline_s` for m = 1..n_mb, the period read from ``levels`` (:func:`period_levels`)."""
    m = np.arange(1, n_mb + 1)
    return pipeline_s(m, levels[np.minimum(m, len(levels)) - 1], fill_s)


# --- one pipeline on Python floats (simulate: one plan) ---------------------------------------------------
# The array functions above, evaluated on plain lists of Python floats for one pipeline: the same IEEE double
# operations in the same order as numpy performs them (its sum adds fewer than 8 values one after another from
# 0.0 and pairs larger ones, so those go to numpy; np.maximum and np.minimum return the second value on a tie,
# which only tells -0.0 from 0.0, and keep a nan), hence the same floats, without numpy's per-call cost on a
# handful of values. tests/planner/test_simulate_speed_s17s.py checks each against its array twin, bit for bit.

def sum_1d(values) -> float:
    """``float(np.sum(values))`` of a sequence of Python floats."""
    if len(values) >= 8:
        return float(np.sum(np.asarray(values, dtype=float)))
    total = 0.0
    for v in values:
        total += v
    return total


def max_1d(values):
    """``np.max(values)`` of a non-empty sequence (``np.maximum`` folded from the first value up to 4 values;
    numpy reduces more in an order of its own, which can keep the other of -0.0 and 0.0)."""
    if len(values) > 4:
        return float(np.max(np.asarray(values, dtype=float)))
    it = iter(values)
    best = next(it)
    for v in it:
        best = best if best > v or best != best else v          # numpy keeps a nan
    return best


def min_1d(values):
    """``np.min(values)`` of a non-empty sequence (as :func:`max_1d`)."""
    if len(values) > 4:
        return float(np.min(np.asarray(values)))
    it = iter(values)
    low = next(it)
    for v in it:
        low = low if low < v or low != low else v
    return low


def busy_s_1d(compute: list[float], p2p_s: list[float], blocking: bool) -> list[float]:
    """:func:`busy_s` of one pipeline (``p2p_s``: one value per boundary)."""
    n = len(compute)
    if not blocking or n < 2:
        return list(compute)
    before, after = [0.0] + list(p2p_s), list(p2p_s) + [0.0]
    return [compute[i] + 2 * before[i] + 2 * after[i] for i in range(n)]


def round_trip_bounds_1d(compute: list[float], p2p_s: list[float]) -> list[float]:
    """:func:`round_trip_bounds` of one pipeline (suffix sums accumulated from the last stage, as cumsum does)."""
    s_num = len(compute)
    if s_num < 2:
        return []
    comp_suffix, acc = [0.0] * s_num, compute[-1]
    comp_suffix[-1] = acc
    for k in range(s_num - 2, -1, -1):
        acc = acc + compute[k]
        comp_suffix[k] = acc
    p2p_suffix, acc = [0.0] * (s_num - 1), p2p_s[-1]
    p2p_suffix[-1] = acc
    for k in range(s_num - 3, -1, -1):
        acc = acc + p2p_s[k]
        p2p_suffix[k] = acc
    return [(comp_suffix[k] + 2 * p2p_suffix[k]) / (s_num - k) for k in range(s_num - 1)]


def period_levels_1d(busy_max: float, trips: list[float]) -> list[float]:
    """:func:`period_levels` of one pipeline."""
    s_num = len(trips) + 1
    out = [busy_max] * (s_num + 1)
    if s_num < 2:
        return out
    acc = trips[-1]
    for i in range(s_num - 1):
        t = trips[s_num - 2 - i]
        acc = acc if acc > t or acc != acc else t        # running maximum from the last round trip
        out[2 + i] = busy_max if busy_max > acc or busy_max != busy_max else acc
    return out


def fill_drain_s_1d(compute: list[float], p2p_s: list[float]) -> float:
    """:func:`fill_drain_s` of one pipeline."""
    return sum_1d(compute) + 2 * sum_1d(p2p_s)


# --- optimizer step and gradient sync -------------------------------------------------------------------

def update_s(update_s_per_param, params, dp, distributed: bool):
    """Optimizer step seconds of one GPU; the distributed optimizer updates a 1/dp shard."""
    t = update_s_per_param * params
    return t / dp if distributed else t


def ring_halves_s(n, grad_halves, grad_chunk_s, param_halves, param_chunk_s, scale):
    """Ring collectives of the distributed optimizer: each half is ``n - 1`` steps of one chunk; a ring
    all-reduce of gradients is 2 gradient halves, reduce-scatter + all-gather is 1 gradient + 1 parameter half.
    ``scale`` (>= 1, ``RuntimeSettings.sharded_collective_scale``): how much slower the backend's
    reduce-scatter and all-gather run than this ring model (1 for NCCL's rings; measured by sailor-profile)."""
    return (n - 1) * (grad_halves * grad_chunk_s + param_halves * param_chunk_s) * scale


def ring_s(n, chunk_s):
    """Ring all-reduce over ``n`` members: 2 (n - 1) steps of one chunk (``chunk_s`` = one chunk's time)."""
    return 2 * (n - 1) * chunk_s


# --- memory ---------------------------------------------------------------------------------------------

def activation_peak_bytes(act_bytes_per_mb, inflight, peak_extra_bytes=0.0):
    """Peak activation bytes of one GPU: ``inflight`` micro-batches keep theirs, and the forward of the last
    one may pass through a short-lived peak ``peak_extra_bytes`` above what it keeps (full recomputation:
    :func:`planner.simulator.activations.recompute_peak_excess_bytes`)."""
    return act_bytes_per_mb * inflight + peak_extra_bytes


def memory_terms(params, act_bytes_per_mb, inflight, max_layer_act_bytes, boundary_bytes,
                 state_bytes: tuple[float, float, float], reserve_factor: float, bucket_elems: float,
                 overhead_bytes: float, act_peak_extra_bytes=0.0):
    """(weights, grads + bucket, optimizer, activations, transient, overhead) bytes of one GPU.

    ``state_bytes``: per-parameter (weights, grads, optimizer) after sharding; activations: ``inflight``
    micro-batches keep theirs, plus a forward's short-lived peak (:func:`activation_peak_bytes`), times the
    allocator reserve; transient: one more layer's activations during backward (or the logits) and the p2p
    send/receive buffers; a flat fp32 gradient bucket if the runtime keeps one.
    """
    w, g, o = state_bytes
    bucket = GRAD_BYTES_PER_PARAM * (min_1d((params, bucket_elems)) if type(params) is int and type(bucket_elems) is int
                                     else np.minimum(params, bucket_elems))
    act = activation_peak_bytes(act_bytes_per_mb, inflight, act_peak_extra_bytes) * reserve_factor
    return (w * params, g * params + bucket, o * params, act,
            max_layer_act_bytes + 2 * boundary_bytes, overhead_bytes)


def memory_total(terms) -> float:
    """Sum of :func:`memory_terms`, in their order."""
    w, g, o, act, transient, overhead = terms
    return w + g + o + act + transient + overhead


def zone_reduce_broadcast_s(ring_time_s):
    """Inside one zone of a hierarchical sync: reduce to the zone's leader and broadcast back, about three
    ring halves (1.5 ring all-reduces)."""
    return 1.5 * ring_time_s


def ring_edge_bytes(n, nbytes):
    """Bytes one edge of an ``n``-member ring all-reduce of ``nbytes`` carries: 2 (n - 1) / n of them
    (0 for n <= 1)."""
    return 2 * (n - 1) / np.maximum(n, 1) * nbytes


def usable_bytes(memory_bytes: float, headroom_fraction: float) -> float:
    """GPU memory a plan may fill: the device's bytes less the headroom kept free."""
    return memory_bytes * (1.0 - headroom_fraction)


# --- utilisation ----------------------------------------------------------------------------------------

def model_flops_per_sample(num_layers, layer_fwd_flops_1: float, head_fwd_flops_1: float, has_head):
    """Model FLOPs one sample needs in ``num_layers`` transformer layers (plus the LM head where
    ``has_head``): forward + backward = 3 x forward; recomputation is not model work and is not counted."""
    return 3.0 * (num_layers * layer_fwd_flops_1 + _where(has_head, head_fwd_flops_1, 0.0))


def mfu(model_flops_per_iteration, iteration_s, peak_flops_per_s):
    """Model FLOP utilisation: achieved model FLOP/s over the summed peak FLOP/s of the GPUs used."""
    return model_flops_per_iteration / iteration_s / peak_flops_per_s
