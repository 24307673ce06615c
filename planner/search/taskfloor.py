"""The *exact task floor*: a lower bound on the iteration time of every plan of a pool task, from per-pool
pipeline times that hold for every layer split of the task and the pools' pipeline capacities.

Contract: :func:`exact_task_floor` is <= the iteration time (the throughput key) of every plan of the task:
every split it searches, every row of pipeline counts, every assignment of micro-batches
(docs/PLANNER.md 2.1, *Exact task floor*; tested against the brute force in
``tests/planner/test_search_bounds_h13y.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.caps import caps_for
from planner.search.netvec import Group, LinkCache
from planner.search.pools import pool_p2p_s
from planner.search.rows import sorted_unique
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext

SLACK = 1e-11           # relative: the exact makespan counts micro-batches at t (1 + 1e-12)


def split_free_times(levels: np.ndarray, fill: np.ndarray, n_mb: int) -> np.ndarray:
    """[N] ``min_k T_k(m)`` for m = 1..N over splits k (``levels`` [K, S + 1], ``fill`` [K]): each ``T_k(m)`` is
    :func:`formulas.pipeline_s_of_m`'s expression, so the minimum is <= every split's value bit for bit, and
    non-decreasing in m (a minimum of non-decreasing sequences).

    From m = S + 1 on every split's period is its last level, ``T_k(m) = (m - 1) L_k + F_k``, and a split with
    ``L_a <= L_b`` and ``F_a <= F_b`` has ``T_a(m) <= T_b(m)`` in floating point too (rounding is monotone), so
    only the splits not dominated in (L, F) are evaluated there: the same minimum, bit for bit."""
    n_lv = levels.shape[1]
    head = min(n_mb, n_lv)
    m = np.arange(1, head + 1)
    out = F.pipeline_s(m[None, :], levels[:, :head], fill[:, None]).min(axis=0) if len(fill) else \
        np.full(head, np.inf)
    if n_mb <= head or len(fill) == 0:
        return out
    keep = _line_front(levels[:, -1], fill)
    m_tail = np.arange(head + 1, n_mb + 1)
    tail = F.pipeline_s(m_tail, levels[keep[0], -1], fill[keep[0]])
    for k in keep[1:]:
        tail = np.minimum(tail, F.pipeline_s(m_tail, levels[k, -1], fill[k]))
    return np.concatenate([out, tail])


def _line_front(slope: np.ndarray, icpt: np.ndarray) -> list[int]:
    """Indices of the (slope, intercept) pairs not weakly dominated by an earlier one in (slope, intercept)
    order: every pair is >= some kept pair in both (nan-free input)."""
    order = np.lexsort((icpt, slope))
    c = icpt[order]
    before = np.minimum.accumulate(np.concatenate([[np.inf], c[:-1]]))
    return [int(k) for k in order[c < before]]


def slots_reach(times: list[np.ndarray], caps: np.ndarray, t: np.ndarray, d: np.ndarray) -> np.ndarray:
    """[len(d)] ``G_d(t_i)``: the micro-batches the d pipeline slots that take the most within ``t_i`` can run
    (pool p offers ``caps[p]`` slots of ``#{m : times[p][m] <= t}`` each)."""
    phi = np.array([np.searchsorted(tp, t, side="right") for tp in times])  # [P, R]
    order = np.argsort(-phi, axis=0, kind="stable")
    phi_s = np.take_along_axis(phi, order, axis=0)
    caps_s = caps[order]
    before = np.cumsum(caps_s, axis=0) - caps_s
    take = np.clip(d[None, :] - before, 0, caps_s)
    return (phi_s * take).sum(axis=0)


def makespan_floor(times: list[np.ndarray], caps: np.ndarray, n_mb: int, d: np.ndarray) -> np.ndarray:
    """[len(d)] tau(d): the smallest value t among the ``times`` with ``G_d(t) >= N`` (inf: none). Any row with
    d pipelines in these pools (at most ``caps`` per pool) whose pipelines' times are >= ``times`` has a
    makespan >= tau(d) (1 - SLACK)."""
    vals = sorted_unique(np.concatenate(times))
    lo = np.zeros(len(d), dtype=np.int64)
    hi = np.full(len(d), len(vals) - 1, dtype=np.int64)
    top_ok = slots_reach(times, caps, vals[hi], d) >= n_mb
    while True:
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi) // 2
        good = slots_reach(times, caps, vals[mid], d) >= n_mb
        hi = np.where(active & good, mid, hi)
        lo = np.where(active & ~good, mid + 1, lo)
    return np.where(top_ok, vals[lo], np.inf)


@dataclass(frozen=True)
class FloorParts:
    """The pieces of the exact task floor, per total pipeline count ``d`` and per usable pool."""

    d: np.ndarray                   # [R] total pipeline counts
    iteration_s: np.ndarray         # [R] max(tau(d), fmin) + step + sync bound (before the 1 - SLACK)
    extra_s: np.ndarray             # [R] step + sync bound: the iteration time after the makespan
    times: list[np.ndarray]         # per pool: split-free pipeline times T'_p(m), m = 1..N
    caps: np.ndarray                # [P] per pool: its pipeline capacity
    type_of: np.ndarray             # [P] per pool: the index of its type in ``task.tps``

    def caps_per_type(self, n_types: int) -> np.ndarray:
        """[n_types] the pipeline capacity of each type of the task (its pools' capacities summed)."""
        return np.bincount(self.type_of, weights=self.caps, minlength=n_types).astype(np.int64)


def task_floor_parts(ctx: SimContext, cluster: ClusterSpec, tables, cache: LinkCache, task, gbs: int, space,
                     sync_lb: np.ndarray | None) -> FloorParts | None:
    """The exact task floor before its minimum over d (None: the task has no plan), see
    :func:`exact_task_floor`."""
    idx = np.nonzero(tables.task_fits(task.tps, task.mbs, task.num_stages, task.recompute, task.dist,
                                      task.dmax))[0]
    n_mb = gbs // task.mbs
    if len(idx) == 0:
        return None
    mb_bytes = ctx.model.boundary_activation_bytes(task.mbs, F.bytes_per_element(space.precision))
    times, caps, type_of, fmin, umin = [], [], [], 0.0, 0.0
    for j, (g, tp) in enumerate(task.tps):
        arr = tables.arrays(g, tp, task.mbs, task.num_stages, task.recompute)
        umin = max(umin, float(arr.update_s[idx].max(axis=1).min()))
        f_type = np.inf
        for z, cap in caps_for(cluster, g, tp, task.num_stages):
            p2p = pool_p2p_s(ctx, cache, Group(z, g, tp), task.num_stages, mb_bytes)
            if not np.isfinite(p2p):
                continue
            key = ("split-free-times", g, tp, task.mbs, task.num_stages, task.recompute, p2p, idx.tobytes(), n_mb)
            if key not in tables.memo:
                levels, fill, _ = tables.levels(g, tp, task.mbs, task.num_stages, task.recompute, p2p,
                                                ctx.settings.p2p_blocking)
                tables.memo[key] = split_free_times(levels[idx], fill[idx], n_mb)
            times.append(tables.memo[key])
            caps.append(cap)
            type_of.append(j)
            f_type = min(f_type, float(tables.memo[key][0]))
        if not np.isfinite(f_type):
            return None                 # a type with no usable pool: the task has no plan
        fmin = max(fmin, f_type)
    caps_a = np.array(caps, dtype=np.int64)
    d = np.arange(len(task.tps), int(min(caps_a.sum(), n_mb)) + 1)
    if len(d) == 0:
        return None
    span = np.maximum(makespan_floor(times, caps_a, n_mb, d), fmin)
    upd = umin / d if task.dist else np.full(len(d), umin)
    it, extra = span + upd, upd
    if sync_lb is not None:     # added in this order: the throughput floor is the same bit for bit as before
        slb = sync_lb[np.minimum(d, len(sync_lb) - 1)]
        it, extra = it + slb, extra + slb
    return FloorParts(d, it, extra, times, caps_a, np.array(type_of, dtype=np.int64))


def exact_task_floor(ctx: SimContext, cluster: ClusterSpec, tables, cache: LinkCache, task, gbs: int, space,
                     sync_lb: np.ndarray | None) -> float:
    """A lower bound on the iteration time of every plan of ``task`` (a :class:`planner.search.tasks.Task`):
    the minimum over the total pipeline count d of ``max(tau(d), fmin) + step + sync_lb(d)``, with per pool the
    split-free times :func:`split_free_times` over the task's fitting splits, ``fmin`` the largest over the
    task's types of its pools' smallest fill/drain (every type runs >= 1 pipeline), ``step`` the largest over
    types of the smallest optimizer step (/ d with the distributed optimizer) and ``sync_lb`` the task's bound
    on the gradient sync and tied all-reduce per d (None: 0)."""
    parts = task_floor_parts(ctx, cluster, tables, cache, task, gbs, space, sync_lb)
    if parts is None:
        return np.inf
    return float(parts.iteration_s.min() * (1 - SLACK))
