"""A lower bound on the cheap row key of every layer split of a task at once (the *split-free row floor*).

Contract: for rows ``D`` of pipeline counts and per pool the smallest steady period ``M``, fill/drain ``F``
and optimizer step ``U`` over the task's splits, :func:`floor_keys` is <= the engine's cheap key
(``engine._cheap_keys``) of the row under every one of those splits, so a row whose floor exceeds the
threshold can be dropped before the per-split pass (docs/PLANNER.md 2.1, *split-free row floor*; tested
against the per-split keys in ``tests/planner/test_search_budget.py``).
"""
from __future__ import annotations

import numpy as np

from planner.search.pools import PoolModel
from planner.search.rowblock import RowBlock
from planner.search.space import Objective

SLACK = 1e-12
GRID = 3000         # time points of the task floor's search for tau(d)


def pool_floors(models: dict[int, dict], cols: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column (pool) of ``cols``: the smallest period, fill/drain and optimizer step over the splits."""
    per: list[list[PoolModel]] = [[by_col[c] for by_col in models.values()] for c in cols]
    m = np.array([min(p.period_s for p in ps) for ps in per])
    f = np.array([min(p.fill_s for p in ps) for ps in per])
    u = np.array([min(p.update_s for p in ps) for ps in per])
    return m, f, u


def floor_keys(m: np.ndarray, f: np.ndarray, u: np.ndarray, D: np.ndarray, n_mb: int, objective: Objective,
               slb: np.ndarray | None, rate: np.ndarray, gpus: np.ndarray, dist: bool = False,
               block: RowBlock | None = None) -> np.ndarray:
    """[R] lower bounds on the cheap key of every row under every split (inf where a constraint fails);
    ``dist``: the distributed optimizer (the optimizer step / D, as the cheap key); ``block``: the
    :class:`RowBlock` of ``D`` when the caller has one."""
    block = RowBlock(D) if block is None else block
    span = block.relaxed_lower_bound(m, f, n_mb)
    upd = block.used_max(u, 0.0)
    if dist:
        upd = upd / block.total_min1
    it = span + upd
    if slb is not None:
        it = it + slb
    it = it * (1 - SLACK)
    return np.where(objective.allows(it, rate * it, gpus), objective.key(it, rate * it), np.inf)


def task_floor(m: np.ndarray, f: np.ndarray, u: np.ndarray, caps: np.ndarray, types: np.ndarray, n_mb: int,
               slb: np.ndarray | None, dist: bool = False) -> float:
    """A lower bound on the iteration time of every row of a task (throughput key), from the per-pool floors
    ``m``, ``f``, ``u`` ([P], minimum over the task's splits), the pool capacities ``caps`` and the pool's
    type index ``types`` (every type of the task runs >= 1 pipeline), and the task's sync bound per total
    pipeline count ``slb`` (docs/PLANNER.md 2.1, *task floor*): a row with d pipelines has
    ``max(t, fmax) >= tau(d)``, the smallest t at which the d pipelines of largest capacity
    ``(t - F) / M + 1`` take the N micro-batches. The engine now visits tasks under
    :func:`planner.search.taskfloor.exact_task_floor`, which is at least as large (exact pipeline times instead
    of this relaxation); this one stays below the cheap row keys, which the exact one need not."""
    n_types = int(types.max()) + 1
    f_min = max(float(f[types == k].min()) for k in range(n_types))
    u_min = max(float(u[types == k].min()) for k in range(n_types))
    total = int(min(caps.sum(), n_mb))
    if total < n_types:
        return np.inf
    d = np.arange(1, total + 1)
    rep = np.repeat(np.arange(len(caps)), caps)           # one entry per pipeline slot

    def reach(t: float) -> np.ndarray:                     # [total] micro-batches the best d slots take at t
        phi = np.maximum((t - f[rep]) / m[rep] + 1.0, 0.0)
        return np.cumsum(np.sort(phi)[::-1])[:total]

    hi = float((n_mb - 1) * m.max() + f.max())             # one slot of the slowest pool takes all N
    grid = np.concatenate([[0.0], np.geomspace(hi * 1e-4, hi, GRID)])
    reach_all = np.vstack([reach(t) for t in grid])          # [GRID + 1, total], non-decreasing down
    short = reach_all < n_mb                                 # grid times at which d slots cannot take N
    last = np.where(short.any(axis=0), short.shape[0] - 1 - np.argmax(short[::-1], axis=0), -1)
    lo = np.where(last >= 0, grid[np.maximum(last, 0)], 0.0)
    tau = lo                        # reach(lo) < N: every row with d pipelines has max(t, fmax) > lo
    it = np.maximum(tau, f_min) + (u_min / d if dist else u_min)    # dist: the optimizer step / d
    if slb is not None:
        it = it + slb[np.minimum(d, len(slb) - 1)]
    it = it[n_types - 1:]
    return float(it.min() * (1 - SLACK)) if len(it) else np.inf
