"""Sync and step floors coupled with the GPU types a plan uses (session 15, helper s15b).

Contract: for one (S, b, smallest TP tau) unit of :mod:`planner.search.mixtab` and a set R of GPU types,
:func:`coupled_floors` returns floors on the gradient sync (per replica count D) and on the optimizer step
that EVERY plan of the unit whose replicas use exactly the types R pays, and the pools such a plan may use
(those of R's types). Every plan uses exactly one R, so splitting a node of :mod:`planner.search.mixbound` by R
(:func:`type_sets`) keeps it a partition. Each stage's sync floor is coupled with the stage's smallest TP k
(:func:`_stage_floor`): the simulator rings a stage at k concurrent streams with the gradient of its TP-k member,
so the floor is the minimum over k of the floor over the groups of TP >= k at a TP-k group's gradient (mixtab's
took the largest TP's gradient at the fastest concurrency). With ``through`` (R exact) two more terms
(docs/PLANNER.md 7.1 items 7-8, 7.2 item 8):

- **sync** (only with ``dp_sync_waits_for_all``: the plan's sync is the max over stages): a plan using type t
  has a stage s holding a t replica; if that stage's usable R-groups all sit in one zone its sync is one flat
  ring (``zone_aware_sync``), whose time is the largest over its edges, and the t member has an edge to a
  ring neighbour: so the sync is >= the smallest ring over the links with a t endpoint (either direction) and
  a usable R-group at the other end, at the gradient of the fewest parameters of a usable t group (the ring's
  gradient is the member with the most). The minimum over the stages where t is usable is taken.
- **step**: the step is the max over every replica; a t replica sits on some stage, so the step is >= the
  smallest step of a usable t group over every stage.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from planner.search.mixtab import MixUnit, _distinct, _endpoint, _ring, stage_sync_floor
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext
from planner.cluster import ClusterSpec


@dataclass(frozen=True)
class Coupled:
    """The floors of the plans of one unit using exactly the GPU types ``types``: ``sync`` [d_max + 1],
    ``upd`` (seconds); ``keep`` [P] the pools of those types (a plan uses no other)."""

    types: tuple[str, ...]
    keep: np.ndarray
    sync: np.ndarray
    upd: float


def unit_types(tab: MixUnit) -> list[str]:
    """The GPU types of the unit's usable groups."""
    return sorted({tab.grp.names[g][0] for g in np.nonzero(tab.usable.any(axis=1))[0]})


def type_sets(tab: MixUnit) -> list[tuple[str, ...]]:
    """Every non-empty set of the unit's GPU types (each plan uses exactly one)."""
    types = unit_types(tab)
    return [c for r in range(1, len(types) + 1) for c in itertools.combinations(types, r)]


def _type_ring(ctx: SimContext, tab: MixUnit, members: np.ndarray, t: str, k: int, grad_b: float, rings: dict
               ) -> np.ndarray:
    """[d_max + 1] smallest flat ring over D members of the groups ``members`` (one zone) of which one is of
    type t, at ``k`` concurrent streams: every link with a t endpoint and a member group at the other, in
    either direction."""
    names = [tab.grp.names[i] for i in np.nonzero(members)[0]]
    links = []
    for ga, za, _ in names:
        if ga != t:
            continue
        for gb, zb, _ in names:
            links.append(ctx.network.link(_endpoint(ctx, ga, za), _endpoint(ctx, gb, zb), concurrent=k))
            links.append(ctx.network.link(_endpoint(ctx, gb, zb), _endpoint(ctx, ga, za), concurrent=k))
    d = np.arange(tab.d_max + 1, dtype=float)
    return np.where(d > 1, _ring(rings, _distinct(links), d, grad_b), 0.0)


def _stage_floor(ctx: SimContext, cluster: ClusterSpec, tab: MixUnit, use_s: np.ndarray, params_s: np.ndarray,
                 ks: list[int], rings: dict, t: str | None = None) -> np.ndarray:
    """[d_max + 1] floor on the sync of a stage whose replicas are of the groups ``use_s``, its smallest TP k
    one of ``ks``: min over k of the floor over the groups of TP >= k (its members) at the gradient of the
    fewest parameters of a TP-k group (the ring's gradient is its member with the most, >= a TP-k member's);
    mixtab's floor (any link of the members at their TP degrees as concurrencies, which include k) or, with
    ``t`` and the members in one zone, also the flat ring through a t member at concurrency k."""
    grp = tab.grp
    key = ("s15b-stage", use_s.tobytes(), params_s.tobytes(), tuple(ks), t, tab.d_max, tuple(grp.names))
    if key in rings:            # stages of equal layers repeat along Sailor's split, and across units
        return rings[key]
    best = np.full(tab.d_max + 1, np.inf)
    for k in ks:
        members = use_s & (grp.tp >= k)
        at_k = use_s & (grp.tp == k)
        if not at_k.any() or (t is not None and not (members & _of_type(grp, t)).any()):
            continue
        grad_b = float(F.grad_bytes(params_s[at_k].min()))
        floor = stage_sync_floor(ctx, grp, members, grad_b, tab.d_max, cluster, rings, k)
        zones = {grp.names[i][1] for i in np.nonzero(members)[0]}
        if t is not None and len(zones) == 1 and not ctx.replica_node_gpus:
            floor = np.maximum(floor, _type_ring(ctx, tab, members, t, k, grad_b, rings))
        best = np.minimum(best, floor)
    rings[key] = best
    return best


def _of_type(grp, t: str) -> np.ndarray:
    return np.array([n[0] == t for n in grp.names])


def coupled_floors(ctx: SimContext, cluster: ClusterSpec, tab: MixUnit, params: np.ndarray, upd: np.ndarray,
                   types: tuple[str, ...], rings: dict, through: bool = True) -> Coupled | None:
    """The floors of the module docstring for the plans of ``tab`` using exactly ``types`` (``through`` False:
    using only ``types``, some perhaps not: without the terms of a ring and a step through each type; with
    every type of the unit, a floor for every plan of the unit); ``params`` / ``upd`` [G, S]: per replica
    parameters per GPU and optimizer step (``stage_core``'s). None: no such plan (a stage with no usable group
    of those types, or no TP-tau group of them anywhere)."""
    grp = tab.grp
    of_type = np.array([n[0] in types for n in grp.names])
    use = tab.usable & of_type[:, None]
    tau = int(grp.tp[tab.usable.any(axis=1)].min()) if tab.usable.any() else 0
    exact = use & (grp.tp == tau)[:, None]
    if not use.any(axis=0).all() or not exact.any():
        return None
    if through and not all((use & _of_type(grp, t)[:, None]).any() for t in types):
        return None             # a type no stage can hold (mixregion's masked units): no plan uses exactly types
    keep = np.zeros(len(grp.caps), dtype=bool)
    keep[grp.pool[of_type]] = True
    s_num = tab.s_num
    tps = sorted({int(x) for x in grp.tp[use.any(axis=1)]})
    per_stage = np.array([_stage_floor(ctx, cluster, tab, use[:, s], params[:, s], tps, rings)
                          for s in range(s_num)])
    step = float(max(upd[use[:, s], s].min() for s in range(s_num)))
    for t in types if through else ():     # a t replica sits on some stage: the step is >= its smallest there
        step = max(step, float(upd[use & _of_type(grp, t)[:, None]].min()))
    if not ctx.settings.dp_sync_waits_for_all:     # stage 0's sync (mixtab's rule), R's groups only
        return Coupled(types, keep, per_stage[0], step)
    # the stage holding a TP-tau replica has smallest TP tau
    with_min = [_stage_floor(ctx, cluster, tab, use[:, s], params[:, s], [tau], rings)
                for s in range(s_num) if exact[:, s].any()]
    sync = np.maximum(per_stage.max(axis=0), np.min(with_min, axis=0))
    for t in types if through else ():     # the stage holding a t replica rings through it
        is_t = use & _of_type(grp, t)[:, None]
        best = np.full(tab.d_max + 1, np.inf)
        for s in np.nonzero(is_t.any(axis=0))[0]:
            best = np.minimum(best, np.maximum(per_stage[s], _stage_floor(ctx, cluster, tab, use[:, s], params[:, s],
                                                                          tps, rings, t)))
        sync = np.maximum(sync, best)
    return Coupled(types, keep, sync, step)
