"""The planner's search: a pure function of (cost model context, cluster, batch, objective, space).

Tasks (S, micro-batch, TP per used type) are visited best-first by a lower bound; inside a task the layer
splits are reduced to the non-dominated ones (the objective is monotone in every criterion), and for each
split every row of pipeline counts is bounded cheaply, then scored exactly if the bound can still win.
"""
from __future__ import annotations

import heapq
import logging
import time

import numpy as np

from planner.cluster import ClusterSpec
from planner.errors import InputError
from planner.search.budget import Budget, OutOfTime, Progress, TopK
from planner.search.chains import search_chains
from planner.search.distopt import dist_dominated
from planner.search.makespan import assign_counts
from planner.search.netvec import Group, LinkCache
from planner.search.pools import PoolModel, pool_model, pool_p2p_s, score_batch
from planner.search.rowblock import RowBlock
from planner.search.rowfloor import floor_keys, pool_floors, task_floor
from planner.search.rows import coarse_options, pareto_min, product_chunks, zone_splits
from planner.search.space import Candidate, Objective, PoolUse, SearchResult, SearchSpace, SearchStats
from planner.search.verify import check_candidates
from planner.search.tasks import Tables, Task, caps_for, enumerate_tasks, mbs_tp_options, task_bound
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext

log = logging.getLogger(__name__)
INCUMBENT_MIN_POOLS = 8             # clusters with this many (type, zone) pools get an incumbent search first
INCUMBENT_SHARES = (0.25, 0.5)      # the incumbent searches (coarse levels 1, 2) end by these shares of the limit
CHAIN_SHARE = 0.7                   # ... and the chain plans that follow them by this one


def plan_search(ctx: SimContext, cluster: ClusterSpec, gbs: int, objective: Objective = Objective(),
                space: SearchSpace = SearchSpace(), top_k: int = 1, progress: Progress | None = None,
                verify: bool = True, time_limit_s: float | None = None) -> SearchResult:
    """Best ``top_k`` candidates of the declared space under ``objective`` (empty list: nothing feasible).

    ``time_limit_s``: stop the search once this many seconds have passed *and* a plan is held; the result
    then holds the best plans found so far, ``stats.complete`` is False and ``stats.lower_bound_key`` bounds
    every plan not yet searched (docs/PLANNER.md 2.4). A search that finishes within the limit returns what
    it returns without one. ``progress(done, total, elapsed_s, phase)`` is called at most every 0.2 s.

    ``verify`` (default): every returned candidate's plan is simulated and its iteration time, cost and GPU
    count must equal the evaluator's within relative 1e-9 (:func:`planner.search.verify.check_candidates`,
    raising :class:`planner.errors.InternalError` otherwise)."""
    t0 = time.perf_counter()
    cluster = cluster.nonempty()
    if cluster.total_gpus == 0:
        raise InputError("no GPUs: the cluster is empty")
    budget = Budget(time_limit_s, progress, t0)
    stats = SearchStats()
    cache = LinkCache(ctx)
    tables = Tables(ctx, space)
    options = {g: mbs_tp_options(ctx, g, min(cluster.gpus_per_node(g), ctx.node_size(g)), space)
               for g in cluster.gpu_types()}
    options = {g: o for g, o in options.items() if o}
    zones = cluster.zones()
    clusters = [cluster] if not space.single_zone else [
        ClusterSpec(tuple(p for p in cluster.pools if p.zone == z)) for z in zones]
    best = TopK(top_k)
    remaining = np.inf          # lower bound on every plan left unsearched

    def chain_stop() -> bool:
        budget.tick(f"chain plans, best {best.best_key():.4g}", stats.chains_bounded, 0)
        return budget.expired(chain_share) and best.has_plan()

    chain_share, chains_done = 1.0, None
    for sub in clusters:
        tasks = enumerate_tasks(ctx, sub, tables, options, gbs, objective, space, cache,
                                tick=lambda i, n: budget.tick("building the task list (depths)", i, n))
        stats.tasks += len(tasks)
        refined: dict[int, tuple[float, dict]] = {}
        if len(sub.pools) >= INCUMBENT_MIN_POOLS and len(tasks) > 1:
            # a large cluster: an incumbent from coarse pipeline counts, then the chain plans against it
            # (pushed as "late" so that ties still go to pool plans), then the exact pool search
            _coarse_incumbents(ctx, sub, tables, cache, tasks, gbs, objective, space, best, budget, refined)
            if chains_done is None:
                chain_share = CHAIN_SHARE
                chains_done = search_chains(ctx, cluster, tables, cache, options, gbs, objective, space,
                                            best.late(), stats, stop=chain_stop)
        remaining = min(remaining, _visit(ctx, sub, tables, cache, tasks, gbs, objective, space, best, stats,
                                          budget, refined, floor_tasks=len(sub.pools) >= INCUMBENT_MIN_POOLS
                                          and objective.kind == "throughput"))
    if chains_done is None:
        chain_share = 1.0
        chains_done = search_chains(ctx, cluster, tables, cache, options, gbs, objective, space, best, stats,
                                    stop=chain_stop)
    if not chains_done:
        remaining = min(remaining, _floor_key(ctx, cluster, gbs, objective, space))
    found = _finish(best, stats, remaining, time_limit_s, tables)
    if verify:
        check_candidates(ctx, found, gbs)
    return SearchResult(found, stats, time.perf_counter() - t0)


def _coarse_incumbents(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache, tasks: list[Task],
                       gbs: int, objective: Objective, space: SearchSpace, best: TopK, budget: Budget,
                       refined: dict[int, tuple[float, dict]]) -> None:
    """Incumbents for ``best`` from the same best-first search over coarse pipeline counts (level 1: the same
    count in every zone; level 2: every zone used, any total), both subsets of the declared rows, each ending
    by its share of the time limit (docs/PLANNER.md 2.4)."""
    for level, share in enumerate(INCUMBENT_SHARES, start=1):
        inc = TopK(best.k)
        inc.set_incumbents(best.incumbents)
        _visit(ctx, cluster, tables, cache, tasks, gbs, objective, space, inc, SearchStats(), budget,
               refined, coarse=level, share=share)
        inc.merge_incumbents()
        best.set_incumbents(inc.sorted())


def _finish(best: TopK, stats: SearchStats, remaining: float, time_limit_s: float | None,
            tables: Tables) -> list[Candidate]:
    """The search's candidates; ``stats`` says whether it finished and, if not, the bound on every plan it
    did not search (the incumbents count as found plans then)."""
    stats.complete = remaining == np.inf
    if not stats.complete:
        best.merge_incumbents()
        stats.lower_bound_key = float(min(remaining, best.best_key()))
        stats.time_limit_s = time_limit_s
    stats.memory_shortfall_bytes = tables.min_overflow_bytes
    return best.sorted()


def _floor_key(ctx: SimContext, cluster: ClusterSpec, gbs: int, objective: Objective, space: SearchSpace) -> float:
    """A lower bound on the objective of every plan (:mod:`planner.search.bound`; covers chain plans)."""
    from planner.search.bound import throughput_bound
    b = throughput_bound(ctx, cluster, gbs, space.precision, space.optimizer)
    if b is None:
        return np.inf
    return float(objective.key(b.iteration_s, b.cost_usd))


def _visit(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache, tasks: list[Task], gbs: int,
           objective: Objective, space: SearchSpace, best: TopK, stats: SearchStats, budget: Budget,
           refined: dict[int, tuple[float, dict]], coarse: int = 0, share: float = 1.0,
           floor_tasks: bool = False) -> float:
    """Best-first over tasks; a task's cheap bound is refined (gradient sync added) when it is first popped
    (refinements are kept in ``refined`` for a later pass). Returns inf when every task was searched or
    pruned, else (stopped at ``share`` of the time limit) a lower bound on every plan of the unsearched
    tasks. ``coarse`` (1, 2): only :func:`coarse_options` rows of that level (the incumbent search).
    ``floor_tasks``: a refined task is bounded once more by :func:`_task_floor` before it runs."""
    heap = [(t.bound, 0, i) for i, t in enumerate(tasks)]
    heapq.heapify(heap)
    done = 0
    phase = f"incumbent search (coarse pipeline counts, level {coarse})" if coarse else "exact search"
    label = [phase]

    def stop() -> bool:
        budget.tick(label[0], done, len(tasks))
        return budget.expired(share) and best.has_plan()

    while heap:
        bound, is_refined, i = heapq.heappop(heap)
        if bound >= best.threshold():
            stats.tasks_pruned += len(heap) + 1
            break
        if stop():
            return bound
        task = tasks[i]
        label[0] = f"{phase}, best {best.best_key():.4g}, bound {bound:.4g}"
        if not is_refined:
            if i not in refined:
                sync_out: dict = {}
                b = task_bound(ctx, cluster, tables, task.tps, task.num_stages, task.mbs, gbs // task.mbs,
                               objective, cache, sync_out=sync_out, recompute=task.recompute, dist=task.dist)
                refined[i] = (b, sync_out)
            heapq.heappush(heap, (max(refined[i][0], bound), 1, i))
            continue
        if floor_tasks and is_refined == 1:
            fb = _task_floor(ctx, cluster, tables, cache, task, gbs, space, refined[i][1].get("by_d"))
            heapq.heappush(heap, (max(fb, bound), 2, i))
            continue
        try:
            _run_task(ctx, cluster, tables, cache, task, gbs, objective, space, best, stats,
                      refined[i][1].get("by_d"), coarse=coarse, stop=stop)
        except OutOfTime:
            return bound
        done += 1
        label[0] = f"{phase}, best {best.best_key():.4g}, bound {bound:.4g}"
    return np.inf


def _task_floor(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache, task: Task, gbs: int,
                space: SearchSpace, sync_lb: np.ndarray | None) -> float:
    """:func:`planner.search.rowfloor.task_floor` of a task: per pool the smallest busiest-stage period,
    fill/drain and optimizer step over the task's fitting splits (what its pool models hold per split)."""
    idx = np.nonzero(tables.task_fits(task.tps, task.mbs, task.num_stages, task.recompute, task.dist,
                                      task.dmax))[0]
    if len(idx) == 0:
        return np.inf
    mb_bytes = ctx.model.boundary_activation_bytes(task.mbs, F.bytes_per_element(space.precision))
    m, f, u, caps, types = [], [], [], [], []
    for t_i, (g, tp) in enumerate(task.tps):
        upd = float(tables.arrays(g, tp, task.mbs, task.num_stages, task.recompute).update_s[idx].max(axis=1).min())
        for z, cap in caps_for(cluster, g, tp, task.num_stages):
            p2p = pool_p2p_s(ctx, cache, Group(z, g, tp), task.num_stages, mb_bytes)
            if not np.isfinite(p2p):
                continue
            _, fill, period = tables.levels(g, tp, task.mbs, task.num_stages, task.recompute, p2p,
                                            ctx.settings.p2p_blocking)
            m.append(float(period[idx].min()))
            f.append(float(fill[idx].min()))
            u.append(upd)
            caps.append(cap)
            types.append(t_i)
    if sorted(set(types)) != list(range(len(task.tps))):
        return np.inf
    return task_floor(np.array(m), np.array(f), np.array(u), np.array(caps, dtype=np.int64),
                      np.array(types), gbs // task.mbs, sync_lb, task.dist)


def _row_grid(cluster: ClusterSpec, task: Task, max_total: int, coarse: int = 0):
    """Chunks of rows [R, P] with columns in (zone, type) order, plus that column order."""
    per_type, cols = [], []
    for g, tp in task.tps:
        caps = caps_for(cluster, g, tp, task.num_stages)
        opts = zone_splits(tuple(c for _, c in caps), max_total)
        per_type.append(coarse_options(opts, coarse) if coarse else opts)
        cols += [(z, g) for z, _ in caps]
    order = sorted(range(len(cols)), key=lambda i: cols[i])
    if any(len(o) == 0 for o in per_type):      # a type with no option under max_total: no rows
        return
    for chunk in product_chunks(per_type, max_total):
        yield chunk[:, order], [cols[i] for i in order]


def _split_criteria(ctx: SimContext, cluster: ClusterSpec, cache: LinkCache, tables: Tables, task: Task,
                    arrs: list, idx: np.ndarray, space: SearchSpace) -> np.ndarray:
    """Per feasible split, quantities the objective is non-decreasing in: per pool the steady period at
    every micro-batch-count level, per type the slowest optimizer step, the largest stage gradient and
    the summed stage gradients (egress)."""
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
    if task.dist:       # the rows a split serves: D from lo (fits) to hi; a dominating split serves as many
        lo, hi = tables.dist_range(task.tps, task.mbs, task.num_stages, task.recompute)
        crit += [lo[idx, None].astype(float), -np.minimum(hi[idx], task.dmax)[:, None].astype(float)]
    return np.concatenate(crit, axis=1)


def _run_task(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache, task: Task, gbs: int,
              objective: Objective, space: SearchSpace, best: TopK, stats: SearchStats,
              sync_lb: np.ndarray | None = None, coarse: int = 0, stop=lambda: False) -> None:
    n_mb = gbs // task.mbs
    arrs = [tables.arrays(g, tp, task.mbs, task.num_stages, task.recompute) for g, tp in task.tps]
    idx = np.nonzero(tables.task_fits(task.tps, task.mbs, task.num_stages, task.recompute, task.dist,
                                      task.dmax))[0]
    d_lo, d_hi = tables.dist_range(task.tps, task.mbs, task.num_stages, task.recompute) if task.dist \
        else (None, None)
    # with sync overlapping the backward the objective is not monotone in these criteria: keep every split
    if ctx.settings.dp_sync_waits_for_all:
        idx = idx[pareto_min(_split_criteria(ctx, cluster, cache, tables, task, arrs, idx, space))]
    models = {int(k): _pool_models(ctx, cluster, tables, cache, task, int(k), n_mb, space) for k in idx}
    floors = None
    # with one replica per stage the distributed optimizer changes nothing (memory / 1, step / 1, no sync): its
    # D = 1 rows are left to the task without it when that task is searched (so --top lists no plan twice)
    one_replica_twin = task.dist and False in space.distributed_optimizer and not dist_dominated(space, task.tps)
    # a task without the distributed optimizer may search only its smaller rows (distopt.plain_rows_cap)
    for D_all, cols in _row_grid(cluster, task, min(n_mb, task.dmax) if not task.dist and task.dmax else n_mb,
                                 coarse):
        if stop():
            raise OutOfTime
        if space.uniform_microbatches:
            D_all = D_all[n_mb % D_all.sum(axis=1) == 0]
        if len(D_all) == 0 or not models:
            continue
        # bound every split's rows cheaply, then score the survivors of all splits in one batch; the
        # pipeline rate, GPUs and sync bound of a row do not depend on the split
        thr = best.threshold()
        items = []
        block = RowBlock(D_all)
        common = _row_terms([models[next(iter(models))][c] for c in cols], D_all, sync_lb, block)
        if len(models) > 1 and thr < np.inf:        # the split-free row floor (rowfloor.py)
            floors = floors or pool_floors(models, cols)
            keep = floor_keys(*floors, D_all, n_mb, objective, *common, dist=task.dist, block=block) <= thr
            if not keep.all():
                D_all = D_all[keep]
                common = tuple(None if x is None else x[keep] for x in common)
                if len(D_all) == 0:
                    continue
                block = block.take(keep)
        for k, by_col in models.items():
            if stop():
                raise OutOfTime
            pools = [by_col[c] for c in cols]
            keys, span, upd = _cheap_keys(pools, D_all, n_mb, objective, *common, dist=task.dist, block=block)
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


def _pool_models(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache, task: Task, k: int,
                 n_mb: int, space: SearchSpace) -> dict[tuple[str, str], PoolModel]:
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
            by_col[(z, g)] = tables.memo[key]
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


def _row_terms(pools: list[PoolModel], D: np.ndarray, sync_lb: np.ndarray | None, block: RowBlock | None = None
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


def _cheap_keys(pools: list[PoolModel], D: np.ndarray, n_mb: int, objective: Objective, slb: np.ndarray | None,
                rate: np.ndarray, gpus: np.ndarray, dist: bool = False, block: RowBlock | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower bounds on the objective per row (inf where a constraint already fails): relaxed makespan,
    optimizer step and the task's sync lower bound for the row's pipeline count (``slb``); also the relaxed
    makespan and the optimizer step per row, which the sync-bound pass reuses. ``block``: :class:`RowBlock`
    of ``D`` (shared by the splits of a task)."""
    block = RowBlock(D) if block is None else block
    span = block.relaxed_lower_bound(np.array([p.period_s for p in pools]), np.array([p.fill_s for p in pools]),
                                     n_mb)
    upd = block.used_max(np.array([p.update_s for p in pools]), 0.0)
    if dist:            # the distributed optimizer steps 1/D of the parameters
        upd = upd / block.total_min1
    it = span + upd
    if slb is not None:
        it = it + slb
    cost = rate * it
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
