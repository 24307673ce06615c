"""Sync and step floors coupled with the GPU types a plan uses (session 15, helper s15b).

Contract: for one (S, b, smallest TP tau) unit of :mod:`planner.search.mixtab` and a set R of GPU types,
:func:`coupled_floors` returns floors on the gradient sync (per replica count D) and on the optimizer step
that EVERY plan of the unit whose replicas use exactly the types R pays, and the pools such a plan may use
(those of R's types). Every plan uses exactly one R, so splitting a node of :mod:`planner.search.mixbound` by R
(:func:`type_sets`) keeps it a partition. The floors are the unit's own, restricted to R's groups, raised by
two coupled terms (docs/PLANNER.md 7.1 item 7, 7.2 item 8):

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


def _type_ring(ctx: SimContext, tab: MixUnit, usable_s: np.ndarray, t: str, grad_b: float, rings: dict
               ) -> np.ndarray:
    """[d_max + 1] smallest flat ring over D members of the groups ``usable_s`` (one zone) of which one is of
    type t: every link with a t endpoint and a usable group at the other, in either direction."""
    names = [tab.grp.names[i] for i in np.nonzero(usable_s)[0]]
    concs = sorted({c for _, _, c in names})
    links = []
    for ga, za, _ in names:
        if ga != t:
            continue
        for gb, zb, _ in names:
            for c in concs:
                links.append(ctx.network.link(_endpoint(ctx, ga, za), _endpoint(ctx, gb, zb), concurrent=c))
                links.append(ctx.network.link(_endpoint(ctx, gb, zb), _endpoint(ctx, ga, za), concurrent=c))
    d = np.arange(tab.d_max + 1, dtype=float)
    return np.where(d > 1, _ring(rings, _distinct(links), d, grad_b), 0.0)


def coupled_floors(ctx: SimContext, cluster: ClusterSpec, tab: MixUnit, params: np.ndarray, upd: np.ndarray,
                   types: tuple[str, ...], rings: dict) -> Coupled | None:
    """The floors of the module docstring for the plans of ``tab`` using exactly ``types``; ``params`` /
    ``upd`` [G, S]: per replica parameters per GPU and optimizer step (``stage_core``'s). None: no such plan
    (a stage with no usable group of those types, or no TP-tau group of them anywhere)."""
    grp = tab.grp
    of_type = np.array([n[0] in types for n in grp.names])
    use = tab.usable & of_type[:, None]
    tau = int(tab.grp.tp[tab.usable.any(axis=1)].min()) if tab.usable.any() else 0
    exact = use & (grp.tp == tau)[:, None]
    if not use.any(axis=0).all() or not exact.any():
        return None
    keep = np.zeros(len(grp.caps), dtype=bool)
    keep[grp.pool[of_type]] = True
    s_num, d_max = tab.s_num, tab.d_max
    per_stage, with_min = [], []
    for s in range(s_num):
        grad_b = float(F.grad_bytes(params[use[:, s], s].min()))
        per_stage.append(stage_sync_floor(ctx, grp, use[:, s], grad_b, d_max, cluster, rings, tau))
        if exact[:, s].any():
            grad_t = float(F.grad_bytes(params[exact[:, s], s].min()))
            with_min.append(stage_sync_floor(ctx, grp, use[:, s], grad_t, d_max, cluster, rings, tau))
    per_stage = np.array(per_stage)
    step = float(max(upd[use[:, s], s].min() for s in range(s_num)))
    if not ctx.settings.dp_sync_waits_for_all:     # stage 0's sync (mixtab's rule), R's groups only
        return Coupled(types, keep, per_stage[0], step)
    sync = np.maximum(per_stage.max(axis=0), np.min(with_min, axis=0))
    for t in types:
        is_t = use & np.array([n[0] == t for n in grp.names])[:, None]
        step = max(step, float(upd[is_t].min()))
        best = np.full(d_max + 1, np.inf)
        for s in np.nonzero(is_t.any(axis=0))[0]:
            zones = {grp.names[i][1] for i in np.nonzero(use[:, s])[0]}
            if len(zones) > 1 or ctx.replica_node_gpus:     # a hierarchical sync may apply: the stage's own floor
                best = np.minimum(best, per_stage[s])
                continue
            grad_t = float(F.grad_bytes(params[is_t[:, s], s].min()))
            best = np.minimum(best, np.maximum(per_stage[s], _type_ring(ctx, tab, use[:, s], t, grad_t, rings)))
        sync = np.maximum(sync, best)
    return Coupled(types, keep, sync, step)
