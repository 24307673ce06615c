"""The planner as a library: typed, frozen arguments in, frozen reports out; nothing it is given is mutated.

    from planner import api
    bundle = api.load_data(api.DataSource(model="opt-350m"))
    ctx = api.make_context(bundle, runtime=None)
    cluster = parse_gpus("A100-40@us-central1-a=8", bundle.catalog)          # planner.cluster
    report = api.plan(api.PlanRequest(cluster=cluster, global_batch_size=64), ctx)
    api.simulate(report.plan, api.context_for(ctx, cluster))                  # == report.estimate

:func:`plan` wraps the search (``planner.search.plan_search``, ``build_plan``) and scores every returned plan
with :func:`simulate` (``planner.simulator.simulate``, the cost model ``sailor-sim`` prints); neither is
changed here. ``sailor-plan``, ``sailor-sim``, ``sailor-elastic`` and the benchmarks call this module.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from planner.cluster import ClusterSpec
from planner.errors import InputError, InternalError
from planner.inputs import DataBundle, DataSource, load_data, make_context
from planner.plan import Plan
from planner.search import Candidate, Objective, SearchSpace, build_plan, plan_search
from planner.search.budget import Progress
from planner.search.space import CHAIN_SPLITS, auto_chain_segments
from planner.search.verify import checked_plans
from planner.simulator import Estimate, SimContext
from planner.simulator import simulate as _simulate

__all__ = ["DataBundle", "DataSource", "PlanReport", "PlanRequest", "context_for", "load_data", "make_context",
           "plan", "search_space", "simulate"]



@dataclass(frozen=True)
class PlanRequest:
    """What to plan: a cluster, the global batch size, the objective and the planner's space.

    ``planner``: ``ours`` (the full space), ``grid`` (homogeneous Megatron 3D grid) or ``sailor`` (Sailor's
    plan shape); ``top_k`` plans are returned; ``comparator`` also scores the best grid plan (not for ``grid``).
    """

    cluster: ClusterSpec
    global_batch_size: int
    objective: Objective = field(default_factory=Objective)
    planner: str = "ours"
    precision: str = "fp32"
    max_stages: int | None = None
    top_k: int = 1
    comparator: bool = True
    recompute: bool = True                  # search activation recomputation (ours only; baselines never)
    chain_segments: int | None = None       # chain plans with up to this many runs (1: none; ours, sailor-space;
                                            # None: auto_chain_segments, 3 or the zones up to 5 for throughput)
    chain_splits: str = "even"              # chain plans' layer splits: even (Sailor's), segment (PLANNER 1.1)
                                            # or refine (even, then a heuristic pass: PLANNER 2.7; off by
                                            # default: it misses the time goals, 2.7)
    time_limit_s: float | None = None       # stop the search with the best plan so far (None: no limit)
    distributed_optimizer: bool = True      # search the distributed optimizer (ours only; baselines never)
    mixed_plans: bool = False               # local search for mixed plans after the exact one (ours only)
    two_tp: bool = False                    # the space gives a GPU type up to two TP degrees in pool plans
                                            # (ours only; SearchSpace.two_tp = 2; docs/PLANNER.md 10.7)

    def __post_init__(self) -> None:
        if isinstance(self.global_batch_size, bool) or not isinstance(self.global_batch_size, int) \
                or self.global_batch_size < 1:
            raise InputError(f"--gbs must be >= 1, got {self.global_batch_size}")
        if self.chain_segments is not None and (isinstance(self.chain_segments, bool)
                                                or not isinstance(self.chain_segments, int)
                                                or not 1 <= self.chain_segments <= 8):
            raise InputError(f"--chain-segments must be an integer in 1..8, got {self.chain_segments!r}")
        if self.chain_splits not in CHAIN_SPLITS:
            raise InputError(f"--chain-splits must be {' or '.join(CHAIN_SPLITS)}, got {self.chain_splits!r}")
        for name in ("recompute", "distributed_optimizer", "mixed_plans", "two_tp"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.mixed_plans and self.planner != "ours":
            raise InputError(f"--mixed-plans applies to --planner ours only, got --planner {self.planner}")
        if self.two_tp and self.planner != "ours":
            raise InputError(f"--two-tp applies to --planner ours only, got --planner {self.planner}")
        if self.top_k < 1:
            raise InputError(f"--top must be >= 1, got {self.top_k}")
        t = self.time_limit_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < float("inf")):
            raise InputError(f"--time-limit-s must be a positive number of seconds, got {t!r}")


@dataclass(frozen=True)
class PlanReport:
    """The chosen plan, its estimate, the runners-up and (when asked) the grid comparator's estimate."""

    plan: Plan
    estimate: Estimate
    candidate: Candidate
    search_time_s: float
    candidates_evaluated: int
    stats: object                                        # planner.search.space.SearchStats
    alternatives: tuple[tuple[Plan, Estimate], ...] = ()
    comparator_ran: bool = False
    comparator: Estimate | None = None                   # None: not run, or no grid plan is feasible


def search_space(request: PlanRequest) -> SearchSpace:
    """The declared space ``request.planner`` names."""
    from planner.baselines.spaces import baseline_space
    return baseline_space(request.planner, request.precision, request.max_stages, recompute=request.recompute,
                          chain_segments=request.chain_segments if request.chain_segments is not None else
                          auto_chain_segments(len(request.cluster.zones()), request.objective),
                          distributed_optimizer=request.distributed_optimizer, mixed_plans=request.mixed_plans,
                          chain_splits=request.chain_splits, two_tp=request.two_tp)


def context_for(context: SimContext, cluster: ClusterSpec) -> SimContext:
    """A copy of ``context`` whose node sizes include ``cluster``'s pools (``context`` is not changed)."""
    gpn = dict(context.gpus_per_node)
    gpn.update({p.gpu_type: p.gpus_per_node for p in cluster.pools})
    return replace(context, gpus_per_node=gpn)


def simulate(plan: Plan, context: SimContext) -> Estimate:
    """Iteration time, per-GPU peak memory and $/iteration of ``plan`` (``planner.simulator.simulate``)."""
    return _simulate(plan, context)


def plan(request: PlanRequest, context: SimContext, progress: Progress | None = None) -> PlanReport:
    """Search ``request.cluster`` for the best plans under ``request.objective``; every plan is simulated.

    Raises :class:`InputError` when the cluster is empty or no plan is feasible (the message names the
    constraint that failed and by how much).
    """
    cluster, gbs, objective = request.cluster, request.global_batch_size, request.objective
    if cluster.nonempty().total_gpus == 0:
        raise InputError(f"no GPUs: every pool of the cluster is empty ({cluster.describe() or 'no pools'})")
    ctx = context_for(context, cluster)
    # a model that ties its embeddings is planned as tied plans (planner.search.tied prices the shared weight)
    space = replace(search_space(request), tie_embeddings=ctx.model.tied_embeddings)
    # the production check (plan_search's verify) runs below, once: checked_plans simulates each candidate's
    # plan, checks it exactly as plan_search would, and reuses that estimate for the plan annotated with the
    # sync modes it assumed (docs/PLANNER.md 2.3, Session 14, second pass)
    res = plan_search(ctx, cluster, gbs, objective, space, top_k=request.top_k, progress=progress,
                      time_limit_s=request.time_limit_s, verify=False)
    if not res.candidates:
        from planner.search.explain import diagnose_empty
        raise diagnose_empty(ctx, cluster, gbs, objective, space, res)
    # every stage carries the sync mode the estimate assumed (the runtime then runs exactly that)
    plans, ests = (list(x) for x in zip(*checked_plans(ctx, res.candidates, gbs)))
    if not ests[0].fits_in_memory:
        raise InternalError("the chosen plan does not fit in memory per the simulator")
    comparator_ran = request.comparator and request.planner != "grid"
    comparator = _grid_comparator(ctx, request, space.precision) if comparator_ran else None
    return PlanReport(plan=plans[0], estimate=ests[0], candidate=res.candidates[0],
                      search_time_s=res.search_time_s, candidates_evaluated=res.candidates_evaluated,
                      stats=res.stats, alternatives=tuple(zip(plans[1:], ests[1:])),
                      comparator_ran=comparator_ran, comparator=comparator)


def _grid_comparator(ctx: SimContext, request: PlanRequest, precision: str) -> Estimate | None:
    from planner.baselines.spaces import baseline_space
    gbs = request.global_batch_size
    space = replace(baseline_space("grid", precision), tie_embeddings=ctx.model.tied_embeddings)
    comp = plan_search(ctx, request.cluster, gbs, request.objective, space).best
    return None if comp is None else simulate(build_plan(comp, ctx.model.num_layers, gbs, ctx.model.name,
                                                         precision), ctx)
