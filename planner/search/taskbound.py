"""Lower bounds on the objective over every plan of a search task (the engine visits tasks best-first by them).

Contract: :func:`task_bound` is <= the objective key of every plan of the task (inf: none is feasible);
``with_sync=False`` is weaker and cheaper, and :func:`cheap_bounds` computes exactly that (bit for bit) for
many combos of one type subset at once (``tests/planner/test_search_speed.py``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.caps import caps_for, task_dmax
from planner.search.netvec import Group, LinkCache
from planner.search.space import Objective
from planner.search.syncbound import sync_lower_bound, tied_lower_bound
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext

# the cheap bounds take the fill-rate bound for tasks of exactly this many types: one type gains nothing from it,
# and three or more made the task list's bounds ~3x slower on the 4-type, 4,096-GPU setup (5.2 against 1.6 CPU s;
# its points grow with the square of the types); the refined bound takes it from two types on
CHEAP_FILL_RATE_TYPES = 2

if TYPE_CHECKING:
    from planner.search.tasks import Tables


def cheap_bounds(ctx: SimContext, cluster: ClusterSpec, tables: Tables, combos: list, s_num: int, mbs: int,
                 n_mb: int, objective: Objective, recompute: bool, dist: bool = False) -> np.ndarray:
    """``task_bound(..., with_sync=False)`` of many combos of one type subset at once ([C]): the same
    operations on the same values, one row per combo."""
    if not combos:
        return np.zeros(0)
    n_types = len(combos[0])
    fits = np.array([tables.task_fits(c, mbs, s_num, recompute, dist, task_dmax(cluster, c, s_num, n_mb),
                                      relaxed=True) for c in combos])          # [C, K]
    stats = [[tables.split_stats(g, t, mbs, s_num, recompute) for g, t in c] for c in combos]

    def masked_min(field: str) -> np.ndarray:                                                # [C, types]
        vals = np.array([[getattr(st, field) for st in row] for row in stats])              # [C, types, K]
        return np.where(fits[:, None, :], vals, np.inf).min(axis=2)

    upd = masked_min("upd_max").max(axis=1)
    m_min, f_min = masked_min("comp_max"), masked_min("comp_sum")
    caps_t = np.array([[sum(c for _, c in caps_for(cluster, g, t, s_num)) for g, t in combo] for combo in combos])
    cap = caps_t.sum(axis=1)
    # columns d > every combo's capacity are inf in every row (``ok`` below): the minima never read them
    d = np.arange(n_types, min(int(cap.max()), n_mb) + 1, dtype=float)
    if len(d) == 0:
        return np.full(len(combos), np.inf)
    with np.errstate(invalid="ignore"):
        x = n_mb / d - 1            # per type f + m x, the minimum over types (exact in any order)
        per_type = np.minimum.reduce([f_min[:, j, None] + m_min[:, j, None] * x[None, :] for j in range(n_types)])
        span = np.maximum(f_min.max(axis=1)[:, None], per_type)
        span = span * (1 - 1e-12)
        if n_types == CHEAP_FILL_RATE_TYPES:
            span = np.maximum(span, fill_rate_span(m_min, f_min, caps_t, d, n_mb))
        it = span + 0.0 + (upd[:, None] / d[None, :] if dist else upd[:, None])
        usd = np.array([min(t * ctx.catalog.get(g).usd_per_s for g, t in c) for c in combos])
        rate = (d[None, :] * s_num) * usd[:, None]
        gpus = (d[None, :] * s_num) * np.array([min(t for _, t in c) for c in combos])[:, None]
        pipe_usd = np.array([[s_num * t * ctx.catalog.get(g).usd_per_s for g, t in c] for c in combos])
        work = _work_usd(n_mb, (pipe_usd * m_min).min(axis=1))
        dollars = np.maximum(rate * it, work[:, None])
        ok = objective.allows(it, dollars, gpus) & (d[None, :] <= np.minimum(cap, n_mb)[:, None])
        keys = np.where(ok, objective.key(it, dollars), np.inf)
    keys = np.where(fits.any(axis=1)[:, None], keys, np.inf)
    return keys.min(axis=1)


def task_bound(ctx: SimContext, cluster: ClusterSpec, tables: Tables, combo, s_num: int, mbs: int, n_mb: int,
               objective: Objective, cache: LinkCache, with_sync: bool = True, sync_out: dict | None = None,
               recompute: bool = False, dist: bool = False) -> float:
    """Lower bound on the objective of every plan of the task (inf: none can be feasible); without the
    gradient-sync term when ``with_sync`` is false (cheaper, weaker). ``sync_out['by_d']`` receives the
    sync lower bound per total pipeline count d (index d), the tied-embedding all-reduce's bound included when
    the space ties embeddings. ``dist``: the distributed optimizer (optimizer step / d, the sync bounds
    halved outside fp32)."""
    fits = tables.task_fits(combo, mbs, s_num, recompute, dist, task_dmax(cluster, combo, s_num, n_mb))
    if not fits.any():
        return np.inf
    stats = [tables.split_stats(g, t, mbs, s_num, recompute) for g, t in combo]
    upd = max(float(st.upd_max[fits].min()) for st in stats)
    cap = sum(c for g, t in combo for _, c in caps_for(cluster, g, t, s_num))
    d = np.arange(len(combo), min(cap, n_mb) + 1, dtype=float)
    if len(d) == 0:
        return np.inf
    if with_sync:
        per_split = np.max([st.params_max[fits] for st in stats], axis=0)     # each split's largest stage
        grad = F.grad_bytes(float(per_split.min()))       # the sync bound holds for every larger gradient
        m_per = np.ceil(n_mb / d).astype(np.int64)      # the fullest pipeline runs at least this many
        t_types, f_types, p_types = [], [], []
        for g, t in combo:
            t_at, fill, period = _type_times(ctx, cluster, cache, tables, fits, g, t, s_num, mbs, m_per, recompute)
            t_types.append(t_at)
            f_types.append(fill)
            p_types.append(period)
        span = np.maximum(max(f_types), np.min(t_types, axis=0))
        if len(combo) > 1:      # one type: T(ceil(N / d)) above is at least as tight
            caps_t = np.array([[sum(c for _, c in caps_for(cluster, g, t, s_num)) for g, t in combo]])
            span = np.maximum(span, fill_rate_span(np.array([p_types]), np.array([f_types]), caps_t, d, n_mb)[0])
    else:   # busiest stage as the period, no transfers: weaker, much cheaper
        m_min = np.array([st.comp_max[fits].min() for st in stats])
        f_min = np.array([st.comp_sum[fits].min() for st in stats])
        span = np.maximum(f_min.max(), (f_min[None, :] + m_min[None, :] * (n_mb / d[:, None] - 1)).min(axis=1))
        span = span * (1 - 1e-12)
        if len(combo) == CHEAP_FILL_RATE_TYPES:
            caps_t = np.array([[sum(c for _, c in caps_for(cluster, g, t, s_num)) for g, t in combo]])
            span = np.maximum(span, fill_rate_span(m_min[None, :], f_min[None, :], caps_t, d, n_mb)[0])
    # with the sync overlapped with earlier stages' backward the slowest stage's sync may hide: no stage term
    overlap = not ctx.settings.dp_sync_waits_for_all
    sync = sync_lower_bound(cluster, combo, s_num, grad, d, cache) \
        if with_sync and not overlap else 0.0
    if with_sync and tables.space.tie_embeddings:       # the tied all-reduce follows the stage syncs
        sync = sync + tied_lower_bound(ctx, cluster, combo, s_num, d, cache)
    if dist:        # fp32: the parameter half moves as many bytes as the gradient half it replaces
        sync = sync * (1 - 1e-12 if tables.space.precision == "fp32" else 0.5)
    if sync_out is not None and with_sync:
        table = np.zeros(int(d[-1]) + 1)
        table[d.astype(np.int64)] = sync
        sync_out["by_d"] = table
    it = span + sync + (upd / d if dist else upd)
    rate = d * s_num * min(t * ctx.catalog.get(g).usd_per_s for g, t in combo)
    gpus = d * s_num * min(t for _, t in combo)
    pipe_usd = np.array([s_num * t * ctx.catalog.get(g).usd_per_s for g, t in combo])
    work = _work_usd(n_mb, (pipe_usd * np.array([st.comp_max[fits].min() for st in stats])).min())
    dollars = np.maximum(rate * it, work)
    ok = objective.allows(it, dollars, gpus)
    keys = np.where(ok, objective.key(it, dollars), np.inf)
    return float(keys.min())


def best_slot_sums(v: np.ndarray, caps: np.ndarray, d: np.ndarray) -> np.ndarray:
    """[C, B, len(d)] the largest sum of per-pipeline values ``v`` ([C, B, types], >= 0) over d pipelines
    with at least one of every type and at most ``caps`` ([C, types]) of type j: one of each, then the largest
    remaining values first (``d`` >= types; beyond the capacity every pipeline is counted)."""
    order = np.argsort(-v, axis=2, kind="stable")
    v_s = np.take_along_axis(v, order, axis=2)
    extra = np.take_along_axis(np.broadcast_to(np.maximum(caps - 1, 0)[:, None, :], v.shape), order,
                               axis=2).astype(float)
    before = np.cumsum(extra, axis=2) - extra
    k = d - v.shape[2]
    take = np.clip(k[None, None, None, :] - before[..., None], 0.0, extra[..., None])   # [C, B, n, D]
    return v.sum(axis=2)[..., None] + (v_s[..., None] * take).sum(axis=2)


def _slot_sum_at(v_s: np.ndarray, e_s: np.ndarray, before: np.ndarray, base: np.ndarray, ci: np.ndarray,
                 pt: np.ndarray, k: np.ndarray) -> np.ndarray:
    """[C, D] :func:`best_slot_sums` at point ``pt[c, i]`` and ``k[i]`` extra pipelines (values sorted;
    ``ci`` = arange(C)[:, None])."""
    take = np.clip(k[None, :, None] - before[ci, pt], 0.0, e_s[ci, pt])                             # [C, D, n]
    return base[ci, pt] + (v_s[ci, pt] * take).sum(axis=2)


def fill_rate_span(period: np.ndarray, fill: np.ndarray, caps: np.ndarray, d: np.ndarray, n_mb: int
                   ) -> np.ndarray:
    """[C, len(d)] the *fill-rate bound* on the makespan of d pipelines (docs/PLANNER.md, *Rate bounds on a task's
    makespan*): a pipeline of type j with m >= 1 micro-batches takes at least ``(m - 1) P_j + F_j`` (``period``,
    ``fill`` [C, types]: the smallest steady-period level and fill/drain over the task's splits and the type's
    pools), so within t it runs at most ``v_j(t) = max(0, (t - F_j) / P_j + 1)``; a row holds >= 1 pipeline of every
    type and <= ``caps`` of each, so ``N <= G_d(t (1 + 1e-12))`` with ``G_d`` the largest sum of ``v`` over such d
    pipelines (:func:`best_slot_sums`): continuous, non-decreasing and linear between the points where a ``v_j``
    leaves 0 or two ``v_j`` cross. The smallest t with ``G_d(t) >= N`` (found on those points, then interpolated),
    times ``1 - 1e-9``, is <= every such row's makespan. 0 in a row whose period or fill is not finite. The cheap
    bound passes the busiest stage's compute and the summed compute (``F_j >= P_j`` there, so ``v_j(t) <= t / P_j``:
    the bound is at least the pure rate bound ``N / sum c_j / P_j``)."""
    n_c, n = period.shape
    finite = (np.isfinite(period) & np.isfinite(fill)).all(axis=1)                                 # [C]
    if not finite.all():
        period, fill = np.where(finite[:, None], period, 1.0), np.where(finite[:, None], fill, 1.0)
    hi = (fill + n_mb * period).max(axis=1)            # one pipeline of any type runs all N (and more) by then
    pts = [np.zeros(n_c), hi] + [fill[:, j] - period[:, j] for j in range(n)]
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(n):
            for j in range(i + 1, n):
                pts.append((fill[:, i] * period[:, j] - fill[:, j] * period[:, i]) / (period[:, j] - period[:, i]))
    t = np.sort(np.clip(np.nan_to_num(np.stack(pts, axis=1), nan=0.0, posinf=0.0, neginf=0.0), 0.0,
                        hi[:, None]), axis=1)                                                       # [C, B]
    v = np.maximum(0.0, (t[:, :, None] - fill[:, None, :]) / period[:, None, :] + 1.0)             # [C, B, n]
    ci, bi = np.arange(n_c)[:, None], np.arange(v.shape[1])[None, :]
    order = np.argsort(-v, axis=2, kind="stable")
    v_s = v[ci[..., None], bi[..., None], order]
    e_s = np.maximum(caps - 1, 0).astype(float)[ci[..., None], order]
    before = np.cumsum(e_s, axis=2) - e_s
    base = v.sum(axis=2)                                                                            # [C, B]
    # per point the fewest pipelines whose best slots reach N, never above the exact count (tolerance 1e-9)
    need = n_mb - base
    gain = np.cumsum(v_s * e_s, axis=2)
    tol = 1e-9 * (np.abs(need) + 1.0)
    piece = np.argmax(gain >= (need - tol)[..., None], axis=2)                                      # [C, B]
    reachable = (need <= tol) | (gain[..., -1] >= need - tol)
    v_p, e_p = v_s[ci, bi, piece], e_s[ci, bi, piece]
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(v_p > 0, (need - (gain[ci, bi, piece] - v_p * e_p)) / v_p, 0.0)
    k_pt = before[ci, bi, piece] + np.clip(np.ceil(x - 1e-9 * (np.abs(x) + 1.0)), 0.0, e_p)
    k_pt = np.where(need <= tol, 0.0, np.where(reachable, k_pt, np.inf))
    k = d - n
    reach = k_pt[:, :, None] <= k[None, None, :]                                                    # [C, B, D]
    b = np.argmax(reach, axis=1)                                                                    # [C, D]
    a = np.maximum(b - 1, 0)
    t_b, t_a = t[ci, b], t[ci, a]
    g_b = _slot_sum_at(v_s, e_s, before, base, ci, b, k)
    g_a = _slot_sum_at(v_s, e_s, before, base, ci, a, k)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(g_b > g_a, (n_mb - g_a) / (g_b - g_a), 1.0)
    tau = np.where(b == 0, t_b, t_a + np.clip(frac, 0.0, 1.0) * (t_b - t_a))
    return np.where(finite[:, None], np.where(reach.any(axis=1), tau, np.inf) * (1 - 1e-9), 0.0)


def _work_usd(n_mb: int, usd_per_mb):
    """The *work bound* on a plan's GPU dollars: every micro-batch holds a pipeline for at least its busiest
    stage's compute, at that pipeline's $/s (``usd_per_mb``: the least such product over the task's types;
    docs/PLANNER.md 2.1, *Cost work bound*)."""
    return n_mb * usd_per_mb * (1 - 1e-11)


def _type_times(ctx: SimContext, cluster: ClusterSpec, cache: LinkCache, tables: Tables, fits: np.ndarray, g: str,
                tp: int, s_num: int, mbs: int, m: np.ndarray, recompute: bool) -> tuple[np.ndarray, float]:
    """Lower bounds over the task's splits and the type's pools: T(m) at the counts ``m``, and the
    fill/drain."""
    nbytes = ctx.model.boundary_activation_bytes(mbs, F.bytes_per_element(tables.space.precision))
    conc = tp if ctx.settings.p2p_all_tp_ranks else 1
    p2p = 0.0 if s_num == 1 else min(cache.checked(Group(z, g, tp), Group(z, g, tp), conc, nbytes)
                                     for z, _ in caps_for(cluster, g, tp, s_num))
    levels_all, fill_all, _ = tables.levels(g, tp, mbs, s_num, recompute, p2p, ctx.settings.p2p_blocking)
    levels = levels_all[fits].min(axis=0)
    fill = float(fill_all[fits].min())
    times = F.pipeline_s(m, levels[np.minimum(m, len(levels)) - 1], fill) if np.isfinite(p2p) \
        else np.full(len(m), np.inf)
    period = float(levels.min()) if np.isfinite(p2p) else np.inf
    return times * (1 - 1e-12), fill * (1 - 1e-12), period
