"""The planner's search: a pure function of (cost model context, cluster, batch, objective, space).

Tasks (S, micro-batch, TP per used type) are visited best-first by a lower bound (built unit by unit, a unit
being (S, micro-batch, recomputation, distributed optimizer), only once the search reaches the unit's bound:
:mod:`planner.search.taskqueue`); inside a task the layer
splits are reduced to the non-dominated ones (the objective is monotone in every criterion), and for each
split every row of pipeline counts is bounded cheaply, then scored exactly if the bound can still win.
"""
from __future__ import annotations

import heapq
import logging
import time
from dataclasses import replace

import numpy as np

from planner.cluster import ClusterSpec
from planner.errors import InputError
from planner.search.budget import Budget, OutOfTime, Progress, TopK
from planner.search.chainrest import rest_floor
from planner.search.chains import search_chains
from planner.search.netvec import LinkCache
from planner.search.rows import ONE_ZONE
from planner.search.space import Candidate, Objective, SearchResult, SearchSpace, SearchStats
from planner.search.taskbound import task_bound
from planner.search.costfloor import objective_task_floor
from planner.search.taskrun import run_task
from planner.search.taskqueue import UNIT, TaskQueue
from planner.search.tasks import Tables, cluster_options
from planner.search.verify import check_candidates
from planner.simulator.settings import SimContext

log = logging.getLogger(__name__)
INCUMBENT_MIN_POOLS = 8             # clusters with this many (type, zone) pools get an incumbent search first
INCUMBENT_SHARES = (0.25, 0.5)      # the incumbent searches (coarse levels 1, 2) end by these shares of the limit
CHAIN_SHARE = 0.7                   # ... and the chain plans that follow them by this one
# the value objective (docs/PLANNER.md 2.4): the chain plans first, then one incumbent level of one-zone rows (no
# egress), each by its own share
VALUE_CHAIN_SHARE = 0.2
VALUE_LEVELS = ((ONE_ZONE, 0.8),)
ONE_ZONE_FLOORS = False             # True: the one-zone level's tasks in the order of their task floors
# SearchSpace.two_tp = 2: the one-TP search first, its plans the incumbents, ending by this share of the limit
TWO_TP_FIRST_SHARE = 0.5


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
    raising :class:`planner.errors.InternalError` otherwise).

    ``space.mixed_plans``: after the search, a bounded local search for mixed plans (stages shared by
    pipelines of different chains, :mod:`planner.search.mixplan`, docs/PLANNER.md 8) from the best plan found;
    it only adds candidates, scored by ``simulate``."""
    t0 = time.perf_counter()
    cluster = cluster.nonempty()
    if cluster.total_gpus == 0:
        raise InputError("no GPUs: the cluster is empty")
    budget = Budget(time_limit_s, progress, t0)
    stats = SearchStats()
    cache = LinkCache(ctx)
    options = cluster_options(ctx, cluster, space)
    tables = Tables(ctx, space, options, cluster)
    zones = cluster.zones()
    clusters = [cluster] if not space.single_zone else [
        ClusterSpec(tuple(p for p in cluster.pools if p.zone == z)) for z in zones]
    best = TopK(top_k)
    remaining = np.inf          # lower bound on every plan left unsearched
    if space.two_tp > 1:
        _one_tp_incumbents(ctx, cluster, gbs, objective, space, best, stats, progress, time_limit_s)

    def chain_stop() -> bool:
        budget.tick(f"chain plans, best {best.best_key():.4g}", stats.chains_bounded, 0)
        return budget.expired(chain_share) and best.has_plan()

    chain_share, chains_done, where = 1.0, None, [0]
    chain_rest = None           # the unsearched chain units' floor, once computed (value objective)
    queues = []
    for sub in clusters:
        budget.tick("building the task list (a bound per depth, micro-batch, recomputation, distributed optimizer)",
                    0, 1)
        tasks = TaskQueue(ctx, sub, tables, options, gbs, objective, space)
        queues.append(tasks)
        refined: dict[tuple[int, int], tuple[float, dict]] = {}
        floors: dict[tuple[int, int], float] = {}       # task floors, kept for a later pass like `refined`
        if len(sub.pools) >= INCUMBENT_MIN_POOLS and tasks.live_units() > 1:
            # a large cluster: an incumbent from coarse pipeline counts, then the chain plans against it
            # (pushed as "late" so that ties still go to pool plans), then the exact pool search
            # (the value objective: the chain plans first, then one-zone pool rows against them)
            for phase in ("chains", "coarse") if objective.kind == "value" else ("coarse", "chains"):
                if phase == "coarse":
                    _coarse_incumbents(ctx, sub, tables, cache, tasks, gbs, objective, space, best, budget,
                                       refined, floors)
                elif chains_done is None:      # the chains search the whole cluster: once
                    chain_share = VALUE_CHAIN_SHARE if objective.kind == "value" else CHAIN_SHARE
                    chains_done = search_chains(ctx, cluster, tables, cache, options, gbs, objective, space,
                                                best.late(), stats, stop=chain_stop, where=where)
                    if not chains_done and objective.kind == "value":
                        # bound the unsearched chain units now, inside the time limit (2.6): at the end
                        # the pool search has used the time up and this took 6 CPU s past the limit
                        chain_rest = rest_floor(ctx, cluster, tables, cache, options, gbs, objective, space,
                                                where[0], best.threshold())
        remaining = min(remaining, _visit(ctx, sub, tables, cache, tasks, gbs, objective, space, best, stats,
                                          budget, refined, floor_tasks=len(sub.pools) >= INCUMBENT_MIN_POOLS,
                                          floors=floors))
    if chains_done is None:
        chain_share = 1.0
        chains_done = search_chains(ctx, cluster, tables, cache, options, gbs, objective, space, best, stats,
                                    stop=chain_stop, where=where)
    if not chains_done:
        floor = _floor_key(ctx, cluster, gbs, objective, space)
        if objective.kind == "value":       # the unsearched chain units' own floors (2.6)
            if chain_rest is None:
                chain_rest = rest_floor(ctx, cluster, tables, cache, options, gbs, objective, space, where[0],
                                        best.threshold())
            floor = max(floor, chain_rest)
        remaining = min(remaining, floor)
    if not best.has_plan():     # no plan: the memory shortfall reported is the one over every unit's splits
        for q in queues:
            q.build_all()
    stats.tasks = sum(q.built for q in queues)
    if space.chain_splits == "refine" and space.chain_segments >= 2 and best.has_plan() and not space.single_zone \
            and not budget.expired():       # a heuristic pass outside the declared space (2.7)
        from planner.search.chainrefine import refine_chains
        refine_chains(ctx, cluster, tables, cache, options, gbs, objective, space, best.best(), best, stats,
                      stop=budget.expired)
    if space.mixed_plans and best.has_plan() and not space.single_zone and not budget.expired():   # section 8
        from planner.search.mixplan import improve
        mix = improve(ctx, cluster, gbs, objective, options, best.best(), stop=budget.expired)
        if mix is not None:
            best.push(mix)
    found = _finish(best, stats, remaining, time_limit_s, tables)
    if verify:
        check_candidates(ctx, found, gbs)
    return SearchResult(found, stats, time.perf_counter() - t0)


def _one_tp_incumbents(ctx: SimContext, cluster: ClusterSpec, gbs: int, objective: Objective, space: SearchSpace,
                       best: TopK, stats: SearchStats, progress: Progress | None, time_limit_s: float | None
                       ) -> None:
    """``space.two_tp`` = 2: the same search with one TP degree per type first (by :data:`TWO_TP_FIRST_SHARE` of
    the time limit), its plans the incumbents of ``best`` (plans of the larger space: the exact search then
    searches only what can beat or tie them, and a search stopped at the limit returns a plan at least as good
    as the one-TP search's, docs/PLANNER.md 10.7). Its pool rows of a type at two TP degrees are free per-zone
    counts, far more than a one-TP task's, so without them first a time-limited search on a many-zone cluster
    could stop inside one two-TP task with a worse plan than the one-TP search's. Its rows and chains scored
    count in ``stats``."""
    limit = None if time_limit_s is None else time_limit_s * TWO_TP_FIRST_SHARE
    first = plan_search(ctx, cluster, gbs, objective, replace(space, two_tp=1, mixed_plans=False), best.k,
                        progress, verify=False, time_limit_s=limit)
    for name in ("splits_scored", "rows_bounded", "rows_sync_bounded", "rows_exact", "chains_bounded",
                 "chains_exact"):
        setattr(stats, name, getattr(stats, name) + getattr(first.stats, name))
    if first.candidates:
        best.set_incumbents(first.candidates)


def _coarse_incumbents(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache, tasks: TaskQueue,
                       gbs: int, objective: Objective, space: SearchSpace, best: TopK, budget: Budget,
                       refined: dict[tuple[int, int], tuple[float, dict]],
                       floors: dict[tuple[int, int], float]) -> None:
    """Incumbents for ``best`` from the same best-first search over coarse pipeline counts (level 1: the same
    count in every zone; level 2: every zone used, any total; under the value objective instead one level of
    one-zone rows, :data:`ONE_ZONE`), all subsets of the declared rows, each ending by its share of the time
    limit (docs/PLANNER.md 2.4)."""
    levels = VALUE_LEVELS if objective.kind == "value" else tuple(enumerate(INCUMBENT_SHARES, start=1))
    for level, share in levels:
        inc = TopK(best.k)
        # under value the chain plans found before are incumbents too (plans of the space, 2.4)
        inc.set_incumbents(best.incumbents + (best.sorted() if objective.kind == "value" else []))
        _visit(ctx, cluster, tables, cache, tasks, gbs, objective, space, inc, SearchStats(), budget,
               refined, coarse=level, share=share, floor_tasks=level == ONE_ZONE and ONE_ZONE_FLOORS,
               floors=floors)
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


def _visit(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache, tasks: TaskQueue, gbs: int,
           objective: Objective, space: SearchSpace, best: TopK, stats: SearchStats, budget: Budget,
           refined: dict[tuple[int, int], tuple[float, dict]], coarse: int = 0, share: float = 1.0,
           floor_tasks: bool = False, floors: dict[tuple[int, int], float] | None = None) -> float:
    """Best-first over units and tasks: a popped unit pushes its tasks (:class:`TaskQueue`); a task's cheap bound
    is refined (gradient sync added) when it is first popped (refinements are kept in ``refined`` for a later
    pass). Returns inf when every task was searched or pruned, else (stopped at ``share`` of the time limit) a
    lower bound on every plan of the unsearched tasks. ``coarse`` (1, 2): only :func:`coarse_options` rows of
    that level (the incumbent search). ``floor_tasks``: a refined task is bounded once more by
    :func:`planner.search.costfloor.objective_task_floor` (the exact task floor under the throughput
    objective) before it runs."""
    heap = tasks.start()
    floors = {} if floors is None else floors
    done = 0
    phase = "exact search" if not coarse else "incumbent search (one-zone rows)" if coarse == ONE_ZONE else \
        f"incumbent search (coarse pipeline counts, level {coarse})"
    label = [phase]

    def stop() -> bool:
        budget.tick(label[0], done, tasks.built)
        return budget.expired(share) and best.has_plan()

    while heap:
        entry = heapq.heappop(heap)
        bound, kind = entry[0], entry[1]
        if bound >= best.threshold():
            stats.tasks_pruned += len(heap) + 1
            break
        if stop():
            return bound
        if kind == UNIT:
            tasks.expand(heap, entry)
            continue
        task, i = tasks.task(entry), entry[3:5]
        label[0] = f"{phase}, best {best.best_key():.4g}, bound {bound:.4g}"
        if kind == 0:
            if i not in refined:
                sync_out: dict = {}
                b = task_bound(ctx, cluster, tables, task.tps, task.num_stages, task.mbs, gbs // task.mbs,
                               objective, cache, sync_out=sync_out, recompute=task.recompute, dist=task.dist)
                refined[i] = (b, sync_out)
            heapq.heappush(heap, (max(refined[i][0], bound), 1) + entry[2:])
            continue
        if floor_tasks and kind == 1:
            if i not in floors:
                floors[i] = objective_task_floor(ctx, cluster, tables, cache, task, gbs, space,
                                                 refined[i][1].get("by_d"), objective)
            heapq.heappush(heap, (max(floors[i], bound), 2) + entry[2:])
            continue
        try:
            run_task(ctx, cluster, tables, cache, task, gbs, objective, space, best, stats,
                      refined[i][1].get("by_d"), coarse=coarse, stop=stop)
        except OutOfTime:
            return bound
        done += 1
        label[0] = f"{phase}, best {best.best_key():.4g}, bound {bound:.4g}"
    return np.inf
