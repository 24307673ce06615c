"""The cost / throughput frontier of a cluster: the planner's candidates and their Pareto front.

Candidates come from the planner's own search (same cost model): the top-K plans for throughput, for cost and
for value, plus an epsilon-constraint sweep (the fastest plan under each of a ladder of $/iteration budgets
between the cheapest and the fastest plan), which finds front points the top-K lists can miss. A point is on
the front when no other candidate is at least as fast and at least as cheap, and strictly better in one.

Time limit: ``frontier_for(..., time_limit_s=T)`` shares T among its searches (each gets what is left over
the number of searches left, so time a fast search leaves passes to the later ones); a search stopped at its
share returns the best plans it found (planner/search/budget.py: only once it holds one), and the frontier
then says that its points are the best found, not proven optimal (``Frontier.complete``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

from planner.cluster import ClusterSpec
from planner.search import Objective, plan_search
from planner.search.space import Candidate, SearchSpace
from planner.simulator.settings import SimContext


@dataclass(frozen=True)
class FrontierPoint:
    throughput_iters_per_s: float
    cost_per_iteration_usd: float
    gpus: int
    label: str            # "S x D, GPU mix"
    on_front: bool
    chosen: bool = False


@dataclass(frozen=True)
class Frontier:
    points: tuple[FrontierPoint, ...]
    baseline: FrontierPoint | None
    min_throughput_iters_per_s: float | None
    max_cost_per_iter_usd: float | None
    complete: bool = True          # False: a search stopped at its share of the time limit

    def front(self) -> list[FrontierPoint]:
        return sorted((p for p in self.points if p.on_front), key=lambda p: p.cost_per_iteration_usd)

    def to_dict(self) -> dict:
        from dataclasses import asdict
        return {"points": [asdict(p) for p in self.points],
                "baseline": None if self.baseline is None else asdict(self.baseline),
                "min_throughput_iters_per_s": self.min_throughput_iters_per_s,
                "max_cost_per_iter_usd": self.max_cost_per_iter_usd, "complete": self.complete}


def label(c: Candidate) -> str:
    mix: dict[str, int] = {}
    for (g, _), n in c.gpus_by_pool().items():
        mix[g] = mix.get(g, 0) + n
    d = c.num_pipelines
    return f"{c.num_stages}x{d} " + "+".join(f"{n} {g}" for g, n in sorted(mix.items()))


def pareto_flags(points: list[tuple[float, float]]) -> list[bool]:
    """(throughput, cost) pairs -> True where no other point dominates (>= throughput and <= cost, one strict)."""
    flags = []
    for i, (t, c) in enumerate(points):
        dominated = any((t2 >= t and c2 <= c) and (t2 > t or c2 < c) for j, (t2, c2) in enumerate(points) if j != i)
        flags.append(not dominated)
    return flags


def _key(c: Candidate) -> tuple:
    return (c.num_stages, c.mbs, c.layers_per_stage, c.pools, c.microbatches, c.chain, c.recompute,
            c.distributed_optimizer)


class TimeShare:
    """Shares a time limit among a known number of searches: each search may use what is left over the number
    of searches left (``None`` limit: no limit for any). ``complete`` turns False once a search stops early."""

    def __init__(self, time_limit_s: float | None, searches: int) -> None:
        self.limit_s, self.left, self.t0, self.complete = time_limit_s, searches, time.perf_counter(), True

    def run(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - plan_search's arguments and result
        share = None
        if self.limit_s is not None:
            share = max(self.limit_s - (time.perf_counter() - self.t0), 1e-3) / max(self.left, 1)
        self.left -= 1
        res = plan_search(*args, time_limit_s=share, **kwargs)
        self.complete = self.complete and res.stats.complete
        return res


def collect_candidates(ctx: SimContext, cluster: ClusterSpec, gbs: int, space: SearchSpace, top_k: int = 20,
                       budgets: int = 8, max_gpus: int | None = None,
                       share: TimeShare | None = None) -> list[Candidate]:
    seen: dict[tuple, Candidate] = {}
    share = share or TimeShare(None, 0)

    def add(res) -> None:
        for c in res.candidates:
            seen.setdefault(_key(c), c)

    for kind in ("throughput", "cost", "value"):
        add(share.run(ctx, cluster, gbs, Objective(kind, max_gpus=max_gpus), space, top_k=top_k))
    lo = min((c.cost_usd for c in seen.values()), default=0.0)
    hi = max((c.cost_usd for c in seen.values()), default=0.0)
    ladder = [lo * math.exp(math.log(hi / lo) * i / budgets) for i in range(1, budgets)] if hi > lo else []
    share.left -= (budgets - 1) - len(ladder)           # the budget searches that will not run
    for budget in ladder:
        add(share.run(ctx, cluster, gbs, Objective("throughput", max_cost_per_iter_usd=budget, max_gpus=max_gpus),
                      space, top_k=1))
    return list(seen.values())


def build_frontier(candidates: list[Candidate], chosen: Candidate | None, baseline: Candidate | None,
                   objective: Objective) -> Frontier:
    pts = [(1.0 / c.iteration_s, c.cost_usd) for c in candidates]
    flags = pareto_flags(pts)
    chosen_key = None if chosen is None else _key(chosen)
    points = tuple(FrontierPoint(t, cost, c.gpus, label(c), f, _key(c) == chosen_key)
                   for (t, cost), f, c in zip(pts, flags, candidates))
    base = None if baseline is None else FrontierPoint(1.0 / baseline.iteration_s, baseline.cost_usd,
                                                       baseline.gpus, "grid: " + label(baseline), False)
    return Frontier(points, base, objective.min_throughput_iters_per_s, objective.max_cost_per_iter_usd)


def frontier_for(ctx: SimContext, cluster: ClusterSpec, gbs: int, objective: Objective, space: SearchSpace,
                 grid_space: SearchSpace, top_k: int = 20, budgets: int = 8,
                 time_limit_s: float | None = None) -> Frontier:
    """Candidates, front, the plan the objective chooses (kept among the candidates) and the grid baseline;
    ``time_limit_s`` is shared among the searches (module docstring)."""
    share = TimeShare(time_limit_s, 3 + (budgets - 1) + 2)
    cands = collect_candidates(ctx, cluster, gbs, space, top_k, budgets, max_gpus=objective.max_gpus, share=share)
    chosen = share.run(ctx, cluster, gbs, objective, space).best
    if chosen is not None and all(_key(chosen) != _key(c) for c in cands):
        cands.append(chosen)
    # the user's constraints do not remove points from the picture; they are drawn as lines
    base = share.run(ctx, cluster, gbs, replace(objective, kind="throughput", max_cost_per_iter_usd=None,
                                                min_throughput_iters_per_s=None), grid_space).best
    return replace(build_frontier(cands, chosen, base, objective), complete=share.complete)


def frontier_lines(fr: Frontier) -> list[str]:
    """The text that goes with a frontier picture: the same points, so text and picture agree."""
    lines = [f"frontier: {len(fr.points)} plans scored, {len(fr.front())} on the Pareto front"]
    if not fr.complete:
        lines.append("  frontier searches STOPPED at their share of the time limit: the points are the best plans "
                     "found, not proven optimal (--time-limit-s none for exact searches)")
    chosen = [p for p in fr.points if p.chosen]
    if chosen:
        c = chosen[0]
        lines.append(f"  chosen (red star): {c.label}, {c.throughput_iters_per_s:.4f} it/s, "
                     f"${c.cost_per_iteration_usd:.4f}/iter")
    if fr.baseline is not None:
        b = fr.baseline
        lines.append(f"  best homogeneous grid plan without the constraints (orange square): {b.label}, "
                     f"{b.throughput_iters_per_s:.4f} it/s, ${b.cost_per_iteration_usd:.4f}/iter")
    else:
        lines.append("  no homogeneous grid plan fits this cluster (no orange square)")
    return lines
