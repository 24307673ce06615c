"""Node inventories that change: which machines sailor-elastic may run the job on now.

Every source's ``poll(elapsed_s, iteration)`` returns the nodes present (a tuple of
:class:`launch.inventory.Node`, possibly empty); the availability the planner sees is the GPUs per pool
(``{"TYPE@ZONE": n}``) of those nodes. Sources:

* :class:`FileNodes`: an inventory file (YAML / JSON, docs/LAUNCH.md) the cluster manager rewrites;
* :class:`CommandNodes`: a command printing such an inventory (``{"nodes": []}`` = none);
* :class:`TraceOnNodes`: an availability source (a Sailor trace, a count file / command) mapped onto an
  inventory (re-read from its file at every poll): per pool, nodes in file order until the count is
  reached; the last node taken may be given fewer GPUs than it has (``gpus_per_node`` lowered to the
  remainder);
* :class:`LocalNodes`: an availability source on this machine only: one loopback node per pool.

A bad inventory raises :class:`planner.errors.InputError` naming the file or command.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol


from planner.errors import InputError
from planner.schema.base import parse_yaml

from launch.elastic.sources import Availability, command_output
from launch.inventory import Inventory, Node, inventory_from_data, load_inventory

Nodes = tuple[Node, ...]


class NodeSource(Protocol):
    def poll(self, elapsed_s: float, iteration: int) -> Nodes: ...

    def describe(self) -> str: ...


def availability_of(nodes: Nodes) -> Availability:
    """GPUs per pool ``{"TYPE@ZONE": n}`` of ``nodes``."""
    av: Availability = {}
    for n in nodes:
        key = f"{n.gpu_type}@{n.zone}"
        av[key] = av.get(key, 0) + n.gpus_per_node
    return av


def describe_nodes(nodes: Nodes) -> str:
    return ", ".join(f"{n.name}:{n.gpus_per_node}" for n in nodes) or "no nodes"


def _inventory_data(data: Any, where: str) -> Nodes:
    if isinstance(data, dict) and data.get("nodes") == []:
        return ()
    try:
        return inventory_from_data(data).nodes
    except InputError as exc:
        raise exc.with_source(where) from None


@dataclass(frozen=True)
class FileNodes:
    """An inventory file the cluster manager rewrites (an empty ``nodes: []`` means no node)."""

    path: str

    def poll(self, elapsed_s: float, iteration: int) -> Nodes:
        try:
            return load_inventory(self.path).nodes
        except InputError as exc:
            if "lists no nodes" in str(exc) or "got []" in str(exc):
                return ()
            raise

    def describe(self) -> str:
        return f"inventory file {self.path}"


@dataclass(frozen=True)
class CommandNodes:
    """A shell command printing an inventory (YAML or JSON)."""

    command: str
    timeout_s: float = 10.0

    def poll(self, elapsed_s: float, iteration: int) -> Nodes:
        # the inventory it prints is untrusted like an inventory file: the strict YAML reader (no aliases)
        data = parse_yaml(command_output(self.command, self.timeout_s), self.command)
        return _inventory_data(data, self.command)

    def describe(self) -> str:
        return f"inventory command {self.command!r}"


def nodes_for(av: Availability, inventory: Inventory) -> Nodes:
    """Per pool, the inventory's nodes in file order until ``av[pool]`` GPUs are covered (see module doc)."""
    left = dict(av)
    unknown = sorted(k for k, v in av.items() if v > 0 and not inventory.pool_nodes(*k.partition("@")[::2]))
    if unknown:
        raise InputError(f"availability names pool(s) {unknown} that no inventory node has")
    out: list[Node] = []
    for node in inventory.nodes:
        key = f"{node.gpu_type}@{node.zone}"
        want = left.get(key, 0)
        if want <= 0:
            continue
        take = min(want, node.gpus_per_node)
        out.append(node if take == node.gpus_per_node else dataclasses.replace(node, gpus_per_node=take))
        left[key] = want - take
    return tuple(out)


@dataclass(frozen=True)
class TraceOnNodes:
    """An availability source mapped onto an inventory (:func:`nodes_for`); given as a path, the inventory
    file is read at every poll (the cluster manager may replace nodes while the trace runs)."""

    source: Any                       # launch.elastic.sources.Source
    inventory: Inventory | str

    def _inventory(self) -> Inventory:
        return load_inventory(self.inventory) if isinstance(self.inventory, str) else self.inventory

    def poll(self, elapsed_s: float, iteration: int) -> Nodes:
        return nodes_for(self.source.poll(elapsed_s, iteration), self._inventory())

    def describe(self) -> str:
        where = f"inventory file {self.inventory}" if isinstance(self.inventory, str) else \
            describe_nodes(self.inventory.nodes)
        return f"{self.source.describe()} on {where}"

    @property
    def points(self) -> Any:
        return getattr(self.source, "points", ())


@dataclass(frozen=True)
class LocalNodes:
    """An availability source, all on this machine: one loopback node per pool (single-node jobs)."""

    source: Any
    host: str = "127.0.0.1"

    def poll(self, elapsed_s: float, iteration: int) -> Nodes:
        av = self.source.poll(elapsed_s, iteration)
        out = []
        for k, v in sorted(av.items()):
            gpu_type, _, zone = k.partition("@")
            if v > 0:
                out.append(Node(host=self.host, gpu_type=gpu_type, zone=zone or "local", gpus_per_node=v,
                                name=f"local.{gpu_type}.{zone or 'local'}"))
        return tuple(out)

    def describe(self) -> str:
        return f"{self.source.describe()} (this machine)"

    @property
    def points(self) -> Any:
        return getattr(self.source, "points", ())
