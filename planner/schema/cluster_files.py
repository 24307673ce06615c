"""Schemas of cluster files (:class:`ClusterFile`) and node inventories (:class:`InventoryFile`).

Part of :mod:`planner.schema.files` (its contract applies); one module per group of file kinds, so a process
builds only the schemas of the files it reads.
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from planner.schema.base import MAX_GPUS, Count, Name, Number, PosCount, Strict


class PoolIn(Strict):
    gpu_type: Name
    zone: Name
    count: Count
    gpus_per_node: Optional[PosCount] = None


class ClusterFile(Strict):
    pools: list[PoolIn] = Field(max_length=10_000)

    @model_validator(mode="after")
    def _total(self) -> "ClusterFile":
        total = sum(p.count for p in self.pools)
        if total > MAX_GPUS:
            raise ValueError(f"the cluster has {total} GPUs, more than the maximum {MAX_GPUS}")
        return self


class EmulateIn(Strict):
    slowdown: Number = 1.0
    link_delay_s: Number = 0.0


class NodeIn(Strict):
    host: Name
    gpu_type: Name
    zone: Name
    gpus_per_node: PosCount
    name: Optional[Name] = None
    cpus_per_node: Optional[PosCount] = None
    emulate: Optional[EmulateIn] = None


class InventoryFile(Strict):
    nodes: list[NodeIn] = Field(min_length=1, max_length=100_000)
