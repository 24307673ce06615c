"""Segment-split refinement of chain plans (docs/PLANNER.md 2.7): a heuristic pass after the exact search.

The exact search scores chain plans with Sailor's even layer split (docs/PLANNER.md 1.1). With
``space.chain_splits == "refine"`` :func:`refine_chains` then looks, outside that declared space, at chains of
two segments (any S) and three (S <= 4) whose segments carry their own layer totals
(:func:`planner.search.chainseq.segment_splits`), for the units (S, micro-batch size, recomputation, distributed
optimizer) that share the best plan's micro-batch size, recomputation and distributed-optimizer setting, on
clusters of two or more GPU types:

1. *estimate*: every (unit, cut, segment split, group per segment; one group per (GPU type, TP)) gets a cheap
   estimate from :meth:`planner.search.tasks.Tables.raw_arrays` (all splits of a unit in one call per group):
   the makespan at the largest D the pools allow, (ceil(N / D) - 1) x the slowest stage + the summed compute,
   plus the optimizer step, no p2p and no sync (a ranking, not a bound); estimates above the search's
   threshold, or above the ``top``-th estimate held, are dropped, most before they are computed: a
   (segment, group, split) whose :func:`_segment_floors` (a lower bound on every such estimate) exceeds that
   cutoff is never combined (session 17; the same estimates kept, in the same order);
2. *score*: the ``top`` best estimates per segment count are scored exactly by the chain search's own path
   (:func:`planner.search.chains.score_cut`: every D, the request's objective and constraints, every stage's
   fit; from the first D at which a chain's key without the sync can reach the threshold, :func:`_first_d`)
   and pushed into the search's top-K as *late* candidates, so a refined plan replaces the plan found only
   when its key is strictly better (ties go to the plans of the declared space).

The result is never worse than the exact search's; it is not exact over the segment-split space (longer
three-segment chains, four or more segments, other micro-batch sizes and optimizer settings, other zones'
groups in the estimates and estimates ranked below ``top`` are not refined).
"""
from __future__ import annotations

import logging
from itertools import combinations

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.chains import chain_units, score_chains, score_cut
from planner.search.chainseq import alive_pairs, chain_sequences, segment_split_rows
from planner.search.chaintab import Linked, StageTab
from planner.search.netvec import LinkCache
from planner.search.space import Candidate, Objective, SearchSpace, SearchStats
from planner.search.tasks import Tables
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext

log = logging.getLogger(__name__)
REFINE_TOP = 8         # the estimates scored exactly, per segment count
REFINE_MAX_STAGES = {2: 64, 3: 4}    # the most stages of the chains estimated, per segment count


def refine_chains(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache,
                  options: dict[str, list[tuple[int, int]]], gbs: int, objective: Objective, space: SearchSpace,
                  base: Candidate, best, stats: SearchStats, stop=lambda: False, top: int = REFINE_TOP) -> int:
    """Push refined chain plans (two or three segments, up to :data:`REFINE_MAX_STAGES` stages) into ``best`` (a
    :class:`planner.search.budget.TopK`; pushed late) for the units of ``base``'s micro-batch size,
    recomputation and distributed optimizer, on clusters of two or more GPU types. Returns the number of
    (split, chain) pairs scored exactly."""
    if len({p.gpu_type for p in cluster.pools}) < 2:     # one GPU type: stages of equal speed, nothing to balance
        return 0
    units = [u for u in chain_units(ctx, cluster, options, gbs, space)
             if (u[2], u[6], u[7]) == (base.mbs, base.recompute, base.distributed_optimizer)]
    scored = 0
    late = best.late()
    for n_seg in range(2, min(3, space.chain_segments) + 1):
        found: list[tuple[float, int, int, tuple[int, ...]]] = []     # (estimate, unit, split row, groups)
        rows_of: dict[int, tuple[np.ndarray, np.ndarray]] = {}          # per unit: (splits [K, S], segment [K, S])
        for ui, unit in enumerate(units):
            if stop():
                return scored
            if not n_seg <= unit[0] <= REFINE_MAX_STAGES[n_seg]:
                continue
            kept = sorted(e[0] for e in found)[top - 1:top]      # an estimate above the top-th found cannot enter
            got = _estimates(ctx, tables, unit, objective, n_seg, min([best.threshold()] + kept))
            if got is None:
                continue
            rows_of[ui], (est, ks, groups) = got[:2], got[2:]
            for e in range(min(top, len(est))):         # (no p2p, no sync: mostly below the exact key)
                if not est[e] <= best.threshold():
                    break
                found.append((float(est[e]), ui, int(ks[e]), tuple(int(g) for g in groups[e])))
        found.sort()
        by_split: dict[tuple[int, int], list[tuple[int, ...]]] = {}    # one table and one scoring per split
        for _, ui, k, groups in found[:top]:
            by_split.setdefault((ui, k), []).append(groups)
        for (ui, k), chains in by_split.items():
            if stop():
                return scored
            s_num, _, mbs, n_mb, grp, d_cap, rc, dist = units[ui]
            counts, seg_of = rows_of[ui]
            split = counts[k:k + 1]
            linked = Linked(ctx, cache, tables, grp, mbs, split, rc, d_cap, space.precision, dist)
            gs = np.array([[groups[i] for i in seg_of[k]] for groups in chains], dtype=np.int64)
            gs = gs[linked.tab.fits[gs, np.arange(s_num)].all(axis=1)]
            d_from = _first_d(ctx, linked.tab, grp, gs, n_mb, s_num, objective, late.threshold()) if len(gs) else 0
            if d_from:
                score_cut(ctx, linked, grp, gs, n_mb, s_num, objective, space, late, stats, split[0], mbs, rc,
                          cache, dist, d_from)
                scored += len(gs)
        log.info("chain refinement, %d segments: %d units, %d estimates kept, %d scored so far", n_seg,
                 len(rows_of), len(found), scored)
    return scored


def _split_rows(num_layers: int, s_num: int, n_seg: int, even: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(splits [K, S], segment of each stage [K, S]): every cut of ``s_num`` stages into ``n_seg`` segments and
    every segment split of it but the even one (:func:`planner.search.chainseq.segment_split_rows`), cut by cut."""
    cuts = np.array(list(combinations(range(1, s_num), n_seg - 1)), dtype=np.int64).reshape(-1, n_seg - 1)
    bounds = np.column_stack([np.zeros(len(cuts), dtype=np.int64), cuts, np.full(len(cuts), s_num)])
    rows, cut = segment_split_rows(num_layers, bounds)
    keep = ~(rows == even).all(axis=1)
    seg_of = (cuts[cut[keep], :, None] <= np.arange(s_num)[None, None, :]).sum(axis=1)
    return rows[keep], seg_of


def _estimates(ctx: SimContext, tables: Tables, unit, objective: Objective, n_seg: int, cutoff: float = np.inf
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(splits [K, S], segment of each stage [K, S], estimates [E], their splits [E] (rows of the splits), their
    groups [E, n_seg]) of one unit's chains of ``n_seg`` segments whose estimate is at most ``cutoff``, in the
    order (estimate, groups, split): every cut, every segment split but the even one, group g_i on segment i
    (adjacent groups differ), the groups being one per (type, TP), the first zone's (the estimate has no p2p:
    the other zones' groups are not refined). A chain is left out where a stage does not fit, the pools lack
    room, the objective's constraints fail (estimate inf; session 16 kept those when the top-K was not full),
    or the estimate exceeds ``cutoff``; a (segment, group, split)
    whose :func:`_segment_floors` exceeds ``cutoff`` is never combined (its every chain's estimate exceeds
    it). None: no such split."""
    s_num, even, mbs, n_mb, grp, d_cap, rc, dist = unit
    counts, seg_of = _split_rows(ctx.model.num_layers, s_num, n_seg, even)
    if not len(counts):
        return None
    reps = np.array(sorted({(g, tp): gi for gi, (g, _, tp) in reversed(list(enumerate(grp.names)))}.values()),
                    dtype=np.int64)
    n_g, n_k = len(reps), len(counts)
    tp_r, pool_r, usd_r = grp.tp[reps], grp.pool[reps], grp.usd_per_s[reps]
    comp, upd = np.zeros((n_g, n_k, s_num)), np.zeros((n_g, n_k, s_num))
    dmin, fits = np.ones((n_g, n_k, s_num), dtype=np.int64), np.zeros((n_g, n_k, s_num), dtype=bool)
    for r, gi in enumerate(reps):
        g, _, tp = grp.names[gi]
        arr = tables.raw_arrays(g, tp, mbs, counts, rc)
        comp[r], upd[r] = arr.compute_s, arr.update_s
        if dist:
            dmin[r] = tables.dist_dmin(g, tp, mbs, s_num, rc, 1, counts, per_stage=True)
            fits[r] = dmin[r] <= d_cap
        else:
            fits[r] = arr.memory_bytes <= tables.table(g, tp, mbs).usable_bytes
    seg = []            # per segment: [G, K] largest, summed compute, slowest step, largest D min, fit, GPUs
    for i in range(n_seg):
        mask = seg_of == i                                              # [K, S]
        seg.append((np.where(mask, comp, -np.inf).max(axis=2), np.where(mask, comp, 0.0).sum(axis=2),
                    np.where(mask, upd, 0.0).max(axis=2), np.where(mask, dmin, 1).max(axis=2),
                    np.where(mask, fits, True).all(axis=2), tp_r[:, None] * mask.sum(axis=1)[None, :]))
    floors = _segment_floors(seg, grp.caps[pool_r], usd_r, n_mb, min(n_mb, d_cap), dist, objective)
    kk, qq = alive_pairs([(f <= cutoff).T for f in floors], n_g)       # chains (split, sequence), adjacent differ
    gs = chain_sequences(n_g, n_seg)[qq]                                # [E, n_seg] indices into reps
    period = csum = step = dm = ok = units = usd = None
    pool_units: list = [0] * len(grp.caps)
    for i in range(n_seg):          # the same operations, in the same order, as on the dense [G] * n + [K] grid
        m, s, u, d, f, n = (x[gs[:, i], kk] for x in seg[i])
        if i == 0:
            period, csum, step, dm, ok, units, usd = m, s, u, d, f, n, n * usd_r[gs[:, i]]
        else:
            period, csum, step, dm = np.maximum(period, m), csum + s, np.maximum(step, u), np.maximum(dm, d)
            usd = usd + n * usd_r[gs[:, i]]
            units = units + n
            ok = ok & f
        for p in range(len(grp.caps)):          # the chain's GPUs in each pool
            pool_units[p] = pool_units[p] + np.where(pool_r[gs[:, i]] == p, n, 0)
    room = np.full(len(kk), min(n_mb, d_cap), dtype=np.int64)
    for p, cap in enumerate(grp.caps):
        used = np.broadcast_to(pool_units[p], room.shape)
        room = np.where(used > 0, np.minimum(room, cap // np.maximum(used, 1)), room)
    dd = np.maximum(room, 1)
    it = (-(-n_mb // dd) - 1) * period + csum + (step / dd if dist else step)
    cost, gpus = dd * usd * it, dd * units
    ok = ok & (room >= np.maximum(dm, 1)) & objective.allows(it, cost, gpus)
    est = np.where(ok, objective.key(it, cost), np.inf)
    keep = np.nonzero(np.isfinite(est) & (est <= cutoff))[0]
    flat = np.ravel_multi_index(tuple(gs[keep].T) + (kk[keep],), [n_g] * n_seg + [n_k])
    order = keep[np.lexsort((flat, est[keep]))]
    return counts, seg_of, est[order], kk[order], reps[gs[order]]


def _segment_floors(seg, cap_r: np.ndarray, usd_r: np.ndarray, n_mb: int, d_top: int, dist: bool,
                    objective: Objective) -> list[np.ndarray]:
    """Per segment i, [G, K]: a lower bound on :func:`_estimates`' estimate of every chain of each split with
    group g on segment i (inf where a stage of the segment does not fit), each other segment's group chosen
    on its own (no adjacency, no shared pool). With dd <= D_j(g) = max(min(``d_top``, cap(g) // GPUs of
    segment j on g), 1) for every segment j on group g: iteration >= max_j (ceil(N / D_j) - 1) x compute
    max_j + sum_j compute sum_j + max_j step_j (/ D_j with the distributed optimizer), each term of another
    segment at least its minimum over the groups that fit, and rounding is monotone (the same operations in
    the same order); dd x iteration >= max(N x period, summed compute) (dd <= N, the period <= the summed
    compute), so dollars >= that times the chain's rate (a 1e-9 margin for the other order of operations)."""
    terms = []          # per segment: [G, K] each of (fill term, summed compute, step, rate, largest compute)
    for m, s, u, _, f, n in seg:
        d_j = np.maximum(np.minimum(d_top, cap_r[:, None] // n), 1)
        terms.append(tuple(np.where(f, x, np.inf) for x in ((-(-n_mb // d_j) - 1) * m, s, u / d_j if dist else u,
                                                            n * usd_r[:, None], m)))
    low = [tuple(x.min(axis=0)[None, :] for x in t) for t in terms]
    out = []
    for i in range(len(seg)):
        a = t = u = rate = per = None
        for j in range(len(seg)):
            fa, fs, fu, fr, fm = terms[j] if j == i else low[j]
            if a is None:
                a, t, u, rate, per = fa, fs, fu, fr, fm
            else:
                a, t, u, rate, per = np.maximum(a, fa), t + fs, np.maximum(u, fu), rate + fr, np.maximum(per, fm)
        it = a + t + u
        with np.errstate(invalid="ignore"):
            cost = rate * np.maximum(n_mb * per, t) * (1 - 1e-9)
        out.append(np.where(np.isfinite(it) & np.isfinite(cost), objective.key(it, cost), np.inf))
    return out


def _first_d(ctx: SimContext, tab: StageTab, grp, gs: np.ndarray, n_mb: int, s_num: int, objective: Objective,
             threshold: float) -> int:
    """The smallest D at which some chain of ``gs`` may still enter below ``threshold`` (0: none): per chain and
    D, the key of :func:`planner.search.chains.iterate_d`'s iteration and dollars without the sync and the tied
    all-reduce (both >= 0, added after these terms: rounding is monotone), i.e. a lower bound on its key; the
    threshold only falls while the split is scored, so no D below it can push a plan."""
    sc = score_chains(ctx, tab, grp, gs, n_mb)
    d = np.arange(1, int(sc.d_max.max(initial=0)) + 1)
    m = -(-n_mb // d)
    span = F.pipeline_s(m[None, :], sc.levels[:, np.minimum(m, s_num + 1) - 1], sc.fill[:, None])
    upd = sc.upd[:, None] / d[None, :] if tab.param_bytes is not None else sc.upd[:, None]
    with np.errstate(invalid="ignore"):
        it = span + upd
        cost = d[None, :] * sc.usd_per_s[:, None] * it + n_mb * sc.egress_per_mb[:, None]
    ok = (sc.d_max[:, None] >= d[None, :]) & (sc.d_min[:, None] <= d[None, :]) & np.isfinite(sc.fill)[:, None]
    key = np.where(ok & objective.allows(it, cost, d[None, :] * sc.gpus[:, None]), objective.key(it, cost), np.inf)
    live = np.nonzero((key * (1 - 1e-12) <= threshold).any(axis=0))[0]
    return int(d[live[0]]) if len(live) else 0
