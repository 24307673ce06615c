"""The *objective task floor*: a lower bound on the objective key (cost or value) of every plan of a pool task,
from the exact task floor's per-d iteration-time floor, the cheapest GPUs a row of d pipelines can hold, and
the dollars per micro-batch of the cheapest pool.

Contract: :func:`objective_task_floor` is <= the objective key of every feasible plan of the task (inf: none is
feasible) under every objective; for ``throughput`` it is the exact task floor itself (docs/PLANNER.md 2.1,
*Cost task floor*; tested against the brute force in ``tests/planner/test_search_bounds_h13c.py``).
"""
from __future__ import annotations

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.netvec import LinkCache
from planner.search.space import Objective
from planner.search.taskfloor import SLACK, FloorParts, exact_task_floor, task_floor_parts
from planner.search.valuetask import rate_cover_keys

RATE_COVER = True       # the value rate-cover floor (valuetask, 2.6 round 3); False: off (tests only)
from planner.simulator.settings import SimContext


def cheapest_sums(unit: np.ndarray, caps: np.ndarray, d: np.ndarray) -> np.ndarray:
    """[len(d)] the smallest sum of ``unit`` over d pipelines with at least one of every type j and at most
    ``caps[j]`` of it (``d >= len(unit)``; inf where ``d > caps.sum()``)."""
    order = np.argsort(unit, kind="stable")
    extra = np.repeat(unit[order], np.maximum(caps[order] - 1, 0))         # the cheapest extra pipelines first
    csum = np.concatenate([[0.0], np.cumsum(extra)])
    k = d - len(unit)
    out = np.full(len(d), np.inf)
    ok = (k >= 0) & (k < len(csum))
    out[ok] = unit.sum() + csum[k[ok]]
    return out


def cost_floor_by_d(parts: FloorParts, rate_per_type: np.ndarray, n_mb: int) -> np.ndarray:
    """[len(parts.d)] a lower bound on the GPU dollars of every plan with d pipelines (egress >= 0 left out):
    ``max(R(d) L(d), N w + R(d) E(d))``, R(d) the cheapest $/s of d pipelines (:func:`cheapest_sums`), L(d) the
    iteration floor, E(d) its step + sync part, w the least dollars per micro-batch ``r_p T'_p(m) / m`` of
    a pool."""
    r = cheapest_sums(rate_per_type, parts.caps_per_type(len(rate_per_type)), parts.d)
    m = np.arange(1, n_mb + 1)
    w = min(float(rate_per_type[j] * (t / m).min()) for t, j in zip(parts.times, parts.type_of))
    return np.maximum(r * parts.iteration_s, n_mb * w + r * parts.extra_s)


def objective_task_floor(ctx: SimContext, cluster: ClusterSpec, tables, cache: LinkCache, task, gbs: int, space,
                         sync_lb: np.ndarray | None, objective: Objective) -> float:
    """A lower bound on ``objective.key`` of every feasible plan of ``task``: the exact task floor under the
    throughput objective; otherwise the minimum over d of the key of (iteration floor, :func:`cost_floor_by_d`)
    where :meth:`Objective.allows` accepts them with the fewest GPUs d pipelines can hold (each bound is
    non-decreasing in its argument, so a d it rejects has no feasible plan)."""
    if objective.kind == "throughput":
        return exact_task_floor(ctx, cluster, tables, cache, task, gbs, space, sync_lb)
    parts = task_floor_parts(ctx, cluster, tables, cache, task, gbs, space, sync_lb)
    if parts is None:
        return np.inf
    n_mb = gbs // task.mbs
    rate = np.array([task.num_stages * tp * ctx.catalog.get(g).usd_per_s for g, tp in task.tps])
    gpus_pp = np.array([task.num_stages * tp for _, tp in task.tps], dtype=float)
    it = parts.iteration_s * (1 - SLACK)
    usd = cost_floor_by_d(parts, rate, n_mb) * (1 - SLACK)
    gpus = cheapest_sums(gpus_pp, parts.caps_per_type(len(rate)), parts.d)
    key = objective.key(it, usd)
    if objective.kind == "value" and RATE_COVER:     # time and dollars of the same plan (2.6, round 3)
        key = np.maximum(key, rate_cover_keys(parts, rate, n_mb) * (1 - SLACK))
    keys = np.where(objective.allows(it, usd, gpus), key, np.inf)
    return float(keys.min())
