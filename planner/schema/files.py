"""Schemas of the planner's and launcher's input files (types and ranges; the readers check meaning).

Contract: one pydantic model per file kind -- :class:`PlanFile`, :class:`SailorPlanFile`,
:class:`ClusterFile`, :class:`InventoryFile`, :class:`NetworkFile`, :class:`CatalogFile`,
:class:`ProfileFile` -- each refusing unknown keys, wrong types, non-finite numbers and counts outside
[0, MAX_GPUS] (1,000,000 GPUs per pool, per node list and per plan). Validate with
:func:`planner.schema.base.validate`, which reports the first problem on one line.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import ConfigDict, Field, RootModel, field_validator, model_validator

from planner.schema.base import (MAX_GPUS, MAX_LAYERS, Batch, Bool, Count, Layers, Name, NonNeg, Number,
                                 PosCount, Positive, Strict, Text)


class ReplicaIn(Strict):
    gpu_type: Name
    tp: PosCount
    zone: Name


class StageIn(Strict):
    first_layer: Layers
    num_layers: Layers
    replicas: list[ReplicaIn] = Field(min_length=1, max_length=MAX_GPUS)
    grad_sync: Optional[Literal["flat", "hierarchical"]] = None    # null: the runtime's --grad-sync decides


class PlanFile(Strict):
    schema_version: Literal[1]
    num_layers: Annotated[int, Field(strict=True, ge=1, le=MAX_LAYERS)]
    micro_batch_size: Batch
    global_batch_size: Batch
    stages: list[StageIn] = Field(min_length=1, max_length=100_000)
    model: Optional[Name] = None
    precision: Literal["fp32", "bf16", "fp16"] = "fp32"
    optimizer: Literal["adamw", "adam", "sgd"] = "adamw"
    recompute_activations: Bool = False
    distributed_optimizer: Bool = False
    tie_embeddings: Bool = False
    recompute_granularity: Optional[Literal["full", "selective"]] = None
    recompute_method: Optional[Literal["uniform", "block"]] = None
    recompute_num_layers: Optional[Annotated[int, Field(strict=True, ge=1, le=MAX_LAYERS)]] = None
    p2p_pattern: Literal["tp0-to-all"] = "tp0-to-all"
    microbatches_per_pipeline: Optional[list[Batch]] = Field(default=None, max_length=MAX_GPUS)

    @field_validator("schema_version", mode="before")
    @classmethod
    def _not_bool(cls, v: object) -> object:
        if isinstance(v, bool):                     # Literal[1] alone would take true (true == 1)
            raise ValueError("must be 1")
        return v

    @model_validator(mode="after")
    def _gpus(self) -> "PlanFile":
        total = sum(r.tp for s in self.stages for r in s.replicas)
        if total > MAX_GPUS:
            raise ValueError(f"the plan uses {total} GPUs, more than the maximum {MAX_GPUS}")
        return self


SailorDevice = tuple[Name, PosCount, Name]                       # [gpu_type, gpus_per_node, zone]
SailorReplica = tuple[list[SailorDevice], PosCount]              # [[[gpu, per_node, zone]], tp]


class SailorPipeline(Strict):
    layers_per_stage: list[list[Layers]] = Field(min_length=1, max_length=100_000)
    tmp_per_stage: list[list[SailorReplica]] = Field(min_length=1, max_length=100_000)
    num_stages: Optional[PosCount] = None
    dp: Optional[Union[PosCount, list[PosCount]]] = None


class SailorPlanFile(Strict):
    pipeline_list: list[SailorPipeline] = Field(min_length=1, max_length=1)
    mbs: Batch
    gbs: Batch
    zone: Optional[Name] = None
    N: Optional[Count] = None
    real: Optional[NonNeg] = None
    max_mem: Optional[NonNeg] = None
    red_grads: Optional[NonNeg] = None


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


class ClassLinkIn(Strict):
    bw_bytes_per_s: Positive
    latency_s: NonNeg = 0.0


class NetworkFile(Strict):
    format: Literal["megatron-sailor-network/1"]
    name: Optional[Name] = None
    description: Optional[Text] = None
    class_links: dict[Literal["inter_node", "cross_zone", "cross_region"], ClassLinkIn] = Field(default_factory=dict)
    egress_usd_per_gb: dict[Name, dict[Name, NonNeg]] = Field(default_factory=dict)


class GPUEntryIn(Strict):
    memory_bytes: Optional[Annotated[int, Field(strict=True, ge=1, le=2 ** 60)]] = None
    peak_flops: Optional[Positive] = None
    peak_fp32_flops: Optional[Positive] = None
    mem_bw_bytes_per_s: Optional[Positive] = None
    usd_per_hour: Optional[NonNeg] = None
    gpus_per_node: Optional[PosCount] = None
    intra_node_bw_bytes_per_s: Optional[Positive] = None
    intra_node_latency_s: Optional[NonNeg] = None


class CatalogFile(RootModel[dict[Name, GPUEntryIn]]):
    pass


Pair = tuple[NonNeg, NonNeg]


class ProfileEntryIn(Strict):
    mbs: PosCount
    tp: PosCount
    embedding_s: Pair
    layers_s: list[Pair] = Field(min_length=1, max_length=100_000)
    head_s: Pair
    update_s_per_param: NonNeg
    layer_act_bytes: Optional[NonNeg] = None
    embedding_act_bytes: Optional[NonNeg] = None
    head_act_bytes: Optional[NonNeg] = None


class ProfileFile(Strict):
    """Top-level extras (``param_bytes``, ``device``, ``timer``, ``settings``, ``emulated_from``...) are
    documented as ignored by the planner (megatron_sailor/profiler/io.py), so they are allowed here."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, frozen=True)
    format: Literal["megatron-sailor-profile/1"]
    gpu_type: Name
    entries: list[ProfileEntryIn] = Field(min_length=1, max_length=100_000)
    model: Optional[Name] = None
    description: Optional[Text] = None
    # provenance the profiler and the emulation benchmark record; the planner reads none of it
    device: Optional[Text] = None
    timer: Optional[Text] = None
    ranks: Optional[PosCount] = None
    settings: Optional[dict[str, Union[Number, Bool, Text, None]]] = None
    param_bytes: Optional[dict[str, dict[str, NonNeg]]] = None
    model_spec: Optional[dict[str, Union[Number, Bool, Text, None]]] = None
    emulated_from: Optional[Text] = None
    slowdown: Optional[Positive] = None




class CoreShareIn(Strict):
    cores: PosCount
    ranks_per_core_slowdown: list[tuple[Positive, Positive]] = Field(min_length=1, max_length=1000)


class RuntimeConstantsFile(Strict):
    """``planner/data/runtime_megatron_sailor.json``: the megatron-sailor preset's constants, measured by
    ``sailor-profile --runtime-constants-out`` on one machine (see docs/PROFILER.md)."""

    format: Literal["megatron-sailor-runtime-constants/1"]
    machine: Text
    measured_by: Text
    measured_at: Text
    load_average: Optional[NonNeg] = None
    per_microbatch_overhead_s: NonNeg
    memory_overhead_bytes: NonNeg
    activation_reserve_factor: Annotated[float, Field(strict=True, allow_inf_nan=False, ge=1.0)]
    core_share: Optional[CoreShareIn] = None
    notes: Optional[dict[Name, Text]] = None


__all__ = ["PlanFile", "SailorPlanFile", "ClusterFile", "InventoryFile", "NetworkFile", "CatalogFile",
           "ProfileFile", "RuntimeConstantsFile"]
