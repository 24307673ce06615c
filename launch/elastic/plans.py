"""Plans for sailor-elastic: the planner for real clusters, a deterministic builder for CPU demos, and the
switch rule (hysteresis).

``SailorPlanner`` runs the planner's library API (``planner.api``: data, context, search, simulate)
in-process on the current availability; its estimate of the iteration time feeds the switch rule.
``CpuDemoPlanner`` exists because the planner is right that a tiny model on CPU "GPUs" is fastest on one
device (its estimates make every extra rank pure overhead), which makes a poor elasticity demo: it builds
a fixed multi-rank plan per rank count (4 ranks: 3 stages, layers [1, L-2, 1], TP 2 | 1 | 1; 3 ranks:
layers [1, L-1], TP 1 | 2; 2 ranks: layers [L/2, L/2], TP 1, micro-batch 1; 1 rank: one stage; more:
the 4-rank pipeline replicated) and predicts iteration time as ``1 / ranks`` (linear scaling).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from planner.errors import InputError
from planner.plan import Plan

from launch.elastic.sources import Availability, total

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlanChoice:
    plan: Plan
    predicted_iteration_s: float     # the planner's estimate (demo: relative, 1 / ranks)
    plan_s: float                    # wall time the planning took


def _stage(first: int, n: int, tps: list[int], gpu_type: str, zone: str) -> dict[str, Any]:
    return {"first_layer": first, "num_layers": n,
            "replicas": [{"gpu_type": gpu_type, "tp": t, "zone": zone} for t in tps]}


def demo_plan_dict(n: int, num_layers: int, gbs: int, model_name: str, gpu_type: str = "cpu",
                   zone: str = "local") -> dict[str, Any]:
    """The CPU demo plan for ``n`` ranks (see the module docstring)."""
    L, mbs = num_layers, 2
    if n < 1:
        raise InputError("no GPUs available")
    if n == 1:
        stages = [_stage(0, L, [1], gpu_type, zone)]
    elif n == 2:
        stages, mbs = [_stage(0, L // 2, [1], gpu_type, zone), _stage(L // 2, L - L // 2, [1], gpu_type, zone)], 1
    elif n == 3:
        stages = [_stage(0, 1, [1], gpu_type, zone), _stage(1, L - 1, [2], gpu_type, zone)]
    else:
        d = n // 4
        while d > 1 and gbs % (mbs * d):
            d -= 1
        stages = [_stage(0, 1, [2] * d, gpu_type, zone), _stage(1, L - 2, [1] * d, gpu_type, zone),
                  _stage(L - 1, 1, [1] * d, gpu_type, zone)]
    return {"schema_version": 1, "model": model_name, "num_layers": L, "micro_batch_size": mbs,
            "global_batch_size": gbs, "precision": "fp32", "optimizer": "adamw", "recompute_activations": False,
            "distributed_optimizer": False, "microbatches_per_pipeline": None, "stages": stages}


class CpuDemoPlanner:
    name = "cpu-demo"

    def __init__(self, num_layers: int, gbs: int, model_name: str) -> None:
        self.num_layers, self.gbs, self.model_name = num_layers, gbs, model_name

    def plan(self, av: Availability) -> PlanChoice:
        start = time.perf_counter()
        pool = max(sorted(av), key=av.get) if av else "cpu@local"      # demo plans use one pool: the largest
        n = av.get(pool, 0)
        gpu_type, _, zone = pool.partition("@")
        plan = Plan.from_dict(demo_plan_dict(n, self.num_layers, self.gbs, self.model_name, gpu_type, zone or "local"))
        return PlanChoice(plan, 1.0 / plan.world_size, time.perf_counter() - start)


class SailorPlanner:
    """The planner (``sailor-plan``'s search + simulator) on the availability, in-process."""

    name = "sailor-plan"

    def __init__(self, planner_args: list[str], gbs: int) -> None:
        """``planner_args``: sailor-plan's data and request flags (``--model``, ``--sailor-data``,
        ``--objective``...); parsed once, here."""
        from planner.options import request_parser, time_limit_s
        self.planner_args, self.gbs = planner_args, gbs
        self.args = request_parser("sailor-elastic --planner-args").parse_args(planner_args)
        time_limit_s(self.args)                         # a bad --time-limit-s is refused before the first replan

    def plan(self, av: Availability) -> PlanChoice:
        from planner import api
        from planner.cluster import parse_gpus
        from planner.options import data_source, plan_request
        start = time.perf_counter()
        gpus = ",".join(f"{k}={v}" for k, v in sorted(av.items()) if v > 0)
        if not gpus:
            raise InputError("no GPUs available")
        bundle = api.load_data(data_source(self.args), self.args.precision)
        ctx = api.make_context(bundle, self.args.runtime)
        request = plan_request(self.args, parse_gpus(gpus, bundle.catalog), self.gbs, comparator=False)
        rep = api.plan(request, ctx)
        return PlanChoice(rep.plan, float(rep.estimate.iteration_time_s), time.perf_counter() - start)


def plan_fits(plan: Plan, av: Availability) -> bool:
    """Can ``plan`` still run on ``av``? (per pool, counting each replica's TP GPUs)."""
    need: dict[str, int] = {}
    for _, _, rep in plan.replicas():
        need[f"{rep.gpu_type}@{rep.zone}"] = need.get(f"{rep.gpu_type}@{rep.zone}", 0) + rep.tp
    if set(need) <= set(av):
        return all(av[k] >= v for k, v in need.items())
    return total(av) >= plan.world_size       # pools renamed (demo: one anonymous pool)


@dataclass(frozen=True)
class SwitchDecision:
    switch: bool
    forced: bool
    gain_s: float          # predicted seconds saved over the horizon (0 when forced or not better)
    cost_s: float          # measured (or assumed) reconfiguration cost
    reason: str


def decide(current: PlanChoice | None, new: PlanChoice, fits: bool, horizon_s: float,
           cost_s: float) -> SwitchDecision:
    """Switch when the current plan no longer fits, or when the predicted gain over ``horizon_s`` exceeds
    the reconfiguration cost: ``horizon_s * (1 - t_new / t_current) > cost_s``."""
    if current is None:
        return SwitchDecision(True, True, 0.0, cost_s, "no job running")
    if not fits:
        return SwitchDecision(True, True, 0.0, cost_s, "current plan no longer fits the available GPUs")
    if new.plan.to_dict() == current.plan.to_dict():
        return SwitchDecision(False, False, 0.0, cost_s, "same plan")
    gain = horizon_s * (1.0 - new.predicted_iteration_s / current.predicted_iteration_s)
    if gain > cost_s:
        return SwitchDecision(True, False, gain, cost_s,
                              f"predicted gain {gain:.1f} s over {horizon_s:.0f} s > cost {cost_s:.1f} s")
    return SwitchDecision(False, False, max(gain, 0.0), cost_s,
                          f"predicted gain {gain:.1f} s over {horizon_s:.0f} s <= cost {cost_s:.1f} s")
