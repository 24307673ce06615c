"""Core sharing: how much slower a plan's ranks compute when they outnumber the machine's cores.

Contract: :func:`core_sharing` returns the compute-time multiplier of ``plan`` on ``cores`` cores, derived
from two things only: the simulator's own event timeline of the plan (:func:`planner.simulator.events.
simulate_events`) and the slowdown table measured before planning (``sailor-profile
--runtime-constants-out``, :func:`planner.simulator.constants.core_share_scale`). Nothing is fitted to runs.

The slowdown a computing rank suffers depends on how many ranks compute at the same moment, not on how many
exist: pipeline stages wait in the fill and drain and on each other. So the term reads, off the timeline,
the *busy ranks seen by computing work*: for every second of a rank's forward/backward compute, the number
of ranks busy at that moment (itself included), averaged over all compute seconds. A TP rank counts as
``core_demand`` of a rank: its profiled compute beyond its ``1/tp`` share of the same layers at TP 1 is time
spent waiting on its peers' all-reduces, which holds no core. The multiplier is the table's slowdown at
(busy ranks / cores) over its slowdown at the profile's (profiled ranks / cores), never below 1. A GPU type
can also declare a core demand of its own (``demand_by_type``): an emulated type whose ranks sleep
``(S - 1) x`` their measured compute after it (megatron_sailor.runtime.emulation) holds a whole core for the
first ``1/S`` of each of its forward/backward events and none for the rest, so emulated ranks that compute
in step contend as much as real ones.

The optimizer step holds a core too, and data-parallel replicas take it at the same moment: its multiplier
(``update_scale``) is the same table read at the busy ranks seen by the update seconds of the timeline at
the compute multiplier's fixed point (one pass: the step is short beside the compute that places it). Since the
timeline itself stretches with the multiplier (transfers and the optimizer step do not), the multiplier is
the fixed point ``x = term(busy_ranks(timeline at x))``, found by bisection.

The result goes into ``RuntimeSettings.compute_scale``, which the simulator and the planner's search apply
alike, so both give the same time for the plan.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Mapping

from planner.errors import InputError
from planner.plan import Plan, Replica
from planner.simulator.constants import core_share_scale
from planner.simulator.events import Timeline, simulate_events
from planner.simulator.settings import SimContext
from planner.simulator.stage import replica_costs

logger = logging.getLogger(__name__)

COMPUTE_KINDS = ("fwd", "bwd")
BUSY_KINDS = ("fwd", "bwd", "update")   # what holds a core (transfers and syncs wait; the optimizer step runs)


@dataclass(frozen=True)
class CoreSharing:
    compute_scale: float     # multiplier for the profiled compute (1.0: no sharing beyond the profile's)
    busy_ranks: float        # ranks busy at once, seen by compute (TP ranks weighted by their core demand)
    update_scale: float      # multiplier for the profiled optimizer step
    update_busy_ranks: float     # ranks busy at once, seen by the optimizer step
    cores: int
    profiled_ranks: float


def core_demand(plan: Plan, ctx: SimContext, s: int, j: int, rep: Replica) -> float:
    """Fraction of a core one TP rank of replica j of stage s holds while it computes: its 1/tp share of the
    same layers' TP-1 compute over its own compute (1.0 at TP 1, or when TP 1 is not profiled)."""
    if rep.tp == 1:
        return 1.0
    try:
        alone = replica_costs(plan, ctx, s, j, replace(rep, tp=1))
    except InputError:
        return 1.0
    mine = replica_costs(plan, ctx, s, j, rep)
    own_s = mine.fwd_s + mine.bwd_s
    return 1.0 if own_s <= 0 else min(1.0, (alone.fwd_s + alone.bwd_s) / rep.tp / own_s)


def busy_ranks_seen(timeline: Timeline, ranks: dict[tuple[int, int], float],
                    head: dict[tuple[int, int], float] | None = None, seen_by: tuple[str, ...] = COMPUTE_KINDS
                    ) -> float:
    """Mean of the busy ranks at each moment, weighted by the seconds of the ``seen_by`` events (compute by
    default): ``ranks[(stage, replica)]`` is the core demand of that replica (TP ranks x core demand); every
    second of it weighs by that demand. ``head[(stage, replica)]``: a compute event holds its load only for
    that leading fraction of its duration (an emulated slow type: it computes, then sleeps)."""
    head = head or {}
    deltas: list[tuple[float, float, float]] = []          # (time, change of busy load, change of weight)
    for e in timeline.events:
        if e.kind not in BUSY_KINDS or e.end_s <= e.start_s:
            continue
        load = ranks[(e.stage, e.replica)]
        weight = load if e.kind in seen_by else 0.0
        end = e.end_s
        if e.kind in COMPUTE_KINDS:
            end = e.start_s + head.get((e.stage, e.replica), 1.0) * (e.end_s - e.start_s)
        deltas += [(e.start_s, load, weight), (end, -load, -weight)]
    deltas.sort()
    load = weight = num = den = 0.0
    prev = deltas[0][0] if deltas else 0.0
    for t, dl, dw in deltas:
        num += weight * load * (t - prev)
        den += weight * (t - prev)
        load, weight, prev = load + dl, weight + dw, t
    return num / den if den > 0 else 0.0


def core_sharing(plan: Plan, ctx: SimContext, cores: int, profiled_ranks: float,
                 table: tuple[tuple[float, float], ...] = (), tol: float = 1e-9,
                 demand_by_type: Mapping[str, float] | None = None) -> CoreSharing:
    """The core-sharing multiplier of ``plan`` (see the module docstring), on top of ``ctx``'s own
    ``compute_scale``. ``demand_by_type``: fraction of a core a rank of that GPU type holds while it computes
    (default 1; in (0, 1])."""
    demand = dict(demand_by_type or {})
    for g, d in demand.items():
        if not 0.0 < d <= 1.0:
            raise InputError(f"core demand of GPU type {g!r} must be in (0, 1], got {d}")
    ranks = {(s, j): rep.tp * core_demand(plan, ctx, s, j, rep) for s, j, rep in plan.replicas()}
    head = {(s, j): demand[rep.gpu_type] for s, j, rep in plan.replicas() if rep.gpu_type in demand}
    base = ctx.settings.compute_scale

    def timeline_at(x: float) -> Timeline:
        return simulate_events(plan, replace(ctx, settings=ctx.settings.with_(compute_scale=base * x)))

    def busy_at(x: float) -> float:
        return busy_ranks_seen(timeline_at(x), ranks, head)

    def term(x: float) -> float:
        return core_share_scale(max(busy_at(x), 1e-9), cores, profiled_ranks, table)

    # term(x) >= 1 and term(x) <= term at every rank busy all the time: a root of term(x) - x lies between
    lo, hi = 1.0, core_share_scale(sum(rep.tp for _, _, rep in plan.replicas()), cores, profiled_ranks, table)
    if term(lo) <= lo:
        lo = hi = 1.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if term(mid) > mid else (lo, mid)
    x = 0.5 * (lo + hi)
    tl = timeline_at(x)
    busy = busy_ranks_seen(tl, ranks, head)
    # an optimizer step waits on no peer: each TP rank holds a whole core through it (no core_demand discount)
    upd_busy = busy_ranks_seen(tl, {(s, j): float(rep.tp) for s, j, rep in plan.replicas()}, head,
                               seen_by=("update",))
    y = core_share_scale(max(upd_busy, 1e-9), cores, profiled_ranks, table) if upd_busy > 0 else 1.0
    logger.info("core sharing: %.3f ranks busy at once on %d cores -> compute x%.4f; optimizer step: %.3f ranks "
                "-> x%.4f", busy, cores, x, upd_busy, y)
    return CoreSharing(compute_scale=x, busy_ranks=busy, cores=cores, profiled_ranks=profiled_ranks,
                       update_scale=y, update_busy_ranks=upd_busy)
