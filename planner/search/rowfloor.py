"""A lower bound on the cheap row key of every layer split of a task at once (the *split-free row floor*).

Contract: for rows ``D`` of pipeline counts and per pool the smallest steady period ``M``, fill/drain ``F``
and optimizer step ``U`` over the task's splits, :func:`floor_keys` is <= the engine's cheap key
(``taskrun.cheap_keys``) of the row under every one of those splits, so a row whose floor exceeds the
threshold can be dropped before the per-split pass (docs/PLANNER.md 2.1, *split-free row floor*; tested
against the per-split keys in ``tests/planner/test_search_budget.py``).
"""
from __future__ import annotations

import numpy as np

from planner.search.pools import PoolModel
from planner.search.rowblock import RowBlock
from planner.search.space import Objective

SLACK = 1e-12


def pool_floors(models: dict[int, dict], cols: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column (pool) of ``cols``: the smallest period, fill/drain and optimizer step over the splits."""
    per: list[list[PoolModel]] = [[by_col[c] for by_col in models.values()] for c in cols]
    m = np.array([min(p.period_s for p in ps) for ps in per])
    f = np.array([min(p.fill_s for p in ps) for ps in per])
    u = np.array([min(p.update_s for p in ps) for ps in per])
    return m, f, u


def floor_keys(m: np.ndarray, f: np.ndarray, u: np.ndarray, D: np.ndarray, n_mb: int, objective: Objective,
               slb: np.ndarray | None, rate: np.ndarray, gpus: np.ndarray, dist: bool = False,
               block: RowBlock | None = None, egress: np.ndarray | None = None) -> np.ndarray:
    """[R] lower bounds on the cheap key of every row under every split (inf where a constraint fails);
    ``dist``: the distributed optimizer (the optimizer step / D, as the cheap key); ``block``: the
    :class:`RowBlock` of ``D`` when the caller has one; ``egress``: a floor on each row's egress dollars
    (``rowzone``; None: 0)."""
    block = RowBlock(D) if block is None else block
    span = block.relaxed_lower_bound(m, f, n_mb)
    upd = block.used_max(u, 0.0)
    if dist:
        upd = upd / block.total_min1
    it = span + upd
    if slb is not None:
        it = it + slb
    it = it * (1 - SLACK)
    cost = rate * it if egress is None else rate * it + egress * (1 - SLACK)
    return np.where(objective.allows(it, cost, gpus), objective.key(it, cost), np.inf)
