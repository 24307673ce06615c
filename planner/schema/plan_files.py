"""Schemas of plan files: ours (:class:`PlanFile`) and Sailor's ``plan_config`` (:class:`SailorPlanFile`).

Part of :mod:`planner.schema.files` (its contract applies); one module per group of file kinds, so a process
builds only the schemas of the files it reads.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from planner.schema.base import MAX_GPUS, MAX_LAYERS, Batch, Bool, Count, Layers, Name, NonNeg, PosCount, Strict


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
