"""Schema of the megatron-sailor preset's constants file (:class:`RuntimeConstantsFile`), read at every start.

Part of :mod:`planner.schema.files` (its contract applies); in a module of its own so that reading it builds no
other schema.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field

from planner.schema.base import Name, NonNeg, PosCount, Positive, Strict, Text


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
    sharded_collective_scale: Optional[Annotated[float, Field(strict=True, allow_inf_nan=False, ge=1.0,
                                                              le=1000.0)]] = None
    notes: Optional[dict[Name, Text]] = None
