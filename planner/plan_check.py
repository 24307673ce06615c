"""A plan read from a file checked against the inputs it is simulated with, naming the file and the field.

``check_plan_inputs(plan, ctx, source)`` raises ``InputError`` with one line
``<source>: stages[s].replicas[j]: field '<name>' ...`` for the first replica whose GPU type has no catalog
entry or whose TP degree the model cannot be split by, and ``<source>: field 'num_layers' ...`` when the plan's
layer count is not the model's. The simulator keeps its own checks (it is also called without a file); this
one runs first in ``sailor-sim``, so a user sees which file and field to fix. The field path is that of our
plan format; for a Sailor ``plan_config`` it names the stage and replica of the plan it was converted to.
"""
from __future__ import annotations

from planner.errors import InputError
from planner.plan import Plan
from planner.simulator.settings import SimContext


def check_plan_inputs(plan: Plan, ctx: SimContext, source: str) -> None:
    """Raise ``InputError`` naming ``source`` and the field if ``plan`` does not fit ``ctx``'s model or catalog."""
    if plan.num_layers != ctx.model.num_layers:
        raise InputError(f"{source}: field 'num_layers' is {plan.num_layers} but model '{ctx.model.name}' has "
                         f"{ctx.model.num_layers} layers")
    for s, j, rep in plan.replicas():
        where = f"{source}: stages[{s}].replicas[{j}]"
        if rep.gpu_type not in ctx.catalog:
            raise InputError(f"{where}: field 'gpu_type' is '{rep.gpu_type}', which has no GPU catalog entry "
                             f"(known: {', '.join(ctx.catalog.names())}); add it with a GPU catalog file")
        try:
            ctx.model.check_tp(rep.tp)
        except InputError as e:
            raise InputError(f"{where}: field 'tp': {e}") from None
