"""Reduce-scatter and all-gather of one fine-shard buffer over the replicas of a stage (distributed optimizer).

Contract: :class:`ShardComm` is built from the :class:`~megatron_sailor.runtime.groups.ShardSyncGroups` that
gradient sync already uses (one rank per replica holding the same fine shard). The buffer, padded to
``n * c`` elements for ``n`` members, is cut into ``n`` contiguous segments of ``c``; member ``order[i]``
owns segment ``i``. :meth:`reduce_scatter` leaves on every member the SUM over all members of its own
segment; :meth:`all_gather` puts every member's segment into every member's full buffer.

``flat`` (or a group inside one zone): ``reduce_scatter_tensor`` / ``all_gather_into_tensor`` over all
members (gloo in torch 2.13 runs both on CPU), ``order`` = ascending ranks. A ring moves
``(n-1)/n * B`` per member each way, i.e. ``2 (n-1)/n * B`` like a ring all-reduce.

``hierarchical`` with members in ``z >= 2`` zones: ``order`` lists the members zone by zone (zones in order
of their first member), so the segments owned inside one zone are one contiguous *zone chunk*.
Reduce-scatter: (1) reduce the buffer to the zone leader inside each zone; (2) for every zone, the zone
leaders reduce that zone's chunk to its leader (``z`` reduces over the leader group; together they move
``(z-1) * B`` across zones, each chunk entering its zone once from each other zone); (3) the leader
scatters the chunk to the zone's members. All-gather reverses it: (4) gather the zone's segments to its
leader, (5) every leader broadcasts its zone chunk to the other leaders (``(z-1) * B`` across zones),
(6) the leader broadcasts the full buffer inside its zone. Cross-zone volume is the lower bound
``(z-1) * B`` each way (the current hierarchical all-reduce moves the same ``2 (z-1) * B``); inside a zone
the leader scheme moves ``B`` per member each way instead of a ring's ``(m-1)/m * B``: zones of the plans
have uneven sizes (2 + 1 ranks), which rules out one reduce-scatter per zone on a common segment grid,
and in-zone links are the fast ones. The all-gather moves parameters in the model's dtype (2 bytes in
bf16 / fp16), the reduce-scatter fp32 gradients.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist

from megatron_sailor.runtime.groups import SYNC_FLAT, ShardSyncGroups
from planner.layout import RankLayout


def zones_in_order(layout: RankLayout, members: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Members grouped by zone, zones in order of their first member (as groups.create_groups makes them)."""
    zones: dict[str, list[int]] = {}
    for r in members:
        zones.setdefault(layout.info(r).zone, []).append(r)
    return [tuple(rs) for rs in zones.values()]


class ShardComm:
    """Reduce-scatter / all-gather of one fine shard's buffer for one member rank (see the module docstring)."""

    def __init__(self, sg: ShardSyncGroups, mode: str, layout: RankLayout, rank: int,
                 emulation: Any | None = None) -> None:
        self.sg, self.rank, self.layout, self.emulation = sg, rank, layout, emulation
        self.n = len(sg.members)
        self.hierarchical = self.n > 1 and mode != SYNC_FLAT and sg.flat is None
        self.zones = zones_in_order(layout, sg.members) if self.hierarchical else [sg.members]
        self.order = tuple(r for zone in self.zones for r in zone)
        self.index = self.order.index(rank)

    def chunk_numel(self, buffer_numel: int) -> int:
        return max(1, math.ceil(buffer_numel / self.n))

    def _zone_span(self, zone: tuple[int, ...], c: int) -> tuple[int, int]:
        a = self.order.index(zone[0]) * c
        return a, a + len(zone) * c

    def _my_zone(self) -> tuple[int, ...]:
        return next(z for z in self.zones if self.rank in z)

    def _emulate(self, nbytes: float, cross: bool) -> None:
        if self.emulation is not None and nbytes > 0:
            self.emulation.message(int(nbytes), cross)

    def reduce_scatter(self, buf: torch.Tensor) -> torch.Tensor:
        """``buf`` (``n * c`` elements, consumed) -> this member's summed segment (``c`` elements)."""
        c = buf.numel() // self.n
        if self.n == 1:
            return buf
        out = torch.empty(c, dtype=buf.dtype, device=buf.device)
        if not self.hierarchical:
            succ = self.order[(self.index + 1) % self.n]
            self._emulate((self.n - 1) / self.n * buf.numel() * buf.element_size(),
                          self.layout.info(succ).zone != self.layout.info(self.rank).zone)
            dist.reduce_scatter_tensor(out, buf, group=self.sg.flat)
            return out
        zone, sg = self._my_zone(), self.sg
        if sg.zone is not None:
            dist.reduce(buf, dst=sg.zone_leader, group=sg.zone)
        if sg.leaders is not None:
            for z in self.zones:
                a, b = self._zone_span(z, c)
                part = buf[a:b].clone()
                if self.rank != z[0]:
                    self._emulate(part.numel() * part.element_size(), True)
                dist.reduce(part, dst=z[0], group=sg.leaders)
                if self.rank == z[0]:
                    buf[a:b].copy_(part)
        a, b = self._zone_span(zone, c)
        if sg.zone is None:
            return buf[a:b].clone()
        parts = list(buf[a:b].chunk(len(zone))) if self.rank == zone[0] else None
        dist.scatter(out, parts, src=zone[0], group=sg.zone)
        return out

    def all_gather(self, segment: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Every member's segment, concatenated in ``order`` (``n * c`` elements), written into ``out`` when
        given (``n * c`` elements; ``segment`` may be this member's own segment of it, as Megatron's in-place
        parameter all-gather). With one member the segment itself comes back."""
        c = segment.numel()
        if self.n == 1:
            return segment
        if out is not None and (out.numel() != self.n * c or out.dtype != segment.dtype):
            raise ValueError(f"all_gather: out has {out.numel()} {out.dtype} elements, need {self.n * c} "
                             f"{segment.dtype}")
        full = out if out is not None else torch.empty(self.n * c, dtype=segment.dtype, device=segment.device)
        if not self.hierarchical:
            succ = self.order[(self.index + 1) % self.n]
            self._emulate((self.n - 1) / self.n * full.numel() * full.element_size(),
                          self.layout.info(succ).zone != self.layout.info(self.rank).zone)
            dist.all_gather_into_tensor(full, segment.contiguous(), group=self.sg.flat)
            return full
        zone, sg = self._my_zone(), self.sg
        a, b = self._zone_span(zone, c)
        if sg.zone is None:
            full[a:b].copy_(segment)
        else:
            parts = [torch.empty_like(segment) for _ in zone] if self.rank == zone[0] else None
            dist.gather(segment.contiguous(), parts, dst=zone[0], group=sg.zone)
            if parts is not None:
                full[a:b].copy_(torch.cat(parts))
        if sg.leaders is not None:
            for z in self.zones:
                za, zb = self._zone_span(z, c)
                part = full[za:zb].clone()
                if self.rank == z[0]:
                    self._emulate(part.numel() * part.element_size() * (len(self.zones) - 1), True)
                dist.broadcast(part, src=z[0], group=sg.leaders)
                full[za:zb].copy_(part)
        if sg.zone is not None:
            dist.broadcast(full, src=zone[0], group=sg.zone)
        return full

    def cross_zone_bytes(self, buffer_numel: int, grad_bytes: int, param_bytes: int) -> int:
        """Bytes crossing zones per step for this shard's whole group (count it on ``order[0]`` only).

        Flat ring: every ring edge between zones carries ``(n-1)/n`` of the padded buffer in each of the
        two collectives. Hierarchical: ``(z-1) * B`` of gradients and ``(z-1) * B`` of parameters."""
        padded = self.chunk_numel(buffer_numel) * self.n
        zones = [self.layout.info(r).zone for r in self.order]
        if self.n < 2 or len(set(zones)) < 2:
            return 0
        if not self.hierarchical:
            crossings = sum(zones[i] != zones[(i + 1) % self.n] for i in range(self.n))
            return int(crossings * (self.n - 1) / self.n * padded * (grad_bytes + param_bytes))
        return (len(self.zones) - 1) * padded * (grad_bytes + param_bytes)
