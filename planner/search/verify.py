"""The production check that the search's vectorised evaluator and the simulator agree.

The search scores plans with numpy expressions of :mod:`planner.simulator.formulas`; every plan it returns
is rebuilt (:func:`planner.search.build.build_plan`) and simulated (:func:`planner.simulator.simulate`), and
the two iteration times, $/iteration and GPU counts must agree within relative ``REL_TOL``. A disagreement is
a bug in the planner, never bad input: it raises :class:`planner.errors.InternalError` (the CLIs print one
``internal error:`` line and exit with status 3).
"""
from __future__ import annotations

import math

from planner.errors import InternalError
from planner.plan import Plan
from planner.search.build import build_plan
from planner.search.space import Candidate
from planner.simulator import Estimate, simulate
from planner.simulator.settings import SimContext

REL_TOL = 1e-9


def check_candidate(cand: Candidate, plan: Plan, est: Estimate, rel_tol: float = REL_TOL) -> None:
    """Raise InternalError unless ``est`` (the simulator on ``plan``) matches the search's scores of ``cand``."""
    pairs = (("iteration time (s)", cand.iteration_s, est.iteration_time_s),
             ("cost per iteration (USD)", cand.cost_usd, est.cost_per_iteration_usd))
    for what, searched, simulated in pairs:
        if not math.isclose(searched, simulated, rel_tol=rel_tol, abs_tol=0.0):
            raise InternalError(f"the search's evaluator and simulate() disagree on the {what} of the returned "
                                f"plan ({len(plan.stages)} stages, {plan.world_size} GPUs): {searched!r} vs "
                                f"{simulated!r} (relative tolerance {rel_tol:g})")
    if cand.gpus != est.num_gpus:
        raise InternalError(f"the search's evaluator counts {cand.gpus} GPUs for the returned plan, simulate() "
                            f"{est.num_gpus}")
    if not est.fits_in_memory:
        raise InternalError("the returned plan does not fit in memory per the simulator")


def check_candidates(ctx: SimContext, cands: list[Candidate], gbs: int) -> list[tuple[Plan, Estimate]]:
    """Build, simulate and check every candidate; returns their (plan, estimate) pairs."""
    out = []
    for cand in cands:
        plan = build_plan(cand, ctx.model.num_layers, gbs, ctx.model.name)
        est = simulate(plan, ctx)
        check_candidate(cand, plan, est)
        out.append((plan, est))
    return out
