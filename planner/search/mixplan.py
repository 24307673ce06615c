"""Mixed plans: stages shared by pipelines of different chains (docs/PLANNER.md section 8).

A *mixed plan* has S stages on one layer split, one micro-batch size and D pipelines, pipeline j being
replica j of every stage, where the pipelines follow two or more different chains (a chain: one (GPU type,
zone, TP) group per stage; a pool pipeline is a chain with one group). Sailor's whole space holds such plans;
the exact search (pool plans, chain plans of D identical pipelines) does not. This module searches them
**heuristically**, not exactly: a local search from the exact search's best plan (same S, split, micro-batch
size, recomputation and distributed optimizer) that adds pipelines of other chains into the GPUs the plan
leaves free, or swaps some pipelines of one chain for another chain's, keeping a move only if it improves
the objective, within a fixed number of evaluations. Every plan is scored by :func:`planner.simulator.simulate`
(the one cost model) with micro-batch counts per pipeline by water-filling on each pipeline's 1F1B makespan
``T_j(m)`` (the simulator's formulas), so what it returns is scored exactly as ``simulate`` scores it.

Candidate chains: the base plan's own chains, every single-group (pool) pipeline of the micro-batch size's
(type, TP) options in every zone, and each base chain with its zones permuted (two pipelines crossing two
zones in opposite directions, the mixing optimum of ``benchmarks/sailor_full_space.py``'s small case).
"""
from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass
from itertools import permutations
from typing import Callable

import numpy as np

from planner.cluster import ClusterSpec
from planner.plan import Plan
from planner.search.build import layout_plan
from planner.search.space import Candidate, Objective
from planner.simulator import Estimate, simulate
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext
from planner.simulator.stage import replica_costs
from planner.simulator.time import p2p_seconds

log = logging.getLogger(__name__)
Group = tuple[str, str, int]            # (GPU type, zone, TP)
Chain = tuple[Group, ...]               # one group per stage
MAX_EVALS = 32                          # plans tried per local search (deterministic budget) ...
MAX_WORK = 4000                         # ... and replicas simulated (D x S per plan simulated)
MAX_ZONE_PERMS = 6                      # zone permutations tried per base chain
REL_GAIN = 1e-9                         # a move is kept only if it improves the key by more than this
MIN_GAIN = 1e-3                         # a mixed plan is returned only if it beats the base by more than this: it
                                        # is harder to run (more chains, often cross-zone p2p and more egress) and
                                        # a gain below 0.1 % is far inside the simulator's error


def is_mixed(cand: Candidate) -> bool:
    return bool(cand.mix)


def _runs(pipes: list[Chain]) -> tuple[tuple[Chain, int], ...]:
    out: list[list] = []
    for c in pipes:
        if out and out[-1][0] == c:
            out[-1][1] += 1
        else:
            out.append([c, 1])
    return tuple((c, n) for c, n in out)


def usage(pipes: list[Chain]) -> dict[tuple[str, str], int]:
    """GPUs per (type, zone) pool used by the pipelines ``pipes``."""
    out: dict[tuple[str, str], int] = {}
    for chain in pipes:
        for g, z, tp in chain:
            out[(g, z)] = out.get((g, z), 0) + tp
    return out


@dataclass(frozen=True)
class Shape:
    """What a mixed plan shares with its base: S via ``split``, the micro-batch size and the whole-plan flags."""

    split: tuple[int, ...]
    mbs: int
    gbs: int
    precision: str
    optimizer: str
    recompute: bool
    tie_embeddings: bool
    distributed_optimizer: bool

    @staticmethod
    def of(cand: Candidate, gbs: int) -> "Shape":
        return Shape(tuple(cand.layers_per_stage), cand.mbs, gbs, cand.precision, cand.optimizer, cand.recompute,
                     cand.tie_embeddings, cand.distributed_optimizer)


def plan_of(shape: Shape, pipes: list[Chain], counts: tuple[int, ...], num_layers: int,
            model_name: str | None) -> Plan:
    """The plan running pipeline j on ``pipes[j]`` with ``counts[j]`` micro-batches."""
    return layout_plan(shape.split, pipes, counts, shape, num_layers, shape.gbs, model_name)


def water_fill(ctx: SimContext, plan: Plan) -> tuple[tuple[int, ...], float]:
    """Micro-batch counts (each >= 1, summing to N) minimising the largest 1F1B makespan
    ``T_j(m) = (m - 1) period_j(m) + fill_j`` over the pipelines of ``plan`` (the simulator's formulas on its
    replica costs and p2p times, computed once per distinct pipeline), and that smallest largest makespan:
    the smallest t with ``sum_j #{m : T_j(m) <= t} >= N``, then the surplus taken back from the pipelines
    whose last micro-batch ends latest. ``simulate``'s iteration is at least that makespan."""
    d = plan.dp_degree
    n = plan.global_batch_size // plan.micro_batch_size
    top = n - d + 1
    over = ctx.settings.per_microbatch_overhead_s
    memo: dict[tuple, np.ndarray] = {}
    rows = []
    for j in range(d):
        reps = plan.pipeline(j)
        key = tuple((r, ctx.replica_node_size(s, j, r.gpu_type)) for s, r in enumerate(reps))
        if key not in memo:
            costs = [replica_costs(plan, ctx, s, j, r) for s, r in enumerate(reps)]
            comp = np.array([F.compute_s(c.fwd_s, c.bwd_s, over) for c in costs])
            p2p = np.array(p2p_seconds(plan, ctx, j), dtype=float)
            busy = F.busy_s(comp, p2p, ctx.settings.p2p_blocking)
            levels = F.period_levels(np.max(busy), F.round_trip_bounds(comp, p2p))
            memo[key] = np.maximum.accumulate(F.pipeline_s_of_m(levels, float(F.fill_drain_s(comp, p2p)), top))
        rows.append(key)
    keys = list(memo)
    arr = np.array([memo[k] for k in keys])                  # [distinct, top], rows non-decreasing
    mult = np.array([rows.count(k) for k in keys])
    values = np.unique(arr)
    values = values[values >= arr[:, 0].max()]

    def cap(t: float) -> int:
        return int(sum(m * np.searchsorted(row, t, side="right") for m, row in zip(mult, arr)))

    lo, hi = 0, len(values) - 1                              # cap(values[-1]) = D x top >= N
    while lo < hi:
        mid = (lo + hi) // 2
        if cap(values[mid]) >= n:
            hi = mid
        else:
            lo = mid + 1
    t = float(values[lo])
    per = {k: int(np.searchsorted(memo[k], t, side="right")) for k in keys}
    counts = [per[k] for k in rows]
    heap = [(-memo[rows[j]][counts[j] - 1], j) for j in range(d) if counts[j] > 1]
    heapq.heapify(heap)
    for _ in range(sum(counts) - n):
        _, j = heapq.heappop(heap)
        counts[j] -= 1
        if counts[j] > 1:
            heapq.heappush(heap, (-memo[rows[j]][counts[j] - 1], j))
    return tuple(counts), t


def score(ctx: SimContext, shape: Shape, pipes: list[Chain], objective: Objective,
          model_name: str | None = None, beat: float = np.inf, tally: list[int] | None = None
          ) -> tuple[Candidate, Plan, Estimate] | None:
    """The candidate of ``pipes`` with water-filled counts as ``simulate`` scores it; None where D > N, the
    plan does not fit or the objective's constraints exclude it, or (throughput objective) where its
    pipelines alone take at least ``beat`` seconds (iteration >= largest makespan, so it cannot beat it).
    ``tally[0]`` grows by D x S for every plan simulated."""
    n = shape.gbs // shape.mbs
    d = len(pipes)
    if d == 0 or d > n:
        return None
    base = tuple(n // d + (1 if j < n % d else 0) for j in range(d))
    num_layers = int(sum(shape.split))
    plan = plan_of(shape, pipes, base, num_layers, model_name)
    counts, makespan = water_fill(ctx, plan)
    if objective.kind == "throughput" and makespan >= beat:
        return None
    plan = plan_of(shape, pipes, counts, num_layers, model_name)
    est = simulate(plan, ctx)
    if tally is not None:
        tally[0] += d * len(shape.split)
    if not est.fits_in_memory:
        return None
    it, usd, gpus = est.iteration_time_s, est.cost_per_iteration_usd, est.num_gpus
    if not bool(objective.allows(it, usd, gpus)):
        return None
    cand = Candidate(key=float(objective.key(it, usd)), num_stages=len(shape.split), mbs=shape.mbs,
                        layers_per_stage=shape.split, pools=(), microbatches=counts, iteration_s=it,
                        cost_usd=usd, gpus=gpus, precision=shape.precision, optimizer=shape.optimizer,
                        recompute=shape.recompute, tie_embeddings=shape.tie_embeddings,
                        distributed_optimizer=shape.distributed_optimizer, mix=_runs(pipes))
    return cand, plan, est


def candidate_chains(base_pipes: list[Chain], groups: list[Group], s_num: int) -> list[Chain]:
    """The chains a move may add (module docstring), deduplicated, in a fixed order."""
    out: dict[Chain, None] = {}
    distinct = list(dict.fromkeys(base_pipes))
    for c in distinct:
        out.setdefault(c)
    for g in groups:
        out.setdefault((g,) * s_num)
    zones_all = sorted({z for _, z, _ in groups})
    for c in distinct:
        used = sorted({z for _, z, _ in c})
        tried = 0
        for perm in permutations(zones_all, len(used)):
            if tried >= MAX_ZONE_PERMS:
                break
            if list(perm) == used:
                continue
            to = dict(zip(used, perm))
            alt = tuple((g, to[z], tp) for g, z, tp in c)
            if all((g, z, tp) in groups for g, z, tp in alt):
                out.setdefault(alt)
                tried += 1
    return list(out)


def _moves(pipes: list[Chain], chains: list[Chain], free: dict[tuple[str, str], int], n_mb: int):
    """Neighbours of ``pipes``: add k pipelines of a chain into the free GPUs (k the most that fit, then
    half of it); cross over k pairs of pipelines of two chains a, b at a stage cut (a's first stages with b's
    last ones and vice versa: the same GPUs); swap k of one chain's pipelines for another chain's (k = half,
    all, one of them)."""
    d = len(pipes)
    for c in chains:
        need = usage([c])
        k = min([free.get(p, 0) // u for p, u in need.items()] + [n_mb - d])
        for kk in dict.fromkeys((k, k // 2)):
            if kk >= 1:
                yield pipes + [c] * kk
    counts: dict[Chain, int] = {}
    for c in pipes:
        counts[c] = counts.get(c, 0) + 1
    kinds = list(counts)
    s_num = len(pipes[0])
    for i, a in enumerate(kinds):          # crossovers: the same GPUs, so always within the pools
        for b in kinds[i + 1:]:
            for cut in range(1, s_num):
                a2, b2 = a[:cut] + b[cut:], b[:cut] + a[cut:]
                if a2 == a:
                    continue
                top = min(counts[a], counts[b])
                for k in dict.fromkeys((top, max(1, top // 2), 1)):
                    yield _replace(_replace(pipes, a, a2, k), b, b2, k)
    for a, n_a in counts.items():
        for c in chains:
            if c == a:
                continue
            for k in dict.fromkeys((max(1, n_a // 2), n_a, 1)):
                left = dict(free)
                for p, u in usage([a]).items():
                    left[p] = left.get(p, 0) + u * k
                if all(left.get(p, 0) >= u * k for p, u in usage([c]).items()):
                    yield _replace(pipes, a, c, k)


def _replace(pipes: list[Chain], old: Chain, new: Chain, k: int) -> list[Chain]:
    """``pipes`` with its last ``k`` pipelines of chain ``old`` running chain ``new`` instead (in place)."""
    out = list(pipes)
    done = 0
    for j in range(len(out) - 1, -1, -1):
        if done < k and out[j] == old:
            out[j] = new
            done += 1
    return out


def improve(ctx: SimContext, cluster: ClusterSpec, gbs: int, objective: Objective,
            options: dict[str, list[tuple[int, int]]], base: Candidate, max_evals: int = MAX_EVALS,
            max_work: int = MAX_WORK, stop: Callable[[], bool] = lambda: False,
            min_gain: float | None = None) -> Candidate | None:
    """First-improvement local search from ``base`` over the moves of :func:`_moves` (at most ``max_evals``
    plans tried and ``max_work`` replicas simulated (plans pruned by their makespan cost nothing there), or
    until ``stop()``); the best mixed plan found if it beats ``base``'s key by more than the relative
    ``min_gain`` (default :data:`MIN_GAIN`), else None. Every plan it returns respects the pool capacities and was scored by ``simulate``."""
    shape = Shape.of(base, gbs)
    n_mb = gbs // base.mbs
    caps: dict[tuple[str, str], int] = {}
    for p in cluster.pools:
        caps[(p.gpu_type, p.zone)] = caps.get((p.gpu_type, p.zone), 0) + p.count
    groups = [(g, z, tp) for (g, z) in caps for m, tp in options.get(g, ()) if m == base.mbs]
    pipes = base.pipeline_chains()
    chains = candidate_chains(pipes, groups, base.num_stages)
    best_key, found, evals, work = base.key, None, 0, [0]
    seen: set[tuple] = {tuple(pipes)}
    improved = True
    while improved and evals < max_evals and work[0] < max_work:
        improved = False
        used = usage(pipes)
        free = {p: caps[p] - used.get(p, 0) for p in caps}
        for new in _moves(pipes, chains, free, n_mb):
            key = tuple(new)
            if key in seen:
                continue
            if evals >= max_evals or work[0] >= max_work or stop():
                improved = False
                break
            seen.add(key)
            evals += 1
            res = score(ctx, shape, new, objective, beat=best_key, tally=work)
            if res is not None and res[0].key < best_key * (1 - REL_GAIN):
                found, best_key, pipes, improved = res[0], res[0].key, new, True
                break
    log.info("mixed plans: %d tried, %d replicas simulated, best %s", evals, work[0],
             "none" if found is None else f"{found.key:.6g}")
    gain = MIN_GAIN if min_gain is None else min_gain
    return found if found is not None and found.key < base.key * (1 - gain) else None

