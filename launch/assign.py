"""Place every plan slot (stage, replica, TP rank) on (node, local GPU). Pure.

Rules: a replica runs on nodes of its GPU type in its zone; all TP ranks of a replica share one node.
Replicas are packed per pool ``(gpu_type, zone)``: first-fit in plan rank order (keeps each node's plan
ranks contiguous whenever it can), else first-fit decreasing by TP (optimal when TP degrees and node sizes
are powers of two). A node's local ranks (= local GPU indices) follow plan rank order; nodes are numbered
(``node_rank``) by their smallest plan rank. Nodes that receive nothing are left out.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from planner.errors import InputError
from planner.plan import Plan
from launch.inventory import Inventory, Node
from planner.layout import RankInfo, plan_slots

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeAssignment:
    """The slots one node runs: ``slots[i]`` runs as local rank ``i`` on local GPU ``i``."""

    node: Node
    node_rank: int
    slots: tuple[RankInfo, ...]

    @property
    def nproc(self) -> int:
        return len(self.slots)

    @property
    def plan_ranks(self) -> tuple[int, ...]:
        return tuple(s.rank for s in self.slots)

    @property
    def max_tp(self) -> int:
        return max(s.tp for s in self.slots)


@dataclass(frozen=True)
class Assignment:
    """Where every plan slot runs. ``nodes`` is in ``node_rank`` order."""

    world_size: int
    nodes: tuple[NodeAssignment, ...]

    def placement(self) -> dict[int, tuple[str, int]]:
        """Plan rank -> (node name, local GPU)."""
        return {slot.rank: (na.node.name, i) for na in self.nodes for i, slot in enumerate(na.slots)}

    @property
    def is_identity(self) -> bool:
        """True when node ranks in order cover plan ranks 0..W-1 contiguously (torchrun's static order)."""
        flat = [r for na in self.nodes for r in na.plan_ranks]
        return flat == list(range(self.world_size))


_Replica = tuple[int, int, tuple[RankInfo, ...]]   # (first plan rank, tp, slots)


def _replicas_by_pool(plan: Plan) -> dict[tuple[str, str], list[_Replica]]:
    pools: dict[tuple[str, str], list[_Replica]] = {}
    current: list[RankInfo] = []
    for slot in plan_slots(plan):
        current.append(slot)
        if slot.tp_rank == slot.tp - 1:
            pools.setdefault((slot.gpu_type, slot.zone), []).append((current[0].rank, slot.tp, tuple(current)))
            current = []
    return pools


def _first_fit(replicas: list[_Replica], capacities: list[int]) -> list[int] | None:
    """Node index per replica (same order as ``replicas``), or None when one does not fit."""
    free = list(capacities)
    chosen: list[int] = []
    for _, tp, _ in replicas:
        idx = next((i for i, f in enumerate(free) if f >= tp), None)
        if idx is None:
            return None
        free[idx] -= tp
        chosen.append(idx)
    return chosen


def _check_pool(pool: tuple[str, str], replicas: list[_Replica], nodes: tuple[Node, ...]) -> None:
    gpu_type, zone = pool
    need = sum(tp for _, tp, _ in replicas)
    where = ", ".join(f"stages[{s[0].stage}].replicas[{s[0].replica}]" for _, _, s in replicas[:3])
    where += ", ..." if len(replicas) > 3 else ""
    if not nodes:
        raise InputError(f"the plan needs {need} {gpu_type} GPU(s) in zone {zone} ({where}) but the inventory "
                         f"has no {gpu_type} node in zone {zone}")
    have = sum(n.gpus_per_node for n in nodes)
    if have < need:
        raise InputError(f"the plan needs {need} {gpu_type} GPU(s) in zone {zone} but the inventory has only "
                         f"{have} ({', '.join(n.name for n in nodes)})")
    largest = max(n.gpus_per_node for n in nodes)
    for _, tp, slots in replicas:
        if tp > largest:
            raise InputError(f"stages[{slots[0].stage}].replicas[{slots[0].replica}] has tp={tp} but the largest "
                             f"{gpu_type} node in zone {zone} has {largest} GPU(s): TP must stay inside one node")


def _pack_pool(pool: tuple[str, str], replicas: list[_Replica], nodes: tuple[Node, ...]) -> dict[str, list[_Replica]]:
    _check_pool(pool, replicas, nodes)
    capacities = [n.gpus_per_node for n in nodes]
    order = list(replicas)
    chosen = _first_fit(order, capacities)
    if chosen is None:
        order = sorted(replicas, key=lambda r: (-r[1], r[0]))
        chosen = _first_fit(order, capacities)
    if chosen is None:
        raise InputError(f"cannot pack {pool[0]} replicas with tp {[r[1] for r in replicas]} in zone {pool[1]} "
                         f"into nodes of {capacities} GPUs (TP must stay inside one node)")
    out: dict[str, list[_Replica]] = {}
    for rep, idx in zip(order, chosen):
        out.setdefault(nodes[idx].name, []).append(rep)
    return out


def assign(plan: Plan, inventory: Inventory) -> Assignment:
    """Place every slot of ``plan`` on ``inventory``; :class:`InputError` names what is missing."""
    per_node: dict[str, list[RankInfo]] = {}
    for pool, replicas in sorted(_replicas_by_pool(plan).items()):
        packed = _pack_pool(pool, replicas, inventory.pool_nodes(*pool))
        for name, reps in packed.items():
            per_node.setdefault(name, []).extend(s for _, _, slots in reps for s in slots)
    used = sorted(per_node, key=lambda name: min(s.rank for s in per_node[name]))
    nodes = tuple(NodeAssignment(node=inventory.by_name(name), node_rank=i,
                                 slots=tuple(sorted(per_node[name], key=lambda s: s.rank)))
                  for i, name in enumerate(used))
    result = Assignment(world_size=plan.world_size, nodes=nodes)
    logger.debug("assigned %d slots to %d nodes (contiguous: %s)", plan.world_size, len(nodes),
                 result.is_identity)
    return result
