"""Node inventory: the machines a plan may run on (YAML or JSON).

::

    nodes:
      - host: gpu-a1.example.org     # address used for ssh / srun / the rendezvous endpoint
        name: a1                     # optional unique id (default: host)
        gpu_type: A100-40
        zone: us-central1-a
        gpus_per_node: 4
        cpus_per_node: 48            # optional: OMP_NUM_THREADS = cpus_per_node // processes on the node
        emulate: {slowdown: 2.0, link_delay_s: 0.005}   # optional: emulated GPU type (demos, tests)

A bare top-level list of nodes is accepted too. Names must be unique. Every string ends up in generated
shell (ssh, srun, comments), so ``host`` must be a DNS name (labels of letters, digits and inner ``-``,
joined by dots, 253 characters at most) or an IP address, and ``name``, ``gpu_type`` and ``zone`` may use
only letters, digits and ``. _ : + @ -`` (100 characters at most, starting with a letter or digit). Several nodes may share one host
address only when it is a loopback address (``localhost``, ``127.x.y.z``, ``::1``): that emulates a
multi-node cluster on one machine. Unknown keys are rejected; errors name the file, field and value.
"""
from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping


from planner.errors import InputError, check_keys, quote
from planner.textio import read_text
_NODE_KEYS = {"host", "name", "gpu_type", "zone", "gpus_per_node", "cpus_per_node", "emulate"}
_NODE_REQUIRED = {"host", "gpu_type", "zone", "gpus_per_node"}
_EMULATE_KEYS = {"slowdown", "link_delay_s"}


_DNS_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+@-]{0,99}$")


def is_valid_host(host: str) -> bool:
    """A DNS host name (RFC 1123 labels) or an IPv4 / IPv6 address; nothing a shell would interpret."""
    if not isinstance(host, str) or not 0 < len(host) <= 253:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        pass
    return all(_DNS_LABEL.match(label) for label in host.removesuffix(".").split("."))


def check_name(value: object, field_name: str) -> str:
    """``value`` if it is a safe identifier (letters, digits, ``. _ : + @ -``), else InputError."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise InputError(f"field '{field_name}' must be 1-100 letters, digits or '._:+@-' (starting with a letter "
                         f"or digit), got {quote(value)}")
    return value


def is_loopback(host: str) -> bool:
    """True for ``localhost``, ``127.x.y.z`` and ``::1``."""
    return host in ("localhost", "::1") or host.startswith("127.")


@dataclass(frozen=True)
class NodeEmulation:
    """Emulate a slower GPU on this node: compute takes ``slowdown`` x longer, each p2p/collective message
    gets ``link_delay_s`` extra seconds. The runtime reads them from ``SAILOR_EMULATE_*`` env vars."""

    slowdown: float = 1.0
    link_delay_s: float = 0.0

    def __post_init__(self) -> None:
        for name, minimum in (("slowdown", 1.0), ("link_delay_s", 0.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"field 'emulate.{name}' must be a number, got {value!r}")
            if value < minimum:
                raise InputError(f"field 'emulate.{name}' must be >= {minimum}, got {value}")

    def env(self) -> dict[str, str]:
        return {"SAILOR_EMULATE_SLOWDOWN": repr(float(self.slowdown)),
                "SAILOR_EMULATE_LINK_DELAY_S": repr(float(self.link_delay_s))}


@dataclass(frozen=True)
class Node:
    """One machine: ``gpus_per_node`` GPUs of one type in one zone."""

    host: str
    gpu_type: str
    zone: str
    gpus_per_node: int
    name: str = ""
    cpus_per_node: int | None = None
    emulate: NodeEmulation | None = None

    def __post_init__(self) -> None:
        if not is_valid_host(self.host):
            raise InputError(f"field 'host' must be a DNS host name (letters, digits, inner '-', dots) or an IP "
                             f"address, got {quote(self.host)}")
        check_name(self.gpu_type, "gpu_type")
        check_name(self.zone, "zone")
        _require_positive_int(self.gpus_per_node, "gpus_per_node")
        if self.cpus_per_node is not None:
            _require_positive_int(self.cpus_per_node, "cpus_per_node")
        if not self.name:
            object.__setattr__(self, "name", self.host)
        check_name(self.name, "name")

    @property
    def pool(self) -> tuple[str, str]:
        """``(gpu_type, zone)``: nodes of one pool are interchangeable for the plan."""
        return self.gpu_type, self.zone


def _require_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"field '{name}' must be an integer >= 1, got {value!r}")
    return value


@dataclass(frozen=True)
class Inventory:
    """The nodes, in file order (file order breaks ties when placing replicas)."""

    nodes: tuple[Node, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, tuple) or not self.nodes:
            raise InputError("the inventory lists no nodes")
        seen_names: set[str] = set()
        seen_hosts: dict[str, str] = {}
        for i, node in enumerate(self.nodes):
            if node.host in seen_hosts and not is_loopback(node.host):
                raise InputError(f"nodes[{i}]: duplicate host {node.host!r} (also node "
                                 f"{seen_hosts[node.host]!r}); only loopback hosts may be listed twice")
            seen_hosts.setdefault(node.host, node.name)
            if node.name in seen_names:
                raise InputError(f"nodes[{i}]: duplicate node name {node.name!r} (give each node a distinct 'name')")
            seen_names.add(node.name)

    def pool_nodes(self, gpu_type: str, zone: str) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.pool == (gpu_type, zone))

    def by_name(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)


def node_from_dict(data: Any, index: int) -> Node:
    where = f"nodes[{index}]"
    check_keys(data, _NODE_KEYS, _NODE_REQUIRED, where)
    try:
        emulate = _emulation_from_dict(data.get("emulate"))
        return Node(host=data["host"], gpu_type=data["gpu_type"], zone=data["zone"],
                    gpus_per_node=data["gpus_per_node"], name=data.get("name") or "",
                    cpus_per_node=data.get("cpus_per_node"), emulate=emulate)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def _emulation_from_dict(data: Any) -> NodeEmulation | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise InputError(f"field 'emulate' must be a mapping {{slowdown, link_delay_s}}, got {data!r}")
    unknown = sorted(set(data) - _EMULATE_KEYS)
    if unknown:
        raise InputError(f"field 'emulate' has unknown key(s) {unknown}; allowed: {sorted(_EMULATE_KEYS)}")
    return NodeEmulation(**dict(data))


def inventory_from_data(data: Any) -> Inventory:
    """Build an :class:`Inventory` from parsed YAML/JSON (``{"nodes": [...]}`` or a bare list)."""
    from planner.schema.base import validate
    from planner.schema.files import InventoryFile
    if isinstance(data, Mapping):
        unknown = sorted(map(str, set(data) - {"nodes"}))
        if unknown:
            raise InputError(f"inventory has unknown top-level key(s) {quote(unknown)}; allowed: ['nodes']")
        data = data.get("nodes")
    if not isinstance(data, list) or not data:
        raise InputError(f"inventory must list nodes (a non-empty list under 'nodes'), got {quote(data)}")
    validate(InventoryFile, {"nodes": data})
    return Inventory(nodes=tuple(node_from_dict(d, i) for i, d in enumerate(data)))


def load_inventory(path: str | Path) -> Inventory:
    """Read a YAML (``.yaml``/``.yml``) or JSON inventory file; errors name the file."""
    from planner.schema.base import parse_json, parse_yaml
    text = read_text(path)
    data = parse_json(text, str(path)) if str(path).endswith(".json") else parse_yaml(text, str(path))
    try:
        return inventory_from_data(data)
    except InputError as exc:
        raise exc.with_source(str(path)) from None
