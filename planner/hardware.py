"""GPU catalog: memory, peak FLOP/s, memory bandwidth, price and node shape per GPU type.

Built-in entries are public facts (vendor data sheets; on-demand 1-GPU VM prices used by the Sailor paper
where it gives them). Users extend or override them with a JSON file::

    {"MyGPU-24": {"memory_bytes": 25769803776, "peak_flops": 1.5e14, "peak_fp32_flops": 3.5e13,
                  "mem_bw_bytes_per_s": 9.0e11, "usd_per_hour": 1.1, "gpus_per_node": 8,
                  "intra_node_bw_bytes_per_s": 2.5e10}}
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

from planner.errors import InputError, quote

GIB = 1024 ** 3


# Fields that may be 0: a free GPU, and a link latency (a latency/bandwidth fit of a fast link can have a
# zero intercept, as every other link's latency may be 0).
ZERO_ALLOWED = frozenset({"usd_per_hour", "intra_node_latency_s"})


@dataclass(frozen=True)
class GPUType:
    """One GPU model. ``peak_flops`` is dense 16-bit tensor throughput; ``peak_fp32_flops`` plain fp32."""

    name: str
    memory_bytes: int
    peak_flops: float
    peak_fp32_flops: float
    mem_bw_bytes_per_s: float
    usd_per_hour: float
    gpus_per_node: int
    intra_node_bw_bytes_per_s: float
    intra_node_latency_s: float = 5e-6
    supports_bf16: bool = True             # False before Ampere (V100, T4, Turing RTX 20 / Titan RTX)

    def __post_init__(self) -> None:
        if not isinstance(self.supports_bf16, bool):
            raise InputError(f"GPU type '{self.name}': field 'supports_bf16' must be true or false, "
                             f"got {self.supports_bf16!r}")
        for f in fields(self):
            if f.name in ("name", "supports_bf16"):
                continue
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0 or (
                    value == 0 and f.name not in ZERO_ALLOWED):
                kind = "a number >= 0" if f.name in ZERO_ALLOWED else "a positive number"
                raise InputError(f"GPU type '{self.name}': field '{f.name}' must be {kind}, "
                                 f"got {quote(value)}")

    def flops_for(self, precision: str) -> float:
        return self.peak_fp32_flops if precision == "fp32" else self.peak_flops

    @property
    def usd_per_s(self) -> float:
        return self.usd_per_hour / 3600.0


def _gpu(name: str, mem_gib: float, tflops16: float, tflops32: float, mem_bw_gbs: float, usd_h: float,
         per_node: int, intra_gbs: float, bf16: bool = True) -> GPUType:
    return GPUType(name, int(mem_gib * GIB), tflops16 * 1e12, tflops32 * 1e12, mem_bw_gbs * 1e9, usd_h,
                   per_node, intra_gbs * 1e9, supports_bf16=bf16)


# name, memory GiB, dense fp16/bf16 TFLOP/s, fp32 TFLOP/s (TF32 where the chip has it), HBM GB/s, $/h, GPUs
# per node, intra-node GB/s per direction (NVLink, or PCIe for the RTX cards).
BUILTIN_GPUS: dict[str, GPUType] = {g.name: g for g in (
    _gpu("A100-40", 40, 312, 156, 1555, 3.673385, 4, 300),
    _gpu("A100-80", 80, 312, 156, 2039, 5.07, 4, 300),
    _gpu("V100-16", 16, 125, 15.7, 900, 2.859998, 4, 150, bf16=False),
    _gpu("GH-96", 96, 989, 494, 4000, 11.06, 4, 450),
    _gpu("H100-80", 80, 989, 494, 3350, 11.06, 8, 450),
    _gpu("Titan-RTX", 24, 130, 16.3, 672, 1.0, 8, 12, bf16=False),
    _gpu("RTX-2080", 11, 40, 10.1, 448, 0.5, 8, 12, bf16=False),
    _gpu("RTX-3090", 24, 71, 35.6, 936, 0.8, 8, 12),
)}


class GPUCatalog:
    """GPU types by name: built-ins plus user entries."""

    def __init__(self, gpus: Mapping[str, GPUType] | None = None) -> None:
        self._gpus: dict[str, GPUType] = dict(BUILTIN_GPUS if gpus is None else gpus)

    def __contains__(self, name: str) -> bool:
        return name in self._gpus

    def names(self) -> list[str]:
        return sorted(self._gpus)

    def get(self, name: str) -> GPUType:
        if name not in self._gpus:
            raise InputError(f"unknown GPU type '{name}': no catalog entry (known: {self.names()}); "
                             "add it with a GPU catalog file")
        return self._gpus[name]

    def add(self, gpu: GPUType) -> None:
        self._gpus[gpu.name] = gpu

    def with_entries(self, entries: Mapping[str, Mapping[str, Any]], source: str = "GPU catalog") -> "GPUCatalog":
        """A copy extended by ``{name: {field: value}}``; fields of an existing type may be partial."""
        out = GPUCatalog(self._gpus)
        allowed = {f.name for f in fields(GPUType)} - {"name"}
        for name, spec in entries.items():
            if not isinstance(spec, Mapping):
                raise InputError(f"entry '{name}' must be an object", source=source)
            unknown = sorted(set(spec) - allowed)
            if unknown:
                raise InputError(f"entry '{name}' has unknown field(s) {unknown}; allowed {sorted(allowed)}",
                                 source=source)
            try:
                if name in self._gpus:
                    out.add(replace(self._gpus[name], **spec))
                else:
                    missing = sorted(allowed - set(spec) - {"intra_node_latency_s", "supports_bf16"})
                    if missing:
                        raise InputError(f"new GPU type '{name}' is missing field(s) {missing}")
                    out.add(GPUType(name=name, **spec))
            except InputError as exc:
                raise exc.with_source(source) from None
        return out

    @classmethod
    def load(cls, path: str | Path | None = None) -> "GPUCatalog":
        cat = cls()
        if path is None:
            return cat
        from planner.textio import read_text
        from planner.schema.base import parse_json, validate
        from planner.schema.files import CatalogFile
        data = parse_json(read_text(path), str(path))
        if not isinstance(data, dict):
            raise InputError("a GPU catalog must be a JSON object {name: {...}}", source=str(path))
        for name, spec in data.items():
            try:
                validate(CatalogFile, {name: spec})
            except InputError as exc:
                raise InputError(f"GPU type {quote(name)}: {str(exc).partition(': ')[2]}", source=str(path)) from None
        return cat.with_entries(data, source=str(path))
