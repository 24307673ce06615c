"""Human explanations: why some GPUs stay unused, and which constraint made the search come back empty."""
from __future__ import annotations

from planner.cluster import ClusterSpec
from planner.errors import InputError
from planner.search.engine import plan_search
from planner.search.space import Candidate, Objective, SearchResult, SearchSpace
from planner.simulator.settings import SimContext

GIB = 1024 ** 3


def unused_reasons(cluster: ClusterSpec, cand: Candidate, objective: Objective) -> list[str]:
    """One line per pool with GPUs left over. A pool whose pipelines run at two TP degrees (``SearchSpace.two_tp``)
    could take one more pipeline at the smaller one, so that is the size a leftover is compared with."""
    least_tp: dict[tuple[str, str], int] = {}
    for p in cand.pools:
        key = (p.gpu_type, p.zone)
        least_tp[key] = min(least_tp.get(key, p.tp), p.tp)
    by_pool = cand.gpus_by_pool()
    lines = []
    for pool in cluster.nonempty().pools:
        tp = least_tp.get((pool.gpu_type, pool.zone))
        n_used = by_pool.get((pool.gpu_type, pool.zone), 0)
        left = pool.count - n_used
        if left <= 0:
            continue
        name = f"{left} of {pool.count} {pool.gpu_type}@{pool.zone}"
        per_chain = sum(tp for g, z, tp in cand.chain if (g, z) == (pool.gpu_type, pool.zone))
        if per_chain and left < per_chain:
            why = f"too few for one more pipeline, which takes {per_chain} of them"
        elif tp is not None and left < cand.num_stages * tp:
            why = f"too few for one more pipeline of S x TP = {cand.num_stages} x {tp} GPUs"
        elif objective.max_gpus is not None and cand.gpus + cand.num_stages > objective.max_gpus:
            why = f"--max-gpus {objective.max_gpus} reached"
        elif objective.kind == "throughput":
            why = ("more replicas would slow the iteration down (gradient sync over more or slower links "
                   "outweighs the compute they add)" if objective.max_cost_per_iter_usd is None
                   else "more GPUs would break the --max-cost-per-iter budget or not pay off")
        else:
            why = f"the {objective.kind} objective is better without them (they cost more than they save)"
        lines.append(f"{name} unused: {why}")
    return lines


def diagnose_empty(ctx: SimContext, cluster: ClusterSpec, gbs: int, objective: Objective, space: SearchSpace,
                   result: SearchResult) -> InputError:
    """The error to raise when ``result`` holds no plan: which constraint failed and by how much."""
    free = Objective(kind="throughput")
    fast = plan_search(ctx, cluster, gbs, free, space).best
    if fast is None:
        short = result.stats.memory_shortfall_bytes
        if short is not None and short > 0:
            return InputError(f"model '{ctx.model.name}' fits on no available GPU: even the best layer split "
                              f"needs {short / GIB:.2f} GiB more than a GPU of the cluster "
                              f"({cluster.describe()}) has")
        return InputError(f"no plan of the search space fits the cluster ({cluster.describe()}) with global batch "
                          f"{gbs}: every pipeline needs S x TP GPUs of one pool and the batch must split into "
                          "micro-batches")
    if objective.max_gpus is not None:
        fast = plan_search(ctx, cluster, gbs, Objective(kind="throughput", max_gpus=objective.max_gpus), space).best
    problems = []
    if objective.min_throughput_iters_per_s is not None and fast is not None:
        best_tp = 1.0 / fast.iteration_s
        if best_tp < objective.min_throughput_iters_per_s:
            problems.append(f"--min-throughput {objective.min_throughput_iters_per_s:g} it/s is out of reach: the "
                            f"fastest plan reaches {best_tp:.4f} it/s (short by "
                            f"{objective.min_throughput_iters_per_s - best_tp:.4f} it/s)")
    if objective.max_cost_per_iter_usd is not None:
        cheap = plan_search(ctx, cluster, gbs, Objective(kind="cost", max_gpus=objective.max_gpus,
                                                         min_throughput_iters_per_s=objective.min_throughput_iters_per_s),
                            space).best
        if cheap is not None and cheap.cost_usd > objective.max_cost_per_iter_usd:
            floor = "" if objective.min_throughput_iters_per_s is None else " meeting the throughput floor"
            problems.append(f"--max-cost-per-iter ${objective.max_cost_per_iter_usd:g} is out of reach: the "
                            f"cheapest plan{floor} costs ${cheap.cost_usd:.4f}/iter (over by "
                            f"${cheap.cost_usd - objective.max_cost_per_iter_usd:.4f})")
    if fast is None:
        problems.append(f"--max-gpus {objective.max_gpus} is too small for any plan of the search space")
    if not problems:
        problems.append("no plan meets all constraints together (each one alone can be met)")
    return InputError("; ".join(problems))
