"""The *rate-cover floor* on the value key of a pool task (docs/PLANNER.md 2.6, round 3, session 12 h12v).

Every GPU of a plan is paid for the whole iteration, so a plan whose pipelines have rates r_p ($/s) has
cost >= it sum_p r_p and value key = it x cost >= it^2 sum_p r_p. Its makespan t is <= it - E(d) (E(d): the
task floor's step + sync bound at d pipelines) and >= its iteration floor L(d) - E(d); a pipeline in pool q runs
at most phi_q(t) = #{m : T'_q(m) <= t} micro-batches within t (T'_q: the pool's split-free times,
:func:`planner.search.taskfloor.split_free_times`, <= every split's pipeline time), and the pipelines run all N,
so sum_p phi_q(p)(t) >= N with at most cap_q pipelines in pool q. The least sum_p r_p under that cover is >=
C(t), the fractional (greedy by r_q / phi_q) cover, non-increasing in t. On a cell [t_i, t_i+1] of a geometric
grid of t the key is >= max(L(d), t_i + E(d))^2 C(t_i+1).

Contract: :func:`rate_cover_keys` ([len(parts.d)]) is <= the value key of every feasible plan of the task with
d pipelines.
"""
from __future__ import annotations

import numpy as np

from planner.search.taskfloor import FloorParts

RATIO = 1.02            # the grid of makespans t (cells [t_i, t_i * RATIO])
SCALE = 1.0             # x the floor (tests only: > 1 inflates it)


def cover_cost(phi: np.ndarray, rate: np.ndarray, caps: np.ndarray, n_mb: int) -> np.ndarray:
    """[T]: per column of ``phi`` ([Q, T], micro-batches one pipeline of pool q runs within t), the least sum of
    rates of pipelines (at most ``caps[q]`` of pool q, a fraction of one allowed) whose micro-batches reach N:
    the pools by rate per micro-batch, cheapest first (the LP optimum of the cover; inf: unreachable)."""
    with np.errstate(divide="ignore"):
        per_mb = np.where(phi > 0, rate[:, None] / np.maximum(phi, 1), np.inf)            # [Q, T]
    order = np.argsort(per_mb, axis=0, kind="stable")
    ph = np.take_along_axis(phi, order, axis=0).astype(float)
    cp = caps[order].astype(float)
    pm = np.take_along_axis(per_mb, order, axis=0)
    runs = ph * cp                                                                         # [Q, T]
    before = np.cumsum(runs, axis=0) - runs
    take = np.clip(n_mb - before, 0.0, runs)                                               # micro-batches taken
    with np.errstate(invalid="ignore"):
        cost = np.where(take > 0, take * pm, 0.0).sum(axis=0)
    return np.where(runs.sum(axis=0) >= n_mb, cost, np.inf)


def rate_cover_keys(parts: FloorParts, rate_per_type: np.ndarray, n_mb: int) -> np.ndarray:
    """[len(parts.d)]: per total pipeline count d, min over the grid cells of max(L(d), t_i + E(d))^2 C(t_i+1)
    (``rate_per_type``: one pipeline's $/s per type of the task; L(d) = ``parts.iteration_s``, E(d) =
    ``parts.extra_s``)."""
    times = parts.times
    lo = max(min(float(t[0]) for t in times), 1e-9)
    hi = max(float(t[-1]) for t in times)
    steps = int(np.ceil(np.log(hi / lo) / np.log(RATIO))) + 1
    grid = lo * RATIO ** np.arange(steps + 1)                                              # [T + 1]
    phi = np.array([np.searchsorted(t, grid, side="right") for t in times])               # [Q, T + 1]
    rate = rate_per_type[parts.type_of]
    c = cover_cost(phi[:, 1:], rate, parts.caps, n_mb)                                     # C(t_i+1), [T]
    x = np.maximum(parts.iteration_s[:, None], grid[None, :-1] + parts.extra_s[:, None])   # [D, T]
    with np.errstate(invalid="ignore"):
        keys = np.where(np.isfinite(c)[None], x * x * c[None], np.inf)
    return SCALE * np.nan_to_num(keys, nan=np.inf).min(axis=1)
