"""The gradient-sync mode the simulator models for each stage, to be written into a plan.

Contract: :func:`chosen_sync_modes` returns, per stage, the mode :func:`planner.simulator.simulate` models
for that stage under ``ctx`` (the plan's own ``grad_sync`` where it names one, else the preset's rule; under
``auto`` the faster of flat and hierarchical). ``None`` for a stage with one replica (nothing to sync; the
runtime's flag may decide). :func:`with_chosen_sync_modes` returns the plan with those modes written, so the
runtime runs what was scored: simulating it gives the same estimate as the plan without them.
"""
from __future__ import annotations

from dataclasses import replace

from planner.plan import Plan
from planner.simulator.settings import SimContext
from planner.simulator.stage import all_replica_costs
from planner.simulator.time import stage_sync


def written_mode(mode: str) -> str | None:
    """What a plan records for a stage whose sync the simulator modelled as ``mode``: ``"flat"`` or
    ``"hierarchical"`` as they are, ``None`` for anything else (one replica: nothing to sync)."""
    return mode if mode in ("flat", "hierarchical") else None


def chosen_sync_modes(plan: Plan, ctx: SimContext) -> tuple[str | None, ...]:
    """Per stage: ``"flat"``, ``"hierarchical"`` or ``None`` (one replica), as the simulator models it."""
    costs = all_replica_costs(plan, ctx)
    return tuple(written_mode(stage_sync(plan, ctx, s, costs[s]).mode) for s in range(plan.num_stages))


def with_sync_modes(plan: Plan, modes: tuple[str | None, ...]) -> Plan:
    """``plan`` with every stage's ``grad_sync`` set to ``modes`` (stages whose mode is None keep theirs)."""
    stages = tuple(st if m is None else replace(st, grad_sync=m) for st, m in zip(plan.stages, modes))
    return replace(plan, stages=stages)


def with_chosen_sync_modes(plan: Plan, ctx: SimContext) -> Plan:
    """``plan`` with every stage's ``grad_sync`` set to :func:`chosen_sync_modes` (stages with one replica keep
    theirs)."""
    return with_sync_modes(plan, chosen_sync_modes(plan, ctx))
