"""Clusters: pools of GPUs of one type in one zone (zones grouped in regions), and availability traces.

Accepted forms:
- ``--gpus`` string: ``A100-40@us-central1-a=128,V100-16@us-central1-a=384`` (GPUs per node from the catalog);
- a YAML or JSON file::

      pools:
        - {gpu_type: A100-40, zone: us-central1-a, count: 32, gpus_per_node: 4}
        - {gpu_type: V100-16, zone: us-west1-b, count: 16}

- a Sailor availability trace CSV (columns ``<GPU>_<zone>``, one row per step).
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from planner.errors import InputError, quote
from planner.hardware import GPUCatalog
from planner.plan import region_of
from planner.textio import read_text
from planner.schema.parse import MAX_GPUS


@dataclass(frozen=True)
class Pool:
    """``count`` GPUs of ``gpu_type`` in ``zone``, ``gpus_per_node`` to a node."""

    gpu_type: str
    zone: str
    count: int
    gpus_per_node: int

    def __post_init__(self) -> None:
        for name in ("count", "gpus_per_node"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "count" else 1):
                raise InputError(f"pool {self.gpu_type}@{self.zone}: field '{name}' must be a "
                                 f"{'non-negative' if name == 'count' else 'positive'} integer, got {v!r}")

    @property
    def region(self) -> str:
        return region_of(self.zone)


@dataclass(frozen=True)
class ClusterSpec:
    """The GPU pools a plan may use (one per GPU type and zone)."""

    pools: tuple[Pool, ...]

    def __post_init__(self) -> None:
        seen: set[tuple[str, str]] = set()
        for p in self.pools:
            if (p.gpu_type, p.zone) in seen:
                raise InputError(f"pool {p.gpu_type}@{p.zone} is listed twice")
            seen.add((p.gpu_type, p.zone))

    @property
    def total_gpus(self) -> int:
        return sum(p.count for p in self.pools)

    def count(self, gpu_type: str, zone: str) -> int:
        return sum(p.count for p in self.pools if p.gpu_type == gpu_type and p.zone == zone)

    def gpus_per_node(self, gpu_type: str) -> int:
        for p in self.pools:
            if p.gpu_type == gpu_type:
                return p.gpus_per_node
        raise InputError(f"GPU type '{gpu_type}' is not in the cluster")

    def gpu_types(self) -> list[str]:
        return sorted({p.gpu_type for p in self.pools})

    def zones(self) -> list[str]:
        return sorted({p.zone for p in self.pools})

    def nonempty(self) -> "ClusterSpec":
        return ClusterSpec(tuple(p for p in self.pools if p.count > 0))

    def describe(self) -> str:
        return ", ".join(f"{p.count}x {p.gpu_type}@{p.zone}" for p in self.pools)


def _pool(gpu_type: str, zone: str, count: int, per_node: int | None, catalog: GPUCatalog) -> Pool:
    if per_node is None:
        per_node = catalog.get(gpu_type).gpus_per_node
    return Pool(gpu_type, zone, count, per_node)


def parse_gpus(text: str, catalog: GPUCatalog) -> ClusterSpec:
    """Parse ``TYPE@ZONE=N[,TYPE@ZONE=N...]`` (``TYPE=N`` alone means zone ``local``)."""
    pools = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        head, eq, num = item.partition("=")
        gpu_type, _, zone = head.partition("@")
        count = int(num.strip()) if re.fullmatch(r"\s*[0-9]{1,30}\s*", num) else -1
        if not eq or not gpu_type or count < 0:
            raise InputError(f"--gpus: cannot parse {quote(item)}: expected TYPE@ZONE=N, e.g. A100-40@us-central1-a=32")
        if count > MAX_GPUS:
            raise InputError(f"--gpus: {quote(item)} asks for {count} GPUs; at most {MAX_GPUS} per pool")
        catalog.get(gpu_type)
        pools.append(_pool(gpu_type, zone or "local", count, None, catalog))
    if not pools:
        raise InputError("--gpus: no GPUs given")
    if sum(p.count for p in pools) > MAX_GPUS:
        raise InputError(f"--gpus: {sum(p.count for p in pools)} GPUs in all; at most {MAX_GPUS}")
    return ClusterSpec(tuple(pools))


def cluster_from_dict(data: Any, catalog: GPUCatalog) -> ClusterSpec:
    from planner.schema.base import validate
    from planner.schema.files import ClusterFile
    if isinstance(data, Mapping) and isinstance(data.get("pools"), list):
        validate(ClusterFile, data)
    if not isinstance(data, Mapping) or not isinstance(data.get("pools"), list):
        raise InputError("a cluster file needs a list 'pools' of {gpu_type, zone, count[, gpus_per_node]}")
    pools = []
    for i, p in enumerate(data["pools"]):
        if not isinstance(p, Mapping) or set(p) - {"gpu_type", "zone", "count", "gpus_per_node"} or \
                not {"gpu_type", "zone", "count"} <= set(p):
            raise InputError(f"pools[{i}] must have gpu_type, zone, count and optionally gpus_per_node, got {quote(p)}")
        catalog.get(p["gpu_type"])
        pools.append(_pool(p["gpu_type"], str(p["zone"]), p["count"], p.get("gpus_per_node"), catalog))
    return ClusterSpec(tuple(pools))


def load_cluster(path: str | Path, catalog: GPUCatalog) -> ClusterSpec:
    from planner.schema.parse import parse_by_suffix
    data = parse_by_suffix(read_text(path), str(path))
    try:
        return cluster_from_dict(data, catalog)
    except InputError as exc:
        raise exc.with_source(str(path)) from None


def load_trace_csv(path: str | Path, catalog: GPUCatalog) -> list[ClusterSpec]:
    """One cluster per row of a Sailor availability CSV (columns ``<GPU>_<zone>``)."""
    rows: list[ClusterSpec] = []
    text = read_text(path)
    reader = csv.DictReader(text.splitlines())
    cols = [c for c in (reader.fieldnames or []) if c and c != "Timestamp" and "_" in c]
    if not cols:
        raise InputError("no '<GPU>_<zone>' columns", source=str(path))
    for n, row in enumerate(reader):
        pools = []
        for c in cols:
            gpu_type, _, zone = c.partition("_")
            cell = (row[c] or "").strip() if isinstance(row[c], str) else row[c]
            if not isinstance(cell, str) or not re.fullmatch(r"[0-9]{1,7}(\.0*)?", cell) or \
                    int(float(cell)) > MAX_GPUS:
                raise InputError(f"row {n}, column {quote(c)}: must be a whole number of GPUs in [0, {MAX_GPUS}], "
                                 f"got {quote(cell)}", source=str(path)) from None
            count = int(float(cell))
            try:
                pools.append(_pool(gpu_type, zone, count, None, catalog))
            except InputError as exc:
                raise exc.with_source(str(path)) from None
        rows.append(ClusterSpec(tuple(pools)))
    return rows

