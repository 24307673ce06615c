"""Profiler outputs (pure, no torch): the profile file the planner reads, and the GPU catalog entry of the
profiled device type (merged into an existing catalog file, so the model and network profilers can each
fill their fields).

Profile file = ``planner.profiles`` format (``megatron-sailor-profile/1``) plus top-level extras the
planner ignores: ``param_bytes`` per TP degree, ``device``, ``timer``, ``settings``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.textio import atomic_write_text
from planner.profiles import PROFILE_FORMAT, LayerCosts, costs_to_entry, parse_profile_file

# Placeholders used only until the network profiler measures the local link (documented in PROFILER.md).
DEFAULT_INTRA_BW = 1.0e9
DEFAULT_INTRA_LATENCY_S = 50e-6
CATALOG_FIELDS = ("memory_bytes", "peak_flops", "peak_fp32_flops", "mem_bw_bytes_per_s", "usd_per_hour",
                  "gpus_per_node", "intra_node_bw_bytes_per_s", "intra_node_latency_s")


def profile_document(model_name: str, gpu_type: str, costs: Iterable[LayerCosts],
                     extras: Mapping[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"format": PROFILE_FORMAT, "model": model_name, "gpu_type": gpu_type,
                           "entries": [costs_to_entry(c) for c in costs]}
    for k, v in (extras or {}).items():
        if k in doc:
            raise ValueError(f"extra key {k!r} clashes with the profile format")
        doc[k] = v
    return doc


def write_profile(path: str | Path, model_name: str, gpu_type: str, costs: list[LayerCosts],
                  extras: Mapping[str, Any] | None = None) -> None:
    """Write the profile and read it back with the planner's own parser (a file it cannot read is a bug)."""
    if not costs:
        raise InputError("nothing was profiled")
    atomic_write_text(Path(path), json.dumps(profile_document(model_name, gpu_type, costs, extras), indent=1) + "\n")
    parse_profile_file(path)


def read_existing_catalog(path: str | Path) -> dict[str, Any]:
    """The catalog JSON already at ``path`` ({} when there is none), checked as far as a merge needs: a JSON
    object of objects. Called before profiling starts too, so a bad file costs no measurement."""
    p = Path(path)
    if not p.exists():
        return {}
    if not p.is_file():
        raise InputError("exists and is not a regular file", source=str(p))
    from planner.textio import read_text
    from planner.schema.base import parse_json
    data = parse_json(read_text(p), str(p))          # one-line errors: unreadable, bad bytes, bad JSON, nesting
    if not isinstance(data, dict):
        raise InputError("a GPU catalog must be a JSON object", source=str(p))
    for name, entry in data.items():
        if not isinstance(entry, dict):
            raise InputError(f"entry {json.dumps(name)} must be an object, got {json.dumps(entry)[:40]}",
                             source=str(p))
    return data


def merge_catalog_entry(path: str | Path, gpu_type: str, fields: Mapping[str, float]) -> dict[str, Any]:
    """Set ``fields`` of ``gpu_type`` in the catalog JSON at ``path`` (created if absent), filling the
    intra-node link with placeholders when it was never measured; validated by the planner's loader."""
    p = Path(path)
    data = read_existing_catalog(p)
    unknown = sorted(set(fields) - set(CATALOG_FIELDS))
    if unknown:
        raise ValueError(f"unknown catalog fields {unknown}")
    entry = dict(data.get(gpu_type) or {})
    entry.update(fields)
    entry.setdefault("intra_node_bw_bytes_per_s", DEFAULT_INTRA_BW)
    entry.setdefault("intra_node_latency_s", DEFAULT_INTRA_LATENCY_S)
    data[gpu_type] = entry
    if _complete(entry):
        GPUCatalog().with_entries({gpu_type: entry}, source=str(p))   # raises InputError if invalid
    atomic_write_text(p, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return entry


def _complete(entry: Mapping[str, Any]) -> bool:
    return all(k in entry for k in CATALOG_FIELDS if k != "intra_node_latency_s")


def emulated_catalog_entry(base: Mapping[str, Any], slowdown: float) -> dict[str, Any]:
    """Catalog entry of an emulated, ``slowdown`` times slower version of a profiled type."""
    out = dict(base)
    for k in ("peak_flops", "peak_fp32_flops", "mem_bw_bytes_per_s"):
        out[k] = base[k] / slowdown
    return out


def emulated_costs(costs: Iterable[LayerCosts], gpu_type: str, slowdown: float) -> list[LayerCosts]:
    """Profile of an emulated GPU type: the emulation stretches each forward and backward by ``slowdown``
    (it sleeps ``(slowdown - 1) x`` the measured compute, see megatron_sailor.runtime.emulation); the optimizer
    step is not stretched."""
    from dataclasses import replace
    return [replace(c, gpu_type=gpu_type, embedding_fwd_s=c.embedding_fwd_s * slowdown,
                    embedding_bwd_s=c.embedding_bwd_s * slowdown,
                    layer_fwd_s=tuple(t * slowdown for t in c.layer_fwd_s),
                    layer_bwd_s=tuple(t * slowdown for t in c.layer_bwd_s),
                    head_fwd_s=c.head_fwd_s * slowdown, head_bwd_s=c.head_bwd_s * slowdown,
                    source=f"{c.source} x{slowdown:g} (emulated)") for c in costs]


def median_of_runs(runs: list[list[LayerCosts]], stat: Any = None) -> list[LayerCosts]:
    """Element-wise median (or ``stat``, e.g. ``min``) over several profiling runs of the same
    (gpu, mbs, tp) entries (e.g. repeats interleaved with other work, so slow drifts in machine load hit
    every entry alike)."""
    import statistics
    from dataclasses import fields, replace
    stat = stat or statistics.median
    by_key: dict[tuple[str, int, int], list[LayerCosts]] = {}
    for run in runs:
        for c in run:
            by_key.setdefault((c.gpu_type, c.mbs, c.tp), []).append(c)
    out = []
    for group in by_key.values():
        changes: dict[str, Any] = {}
        for f in fields(LayerCosts):
            values = [getattr(c, f.name) for c in group]
            if f.name in ("layer_fwd_s", "layer_bwd_s"):
                changes[f.name] = tuple(stat(col) for col in zip(*values))
            elif isinstance(values[0], float) and f.name not in ("mbs", "tp"):
                changes[f.name] = float(stat(values))
        name = getattr(stat, "__name__", "stat")
        out.append(replace(group[0], **changes, source=f"{group[0].source} ({name} of {len(group)} runs)"))
    return out
