"""Per (GPU type, TP, micro-batch) tables and vectorised per-stage quantities for candidate layer splits.

Every term is computed by :mod:`planner.simulator.formulas`, the functions :mod:`planner.simulator.stage` and
:mod:`planner.simulator.memory` call for one plan, here on arrays of splits; ``tests/planner/test_planner_evaluator.py``
checks the numbers against :func:`planner.simulator.simulate` on many plans, and ``sailor-plan`` checks the
returned plans in production (:mod:`planner.search.verify`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
import numpy as np

from planner.simulator import formulas as F
from planner.simulator.activations import recompute_peak_excess_bytes
from planner.simulator.settings import SimContext
from planner.simulator.stage import layer_sizes, recompute_keep_and_mask, recompute_live_bytes
from planner.simulator.tied import head_params_for_plan


@dataclass(frozen=True)
class _PlanShape:
    """The two plan fields the simulator's head-parameter rule reads (the search's plans are untied)."""

    tie_embeddings: bool
    num_stages: int


@dataclass(frozen=True)
class TypeTable:
    """Costs of one GPU of ``gpu_type`` at (``mbs``, ``tp``); arrays are per transformer layer."""

    gpu_type: str
    tp: int
    mbs: int
    cum_fwd_s: np.ndarray      # prefix sums (length L+1) of the offset-adjusted per-layer forward seconds
    cum_bwd_s: np.ndarray
    emb_fwd_s: float
    emb_bwd_s: float
    head_fwd_s: float
    head_bwd_s: float
    layer_params: int
    emb_params: int
    head_params: int
    head_params_tied_single: int   # a tied plan with one stage: the head reuses the embedding (no matrix)
    layer_act_bytes: float
    keep_bytes: float          # what one layer keeps per micro-batch under full recomputation
    mask_bytes: float          # the causal mask a stage with >= 1 layer keeps per micro-batch
    emb_act_bytes: float
    head_act_bytes: float
    update_s_per_param: float
    recompute_live_bytes: float         # saved inside a recomputed layer's forward until its group returns
    usable_bytes: float
    usd_per_s: float
    estimated: bool


def build_type_table(ctx: SimContext, gpu_type: str, tp: int, mbs: int, precision: str) -> TypeTable:
    costs = ctx.profiles.get(gpu_type, mbs, tp)
    off = ctx.settings.profile_offset_s
    fwd = F.offset_adjusted(costs.layer_fwd_s, off)
    bwd = F.offset_adjusted(costs.layer_bwd_s, off)
    elem = F.bytes_per_element(precision)
    lp, ep, _, la, ea, ha = layer_sizes(ctx, costs, tp, elem)
    # the last stage's norm + LM head as simulate() counts it for an untied plan (a tied *model* planned
    # untied still holds its own output matrix)
    hp = head_params_for_plan(_PlanShape(False, 2), ctx.model, tp, costs.head_params)
    hp_tied_single = head_params_for_plan(_PlanShape(True, 1), ctx.model, tp, costs.head_params)
    keep, mask = recompute_keep_and_mask(ctx, costs, mbs, tp, elem)
    gpu = ctx.catalog.get(gpu_type)
    return TypeTable(
        gpu_type=gpu_type, tp=tp, mbs=mbs, cum_fwd_s=np.concatenate([[0.0], np.cumsum(fwd)]),
        cum_bwd_s=np.concatenate([[0.0], np.cumsum(bwd)]), emb_fwd_s=costs.embedding_fwd_s,
        emb_bwd_s=costs.embedding_bwd_s, head_fwd_s=costs.head_fwd_s, head_bwd_s=costs.head_bwd_s,
        layer_params=int(lp), emb_params=int(ep), head_params=int(hp),
        head_params_tied_single=int(hp_tied_single), layer_act_bytes=float(la),
        keep_bytes=float(keep), mask_bytes=float(mask), emb_act_bytes=float(ea), head_act_bytes=float(ha),
        update_s_per_param=costs.update_s_per_param, recompute_live_bytes=recompute_live_bytes(ctx, mbs, tp, elem),
        usable_bytes=F.usable_bytes(gpu.memory_bytes, ctx.settings.memory_headroom_fraction),
        usd_per_s=gpu.usd_per_s, estimated=costs.estimated)


@dataclass(frozen=True)
class StageArrays:
    """Per (split, stage) quantities of one type table for a batch of splits (arrays shaped [K, S])."""

    compute_s: np.ndarray      # fwd + bwd (+ per-micro-batch overhead): the fill/drain term
    bwd_s: np.ndarray
    params: np.ndarray         # parameters held by one GPU
    update_s: np.ndarray
    memory_bytes: np.ndarray   # peak per GPU with S - s micro-batches in flight
    fits: np.ndarray           # [K] every stage fits
    counts: np.ndarray         # [K, S] layers per stage


def head_params(tt: TypeTable, num_stages: int, tie_embeddings: bool) -> int:
    """Last stage's norm + LM head parameters on one GPU (simulate()'s rule: planner.simulator.tied)."""
    return tt.head_params_tied_single if tie_embeddings and num_stages == 1 else tt.head_params


def stage_params(tt: TypeTable, counts: np.ndarray, first: np.ndarray, last: np.ndarray, head) -> np.ndarray:
    """Parameters one GPU of ``tt`` holds for a stage of ``counts`` layers (``first``: with the embedding,
    ``last``: with the head of ``head`` parameters, :func:`head_params`); the one expression of it in the search."""
    return counts * tt.layer_params + first * tt.emb_params + last * head


def params_and_update(ctx: SimContext, tt: TypeTable, counts: np.ndarray, tie_embeddings: bool
                   ) -> tuple[np.ndarray, np.ndarray]:
    """([K, S] parameters held by one GPU, [K, S] its optimizer step) of splits ``counts``."""
    s_num = counts.shape[1]
    first = np.zeros(s_num, dtype=bool)
    first[0] = True
    last = np.zeros(s_num, dtype=bool)
    last[-1] = True
    params = stage_params(tt, counts, first, last, head_params(tt, s_num, tie_embeddings))
    return params, F.update_s(tt.update_s_per_param, params, 1, False) * ctx.settings.update_scale


def stage_compute(ctx: SimContext, tt: TypeTable, starts: np.ndarray, ends: np.ndarray, first: np.ndarray,
             last: np.ndarray, recompute: bool) -> tuple[np.ndarray, np.ndarray]:
    """(compute seconds, backward seconds) per micro-batch of stages holding layers ``starts`` .. ``ends`` - 1,
    the first / last stage where ``first`` / ``last`` (all broadcast together)."""
    fwd = tt.cum_fwd_s[ends] - tt.cum_fwd_s[starts]
    bwd = F.recompute_bwd_s(fwd, tt.cum_bwd_s[ends] - tt.cum_bwd_s[starts], recompute)
    fwd = fwd + first * tt.emb_fwd_s + last * tt.head_fwd_s
    bwd = bwd + first * tt.emb_bwd_s + last * tt.head_bwd_s
    scale = ctx.settings.compute_scale
    return F.compute_s(fwd * scale, bwd * scale, ctx.settings.per_microbatch_overhead_s), bwd * scale


def stage_arrays(ctx: SimContext, tt: TypeTable, counts: np.ndarray, precision: str,
                 optimizer: str, recompute: bool = False, tie_embeddings: bool = False,
                 terms: tuple | None = None) -> StageArrays:
    """Quantities for splits ``counts`` ([K, S] layers per stage) on GPU table ``tt`` (``recompute``: full
    activation recomputation; ``tie_embeddings``: a tied plan). ``terms``: :func:`memory_terms_of` of the same
    arguments when already computed (the same element-wise expressions: the memory is their sum)."""
    k, s_num = counts.shape
    ends = np.cumsum(counts, axis=1)
    starts = ends - counts
    first = np.zeros(s_num, dtype=bool)
    first[0] = True
    last = np.zeros(s_num, dtype=bool)
    last[-1] = True
    compute, bwd_s = stage_compute(ctx, tt, starts, ends, first, last, recompute)
    params, upd = params_and_update(ctx, tt, counts, tie_embeddings)
    memory = F.memory_total(terms) if terms is not None else \
        _memory(ctx, tt, counts, params, first, last, precision, optimizer, recompute)
    return StageArrays(compute_s=compute, bwd_s=bwd_s, params=params, update_s=upd,
                       memory_bytes=memory, fits=np.all(memory <= tt.usable_bytes, axis=1), counts=counts)


def opt_ratio(ctx: SimContext, tt: TypeTable, counts: np.ndarray, params: np.ndarray, first: np.ndarray,
              last: np.ndarray, shards: int) -> np.ndarray:
    """[K, S] optimizer parameters over parameters held under the distributed optimizer (the simulator's
    ``memory.optimizer_params``): a TP-t rank of a stage whose TP degrees have least common multiple
    ``shards * t`` packs the stage's replicated parameters into each of its ``shards`` fine shards."""
    if shards == 1:
        return np.where(params > 0, params / np.maximum(params, 1), 1.0)
    m = ctx.model
    rep = counts * m.layer_params(tt.tp)[1] + first * m.embedding_params(tt.tp)[1] + last * m.head_params(tt.tp)[1]
    return np.where(params > 0, (params + (shards - 1) * rep) / np.maximum(params, 1), 1.0)


def _memory(ctx: SimContext, tt: TypeTable, counts: np.ndarray, params: np.ndarray, first: np.ndarray,
            last: np.ndarray, precision: str, optimizer: str, recompute: bool,
            inflight: np.ndarray | None = None, dp=None, ratio: np.ndarray | None = None) -> np.ndarray:
    """Peak bytes per GPU [K, S]; ``inflight`` micro-batches per stage (default S - s: the declared space
    fits with a full pipeline in flight; the simulator keeps min(S - s, m), never more). ``dp`` (scalar or
    [K, 1]) with ``ratio`` (:func:`opt_ratio`): the distributed optimizer over that many replicas."""
    return F.memory_total(_memory_terms(ctx, tt, counts, params, first, last, precision, optimizer, recompute,
                                        inflight, dp, ratio))


def _memory_terms(ctx: SimContext, tt: TypeTable, counts: np.ndarray, params: np.ndarray, first: np.ndarray,
                  last: np.ndarray, precision: str, optimizer: str, recompute: bool,
                  inflight: np.ndarray | None = None, dp=None, ratio: np.ndarray | None = None) -> tuple:
    """:func:`formulas.memory_terms` of :func:`_memory` (summed there by :func:`formulas.memory_total`)."""
    st = ctx.settings
    s_num = counts.shape[1]
    if inflight is None:
        inflight = np.arange(s_num, 0, -1)
    boundary = ctx.model.boundary_activation_bytes(tt.mbs, F.bytes_per_element(precision))
    act = F.layer_activation_bytes(counts, tt.layer_act_bytes, tt.keep_bytes, recompute) \
        + F.stage_mask_bytes(counts, tt.mask_bytes) + first * tt.emb_act_bytes + last * tt.head_act_bytes
    biggest = np.where(counts > 0, tt.layer_act_bytes, 0.0)
    biggest = np.where(last, np.maximum(biggest, tt.head_act_bytes), biggest)
    # the search's recompute is the plan field recompute_activations: full, uniform, 1 layer (Plan.recompute)
    extra = recompute_peak_excess_bytes(counts, ("full", "uniform", 1) if recompute else (None, None, None),
                                        tt.recompute_live_bytes, tt.keep_bytes, tt.mask_bytes,
                                        tt.layer_act_bytes, last * tt.head_act_bytes)
    w, g, o = F.state_bytes_per_param(precision, optimizer)
    if dp is not None:
        o = F.sharded_optimizer_bytes(o, dp, True) * ratio
    return F.memory_terms(params, act, inflight, biggest, boundary, (w, g, o),
                          st.activation_reserve_factor, st.grad_bucket_elems, st.memory_overhead_bytes, extra)


def stage_peak_bytes(ctx: SimContext, tt: TypeTable, counts: np.ndarray, precision: str, optimizer: str,
                     recompute: bool, microbatches: int, tie_embeddings: bool = False, dp: int | None = None,
                     shards: np.ndarray | None = None) -> np.ndarray:
    """Peak bytes [S] of one GPU of ``tt`` on each stage of the split ``counts`` ([S]) in a pipeline that
    runs ``microbatches`` micro-batches (min(S - s, m) in flight, as the simulator keeps): what the
    production check compares with simulate() per stage. ``dp``: the distributed optimizer over that many
    replicas, ``shards`` ([S]) the fine shards per stage (:func:`opt_ratio`)."""
    c = np.asarray(counts, dtype=np.int64).reshape(1, -1)
    s_num = c.shape[1]
    first = np.arange(s_num) == 0
    last = np.arange(s_num) == s_num - 1
    params = stage_params(tt, c, first, last, head_params(tt, s_num, tie_embeddings))
    inflight = np.minimum(np.arange(s_num, 0, -1), microbatches)
    ratio = None
    if dp is not None:
        ratio = np.column_stack([opt_ratio(ctx, tt, c[:, [s]], params[:, [s]], first[[s]], last[[s]],
                                           int(shards[s]))[:, 0] for s in range(s_num)])
    return _memory(ctx, tt, c, params, first, last, precision, optimizer, recompute, inflight, dp, ratio)[0]


def memory_terms_of(ctx: SimContext, tt: TypeTable, counts: np.ndarray, precision: str, optimizer: str,
                    recompute: bool, tie_embeddings: bool = False) -> tuple:
    """:func:`_memory_terms` of splits ``counts`` ([K, S]) with S - s micro-batches in flight, no sharding."""
    s_num = counts.shape[1]
    first = (np.arange(s_num) == 0)[None, :]
    last = (np.arange(s_num) == s_num - 1)[None, :]
    params = stage_params(tt, counts, first, last, head_params(tt, s_num, tie_embeddings))
    return _memory_terms(ctx, tt, counts, params, first, last, precision, optimizer, recompute)


NEVER = 1 << 40         # a replica count no cluster reaches: the split never fits


def dist_min_dp(ctx: SimContext, tt: TypeTable, counts: np.ndarray, precision: str, optimizer: str,
                recompute: bool, shards: int = 1, tie_embeddings: bool = False, terms: tuple | None = None,
                layout: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """[K, S] the smallest replica count D at which each stage of each split fits on ``tt`` under the
    distributed optimizer (S - s micro-batches in flight; :data:`NEVER` where no D does). Memory is
    non-increasing in D (only the optimizer term o / D changes), so the answer is found from the closed form
    and then checked with the exact expression the fit uses at D and D - 1. ``terms``: :func:`_memory_terms` of
    these splits (without sharding), when already computed (they do not depend on ``shards``). ``layout``:
    (first, last, parameters) of each entry of ``counts`` when its columns are not the stages of one depth
    (:mod:`planner.search.grids`; ``terms`` then given too). Each entry's answer depends on that entry alone."""
    if layout is not None:
        first, last, params = layout
    else:
        s_num = counts.shape[1]
        first = (np.arange(s_num) == 0)[None, :]
        last = (np.arange(s_num) == s_num - 1)[None, :]
        params = stage_params(tt, counts, first, last, head_params(tt, s_num, tie_embeddings))
    ratio = opt_ratio(ctx, tt, counts, params, first, last, shards)
    if terms is None:
        terms = _memory_terms(ctx, tt, counts, params, first, last, precision, optimizer, recompute)
    w, g, _, a, t, ov = terms
    o = F.state_bytes_per_param(precision, optimizer)[2]

    def fits(d: np.ndarray) -> np.ndarray:      # _memory at dp = d, term by term in the same order
        o_d = (F.sharded_optimizer_bytes(o, d.astype(float), True) * ratio) * params
        return F.memory_total((w, g, o_d, a, t, ov)) <= tt.usable_bytes

    rest = F.memory_total((w, g, 0.0 * params, a, t, ov))                 # the optimizer term at 0
    opt = (o * ratio) * params
    room = tt.usable_bytes - rest
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(opt <= 0, 1.0, np.where(room > 0, opt / room, np.inf))
    ever = room >= 0
    d = np.where(ever, np.clip(np.ceil(need), 1, NEVER), NEVER).astype(np.int64)
    live = ever & (d < NEVER)
    settled = False                      # every live D fits (fits is element-wise, so moving down to a
    for _ in range(4):                   # D - 1 that fits keeps that true)
        up = live & ~fits(d)             # rounding: move up while it does not fit, down while D - 1 does
        if not up.any():
            settled = True
            break
        d = np.where(up, d + 1, d)
    for _ in range(4):
        down = live & (d > 1) & fits(np.maximum(d - 1, 1))
        if not down.any():
            break
        d = np.where(down, d - 1, d)
    if settled:
        return np.where(~ever, NEVER, d)
    bad = live & ~fits(d)
    return np.where(bad | ~ever, NEVER, d)


@lru_cache(maxsize=None)
def split_family(num_layers: int, num_stages: int) -> np.ndarray:
    """The declared layer splits: first and last stage sizes free; the middle stages either as even as
    possible (sizes differing by at most one, the larger ones at later positions: they keep fewer
    micro-batches in flight) or a *staircase* (:func:`planner.search.splits.front_loaded` without memory
    caps: ``M`` layers on each of the first middle stages, one stage with the rest, then one layer each; the
    smallest suffix sums for its largest stage ``M``, which the 1F1B round-trip bounds are non-decreasing in).

    Every stage gets >= 1 layer. For S <= 3 this is every composition of the layers. Returns an int array
    [K, S]: the even-middle splits first (in the order of earlier versions), then the staircases not among them.
    """
    L, S = num_layers, num_stages
    if S <= 2:
        out = np.array([[L]] if S == 1 else [[a, L - a] for a in range(1, L)], dtype=np.int64).reshape(-1, S)
        out.flags.writeable = False
        return out
    mid = S - 2
    # every (first, last) pair (a, c) with a middle of >= 1 layer per stage, a-major as the loops of earlier
    # versions visited them; the middle depends on its total t = L - a - c alone
    a, c = np.nonzero(np.arange(L)[:, None] + np.arange(L)[None, :] <= L - mid - 2)
    a, c = a + 1, c + 1
    t = L - a - c
    totals = np.arange(L + 1)
    q, r = totals // mid, totals % mid
    even = q[:, None] + (np.arange(mid)[None, :] >= (mid - r)[:, None])       # [L + 1, mid]: the larger ones later
    parts = [np.column_stack([a, even[t], c])]
    if S >= 4:
        # the staircase of each total x >= mid (planner.search.splits.front_loaded without caps at level
        # ceil(x / mid): prefix sums min((s + 1) level, x - (mid - 1 - s)), all at once), where it is not the even
        # middle (a split of the same first and last stage sizes is the same total's)
        level = -(-totals // mid)
        used = np.minimum((np.arange(1, mid + 1)[None, :]) * level[:, None],
                          totals[:, None] - (mid - 1 - np.arange(mid))[None, :])
        stair = np.diff(used, axis=1, prepend=0)
        other = (stair != even).any(axis=1)[t]
        parts.append(np.column_stack([a[other], stair[t[other]], c[other]]))
    out = np.concatenate(parts).astype(np.int64, copy=False).reshape(-1, S)
    out.flags.writeable = False
    return out
