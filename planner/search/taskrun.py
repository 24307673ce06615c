"""One search task's rows: every layer split's rows bounded cheaply, the survivors scored exactly.

Contract: :func:`run_task` pushes into ``best`` every plan of the task (its non-dominated layer splits, every
row of pipeline counts of its pools, coarse rows only when asked) whose exact objective key can still enter
it; a row is dropped only when a lower bound on its key (the split-free row floor, :func:`cheap_keys`, then
the largest stage's sync) already exceeds the threshold, so the plans kept are the ones exhaustive scoring
keeps. Scores are :mod:`planner.search.pools`' (the simulator's formulas on arrays of rows).
"""
from __future__ import annotations

import numpy as np

from planner.cluster import ClusterSpec
from planner.errors import InputError
from planner.search.budget import OutOfTime, TopK
from planner.search.caps import caps_for
from planner.search.distopt import dist_dominated
from planner.search.makespan import assign_counts
from planner.search.netvec import Group, LinkCache
from planner.search.pools import PoolModel, pool_model, pool_p2p_s, score_batch
from planner.search.rowblock import RowBlock
from planner.search.rowfloor import floor_keys, pool_floors
from planner.search.rowclass import class_row_grid, task_class_table
from planner.search.rowzone import zone_row_terms, zone_terms
from planner.search.rows import ONE_ZONE, one_zone_rows, ordered_product_chunks, pareto_min, task_options, \
    used_rows
from planner.search.splitegress import egress_columns
from planner.search.space import Candidate, Objective, PoolUse, SearchSpace, SearchStats
from planner.search.tasks import Tables, Task
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext


def row_grid(cluster: ClusterSpec, task: Task, max_total: int, coarse: int = 0):
    """Chunks of rows [R, P] with columns (zone, type, TP) in sorted order, plus that column order: the product
    of the task's row blocks (:func:`planner.search.rows.task_options`), rows leaving a TP degree of a two-TP
    type unused dropped."""
    per_type, cols, used = task_options(cluster, task, max_total, coarse)
    order = sorted(range(len(cols)), key=lambda i: cols[i])
    if any(len(o) == 0 for o in per_type):      # a type with no option under max_total: no rows
        return
    at = {src: j for j, src in enumerate(order)}
    groups = [[at[i] for i in grp] for grp in used]
    for chunk in ordered_product_chunks(per_type, max_total, order):
        yield (chunk[used_rows(chunk, groups)] if groups else chunk), [cols[i] for i in order]


def _split_criteria(ctx: SimContext, cluster: ClusterSpec, cache: LinkCache, tables: Tables, task: Task,
                    arrs: list, idx: np.ndarray, space: SearchSpace, same_stage_bytes: bool = False,
                    rows=None) -> np.ndarray:
    """Per feasible split, quantities the objective is non-decreasing in: per pool the steady period at
    every micro-batch-count level, per type the slowest optimizer step, the largest stage gradient and
    the summed stage gradients (egress). ``same_stage_bytes`` (egress not a function of the summed bytes,
    :func:`split_dominance_rule`): with ``rows`` (a callable giving the chunks of every row the task may score,
    :func:`row_grid`'s) the split's exact egress on each sync class of those rows over several zones and, with
    tied embeddings, stage 0's mode there (:func:`splitegress.egress_columns`); without ``rows``, or where those
    are too many, the split's class of equal stage bytes (:func:`_stage_bytes_class`, as two columns id and -id),
    so a split is compared only with the splits whose stages carry the same bytes in some order."""
    crit = []
    mb_bytes = ctx.model.boundary_activation_bytes(task.mbs, F.bytes_per_element(space.precision))
    for a, (g, tp) in zip(arrs, task.tps):
        s_num = task.num_stages
        for z, _ in caps_for(cluster, g, tp, task.num_stages):
            grp = Group(z, g, tp)
            p2p = pool_p2p_s(ctx, cache, grp, s_num, mb_bytes)
            crit.append(tables.levels(g, tp, task.mbs, task.num_stages, task.recompute, p2p,
                                      ctx.settings.p2p_blocking)[0][idx])
        crit.append(a.update_s[idx].max(axis=1)[:, None])
    params = np.max([a.params[idx] for a in arrs], axis=0)
    full = np.max([a.params[idx] * tp for a, (_, tp) in zip(arrs, task.tps)], axis=0)
    crit += [params.max(axis=1)[:, None], full.sum(axis=1)[:, None]]
    if len(idx) and _refusal_possible(ctx, cluster, cache, tables, task, float(params.min()), space):
        # a sync chunk below a fit's valid start is refused, so a split with smaller stages can be refused on
        # a row where a larger one is accepted: a dominating split must have a smallest stage at least as large
        # (every stage of a pool plan syncs over the same ring, docs/PLANNER.md 2.1, split dominance)
        crit.append(-params.min(axis=1)[:, None])
    if task.dist:       # the rows a split serves: D from lo (fits) to hi; a dominating split serves as many
        lo, hi = tables.dist_range(task.tps, task.mbs, task.num_stages, task.recompute)
        crit += [lo[idx, None].astype(float), -np.minimum(hi[idx], task.dmax)[:, None].astype(float)]
    if same_stage_bytes:
        crit.append(_egress_criteria(ctx, cache, task, arrs, idx, space, rows,
                                     _tied_mode_varies(ctx, cluster, task, space)))
    return np.concatenate(crit, axis=1)


def _egress_criteria(ctx: SimContext, cache: LinkCache, task: Task, arrs: list, idx: np.ndarray, space: SearchSpace,
                     rows=None, tied_modes: bool = False) -> np.ndarray:
    """:func:`_split_criteria`'s columns for ``same_stage_bytes``: the per-class egress criterion where ``rows`` is
    given and its sync table small enough (with stage 0's mode per class where ``tied_modes``), else the stage-bytes
    class (id and -id; with ``tied_modes`` also :func:`_stage0_class`)."""
    cols = None if rows is None or len(idx) < 2 else \
        egress_columns(ctx, cache, [a.params[idx] for a in arrs], list(task.tps), rows(), _dist_bytes(task, space),
                       tied_modes)
    if cols is None:
        params = np.max([a.params[idx] for a in arrs], axis=0)
        full = np.max([a.params[idx] * tp for a, (_, tp) in zip(arrs, task.tps)], axis=0)
        cls = _stage_bytes_class(params, full)[:, None]
        cols = np.concatenate([cls, -cls] + ([_stage0_class(arrs, idx)] if tied_modes else []), axis=1)
    return cols


def _tied_mode_varies(ctx: SimContext, cluster: ClusterSpec, task: Task, space: SearchSpace) -> bool:
    """Whether the tied-embedding all-reduce can depend on the split: it runs in stage 0's mode
    (``tiedvec.tied_rows``), and under ``grad_sync = "auto"`` on a task over several zones that mode flips with
    stage 0's bytes (docs/PLANNER.md 10.8.4)."""
    if not space.tie_embeddings or task.num_stages < 2 or ctx.settings.grad_sync != "auto":
        return False
    return len({z for g, tp in task.tps for z, _ in caps_for(cluster, g, tp, task.num_stages)}) > 1


def _stage0_class(arrs: list, idx: np.ndarray) -> np.ndarray:
    """[K, 2]: an id equal for two splits exactly when their first stages hold the same per-GPU parameters under
    every (type, TP) of the task (then the same bytes, so the same mode on every row), as id and -id."""
    first = np.stack([a.params[idx, 0] for a in arrs], axis=1)
    cls = np.unique(first, axis=0, return_inverse=True)[1].reshape(-1).astype(float)[:, None]
    return np.concatenate([cls, -cls], axis=1)


def _stage_bytes_class(params: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Per split ([K, S] arrays: the largest per-GPU parameters of each stage over the task's types, and its
    whole-stage parameters), an id equal for two splits exactly when their stages carry the same (per-GPU,
    whole-stage) pairs in some order: then every stage of one has a stage of the other with the same sync
    bytes, the same mode under ``auto`` on every row and the same egress, so their egress is equal."""
    if len(params) == 0:
        return np.zeros(0)
    pairs = np.stack([params, full], axis=-1)                            # [K, S, 2]
    order = np.lexsort((pairs[..., 1], pairs[..., 0]), axis=-1)          # stages by (per-GPU, whole-stage)
    key = np.take_along_axis(pairs, order[..., None], axis=1).reshape(len(pairs), -1)
    return np.unique(key, axis=0, return_inverse=True)[1].reshape(-1).astype(float)


def _refusal_possible(ctx: SimContext, cluster: ClusterSpec, cache: LinkCache, tables: Tables, task: Task,
                      least_params: float, space: SearchSpace) -> bool:
    """Whether a row of the task could send a sync chunk below a link fit's valid start: the smallest stage's
    gradient (or, under the distributed optimizer, parameter) bytes over the most replicas a ring can hold,
    against the largest valid start of every link between the task's pools at every concurrency a ring can
    use (its smallest TP). A link the network lacks answers True (the search refuses such rows elsewhere)."""
    groups = [Group(z, g, tp) for g, tp in task.tps for z, _ in caps_for(cluster, g, tp, task.num_stages)]
    key = ("valid-from", tuple(groups))
    start = tables.memo.get(key)
    if start is None:
        try:
            start = max((cache.get(a, b, conc).valid_from_bytes() for a in groups for b in groups
                         for conc in {tp for _, tp in task.tps}), default=0.0)
        except InputError:
            start = np.inf
        tables.memo[key] = start
    if start <= 0:
        return False
    rings = sum(c for g, tp in task.tps for _, c in caps_for(cluster, g, tp, task.num_stages))
    least = F.grad_bytes(least_params)
    if task.dist:
        least = min(least, least_params * F.bytes_per_element(space.precision))
    return least / max(1, rings) < start


ANY_SPLIT, SAME_STAGE_BYTES = "any split", "same stage bytes"


def split_dominance_rule(ctx: SimContext, cluster: ClusterSpec, task: Task, objective: Objective) -> str | None:
    """How split dominance may compare this task's splits so that it keeps the task's optimum (docs/PLANNER.md
    2.1, *Split dominance*; 10.8.4): None when the sync overlaps the backward (longer stages can hide more sync:
    no dominance); :data:`SAME_STAGE_BYTES` when the objective prices egress (cost, value, or a $/iteration cap)
    under ``grad_sync = "auto"`` on a task whose pools span several zones: each stage of such a row takes the
    faster of the flat and the hierarchical ring, whose cross-zone bytes differ, so which mode a stage takes, and
    with it the egress, depends on the stage's own bytes, not on their sum; the egress is equal only between
    splits whose stages carry the same bytes in some order; else :data:`ANY_SPLIT`."""
    if not ctx.settings.dp_sync_waits_for_all:
        return None
    prices_egress = objective.kind != "throughput" or objective.max_cost_per_iter_usd is not None
    if not prices_egress or ctx.settings.grad_sync != "auto":
        return ANY_SPLIT
    zones = {z for g, tp in task.tps for z, _ in caps_for(cluster, g, tp, task.num_stages)}
    return ANY_SPLIT if len(zones) <= 1 else SAME_STAGE_BYTES


def split_parts(ctx: SimContext, cluster: ClusterSpec, cache: LinkCache, tables: Tables, task: Task, arrs: list,
                idx: np.ndarray, objective: Objective, space: SearchSpace, rows=None) -> list[np.ndarray]:
    """The fitting splits ``idx`` that split dominance keeps (:func:`split_dominance_rule`), in the parts
    :func:`run_task` searches one after the other. ``rows``: a callable giving the chunks of every row the task
    may score (for the per-class egress criterion; None: the stage-bytes class)."""
    rule = split_dominance_rule(ctx, cluster, task, objective)
    if rule is None:
        return [idx]
    crit = _split_criteria(ctx, cluster, cache, tables, task, arrs, idx, space)
    if rule == SAME_STAGE_BYTES:
        extra = _egress_criteria(ctx, cache, task, arrs, idx, space, rows=rows,
                                 tied_modes=_tied_mode_varies(ctx, cluster, task, space))
    elif _tied_mode_varies(ctx, cluster, task, space):
        extra = _stage0_class(arrs, idx)
    else:
        extra = np.zeros((len(idx), 0))
    kept = idx[pareto_min(np.concatenate([crit, extra], axis=1))]
    if not extra.shape[1] or len(kept) < 2:
        return [kept]
    # the kept splits that the dominance over every split keeps too are searched first: their plans, usually the
    # task's best, set the threshold the other kept splits' rows are bounded by (a schedule only: every kept split
    # is searched, docs/PLANNER.md 10.8.4)
    first = np.intersect1d(kept, idx[pareto_min(crit)])
    return [first, np.setdiff1d(kept, first)]


def run_task(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache, task: Task, gbs: int,
              objective: Objective, space: SearchSpace, best: TopK, stats: SearchStats,
              sync_lb: np.ndarray | None = None, coarse: int = 0, stop=lambda: False) -> None:
    n_mb = gbs // task.mbs
    arrs = [tables.arrays(g, tp, task.mbs, task.num_stages, task.recompute) for g, tp in task.tps]
    idx = np.nonzero(tables.task_fits(task.tps, task.mbs, task.num_stages, task.recompute, task.dist,
                                      task.dmax))[0]
    d_lo, d_hi = tables.dist_range(task.tps, task.mbs, task.num_stages, task.recompute) if task.dist \
        else (None, None)
    # a task without the distributed optimizer may search only its smaller rows (distopt.plain_rows_cap)
    max_total = min(n_mb, task.dmax) if not task.dist and task.dmax else n_mb
    parts = split_parts(ctx, cluster, cache, tables, task, arrs, idx, objective, space,
                        rows=lambda: row_grid(cluster, task, max_total, coarse))
    for part in parts:
        if len(part):
            _run_splits(ctx, cluster, tables, cache, task, n_mb, arrs, part, objective, space, best, stats, sync_lb,
                        coarse, stop, d_lo, d_hi, max_total)


def _run_splits(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache, task: Task, n_mb: int,
                arrs: list, idx: np.ndarray, objective: Objective, space: SearchSpace, best: TopK, stats: SearchStats,
                sync_lb: np.ndarray | None, coarse: int, stop, d_lo: np.ndarray | None, d_hi: np.ndarray | None,
                max_total: int) -> None:
    """:func:`run_task`'s rows of the splits ``idx`` (pool models, row floors, bounds, exact scores)."""
    models = {int(k): pool_models(ctx, cluster, tables, cache, task, int(k), n_mb, space) for k in idx}
    floors = None
    # with one replica per stage the distributed optimizer changes nothing (memory / 1, step / 1, no sync): its
    # D = 1 rows are left to the task without it when that task is searched (so --top lists no plan twice)
    scale = ctx.settings.sharded_collective_scale
    one_replica_twin = task.dist and False in space.distributed_optimizer and not dist_dominated(space, task.tps, scale)
    zt = zone_terms(ctx, cluster, tables, cache, task, n_mb)     # rows over several zones (2.6, round 4)
    egress = None
    thr0 = best.threshold()         # rows of classes whose floor exceeds it are never built (rowclass.py)
    ctab = task_class_table(cluster, task, models, n_mb, objective, sync_lb, zt, max_total, coarse) \
        if thr0 < np.inf else None
    for D_all, cols in class_row_grid(cluster, task, max_total, coarse, ctab, thr0):
        if stop():
            raise OutOfTime
        if space.uniform_microbatches:
            D_all = D_all[n_mb % D_all.sum(axis=1) == 0]
        if coarse == ONE_ZONE:
            D_all = D_all[one_zone_rows(D_all, cols)]
        if len(D_all) == 0 or not models:
            continue
        # bound every split's rows cheaply, then score the survivors of all splits in one batch; the
        # pipeline rate, GPUs and sync bound of a row do not depend on the split
        thr = best.threshold()
        items = []
        block = RowBlock(D_all)
        common = row_terms([models[next(iter(models))][c] for c in cols], D_all, sync_lb, block)
        if zt is not None:
            slb, egress = zone_row_terms(common, D_all, cols, zt, block.total)
            common = (slb,) + common[1:]
        if len(models) > 1 and thr < np.inf:        # the split-free row floor (rowfloor.py)
            floors = floors or pool_floors(models, cols)
            keep = floor_keys(*floors, D_all, n_mb, objective, *common, dist=task.dist, block=block,
                              egress=egress) <= thr
            if not keep.all():
                D_all = D_all[keep]
                common = tuple(None if x is None else x[keep] for x in common)
                egress = None if egress is None else egress[keep]
                if len(D_all) == 0:
                    continue
                block = block.take(keep)
        for k, by_col in models.items():
            if stop():
                raise OutOfTime
            pools = [by_col[c] for c in cols]
            keys, span, upd = cheap_keys(pools, D_all, n_mb, objective, *common, dist=task.dist, block=block,
                                         egress=egress)
            sel = keys <= thr
            if task.dist:       # the distributed optimizer's memory: the row's D must lie in the split's range
                d_row = block.total
                sel &= (d_row >= d_lo[k]) & (d_row <= d_hi[k])
                if one_replica_twin:    # D = 1: the same plan as the task without it (searched too)
                    sel &= d_row >= 2
            stats.rows_bounded += len(D_all)
            if sel.any():
                rate, gpus = common[1][sel], common[2][sel]
                items.append((k, pools, D_all[sel], (span[sel], upd[sel], rate, gpus)))
        if items:
            stats.splits_scored += len(items)
            _score_batch(ctx, cache, task, tables, items, n_mb, objective, space, best, stats)


def pool_models(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache, task: Task, k: int,
                 n_mb: int, space: SearchSpace) -> dict[tuple[str, str, int], PoolModel]:
    """The :class:`PoolModel` of every (zone, type, TP) column of the task at split ``k``."""
    by_col = {}
    mb_bytes = ctx.model.boundary_activation_bytes(task.mbs, F.bytes_per_element(space.precision))
    for g, tp in task.tps:
        arr = tables.arrays(g, tp, task.mbs, task.num_stages, task.recompute)
        for z, _ in caps_for(cluster, g, tp, task.num_stages):
            # a pool's model depends on its group and split only: tasks sharing (type, TP) share it
            key = ("pool", z, g, tp, task.mbs, task.num_stages, task.recompute, k, n_mb)
            if key not in tables.memo:
                grp = Group(z, g, tp)
                lv = tables.levels(g, tp, task.mbs, task.num_stages, task.recompute,
                                   pool_p2p_s(ctx, cache, grp, task.num_stages, mb_bytes), ctx.settings.p2p_blocking)
                tables.memo[key] = pool_model(ctx, cache, grp, arr, k, mb_bytes, ctx.catalog.get(g).usd_per_s,
                                              n_mb, lv)
            by_col[(z, g, tp)] = tables.memo[key]
    return by_col


def _score_batch(ctx: SimContext, cache: LinkCache, task: Task, tables: Tables, items: list, n_mb: int,
                 objective: Objective, space: SearchSpace, best: TopK, stats: SearchStats) -> None:
    """Bound the rows of every (split, pools, rows) item with the largest stage's sync, then score the
    survivors exactly (gradient sync batched over the items)."""
    stats.rows_sync_bounded += sum(len(D) for _, _, D, _ in items)
    lbs = score_batch(ctx, cache, [(pools, D) for _, pools, D, _ in items], n_mb, exact=False,
                      uniform=space.uniform_microbatches, known=[pre for *_, pre in items],
                      dist_bytes=_dist_bytes(task, space))
    thr = best.threshold()
    kept = []
    for (k, pools, D, _), lb in zip(items, lbs):
        keep = objective.allows(lb.iteration_s, lb.cost_usd, lb.gpus) & \
            (objective.key(lb.iteration_s, lb.cost_usd) <= thr)
        if keep.any():
            kept.append((k, pools, D[keep]))
    if not kept:
        return
    scs = score_batch(ctx, cache, [(pools, D) for _, pools, D in kept], n_mb, exact=True,
                      uniform=space.uniform_microbatches, tied=cache.tied if space.tie_embeddings else None,
                      dist_bytes=_dist_bytes(task, space),
                      keep=lambda it, cost, gpus: objective.allows(it, cost, gpus)
                      & (objective.key(it, cost) <= best.threshold()))
    for (k, pools, D), sc in zip(kept, scs):
        stats.rows_exact += len(D)
        ok = objective.allows(sc.iteration_s, sc.cost_usd, sc.gpus) & np.isfinite(sc.iteration_s)
        keys = np.where(ok, objective.key(sc.iteration_s, sc.cost_usd), np.inf)
        for r in np.argsort(keys, kind="stable")[:best.k]:
            if not np.isfinite(keys[r]) or keys[r] > best.threshold():
                break
            best.push(_candidate(task, tables, k, pools, D[r], sc, r, keys[r], n_mb, space))


def row_terms(pools: list[PoolModel], D: np.ndarray, sync_lb: np.ndarray | None, block: RowBlock | None = None
               ) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Per row: the task's sync lower bound for the row's pipeline count (None without one), the GPU dollars
    per second and the GPUs (the same for every split of a task). ``block``: :class:`RowBlock` of ``D``."""
    block = RowBlock(D) if block is None else block
    slb = None if sync_lb is None else sync_lb[np.minimum(block.total, len(sync_lb) - 1)]
    rate = block.weighted_sum(np.array([p.gpus_per_pipeline * p.usd_per_s for p in pools]))
    gpus = D @ np.array([p.gpus_per_pipeline for p in pools], dtype=D.dtype)     # integers: exact in any order
    return slb, rate, gpus


def _dist_bytes(task: Task, space: SearchSpace) -> int | None:
    """The distributed optimizer's parameter bytes per element (None: a plain all-reduce)."""
    return F.bytes_per_element(space.precision) if task.dist else None


def cheap_keys(pools: list[PoolModel], D: np.ndarray, n_mb: int, objective: Objective, slb: np.ndarray | None,
                rate: np.ndarray, gpus: np.ndarray, dist: bool = False, block: RowBlock | None = None,
                egress: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower bounds on the objective per row (inf where a constraint already fails): relaxed makespan,
    optimizer step and the task's sync lower bound for the row's pipeline count (``slb``); also the relaxed
    makespan and the optimizer step per row, which the sync-bound pass reuses. ``block``: :class:`RowBlock`
    of ``D`` (shared by the splits of a task); ``egress``: a floor on each row's egress dollars (None: 0)."""
    block = RowBlock(D) if block is None else block
    span = block.relaxed_lower_bound(np.array([p.period_s for p in pools]), np.array([p.fill_s for p in pools]),
                                     n_mb)
    upd = block.used_max(np.array([p.update_s for p in pools]), 0.0)
    if dist:            # the distributed optimizer steps 1/D of the parameters
        upd = upd / block.total_min1
    it = span + upd
    if slb is not None:
        it = it + slb
    cost = rate * it if egress is None else rate * it + egress
    keys = np.where(objective.allows(it, cost, gpus), objective.key(it, cost), np.inf)
    return keys, span, upd


def _candidate(task: Task, tables: Tables, k: int, pools: list[PoolModel], row: np.ndarray, sc, r: int,
               key: float, n_mb: int, space: SearchSpace) -> Candidate:
    g0, tp0 = task.tps[0]
    layers = tuple(int(x) for x in tables.arrays(g0, tp0, task.mbs, task.num_stages, task.recompute).counts[k])
    used = [(p, int(d)) for p, d in zip(pools, row) if d > 0]
    if space.uniform_microbatches:
        counts = [[n_mb // int(row.sum())] * d for _, d in used]
    else:
        counts = assign_counts([d for _, d in used], [p.times_s for p, _ in used], n_mb, float(sc.makespan_s[r]))
    return Candidate(
        key=float(key), num_stages=task.num_stages, mbs=task.mbs, layers_per_stage=layers,
        pools=tuple(PoolUse(p.group.gpu_type, p.group.zone, p.group.tp, d) for p, d in used),
        microbatches=tuple(m for c in counts for m in c), iteration_s=float(sc.iteration_s[r]),
        cost_usd=float(sc.cost_usd[r]), gpus=int(sc.gpus[r]), precision=space.precision,
        optimizer=space.optimizer, recompute=task.recompute, tie_embeddings=space.tie_embeddings,
        distributed_optimizer=task.dist)
