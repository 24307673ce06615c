"""Sync and step floors of the split-space bound per smallest TP degree (session 15, helper s15x).

Contract: :func:`split_base(ctx, cluster, grp, params, upd, taus, d_max, rings, dist, elem)` returns [d_max + 1]:
per replica count D, a floor on ``sync + update`` of EVERY plan of :mod:`planner.search.mixsplit`'s space with
S stages (any contiguous split, every stage >= 1 layer), D replicas per stage, smallest TP degree ``taus[0]``
(every replica TP >= tau, some replica TP = tau) or, with one per stage, smallest TP ``taus[s]`` on stage s,
the distributed optimizer off, or on where ``dist`` allows it.
docs/PLANNER.md 7.6 (session 15) is the proof: the stage holding a TP-tau replica reduces >= that group's
gradient at its layer count, every other stage >= the smallest gradient of a TP >= tau group at its layer count,
and the split is any composition of the L layers, so the floor is the smallest over compositions of the largest
stage floor (:func:`minmax_composition`). numpy only.
"""
from __future__ import annotations

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.chaintab import ChainGroups
from planner.search.mixtab import stage_sync_floor
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext

def minmax_composition(stage_f: np.ndarray, n_layers: int) -> np.ndarray:
    """[D] a lower bound on min over compositions (n_s >= 1, sum n_s = L) of max_s ``stage_f[s, n_s, D]``
    (``stage_f`` [S, L + 1, D], index n = layer count, inf where impossible; inf: no composition), exact where
    every row is non-decreasing in n. Each row is replaced by its suffix minimum over n (a non-decreasing lower
    bound), so the stages within t hold 1..cap_s(t) layers, and t is feasible iff every cap_s >= 1 and sum
    cap_s >= L; the answer is the smallest feasible value of those rows (binary search over their sorted values
    per D)."""
    f = stage_f[:, 1:, :]
    g = np.minimum.accumulate(f[:, ::-1], axis=1)[:, ::-1]
    n_d = g.shape[2]
    vals = np.sort(g.reshape(-1, n_d), axis=0)                     # [S N, D], inf last
    cols = np.arange(n_d)

    def feasible(idx: np.ndarray) -> np.ndarray:
        t = vals[idx, cols]
        cap = (g <= t[None, None, :]).sum(axis=1)
        return (cap >= 1).all(axis=0) & (cap.sum(axis=0) >= n_layers)

    lo = np.zeros(n_d, dtype=np.int64)
    hi = np.full(n_d, vals.shape[0] - 1, dtype=np.int64)
    ok = feasible(hi)
    while (lo < hi).any():
        mid = (lo + hi) // 2
        f_mid = feasible(mid)
        hi = np.where(f_mid, mid, hi)
        lo = np.where(f_mid, lo, np.minimum(mid + 1, hi))
    return np.where(ok, vals[hi, cols], np.inf)


def _stage_rows(ctx: SimContext, cluster: ClusterSpec, grp: ChainGroups, params: np.ndarray, sel: np.ndarray,
                usable: np.ndarray, tau: int, d_max: int, rings: dict, dist: tuple[float, float] | None,
                elem: int, memo: dict) -> np.ndarray:
    """[S, L + 1, d_max + 1] per (stage, layer count) the sync floor of a stage whose members reduce >= the
    smallest gradient of the groups ``sel`` there (inf: none); ``dist``: (None, scale) the distributed
    optimizer's sync, its parameter half from the same parameters at ``elem`` bytes."""
    n_g, s_num, n1 = params.shape
    out = np.full((s_num, n1, d_max + 1), np.inf)
    if not sel.any():
        return out
    low = params[sel].min(axis=0)                       # [S, L + 1]
    for s in range(s_num):
        for n in range(1, n1):
            p = float(low[s, n])
            if not np.isfinite(p):
                continue
            key = (p, tau, usable.tobytes(), dist)
            if key not in memo:     # at every D the cluster allows; each unit reads its first d_max + 1
                arg = None if dist is None else (p * elem, dist[1])
                memo[key] = stage_sync_floor(ctx, grp, usable, float(F.grad_bytes(p)), cluster.total_gpus, cluster,
                                             rings, tau, arg)
            out[s, n] = memo[key][:d_max + 1]
    return out


def split_sync(ctx: SimContext, cluster: ClusterSpec, grp: ChainGroups, params: np.ndarray, taus: tuple[int, ...],
               d_max: int, rings: dict, dist: tuple[float, float] | None, elem: int, memo: dict) -> np.ndarray:
    """[d_max + 1] the sync floor of the module docstring (one optimizer setting: ``dist`` None = off).
    ``taus``: (tau,) the plan's smallest TP (every replica >= tau, some stage holds a TP-tau one), or one per
    stage (stage s: every replica >= taus[s], some replica = taus[s])."""
    s_num, n_l = params.shape[1], params.shape[2] - 1
    rows_of = {}
    for tau in sorted(set(taus)):
        ge, eq = grp.tp >= tau, grp.tp == tau
        rows_of[tau] = (_stage_rows(ctx, cluster, grp, params, ge, ge, tau, d_max, rings, dist, elem, memo),
                        _stage_rows(ctx, cluster, grp, params, eq, ge, tau, d_max, rings, dist, elem, memo))
    if len(taus) == s_num and s_num > 1 or len(taus) == 1 and s_num == 1:      # per stage
        rows = np.stack([rows_of[taus[s if len(taus) > 1 else 0]][1][s] for s in range(s_num)])
        if not ctx.settings.dp_sync_waits_for_all:
            return rows[0, 1:].min(axis=0)
        return minmax_composition(rows, n_l)
    f_ge, f_eq = rows_of[taus[0]]
    if not ctx.settings.dp_sync_waits_for_all:      # stage 0's sync (no backward left to hide it)
        return f_ge[0, 1:].min(axis=0)
    best = np.full(d_max + 1, np.inf)
    for s in sorted({0, min(1, s_num - 1), s_num - 1}):     # middle stages are alike: stage 1 stands for them
        rows = f_ge.copy()
        rows[s] = np.maximum(f_eq[s], f_ge[s])
        best = np.minimum(best, minmax_composition(rows, n_l))
    return best


def split_base(ctx: SimContext, cluster: ClusterSpec, grp: ChainGroups, params: np.ndarray, upd: float,
               taus: tuple[int, ...], d_max: int, rings: dict, dist: bool, elem: int, memo: dict) -> np.ndarray:
    """[d_max + 1] floor on sync + update: without the distributed optimizer the sync floor plus ``upd`` (the
    smallest step of a replica of the stage holding >= ceil(L / S) layers); with it (``dist``) also its own
    sync floor plus ``upd / D`` (the step of a 1/D shard); the smaller of both."""
    d = np.arange(d_max + 1, dtype=float)
    base = split_sync(ctx, cluster, grp, params, taus, d_max, rings, None, elem, memo) + upd
    if dist:
        sharded = split_sync(ctx, cluster, grp, params, taus, d_max, rings,
                             (None, ctx.settings.sharded_collective_scale), elem, memo) + upd / np.maximum(d, 1.0)
        base = np.minimum(base, sharded)
    return base
