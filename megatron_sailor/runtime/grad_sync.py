"""Gradient reduction over the replicas of a stage, whose TP degrees may differ (fine-shard matching).

With ``L`` fine shards per stage (see :mod:`planner.layout`), a rank of a TP-``t`` replica holds
``k = L / t`` fine shards; for each of them it packs, into one flat buffer, slice ``i`` (of ``k``) of every
TP-sharded gradient along its partition dimension plus the full gradient of every replicated parameter
(norms, row-parallel biases, position embeddings). The buffer is SUM-reduced over the shard's group
(exactly one rank per replica, so each replica counts once even when its TP ranks hold identical copies
of a replicated parameter) and unpacked. Because every micro-batch loss is already divided by the token
count of the whole global batch, the sum is the gradient of the global-mean loss, whatever the
per-pipeline micro-batch counts.

Tied embeddings (several stages): the first stage's word embedding and the last stage's LM-head copy
are left out of the stage sync and summed instead over Megatron's embedding group, per fine shard of
``lcm(TP of the first and last stage)``: one rank per replica of both stages, so the sum is the whole
gradient of the shared weight and both copies take the same step.

Modes (per stage, carried by each group: the plan's ``stages[s].grad_sync`` or the run's ``--grad-sync``; the
tied-embedding groups use the first stage's, the rule the simulator prices them by): ``flat`` all-reduces over the whole group; ``hierarchical`` reduces
inside each zone to the zone's leader, all-reduces among zone leaders, then broadcasts inside each zone.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from megatron_sailor.runtime.groups import SYNC_FLAT, RankGroups, ShardSyncGroups, embedding_shards_of
from megatron_sailor.runtime.init_weights import is_sharded
from planner.layout import RankLayout

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardPlan:
    """How this rank packs one fine shard: its index among the rank's ``k`` local pieces."""

    groups: ShardSyncGroups
    piece: int
    pieces: int
    write_replicated: bool


class GradSync:
    """Reduces a set of gradients of one rank across replicas, over the given fine-shard groups.

    :meth:`for_stage`: every gradient of the stage except a tied embedding, over the stage's replicas.
    :meth:`for_tied_embedding`: the tied word embedding / LM head copy, over the first and last stages.
    """

    def __init__(self, params: list[torch.nn.Parameter], shard_groups: tuple[ShardSyncGroups, ...],
                 held: tuple[int, ...], layout: RankLayout, groups: RankGroups,
                 emulation: Any | None = None) -> None:
        self.params = params
        self.sharded = [p for p in self.params if is_sharded(p)]
        self.replicated = [p for p in self.params if not is_sharded(p)]
        by_shard = {sg.shard: sg for sg in shard_groups}
        self.shards = tuple(ShardPlan(by_shard[f], piece=n, pieces=len(held), write_replicated=(n == 0))
                            for n, f in enumerate(held) if f in by_shard)
        self.layout = layout
        self.rank = groups.rank
        self.emulation = emulation   # see megatron_sailor.runtime.emulation (demos only)

    @classmethod
    def for_stage(cls, model: torch.nn.Module, layout: RankLayout, groups: RankGroups,
                  emulation: Any | None = None) -> "GradSync":
        params = [p for p in model.parameters() if p.requires_grad and not getattr(p, "sailor_tied", False)]
        return cls(params, groups.grad_sync, layout.fine_shards_of(groups.rank), layout, groups, emulation)

    @classmethod
    def for_tied_embedding(cls, model: torch.nn.Module, layout: RankLayout, groups: RankGroups,
                           emulation: Any | None = None) -> "GradSync":
        params = [p for p in model.parameters() if getattr(p, "sailor_tied", False)]
        held = embedding_shards_of(layout, groups.rank) if params else ()
        return cls(params, groups.embedding, held, layout, groups, emulation)

    def _pieces(self, shard: ShardPlan, of_grads: bool = True) -> list[torch.Tensor]:
        def src(p: torch.nn.Parameter) -> torch.Tensor:
            return p.grad if of_grads else p.data
        out = [src(p).chunk(shard.pieces, dim=p.partition_dim)[shard.piece] for p in self.sharded]
        return out + [src(p) for p in self.replicated]

    def buffer_numel(self, shard: ShardPlan) -> int:
        return sum(t.numel() for t in self._pieces(shard, of_grads=False))

    def _emulate(self, buf: torch.Tensor, members: tuple[int, ...]) -> None:
        """Delay this rank's ring share (2 (n-1)/n of the buffer) as if sent to its ring successor."""
        if self.emulation is None or len(members) < 2:
            return
        succ = members[(members.index(self.rank) + 1) % len(members)]
        nbytes = int(2 * (len(members) - 1) / len(members) * buf.numel() * buf.element_size())
        self.emulation.message(nbytes, self.layout.info(succ).zone != self.layout.info(self.rank).zone)

    def _reduce(self, buf: torch.Tensor, sg: ShardSyncGroups) -> None:
        if len(sg.members) < 2:
            return
        if sg.flat is not None:
            self._emulate(buf, sg.members)
        elif sg.leaders is not None:
            leaders = tuple(r for r in sg.members if r == self._leader_of(r, sg))
            self._emulate(buf, leaders)
        if sg.mode == SYNC_FLAT or sg.flat is not None:
            dist.all_reduce(buf, group=sg.flat)
            return
        if sg.zone is not None:
            dist.reduce(buf, dst=sg.zone_leader, group=sg.zone)
        if sg.leaders is not None:
            dist.all_reduce(buf, group=sg.leaders)
        if sg.zone is not None:
            dist.broadcast(buf, src=sg.zone_leader, group=sg.zone)

    def _leader_of(self, rank: int, sg: ShardSyncGroups) -> int:
        zone = self.layout.info(rank).zone
        return next(r for r in sg.members if self.layout.info(r).zone == zone)

    def sync(self) -> None:
        """Sum gradients over the stage's replicas (in place)."""
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        # Pack every buffer before unpacking any: a rank holding several fine shards must send its own
        # (not an already reduced) copy of the replicated gradients to every shard group.
        packed = [(shard, torch.cat([t.reshape(-1) for t in self._pieces(shard)]))
                  for shard in self.shards if len(shard.groups.members) > 1]
        for shard, buf in packed:
            self._reduce(buf, shard.groups)
        for shard, buf in packed:
            pieces = self._pieces(shard)
            if not shard.write_replicated:
                pieces = pieces[:len(self.sharded)]
            offset = 0
            for t in pieces:
                t.copy_(buf[offset:offset + t.numel()].view_as(t))
                offset += t.numel()

    def cross_zone_bytes(self, bytes_per_elem: int = 4) -> int:
        """Bytes crossing zones per iteration for the groups this rank leads (ring all-reduce model).

        Flat ring over n members in rank order: each member sends ``2 (n-1)/n * B`` to its ring successor;
        count the successors in another zone. Hierarchical: only the ring over z zone leaders crosses
        zones: ``2 (z-1) * B``. Sum this over all ranks for the job total.
        """
        total = 0
        for shard in self.shards:
            members = shard.groups.members
            if len(members) < 2 or members[0] != self.rank:
                continue
            size = self.buffer_numel(shard) * bytes_per_elem
            total += ring_cross_zone_bytes([self.layout.info(r).zone for r in members], size, shard.groups.mode)
        return total


def ring_cross_zone_bytes(zones: list[str], buffer_bytes: int, mode: str) -> int:
    """Cross-zone bytes of one all-reduce of ``buffer_bytes`` over members in ``zones`` (ring order)."""
    n = len(zones)
    distinct = list(dict.fromkeys(zones))
    if n < 2 or len(distinct) < 2:
        return 0
    if mode == SYNC_FLAT:
        crossings = sum(zones[i] != zones[(i + 1) % n] for i in range(n))
        return int(crossings * 2 * (n - 1) / n * buffer_bytes)
    return 2 * (len(distinct) - 1) * buffer_bytes
