"""Pool plans with up to two TP degrees per GPU type (issue 13; docs/PLANNER.md section 10, helper s19p).

The declared space gives every used type one TP degree in pool plans (docs/PLANNER.md 1, items 3 and 5). Here a
(type, TP) is a *pseudo-type* with its own pool columns (zone, type, TP); the columns of one (type, zone) share
that pool's GPUs: ``sum_t S t x_{z,g,t} <= n_{g,z}``, i.e. ``sum_t t x_{z,g,t} <= floor(n_{g,z} / S)``.

- :func:`type_rows` / :func:`task_rows`: every such count vector of one type / of a task (free per-zone counts:
  every vector under the joint caps, a superset of the search's water-filled rows); ``minority`` = r keeps only
  rows where each pool holds at most r pipelines of one of its two TP degrees (the "r = 1" variant),
  ``minority_total`` = r those where one TP degree has at most r pipelines in all, ``water_filled`` the pairs of
  the search's water-filled rows (one per TP degree) that fit every pool jointly.
- :func:`two_tp_search`: an exhaustive search (no pruning, small clusters only) over S, micro-batch size,
  recomputation, every type subset, every set of at most ``max_tps`` TP degrees per used type, every fitting
  split of the search's split list (:meth:`Tables.splits`) and every row, scored by the search's own exact row
  scorer (:func:`planner.search.pools.score_batch`, one :class:`PoolModel` per (zone, type, TP) column). Its
  best candidate is checked against ``simulate`` by :func:`planner.search.verify.check_candidates` (rel. 1e-9).
- :func:`two_tp_improve`: the two-TP tasks only, skipped when the search's task bound reaches an incumbent.

The search itself holds these plans with ``SearchSpace.two_tp = 2`` (:func:`planner.search.tasks.unit_tasks`,
:func:`planner.search.rows.task_options`: the same joint caps, free counts per zone; docs/PLANNER.md 10.7); this
module is the exhaustive reference its tests compare against.

Exact: the scores (the verify check), and :func:`two_tp_search`'s optimum over its set. :func:`two_tp_improve` is
exact as far as the search's task bound holds for two-TP tasks (argued and tested, not proved in
docs/PLANNER.md 2.1 and 10.6.3). Not covered: the distributed optimizer (its shards depend on the
TP degrees of a stage: off only).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations, product

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.caps import caps_for
from planner.errors import InputError
from planner.search.netvec import Group, LinkCache
from planner.search.pools import PoolModel, pool_model, pool_p2p_s, score_batch
from planner.search.rows import joint_zone_options, one_zone_rows, zone_splits
from planner.search.space import Candidate, Objective, SearchSpace
from planner.search.taskbound import task_bound
from planner.search.taskrun import _candidate
from planner.search.tasks import Tables, Task, cluster_options
from planner.search.verify import check_candidates
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext

log = logging.getLogger(__name__)

def pool_caps(cluster: ClusterSpec, g: str, s_num: int) -> tuple[tuple[str, int], ...]:
    """(zone, floor(GPUs / S)) of every pool of type ``g`` (zones sorted): the TP units one pool offers to
    pipelines of S stages (a pipeline at TP t takes t of them); :func:`planner.search.caps.caps_for` at TP 1."""
    return caps_for(cluster, g, 1, s_num)


def _water_filled(caps: tuple[int, ...], t: int, max_total: int) -> np.ndarray:
    """[R, len(caps)] the search's rows of one TP over the zones: :func:`planner.search.rows.zone_splits` of the
    zones with room for a pipeline (caps // t), zeros elsewhere."""
    room = [i for i, c in enumerate(caps) if c // t > 0]
    out = np.zeros((0, len(caps)), dtype=np.int64)
    if room:
        sub = zone_splits(tuple(caps[i] // t for i in room), max_total)
        out = np.zeros((len(sub), len(caps)), dtype=np.int64)
        out[:, room] = sub
    return out


def type_rows(caps: tuple[int, ...], tps: tuple[int, ...], max_total: int, minority: int | None = None,
              minority_total: int | None = None, water_filled: bool = False) -> np.ndarray:
    """[R, len(caps) * len(tps)] every count vector of one type, columns in (zone, TP) order: per zone the joint
    cap ``sum_t t x_{z,t} <= caps[z]``, every TP of ``tps`` used by at least one pipeline, at most ``max_total``
    pipelines (``minority``: :func:`planner.search.rows.joint_zone_options`; ``minority_total`` = r: one of the TP degrees has at most r
    pipelines over all the type's zones). ``water_filled``: instead of every vector, each TP's vector is one of the
    search's water-filled rows (:func:`_water_filled`) and the pairs that overfill a pool are dropped."""
    if water_filled:
        return _water_filled_rows(caps, tps, max_total, minority, minority_total)
    per_zone = [joint_zone_options(c, tps, minority) for c in caps]
    if not per_zone:
        return np.zeros((0, 0), dtype=np.int64)
    rows = per_zone[0]
    for opt in per_zone[1:]:
        rows = np.concatenate([np.repeat(rows, len(opt), axis=0), np.tile(opt, (len(rows), 1))], axis=1)
        rows = rows[rows.sum(axis=1) <= max_total]
    per_tp = rows.reshape(len(rows), len(caps), len(tps)).sum(axis=1)
    keep = (per_tp > 0).all(axis=1) & (rows.sum(axis=1) <= max_total)
    if minority_total is not None and len(tps) >= 2:
        keep &= per_tp.min(axis=1) <= minority_total
    return rows[keep]


def _water_filled_rows(caps: tuple[int, ...], tps: tuple[int, ...], max_total: int, minority: int | None,
                       minority_total: int | None) -> np.ndarray:
    """:func:`type_rows` with ``water_filled``: columns (zone, TP)."""
    z, k = len(caps), len(tps)
    rows = np.ones((1, 0), dtype=np.int64)
    for t in tps:
        opt = _water_filled(caps, t, max_total)
        rows = np.concatenate([np.repeat(rows, len(opt), axis=0), np.tile(opt, (len(rows), 1))], axis=1)
        rows = rows[rows.sum(axis=1) <= max_total]
    per = rows.reshape(len(rows), k, z)                 # [R, TP, zone]
    keep = ((per * np.array(tps)[None, :, None]).sum(axis=1) <= np.array(caps)[None, :]).all(axis=1)
    if minority is not None and k >= 2:
        keep &= (per.min(axis=1) <= minority).all(axis=1)
    if minority_total is not None and k >= 2:
        keep &= per.sum(axis=2).min(axis=1) <= minority_total
    return per[keep].transpose(0, 2, 1).reshape(int(keep.sum()), z * k)


@dataclass(frozen=True)
class TwoTpTask:
    """One (S, micro-batch size, recomputation) and the TP set of every used type (types sorted)."""

    num_stages: int
    mbs: int
    recompute: bool
    tps: tuple[tuple[str, tuple[int, ...]], ...]

    def pairs(self) -> tuple[tuple[str, int], ...]:
        """Every (type, TP) pseudo-type of the task."""
        return tuple((g, t) for g, ts in self.tps for t in ts)


def task_rows(cluster: ClusterSpec, task: TwoTpTask, max_total: int, minority: int | None = None,
              minority_total: int | None = None, water_filled: bool = False
              ) -> tuple[np.ndarray, list[tuple[str, str, int]]]:
    """(rows [R, P], columns (zone, type, TP) sorted): the product of every used type's :func:`type_rows`,
    at most ``max_total`` pipelines in all."""
    rows, cols = np.ones((1, 0), dtype=np.int64), []
    for g, ts in task.tps:
        caps = pool_caps(cluster, g, task.num_stages)
        opt = type_rows(tuple(c for _, c in caps), ts, max_total, minority, minority_total, water_filled)
        rows = np.concatenate([np.repeat(rows, len(opt), axis=0), np.tile(opt, (len(rows), 1))], axis=1)
        rows = rows[rows.sum(axis=1) <= max_total]
        cols += [(z, g, t) for z, _ in caps for t in ts]
    order = sorted(range(len(cols)), key=lambda i: cols[i])
    return rows[:, order], [cols[i] for i in order]


def task_choices(cluster: ClusterSpec, tables: Tables, options: dict[str, list[tuple[int, int]]], s_num: int,
                 mbs: int, recompute: bool, max_tps: int, tp_rule: str = "any") -> dict[str, list[tuple[int, ...]]]:
    """Per GPU type, the TP sets (1 .. ``max_tps`` degrees, ascending) a task may give it at (S, mbs,
    recomputation): TP degrees of the options with a fitting split and a pool of at least S t GPUs."""
    out = {}
    for g in sorted(options):
        ts = [t for m, t in options[g] if m == mbs and caps_for(cluster, g, t, s_num)
              and tables.arrays(g, t, mbs, s_num, recompute) is not None]
        if tp_rule == "min_fit":
            ts = ts[:1]
        out[g] = [c for k in range(1, max_tps + 1) for c in combinations(ts, k)]
    return out


def enumerate_two_tp_tasks(ctx: SimContext, cluster: ClusterSpec, tables: Tables,
                           options: dict[str, list[tuple[int, int]]], gbs: int, space: SearchSpace,
                           max_tps: int = 2):
    """Every :class:`TwoTpTask` of the space (distributed optimizer off), in (S, mbs, recomputation, type
    subset, TP sets) order."""
    max_s = min(ctx.model.num_layers, space.max_stages or ctx.model.num_layers)
    mbs_all = sorted({m for g in options for m, _ in options[g]})
    for s_num, mbs, rc in product(range(1, max_s + 1), mbs_all, space.recompute):
        if gbs % mbs:
            continue
        choices = task_choices(cluster, tables, options, s_num, mbs, rc, max_tps, space.tp_rule)
        types = [g for g in sorted(choices) if choices[g]]
        for k in range(1, min(len(types), space.max_gpu_types or len(types)) + 1):
            for subset in combinations(types, k):
                for sets in product(*(choices[g] for g in subset)):
                    yield TwoTpTask(s_num, mbs, rc, tuple(zip(subset, sets)))


def column_models(ctx: SimContext, tables: Tables, cache: LinkCache, task: TwoTpTask,
                  cols: list[tuple[str, str, int]], k: int, n_mb: int) -> list[PoolModel]:
    """The :class:`PoolModel` of every (zone, type, TP) column at split ``k`` (memoised in ``tables.memo``
    under the key :func:`planner.search.taskrun.pool_models` uses: the same model)."""
    mb_bytes = ctx.model.boundary_activation_bytes(task.mbs, F.bytes_per_element(tables.space.precision))
    out = []
    for z, g, tp in cols:
        key = ("pool", z, g, tp, task.mbs, task.num_stages, task.recompute, k, n_mb)
        if key not in tables.memo:
            grp = Group(z, g, tp)
            arr = tables.arrays(g, tp, task.mbs, task.num_stages, task.recompute)
            lv = tables.levels(g, tp, task.mbs, task.num_stages, task.recompute,
                               pool_p2p_s(ctx, cache, grp, task.num_stages, mb_bytes), ctx.settings.p2p_blocking)
            tables.memo[key] = pool_model(ctx, cache, grp, arr, k, mb_bytes, ctx.catalog.get(g).usd_per_s, n_mb, lv)
        out.append(tables.memo[key])
    return out


def task_best(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache, task: TwoTpTask, gbs: int,
              objective: Objective, space: SearchSpace, minority: int | None = None,
              minority_total: int | None = None, water_filled: bool = False) -> tuple[Candidate | None, int]:
    """(the best candidate of one task over every fitting split and every row of :func:`task_rows` (None: no
    feasible one), the (split, row) pairs scored)."""
    n_mb = gbs // task.mbs
    D, cols = task_rows(cluster, task, n_mb, minority, minority_total, water_filled)
    if space.uniform_microbatches:
        D = D[n_mb % D.sum(axis=1) == 0]
    if space.single_zone:
        D = D[one_zone_rows(D, cols)]
    best, best_key, n_rows = None, np.inf, 0
    if len(D) == 0:
        return best, n_rows
    fits = np.logical_and.reduce([tables.arrays(g, t, task.mbs, task.num_stages, task.recompute).fits
                                  for g, t in task.pairs()])
    for k in np.nonzero(fits)[0]:
        pools = column_models(ctx, tables, cache, task, cols, int(k), n_mb)
        sc = score_batch(ctx, cache, [(pools, D)], n_mb, exact=True, uniform=space.uniform_microbatches,
                         tied=cache.tied if space.tie_embeddings else None)[0]
        n_rows += len(D)
        ok = objective.allows(sc.iteration_s, sc.cost_usd, sc.gpus) & np.isfinite(sc.iteration_s)
        keys = np.where(ok, objective.key(sc.iteration_s, sc.cost_usd), np.inf)
        r = int(np.argmin(keys))
        if keys[r] < best_key:
            best_key = float(keys[r])
            shell = Task(task.num_stages, task.mbs, task.pairs(), 0.0, task.recompute, False)
            best = _candidate(shell, tables, int(k), pools, D[r], sc, r, best_key, n_mb, space)
    return best, n_rows


@dataclass(frozen=True)
class TwoTpResult:
    best: Candidate | None
    tasks: int          # tasks enumerated
    rows: int           # (split, row) pairs scored exactly
    pruned: int = 0     # tasks skipped by their bound (:func:`two_tp_improve`)
    stopped: bool = False   # :func:`two_tp_improve` stopped by ``stop`` before every task was searched or pruned


def two_tp_search(ctx: SimContext, cluster: ClusterSpec, gbs: int, objective: Objective = Objective(),
                  space: SearchSpace = SearchSpace(), max_tps: int = 2, minority: int | None = None,
                  minority_total: int | None = None, water_filled: bool = False, verify: bool = True) -> TwoTpResult:
    """The best pool plan with at most ``max_tps`` TP degrees per used type (module docstring): exhaustive,
    for small clusters only. ``minority`` / ``minority_total`` / ``water_filled``: only rows of :func:`task_rows`
    with those limits (:func:`type_rows`). ``verify``: the best
    candidate is simulated and must match its scores (:func:`planner.search.verify.check_candidates`). The
    distributed optimizer is not searched (a space holding only ``True`` raises InputError)."""
    if False not in space.distributed_optimizer:
        raise InputError("two_tp_search: the distributed optimizer is not supported")
    options = cluster_options(ctx, cluster, space)
    tables = Tables(ctx, space, options, cluster)
    cache = LinkCache(ctx)
    best, best_key, n_tasks, n_rows = None, np.inf, 0, 0
    for task in enumerate_two_tp_tasks(ctx, cluster, tables, options, gbs, space, max_tps):
        n_tasks += 1
        cand, rows = task_best(ctx, cluster, tables, cache, task, gbs, objective, space, minority, minority_total,
                               water_filled)
        n_rows += rows
        if cand is not None and cand.key < best_key:
            best, best_key = cand, cand.key
    if verify and best is not None:
        check_candidates(ctx, [best], gbs)
    log.debug("two_tp_search: %d tasks, %d rows scored", n_tasks, n_rows)
    return TwoTpResult(best, n_tasks, n_rows)


def two_tp_improve(ctx: SimContext, cluster: ClusterSpec, gbs: int, incumbent_key: float,
                   objective: Objective = Objective(), space: SearchSpace = SearchSpace(), max_tps: int = 2,
                   water_filled: bool = False, verify: bool = True,
                   stop: Callable[[], bool] | None = None) -> TwoTpResult:
    """The best pool plan that gives some type two TP degrees and beats ``incumbent_key`` (e.g. the search's
    optimum; None in ``best``: none does). Tasks whose :func:`planner.search.taskbound.task_bound` (the search's
    bound, given the task's (type, TP) pseudo-types) is at least the best key so far are skipped; the others are
    searched as :func:`two_tp_search` does. Exact only as far as that bound holds for two-TP tasks: argued in
    docs/PLANNER.md 10.6.3 and tested against :func:`task_best`, not proved in docs/PLANNER.md 2.1.
    ``stop`` (e.g. a time limit): asked before every task's bound and every task's search; once it returns True
    the pass ends with the best plan found so far (``stopped`` in the result)."""
    if False not in space.distributed_optimizer:
        raise InputError("two_tp_improve: the distributed optimizer is not supported")
    options = cluster_options(ctx, cluster, space)
    tables = Tables(ctx, space, options, cluster)
    cache = LinkCache(ctx)
    tasks = [t for t in enumerate_two_tp_tasks(ctx, cluster, tables, options, gbs, space, max_tps)
             if any(len(ts) > 1 for _, ts in t.tps)]
    halt = stop if stop is not None else (lambda: False)
    bounds: list[float] = []
    for t in tasks:
        if halt():
            return TwoTpResult(None, len(tasks), 0, 0, stopped=True)
        bounds.append(task_bound(ctx, cluster, tables, t.pairs(), t.num_stages, t.mbs, gbs // t.mbs, objective,
                                 cache, recompute=t.recompute))
    best, best_key, n_rows, pruned, stopped = None, incumbent_key, 0, 0, False
    for b, task in sorted(zip(bounds, tasks), key=lambda x: x[0]):
        if b >= best_key:
            pruned += 1
            continue
        if halt():
            stopped = True
            break
        cand, rows = task_best(ctx, cluster, tables, cache, task, gbs, objective, space, water_filled=water_filled)
        n_rows += rows
        if cand is not None and cand.key < best_key:
            best, best_key = cand, cand.key
    if verify and best is not None:
        check_candidates(ctx, [best], gbs)
    return TwoTpResult(best, len(tasks), n_rows, pruned, stopped)
