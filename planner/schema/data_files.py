"""Schemas of the planner's data files: network (:class:`NetworkFile`), GPU catalog (:class:`CatalogFile`),
profiles (:class:`ProfileFile`).

Part of :mod:`planner.schema.files` (its contract applies); one module per group of file kinds, so a process
builds only the schemas of the files it reads.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import ConfigDict, Field, RootModel

from planner.schema.base import Bool, Name, NonNeg, Number, PosCount, Positive, Strict, Text


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
