"""Segment-split refinement of chain plans (docs/PLANNER.md 2.7): a heuristic pass after the exact search.

The exact search scores chain plans with Sailor's even layer split (docs/PLANNER.md 1.1). With
``space.chain_splits == "refine"`` :func:`refine_chains` then looks, outside that declared space, at the
two-segment chains whose segments carry their own layer totals (:func:`planner.search.chainseq.segment_splits`)
for the units (S, micro-batch size, recomputation, distributed optimizer) that share the best plan's micro-batch
size, recomputation and distributed-optimizer setting:

1. *estimate*: every (unit, cut, segment split, ordered pair of groups) gets a cheap estimate from the per-stage
   tables of :meth:`planner.search.tasks.Tables.raw_arrays` (all splits of a unit in one call per group): the
   makespan at the largest D the pools allow, (ceil(N / D) - 1) x the slowest stage + the summed compute, plus the
   optimizer step, no p2p and no sync (a ranking, not a bound);
2. *score*: the ``top`` best estimates are scored exactly by the chain search's own path
   (:func:`planner.search.chains.score_cut`: every D, the request's objective and constraints) and pushed into the
   search's top-K as *late* candidates, so a refined plan replaces the plan found only when its key is strictly
   better (ties go to the plans of the declared space).

The result is never worse than the exact search's; it is not exact over the segment-split space (chains of
three segments, other micro-batch sizes and estimates ranked below ``top`` are not refined).
"""
from __future__ import annotations

import logging

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.chains import chain_units, score_cut
from planner.search.chainseq import segment_splits
from planner.search.chaintab import Linked
from planner.search.netvec import LinkCache
from planner.search.space import Candidate, Objective, SearchSpace, SearchStats
from planner.search.tasks import Tables
from planner.simulator.settings import SimContext

log = logging.getLogger(__name__)
REFINE_TOP = 24         # the estimates scored exactly


def refine_chains(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache,
                  options: dict[str, list[tuple[int, int]]], gbs: int, objective: Objective, space: SearchSpace,
                  base: Candidate, best, stats: SearchStats, stop=lambda: False, top: int = REFINE_TOP) -> int:
    """Push refined two-segment chain plans into ``best`` (a :class:`planner.search.budget.TopK`; pushed late)
    for the units of ``base``'s micro-batch size, recomputation and distributed optimizer. Returns the number
    of (split, chain) pairs scored exactly."""
    units = [u for u in chain_units(ctx, cluster, options, gbs, space)
             if (u[2], u[6], u[7]) == (base.mbs, base.recompute, base.distributed_optimizer)]
    found: list[tuple[float, int, int, int, int]] = []      # (estimate, unit, split row, group a, group b)
    rows_of: list[tuple[np.ndarray, np.ndarray] | None] = []   # per unit: (splits [K, S], cuts [K])
    for ui, unit in enumerate(units):
        if stop():
            break
        got = _estimates(ctx, tables, unit, objective)
        rows_of.append(got and got[:2])
        if got is None:
            continue
        est = got[2]
        for f in np.argsort(est, axis=None, kind="stable")[:top]:
            if not np.isfinite(est.flat[f]):
                break
            a, b, k = np.unravel_index(f, est.shape)
            found.append((float(est.flat[f]), ui, int(k), int(a), int(b)))
    found.sort()
    scored = 0
    late = best.late()
    for _, ui, k, a, b in found[:top]:
        if stop():
            break
        s_num, _, mbs, n_mb, grp, d_cap, rc, dist = units[ui]
        counts, cuts = rows_of[ui]
        split, c = counts[k:k + 1], int(cuts[k])
        linked = Linked(ctx, cache, tables, grp, mbs, split, rc, d_cap, space.precision, dist)
        gs = np.array([[a] * c + [b] * (s_num - c)], dtype=np.int64)
        if not linked.tab.fits[gs[0], np.arange(s_num)].all():
            continue
        score_cut(ctx, linked, grp, gs, n_mb, s_num, objective, space, late, stats, split[0], mbs, rc, cache, dist)
        scored += 1
    log.info("chain refinement: %d units, %d estimates kept, %d scored", len(units), len(found), scored)
    return scored


def _estimates(ctx: SimContext, tables: Tables, unit, objective: Objective
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(splits [K, S], cuts [K], estimates [G, G, K]) of one unit's two-segment chains: every cut, every segment
    split but the even one, group a on the stages before the cut and b from it on (inf: a == b, a stage that
    does not fit, no room in the pools, or outside the objective's constraints). None: no such split."""
    s_num, even, mbs, n_mb, grp, d_cap, rc, dist = unit
    rows, cut_list = [], []
    for c in range(1, s_num):
        for split in segment_splits(ctx.model.num_layers, (0, c, s_num)):
            if not np.array_equal(split, even):
                rows.append(split[0])
                cut_list.append(c)
    if not rows:
        return None
    counts, cuts = np.array(rows, dtype=np.int64), np.array(cut_list, dtype=np.int64)
    n_g, n_k = len(grp.names), len(rows)
    comp, upd = np.zeros((n_g, n_k, s_num)), np.zeros((n_g, n_k, s_num))
    dmin, fits = np.ones((n_g, n_k, s_num), dtype=np.int64), np.zeros((n_g, n_k, s_num), dtype=bool)
    seen: dict[tuple[str, int], int] = {}
    for gi, (g, _, tp) in enumerate(grp.names):
        twin = seen.setdefault((g, tp), gi)
        if twin != gi:              # the same type and TP in another zone: the same rows
            comp[gi], upd[gi], dmin[gi], fits[gi] = comp[twin], upd[twin], dmin[twin], fits[twin]
            continue
        arr = tables.raw_arrays(g, tp, mbs, counts, rc)
        comp[gi], upd[gi] = arr.compute_s, arr.update_s
        if dist:
            dmin[gi] = tables.dist_dmin(g, tp, mbs, s_num, rc, 1, counts, per_stage=True)
            fits[gi] = dmin[gi] <= d_cap
        else:
            fits[gi] = arr.memory_bytes <= tables.table(g, tp, mbs).usable_bytes
    first = np.arange(s_num)[None, :] < cuts[:, None]              # [K, S] the stages of the first segment

    def seg(mask):      # per group and split: the segment's slowest, summed compute, step, D min, fit [G, K]
        return (np.where(mask, comp, -np.inf).max(axis=2), np.where(mask, comp, 0.0).sum(axis=2),
                np.where(mask, upd, 0.0).max(axis=2), np.where(mask, dmin, 1).max(axis=2),
                np.where(mask, fits, True).all(axis=2))

    (m1, s1, u1, d1, f1), (m2, s2, u2, d2, f2) = seg(first), seg(~first)
    n1, n2 = grp.tp[:, None] * cuts[None, :], grp.tp[:, None] * (s_num - cuts)[None, :]     # [G, K] GPUs
    caps = grp.caps[grp.pool]                                                             # [G]
    same = (grp.pool[:, None] == grp.pool[None, :])[:, :, None]
    room = np.where(same, caps[:, None, None] // (n1[:, None] + n2[None, :]),
                    np.minimum(caps[:, None, None] // n1[:, None], caps[None, :, None] // n2[None, :]))
    d = np.minimum(room, min(n_mb, d_cap))
    dd = np.maximum(d, 1)
    period = np.maximum(m1[:, None], m2[None, :])
    step = np.maximum(u1[:, None], u2[None, :])
    it = (-(-n_mb // dd) - 1) * period + s1[:, None] + s2[None, :] + (step / dd if dist else step)
    usd = n1[:, None] * grp.usd_per_s[:, None, None] + n2[None, :] * grp.usd_per_s[None, :, None]
    cost, gpus = dd * usd * it, dd * (n1[:, None] + n2[None, :])
    ok = (f1[:, None] & f2[None, :] & (d >= np.maximum(np.maximum(d1[:, None], d2[None, :]), 1))
          & ~np.eye(n_g, dtype=bool)[:, :, None] & objective.allows(it, cost, gpus))
    return counts, cuts, np.where(ok, objective.key(it, cost), np.inf)
