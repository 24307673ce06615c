"""A plan checked against the inputs it is simulated with: the one implementation of these checks.

``check_plan_inputs(plan, ctx, source=None)`` raises ``InputError`` with one line for the first problem: the
plan's layer count is not the model's (``field 'num_layers'``), or a replica (``stages[s].replicas[j]``) has a
GPU type without a catalog entry (``field 'gpu_type'``), a TP degree the model cannot be split by or one wider
than its node (``field 'tp'``). :func:`planner.simulator.core.simulate` calls it without a source;
``sailor-sim`` calls it first with the plan file's path, so the line also names the file. The field path is
that of our plan format; for a Sailor ``plan_config`` it names the stage and replica of the converted plan.
"""
from __future__ import annotations

from planner.errors import InputError
from planner.plan import Plan
from planner.simulator.settings import SimContext


def check_plan_inputs(plan: Plan, ctx: SimContext, source: str | None = None) -> None:
    """Raise ``InputError`` naming the field (and ``source``, if given) if ``plan`` does not fit ``ctx``."""
    head = f"{source}: " if source else ""
    if plan.num_layers != ctx.model.num_layers:
        raise InputError(f"{head}field 'num_layers' is {plan.num_layers} but model '{ctx.model.name}' has "
                         f"{ctx.model.num_layers} layers")
    passed = set()              # a replica equal to one that passed passes (the checks read only its fields)
    for s, j, rep in plan.replicas():
        if rep in passed:
            continue
        where = f"{head}stages[{s}].replicas[{j}]"
        if rep.gpu_type not in ctx.catalog:
            raise InputError(f"{where}: field 'gpu_type' is '{rep.gpu_type}', which has no GPU catalog entry "
                             f"(known: {', '.join(ctx.catalog.names())}); add it with a GPU catalog file")
        try:
            ctx.model.check_tp(rep.tp)
        except InputError as e:
            raise InputError(f"{where}: field 'tp': {e}") from None
        if rep.tp > ctx.node_size(rep.gpu_type):
            raise InputError(f"{where}: TP {rep.tp} exceeds the {ctx.node_size(rep.gpu_type)} GPUs per node of "
                             f"{rep.gpu_type} (TP stays inside a node)")
        passed.add(rep)
