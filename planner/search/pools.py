"""Score many pipeline-count choices at once for one (S, micro-batch, TP per type, layer split).

Pools are (GPU type, zone) pairs; every pipeline of a pool runs all S stages on that type and zone with the
type's TP degree. A *row* gives the number of pipelines D_p of every pool. For each row this module computes
exactly what :func:`planner.simulator.simulate` predicts for the plan :mod:`planner.search.build` makes of it:
makespan (optimal per-pipeline micro-batch counts), gradient sync, optimizer step, $/iteration.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.search.makespan import min_makespan, relaxed_lower_bound
from planner.search.netvec import Group, LinkCache, stacked_sync_rows, sync_rows
from planner.search.rowblock import used_max_by_columns, weighted_row_sum
from planner.search.rows import int_row_sum, unique_first
from planner.search.tables import StageArrays
from planner.search.tied import TiedSync
from planner.search.tiedvec import tied_rows
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext


@dataclass(frozen=True)
class PoolModel:
    """One pool's pipeline under a fixed split: steady-state period M, fill/drain F, GPUs per pipeline."""

    group: Group
    period_s: float
    fill_s: float
    gpus_per_pipeline: int
    usd_per_s: float
    params: np.ndarray        # [S] parameters per GPU of each stage
    update_s: float           # slowest stage's optimizer step
    bwd_s: np.ndarray         # [S] for sync overlap
    times_s: np.ndarray       # [N] T(m) = (m - 1) * period(m) + fill for m = 1..N
    p2p_s: float


def level_periods(comp: np.ndarray, p2p_s: float, blocking: bool) -> np.ndarray:
    """Steady period per micro-batch-count level of splits ``comp`` ([K, S] compute seconds) with one
    transfer time on every boundary: [K, S + 1] (:func:`formulas.period_levels`)."""
    busy = F.busy_s(comp, p2p_s, blocking)
    return F.period_levels(busy.max(axis=-1), F.round_trip_bounds(comp, p2p_s))


def pool_p2p_s(ctx: SimContext, cache: LinkCache, group: Group, s_num: int, mbs_bytes: float) -> float:
    """One boundary transfer inside a pool's pipeline (0 with one stage)."""
    conc = group.tp if ctx.settings.p2p_all_tp_ranks else 1
    return cache.checked(group, group, conc, mbs_bytes) if s_num > 1 else 0.0


def pool_model(ctx: SimContext, cache: LinkCache, group: Group, arr: StageArrays, k: int, mbs_bytes: float,
               usd_per_s: float, n_mb: int, levels_of_splits: tuple | None = None) -> PoolModel:
    """The pool's pipeline for split index ``k`` of ``arr``. ``levels_of_splits``: the (levels, fill, busiest
    stage) of every split of ``arr`` at this pool's transfer time, when already computed (row k is what the
    one-split computation gives)."""
    comp = arr.compute_s[k]
    s_num = len(comp)
    p2p = pool_p2p_s(ctx, cache, group, s_num, mbs_bytes)
    if levels_of_splits is None:
        period = float(F.busy_s(comp, p2p, ctx.settings.p2p_blocking).max())
        fill = float(F.fill_drain_s(comp, p2p))
        levels = level_periods(comp, p2p, ctx.settings.p2p_blocking)
    else:
        levels, fill, period = (x[k] for x in levels_of_splits)
        fill, period = float(fill), float(period)
    return PoolModel(group=group, period_s=period, fill_s=fill, gpus_per_pipeline=s_num * group.tp,
                     usd_per_s=usd_per_s, params=arr.params[k], update_s=float(arr.update_s[k].max()),
                     bwd_s=arr.bwd_s[k], p2p_s=p2p,
                     times_s=F.pipeline_s_of_m(levels, fill, n_mb) if np.isfinite(p2p) else np.full(n_mb, np.inf))


@dataclass
class RowScores:
    makespan_s: np.ndarray
    sync_s: np.ndarray
    update_s: np.ndarray
    iteration_s: np.ndarray
    cost_usd: np.ndarray
    egress_usd: np.ndarray
    gpus: np.ndarray


def _distinct_rows(pools: list[PoolModel], D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(representative row indices, inverse): rows that share the pattern of 0 / 1 / >= 2 replicas per pool,
    the total and the replicas per zone have the same gradient sync (for large row sets only)."""
    if len(D) < 4096:
        return np.arange(len(D)), np.arange(len(D))
    zones = sorted({p.group.zone for p in pools})
    ind = np.array([[p.group.zone == z for z in zones] for p in pools], dtype=np.int64)      # [P, Z]
    code = np.minimum(D, 2) @ (3 ** np.arange(D.shape[1], dtype=np.int64))
    d = int_row_sum(D)
    if len(zones) == 1:
        first, inv = unique_first(code * (int(d.max()) + 1) + d)
    else:
        per_zone = D @ ind                                       # the total d is their sum
        _, ci = unique_first(code)
        radix = [int(x) + 1 for x in per_zone.max(axis=0)]
        if (int(ci.max()) + 1) * int(np.prod(radix, dtype=object)) < 2 ** 62:   # one int64 key per row
            key = ci.astype(np.int64)
            for j, r in enumerate(radix):
                key = key * r + per_zone[:, j]
            first, inv = unique_first(key)
        else:
            _, first, inv = np.unique(np.column_stack([code, d, per_zone]), axis=0, return_index=True,
                                      return_inverse=True)
    return first, inv.reshape(-1)


def _row_gradients(pools: list[PoolModel], D: np.ndarray, dist_bytes: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Per row and stage: the largest per-GPU gradient, the bytes one ring carries across zones (the largest
    whole-stage gradient; with the distributed optimizer, ``dist_bytes`` per element, the mean of it and the
    whole-stage parameters), the slowest backward among the pools the row uses and (distributed optimizer)
    the largest per-GPU parameter bytes ([R, S] each; the last None without it)."""
    params = np.array([p.params for p in pools], dtype=float)            # [P, S]
    tps = np.array([p.group.tp for p in pools], dtype=float)
    bwd = np.array([p.bwd_s for p in pools], dtype=float)
    key = (D > 0).astype(np.int64) @ (1 << np.arange(D.shape[1]))
    first, inv = unique_first(key)
    codes = key[first]
    used = ((codes[:, None] >> np.arange(D.shape[1])[None, :]) & 1).astype(bool)[:, :, None]   # [K, P, 1]
    grad = F.grad_bytes(np.where(used, params[None], 0.0).max(axis=1))
    full = F.grad_bytes(np.where(used, (params * tps[:, None])[None], 0.0).max(axis=1))
    slow = np.where(used, bwd[None], -np.inf).max(axis=1)
    inv = inv.reshape(-1)
    if dist_bytes is None:
        return grad[inv], full[inv], slow[inv], None
    # planner.simulator.time.stage_sync: reduce-scatter of fp32 gradients, all-gather of the parameters
    param = np.where(used, params[None], 0.0).max(axis=1) * dist_bytes
    moved = (full + np.where(used, (params * tps[:, None])[None], 0.0).max(axis=1) * dist_bytes) / 2
    return grad[inv], moved[inv], slow[inv], param[inv]


def _sync_batch(ctx: SimContext, cache: LinkCache, groups: list[Group], D: np.ndarray, grad: np.ndarray,
                full: np.ndarray, slow_bwd: np.ndarray, bound_only: bool, param: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sync seconds, egress USD, stage 0 hierarchical?) per row from per-row stage gradients. ``bound_only``: a
    lower bound (the stage with the largest gradient only, no egress; the third all False). ``param``: the
    distributed optimizer's per-GPU parameter bytes per row and stage (None: a plain all-reduce)."""
    pick = (lambda x, i: None) if param is None else (lambda x, i: x[:, i])
    if bound_only:
        top = np.argmax(grad, axis=1)[:, None]
        t, _, _ = sync_rows(ctx, cache, groups, D, np.take_along_axis(grad, top, 1)[:, 0],
                            np.take_along_axis(full, top, 1)[:, 0],
                            None if param is None else np.take_along_axis(param, top, 1)[:, 0])
        return ((t if ctx.settings.dp_sync_waits_for_all else np.zeros(len(D))), np.zeros(len(D)),
                np.zeros(len(D), dtype=bool))
    stages: dict[tuple[bytes, bytes], int] = {}       # per distinct (grad, full) of a stage, its first stage
    for s in range(grad.shape[1]):
        stages.setdefault((grad[:, s].tobytes(), full[:, s].tobytes()), s)
    # every distinct stage's sync in one call on the rows stacked (netvec.stacked_sync_rows: bit for bit)
    memo = dict(zip(stages, stacked_sync_rows(ctx, cache, groups, D, [(grad[:, s], full[:, s], pick(param, s))
                                                                      for s in stages.values()])))
    times, egress = [], np.zeros(len(D))
    for s in range(grad.shape[1]):
        key = (grad[:, s].tobytes(), full[:, s].tobytes())
        times.append(memo[key][0])
        egress = egress + memo[key][1]
    hier0 = memo[(grad[:, 0].tobytes(), full[:, 0].tobytes())][2]
    if ctx.settings.dp_sync_waits_for_all:
        return np.max(np.vstack(times), axis=0), egress, hier0
    # ``sync_seconds``: stage s's sync overlaps with the remaining backward of stages < s
    extra, slack = np.zeros(len(D)), np.zeros(len(D))
    for s, t in enumerate(times):
        extra = np.maximum(extra, t - slack)
        slack = slack + slow_bwd[:, s]
    return np.maximum(0.0, extra), egress, hier0


def _span(pools: list[PoolModel], D: np.ndarray, n_mb: int, exact: bool, uniform: bool) -> np.ndarray:
    if uniform:
        d = int_row_sum(D)
        per = np.clip(n_mb // np.maximum(d, 1), 1, n_mb)
        tm = np.column_stack([p.times_s[per - 1] for p in pools])
        span = used_max_by_columns(D, tm, -np.inf)
        return np.where((d > 0) & (n_mb % np.maximum(d, 1) == 0), span, np.inf)
    if exact:
        return min_makespan(D, [p.times_s for p in pools], n_mb)
    return relaxed_lower_bound(D, np.array([p.period_s for p in pools]), np.array([p.fill_s for p in pools]), n_mb)


def score_batch(ctx: SimContext, cache: LinkCache, items: list[tuple[list[PoolModel], np.ndarray]], n_mb: int,
                exact: bool = True, uniform: bool = False, tied: TiedSync | None = None,
                known: list[tuple] | None = None, dist_bytes: int | None = None, keep=None) -> list[RowScores]:
    """Scores of several (pools, rows) items sharing the pool columns (e.g. the splits of one task): the
    gradient sync of all of them is computed in one batch. ``exact=False``: lower bounds (relaxed makespan,
    the largest stage's sync, no egress, no tied-embedding all-reduce). ``tied``: the plans tie their
    embeddings (the shared weight's all-reduce follows the stage syncs). ``known`` (``exact=False`` only):
    per item the (relaxed makespan, optimizer step, dollars per second, GPUs) of its rows, already computed
    by the same expressions (the optimizer step already divided by D under the distributed optimizer).
    ``dist_bytes``: the distributed optimizer with parameters of that many bytes per element (None: off).
    ``keep(iteration_s, cost_usd, gpus)`` (with ``tied``): rows it rejects before the tied all-reduce is added
    are not priced further and score inf (the all-reduce only adds time and egress, so the caller's objective
    and constraints, monotone in both, reject them anyway)."""
    items = [(pools, D) for pools, D in items]
    reps, parts = [], []
    for pools, D in items:
        first, inv = _distinct_rows(pools, D)
        g, f, b, pb = _row_gradients(pools, D[first], dist_bytes)
        reps.append((D[first], g, f, b, pb))
        parts.append((len(first), inv))
    cat = [np.concatenate([r[i] for r in reps], axis=0) for i in range(4)]
    param = None if dist_bytes is None else np.concatenate([r[4] for r in reps], axis=0)
    t_all, e_all, h_all = _sync_batch(ctx, cache, [p.group for p in items[0][0]], *cat, bound_only=not exact,
                                      param=param)
    out, lo = [], 0
    for i, ((pools, D), (n, inv)) in enumerate(zip(items, parts)):
        sync, egress, hier0 = t_all[lo:lo + n][inv], e_all[lo:lo + n][inv], h_all[lo:lo + n][inv]
        lo += n
        span = None                         # computed once per item (the exact makespan is the costly part)
        if exact and tied is not None:      # in stage 0's mode, as the built plan will carry it
            live = np.ones(len(D), dtype=bool)
            if keep is not None:
                span = _span(pools, D, n_mb, exact, uniform)
                it0 = span + sync + _update(pools, D, dist_bytes)
                live = keep(it0, _rate(pools, D) * it0 + egress, _gpus(pools, D))
            t_tied, e_tied = np.full(len(D), np.inf), np.zeros(len(D))
            if len(pools[0].params) > 1:        # one stage: nothing to sync
                t_tied[live], e_tied[live] = tied_rows(ctx, cache, [p.group for p in pools], D[live], hier0[live],
                                                       dist_bytes)
            else:
                t_tied[live] = 0.0
            sync, egress = sync + t_tied, egress + e_tied
        if known is not None and not exact:
            span, upd, rate, gpus = known[i]
            if uniform:
                span = _span(pools, D, n_mb, exact, uniform)
        else:
            span = _span(pools, D, n_mb, exact, uniform) if span is None else span
            upd, rate, gpus = _update(pools, D, dist_bytes), _rate(pools, D), _gpus(pools, D)
        it = span + sync + upd
        out.append(RowScores(makespan_s=span, sync_s=sync, update_s=upd, iteration_s=it,
                             cost_usd=rate * it + egress, egress_usd=egress, gpus=gpus))
    return out


def _update(pools: list[PoolModel], D: np.ndarray, dist_bytes: int | None) -> np.ndarray:
    """The slowest used pool's optimizer step per row (the distributed optimizer steps 1/D of it)."""
    upd = used_max_by_columns(D, np.array([p.update_s for p in pools]), 0.0)
    return upd if dist_bytes is None else upd / np.maximum(int_row_sum(D), 1)


def _rate(pools: list[PoolModel], D: np.ndarray) -> np.ndarray:
    return weighted_row_sum(D, np.array([p.gpus_per_pipeline * p.usd_per_s for p in pools]))


def _gpus(pools: list[PoolModel], D: np.ndarray) -> np.ndarray:
    return int_row_sum(D * np.array([p.gpus_per_pipeline for p in pools])[None, :])


def score_rows(ctx: SimContext, cache: LinkCache, pools: list[PoolModel], D: np.ndarray, n_mb: int,
               exact: bool = True, uniform: bool = False, tied: TiedSync | None = None,
               dist_bytes: int | None = None) -> RowScores:
    """Scores of rows ``D`` ([R, P] pipelines per pool) for one pool list (see :func:`score_batch`)."""
    return score_batch(ctx, cache, [(pools, D)], n_mb, exact, uniform, tied, dist_bytes=dist_bytes)[0]
