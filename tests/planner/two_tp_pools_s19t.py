"""Pool plans in which pipelines of one GPU type may run at different TP degrees (issue 13; docs/PLANNER.md 1,
items 3 and 5, and section 10): a brute force written independently of ``planner.search`` (it shares only the
plan dataclasses, the cluster, model and profile objects and ``simulate``), so that the gain of a second TP
degree per GPU type can be measured against the search's plan.

A *pool plan* here: S stages on one contiguous layer split (every composition of L, which contains every split
of the declared space), one micro-batch size b, no recomputation, no distributed optimizer, and a set of
homogeneous pipelines, each on one (GPU type, zone, TP); pool capacity: for every (type, zone) pool the sum over
its pipelines of ``S x TP`` is at most its GPUs; ``1 <= D <= N = GBS / b``. ``max_tps`` bounds the number of
distinct TP degrees of one GPU type over the whole plan (1: the declared space's rule "one TP per used type";
2 or more: the extension measured here). Per-zone counts are free (every count vector within the caps), not
water-filled. Replica order in every stage: sorted by (zone, GPU type, TP), replica j of every stage is pipeline
j (docs/PLANNER.md 1 item 7, with TP as the last key).

Micro-batch counts: each pipeline's 1F1B seconds ``T(m)`` depend only on its own (type, zone, TP), the split
and b (read from one-pipeline plans scored by ``simulate``); sync, optimizer step and egress do not depend on
the counts (``simulate``: iteration = largest pipeline time + sync + step; egress only on cross-zone boundaries
and rings), and every pipeline is checked for memory at S micro-batches in flight. So the counts of least
largest ``T`` are optimal for every objective: :func:`least_makespan_counts` finds them (the least t among
the ``T`` values with ``sum_j #{m : T_j(m) <= t} >= N``, every pipeline at least one), and every scored plan
checks that ``simulate``'s largest pipeline time equals that t.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from itertools import product

from planner.cluster import ClusterSpec
from planner.errors import InputError
from planner.plan import Plan, Replica, Stage
from planner.simulator import simulate
from planner.simulator.settings import SimContext

ANALYTIC = (1, 2, 4, 8)     # the analytic profiles' micro-batch sizes and TP degrees


@dataclass(frozen=True)
class PoolPipes:
    """``count`` pipelines of ``gpu_type`` in ``zone`` at TP ``tp``."""

    gpu_type: str
    zone: str
    tp: int
    count: int


@dataclass(frozen=True)
class BruteResult:
    """The best plan found (None: none fits and meets the objective), its key and how many plans were scored."""

    key: float
    plan: Plan | None
    pools: tuple[PoolPipes, ...]
    scored: int
    structures: int


def compositions(total: int, parts: int):
    """Every tuple of ``parts`` positive integers summing to ``total``."""
    if parts == 1:
        yield (total,)
        return
    for first in range(1, total - parts + 2):
        for rest in compositions(total - first, parts - 1):
            yield (first,) + rest


def tp_choices(ctx: SimContext, cluster: ClusterSpec, gpu_type: str, mbs: int, tp_opts) -> list[int]:
    """TP degrees of ``gpu_type`` at micro-batch size ``mbs``: in ``tp_opts``, profiled for (mbs, TP) (analytic:
    1, 2, 4, 8), dividing the model's heads and FFN, at most the GPUs per node of the cluster and the context."""
    measured = ctx.profiles.options(gpu_type) or [(m, t) for m in ANALYTIC for t in ANALYTIC]
    node = min(cluster.gpus_per_node(gpu_type), ctx.node_size(gpu_type))
    out = set()
    for m, t in measured:
        if m != mbs or t > node or t not in tp_opts:
            continue
        try:
            ctx.model.check_tp(t)
        except InputError:
            continue
        out.add(t)
    return sorted(out)


def make_plan(split: tuple[int, ...], replicas: list[Replica], mbs: int, gbs: int, counts: list[int]) -> Plan:
    stages, first = [], 0
    for n in split:
        stages.append(Stage(first, n, tuple(replicas)))
        first += n
    return Plan(num_layers=sum(split), stages=tuple(stages), micro_batch_size=mbs, global_batch_size=gbs,
                microbatches_per_pipeline=tuple(counts))


def pipeline_times(ctx: SimContext, split, mbs: int, rep: Replica, n_mb: int) -> tuple[list[float], float] | None:
    """(``T(m)`` for m = 1..n_mb, the optimizer step seconds) of one pipeline on ``rep`` (None: it does not fit
    with S micro-batches in flight). ``T`` is checked non-decreasing (the water-filling needs it); the step of a
    replica does not depend on the other pipelines without the distributed optimizer."""
    S = len(split)
    est = simulate(make_plan(split, [rep], mbs, mbs * S, [S]), ctx)
    if not est.fits_in_memory:
        return None
    times = [simulate(make_plan(split, [rep], mbs, mbs * m, [m]), ctx).pipeline_s[0] for m in range(1, n_mb + 1)]
    assert all(a <= b for a, b in zip(times, times[1:])), (split, mbs, rep)
    return times, est.update_s


def least_makespan_counts(tables: list[list[float]], n_mb: int, mult: list[int] | None = None
                          ) -> tuple[float, list[int]] | None:
    """(least largest ``T_j(m_j)``, the counts m_j >= 1 summing to n_mb that reach it) for pipelines with
    non-decreasing ``T_j`` (``tables[j][m - 1]``); ``mult[j]``: how many pipelines share table j (default one
    each; the counts are returned per pipeline, table by table). None when n_mb < the number of pipelines.
    The least t among the table values with ``t >= every T_j(1)`` and ``sum_j #{m : T_j(m) <= t} >= n_mb``
    (the capacity grows with t, so a bisection finds it): any count vector with largest time t' has t' among
    those values and capacity >= n_mb at t'; the counts take every pipeline's capacity at t and give the
    surplus back from the first pipelines (each keeps >= 1, so every time stays <= t)."""
    mult = [1] * len(tables) if mult is None else mult
    d = sum(mult)
    if d == 0 or d > n_mb:
        return None
    floor = max(t[0] for t in tables)
    cands = sorted({x for t in tables for x in t if x >= floor})

    def capacity(top: float) -> int:
        return sum(k * bisect_right(t, top) for t, k in zip(tables, mult))

    lo, hi = 0, len(cands) - 1
    if capacity(cands[hi]) < n_mb:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if capacity(cands[mid]) >= n_mb:
            hi = mid
        else:
            lo = mid + 1
    top = cands[lo]
    take = [bisect_right(t, top) for t, k in zip(tables, mult) for _ in range(k)]
    extra = sum(take) - n_mb
    for j in range(d):
        cut = min(extra, take[j] - 1)
        take[j] -= cut
        extra -= cut
    return top, take


def type_assignments(caps: list[int], S: int, tps: list[int], n_mb: int, max_tps: int):
    """Per-zone pipeline counts of one GPU type: tuples (per zone, a tuple of counts per TP in ``tps``) with
    ``sum_t S t x_zt <= caps[z]``, at most ``max_tps`` TP degrees used over all zones and at most n_mb pipelines
    in all; the empty assignment (type unused) included."""
    per_zone = []
    for cap in caps:
        vecs = []
        for x in product(*[range(cap // (S * t) + 1) for t in tps]):
            if sum(S * t * k for t, k in zip(tps, x)) <= cap and sum(x) <= n_mb:
                vecs.append(x)
        per_zone.append(vecs)
    for combo in product(*per_zone):
        if sum(map(sum, combo)) > n_mb:
            continue
        used = sum(1 for i in range(len(tps)) if any(x[i] for x in combo))
        if used <= max_tps:
            yield combo


def lower_bound(objective, floor_s: float, usd_per_s: float) -> float:
    """A key no plan of a structure can beat, from ``floor_s`` = its largest pipeline time + its slowest
    optimizer step (``simulate``: iteration = that + the sync, and the sync is >= 0): throughput, the iteration
    seconds >= floor_s; cost, $/iteration >= GPU dollars = GPU $/s x iteration >= GPU $/s x floor_s; value:
    no bound (-inf)."""
    if objective.kind == "throughput":
        return floor_s
    if objective.kind == "cost":
        return usd_per_s * floor_s
    return float("-inf")


def _structures(ctx: SimContext, cluster: ClusterSpec, gbs: int, objective, max_stages: int, mbs_opts, tp_opts,
                max_tps: int, splits, memo: dict):
    """Every pool-plan structure with its lower bound: (bound, split, mbs, pools, counts, largest T)."""
    L = ctx.model.num_layers
    types = cluster.gpu_types()
    zones = {g: sorted(p.zone for p in cluster.pools if p.gpu_type == g and p.count > 0) for g in types}
    for S in range(1, min(L, max_stages) + 1):
        for split in (splits(S) if splits else compositions(L, S)):
            for mbs in mbs_opts:
                if gbs % mbs:
                    continue
                n_mb = gbs // mbs
                tables: dict[tuple[str, str, int], tuple[list[float], float]] = {}
                per_type, type_tps = [], []
                for g in types:
                    tps = []
                    for t in tp_choices(ctx, cluster, g, mbs, tp_opts):
                        got = {}
                        for z in zones[g]:
                            key = (split, mbs, g, z, t, n_mb)
                            if key not in memo:
                                memo[key] = pipeline_times(ctx, split, mbs, Replica(g, t, z), n_mb)
                            got[z] = memo[key]
                        if all(v is not None for v in got.values()):
                            tables.update({(g, z, t): v for z, v in got.items()})
                            tps.append(t)
                    type_tps.append(tps)
                    caps = [cluster.count(g, z) for z in zones[g]]
                    per_type.append(list(type_assignments(caps, S, tps, n_mb, max_tps)) if tps else [None])
                for choice in product(*per_type):
                    pools = []
                    for g, tps, combo in zip(types, type_tps, choice):
                        if combo is not None:
                            for z, x in zip(zones[g], combo):
                                pools += [PoolPipes(g, z, t, k) for t, k in zip(tps, x) if k]
                    if not 1 <= sum(p.count for p in pools) <= n_mb:
                        continue
                    pools.sort(key=lambda p: (p.zone, p.gpu_type, p.tp))
                    top, counts = least_makespan_counts([tables[(p.gpu_type, p.zone, p.tp)][0] for p in pools],
                                                        n_mb, [p.count for p in pools])
                    step = max(tables[(p.gpu_type, p.zone, p.tp)][1] for p in pools)
                    usd_per_s = sum(ctx.catalog.get(p.gpu_type).usd_per_s * p.tp * p.count * S for p in pools)
                    yield lower_bound(objective, top + step, usd_per_s), split, mbs, tuple(pools), counts, top


def best_pool_plan(ctx: SimContext, cluster: ClusterSpec, gbs: int, objective, max_stages: int,
                   mbs_opts=(1, 2), tp_opts=(1, 2, 4), max_tps: int = 2, splits=None,
                   memo: dict | None = None) -> BruteResult:
    """The best pool plan (module docstring) with at most ``max_tps`` TP degrees per GPU type, scored by
    ``simulate`` under ``objective``. ``splits``: a function S -> iterable of splits (default: every
    composition of L into S parts). Structures are scored in the order of their lower bounds
    (:func:`lower_bound`) until the bound reaches the best key found (a plan with a larger bound cannot win;
    ties keep the first in that order). ``memo``: one-pipeline tables shared between calls on one context."""
    memo = {} if memo is None else memo
    found = sorted(_structures(ctx, cluster, gbs, objective, max_stages, mbs_opts, tp_opts, max_tps, splits, memo),
                   key=lambda c: c[0])
    best, best_plan, best_pools, scored = float("inf"), None, (), 0
    for bound, split, mbs, pools, counts, top in found:
        if bound >= best:
            break
        replicas = [Replica(p.gpu_type, p.tp, p.zone) for p in pools for _ in range(p.count)]
        plan = make_plan(split, replicas, mbs, gbs, counts)
        est = simulate(plan, ctx)
        scored += 1
        assert abs(max(est.pipeline_s) - top) <= 1e-12 * top, (plan, top, est.pipeline_s)
        if not est.fits_in_memory:
            continue
        if not objective.allows(est.iteration_time_s, est.cost_per_iteration_usd, est.num_gpus):
            continue
        key = objective.key(est.iteration_time_s, est.cost_per_iteration_usd)
        if key < best:
            best, best_plan, best_pools = key, plan, pools
    return BruteResult(best, best_plan, best_pools, scored, len(found))


def tps_per_type(plan: Plan) -> dict[str, tuple[int, ...]]:
    """The distinct TP degrees of each GPU type in ``plan`` (stage 0's replicas; pool plans repeat them)."""
    out: dict[str, set[int]] = {}
    for r in plan.stages[0].replicas:
        out.setdefault(r.gpu_type, set()).add(r.tp)
    return {g: tuple(sorted(t)) for g, t in sorted(out.items())}


def shape(plan: Plan | None) -> str:
    """One line: S, split, micro-batch size and the pipelines per (type, zone, TP) with their counts."""
    if plan is None:
        return "-"
    groups: dict[tuple[str, str, int], list[int]] = {}
    for j, r in enumerate(plan.stages[0].replicas):
        groups.setdefault((r.gpu_type, r.zone, r.tp), []).append(plan.microbatch_counts[j])
    parts = [f"{len(m)}x{g}@{z} TP{t} m{'/'.join(map(str, sorted(set(m), reverse=True)))}"
             for (g, z, t), m in groups.items()]
    split = "/".join(str(s.num_layers) for s in plan.stages)
    return f"S{plan.num_stages} [{split}] b{plan.micro_batch_size}: " + ", ".join(parts)
