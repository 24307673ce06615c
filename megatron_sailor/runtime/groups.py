"""The only module that creates process groups (other parts call :func:`new_group`, never torch's).

Every rank calls :func:`create_groups` with the same layout; it calls ``new_group`` for every group of
the plan in one fixed order (torch requires all ranks to take part in every ``new_group`` call) and
returns the groups this rank belongs to as one frozen :class:`RankGroups` object that travels explicitly.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import timedelta
from functools import reduce
from typing import Any

import torch.distributed as dist

from planner.layout import RankLayout, tied_embedding_sync_mode

logger = logging.getLogger(__name__)

SYNC_FLAT = "flat"
SYNC_HIERARCHICAL = "hierarchical"


@dataclass(frozen=True)
class ShardSyncGroups:
    """Groups used to sum the gradient slices of one fine shard across the replicas of a stage."""

    shard: int
    members: tuple[int, ...]
    flat: Any | None                      # all members (flat mode), None when hierarchical or alone
    zone: Any | None                      # members in this rank's zone (hierarchical, >= 2 members)
    zone_leader: int | None               # global rank of this zone's leader
    leaders: Any | None                   # one leader per zone (hierarchical, >= 2 zones, leaders only)
    mode: str = SYNC_HIERARCHICAL         # the stage's sync mode these groups were made for


@dataclass(frozen=True)
class RankGroups:
    """Process groups of one rank."""

    rank: int
    tp: Any                               # this replica's TP group (a singleton for TP 1)
    single: Any                           # {rank}: stands in for PP/CP/EP groups inside a stage model
    p2p: Any                              # all ranks; used only for point-to-point between stages
    world: Any                            # all ranks; loss / grad-norm reductions
    grad_sync: tuple[ShardSyncGroups, ...]
    sync_mode: str                        # the run's mode (--grad-sync): stages without their own
    embedding: tuple[ShardSyncGroups, ...] = ()   # tied embeddings: first + last stage, per fine shard
    stage_modes: tuple[str, ...] = ()     # each stage's mode (the plan's grad_sync, else sync_mode)


def _new(ranks: tuple[int, ...], timeout: timedelta) -> Any:
    return dist.new_group(ranks=list(ranks), timeout=timeout)


def new_group(ranks: tuple[int, ...] | list[int], timeout: timedelta) -> Any:
    """One group for a layout that is not a plan's (the profiler's TP blocks); collective like every group here."""
    return _new(tuple(ranks), timeout)


def _zones_of(layout: RankLayout, members: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    zones: dict[str, list[int]] = {}
    for r in members:
        zones.setdefault(layout.info(r).zone, []).append(r)
    return {z: tuple(rs) for z, rs in zones.items()}


def _shard_groups(layout: RankLayout, rank: int, members: tuple[int, ...], shard: int, mode: str,
                  timeout: timedelta) -> ShardSyncGroups:
    mine = rank in members
    if len(members) < 2:
        return ShardSyncGroups(shard, members, None, None, None, None, mode)
    zones = _zones_of(layout, members)
    if mode == SYNC_FLAT or len(zones) == 1:
        group = _new(members, timeout)
        return ShardSyncGroups(shard, members, group if mine else None, None, None, None, mode)
    zone_group, leader = None, None
    for zone_members in zones.values():
        g = _new(zone_members, timeout) if len(zone_members) > 1 else None
        if rank in zone_members:
            zone_group, leader = g, zone_members[0]
    leaders = tuple(zm[0] for zm in zones.values())
    leader_group = _new(leaders, timeout)
    return ShardSyncGroups(shard, members, None, zone_group, leader,
                           leader_group if rank in leaders else None, mode)


def stage_sync_modes(plan_modes: tuple[str | None, ...], sync_mode: str) -> tuple[str, ...]:
    """Each stage's gradient-sync mode: the plan's ``stages[s].grad_sync``, else the run's ``sync_mode``."""
    modes = tuple(m or sync_mode for m in plan_modes)
    for m in (*modes, sync_mode):
        if m not in (SYNC_FLAT, SYNC_HIERARCHICAL):
            raise ValueError(f"grad sync mode must be '{SYNC_FLAT}' or '{SYNC_HIERARCHICAL}', got {m!r}")
    return modes


def tied_sync_mode(modes: tuple[str, ...]) -> str:
    """The tied-embedding groups' mode from the stages' resolved modes (:func:`stage_sync_modes`), by the
    planner's one rule (:func:`planner.layout.tied_embedding_sync_mode`: the first stage's)."""
    mode = tied_embedding_sync_mode(modes)
    if mode is None:
        raise ValueError("a plan has at least one stage")
    return mode


def create_groups(layout: RankLayout, rank: int, sync_mode: str = SYNC_HIERARCHICAL,
                  timeout: timedelta = timedelta(seconds=120), tied_embeddings: bool = False,
                  plan_modes: tuple[str | None, ...] | None = None) -> RankGroups:
    """Create every group of the plan (collectively) and return this rank's. ``plan_modes``: the plan's
    per-stage ``grad_sync`` (None entries, or None: ``sync_mode``); the tied-embedding groups use
    :func:`tied_sync_mode` (the first stage's resolved mode)."""
    modes = stage_sync_modes(plan_modes or (None,) * layout.num_stages, sync_mode)
    me = layout.info(rank)
    world_ranks = tuple(range(layout.world_size))
    p2p = _new(world_ranks, timeout)
    world = _new(world_ranks, timeout)
    tp_group = single = None
    for s in range(layout.num_stages):
        for j in range(layout.dp_degree):
            ranks = layout.replica_ranks(s, j)
            g = _new(ranks, timeout)
            if me.stage == s and me.replica == j:
                tp_group = g
    for r in world_ranks:
        g = _new((r,), timeout)
        if r == rank:
            single = g
    grad_sync: list[ShardSyncGroups] = []
    for s in range(layout.num_stages):
        for f in range(layout.num_fine_shards(s)):
            sg = _shard_groups(layout, rank, layout.fine_shard_group(s, f), f, modes[s], timeout)
            if rank in sg.members:
                grad_sync.append(sg)
    embedding: list[ShardSyncGroups] = []
    if tied_embeddings and layout.num_stages > 1:
        for f in range(embedding_fine_shards(layout)):
            sg = _shard_groups(layout, rank, embedding_group(layout, f), f, tied_sync_mode(modes), timeout)
            if rank in sg.members:
                embedding.append(sg)
    logger.debug("rank %d: %d grad-sync shard groups (%s)", rank, len(grad_sync), modes)
    return RankGroups(rank=rank, tp=tp_group, single=single, p2p=p2p, world=world,
                      grad_sync=tuple(grad_sync), sync_mode=sync_mode, embedding=tuple(embedding),
                      stage_modes=modes)


# ---- tied embeddings: Megatron's embedding group, across replicas of different TP --------------------
def _embedding_ranks(layout: RankLayout) -> tuple[int, ...]:
    return layout.stage_ranks(0) + layout.stage_ranks(layout.num_stages - 1)


def embedding_fine_shards(layout: RankLayout) -> int:
    """``lcm`` of the TP degrees of the first and the last stage."""
    tps = {layout.info(r).tp for r in _embedding_ranks(layout)}
    return reduce(lambda a, b: a * b // math.gcd(a, b), tps, 1)


def embedding_shards_of(layout: RankLayout, rank: int) -> tuple[int, ...]:
    """Fine shards (of :func:`embedding_fine_shards`) of the tied weight that ``rank`` holds."""
    me = layout.info(rank)
    per_rank = embedding_fine_shards(layout) // me.tp
    return tuple(range(me.tp_rank * per_rank, (me.tp_rank + 1) * per_rank))


def embedding_group(layout: RankLayout, shard: int) -> tuple[int, ...]:
    """Ranks of the first and last stage (one per replica of each) holding fine shard ``shard`` of the
    tied weight: summing over them adds every replica's contribution from both ends exactly once."""
    return tuple(r for r in _embedding_ranks(layout) if shard in embedding_shards_of(layout, r))
