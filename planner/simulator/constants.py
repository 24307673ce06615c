"""The megatron-sailor preset's measured constants: one data file per machine, written by ``sailor-profile``.

Contract: :func:`load_runtime_constants` reads ``planner/data/runtime_megatron_sailor.json`` (or the file named by
the environment variable ``SAILOR_RUNTIME_CONSTANTS``) into :class:`RuntimeConstants`; a bad file is one
:class:`~planner.errors.InputError` naming the file, the field and the value. :func:`core_share_scale` is the
core-sharing term: how much slower each rank computes when ``ranks`` busy ranks share ``cores`` cores,
relative to the ranks-per-core the profile was taken at, interpolated in the measured table (linearly in
ranks per core; beyond the table, proportional to ranks per core, as time slicing gives; the table is made
non-decreasing on loading, since more ranks on the same cores never compute faster). How many ranks are
busy at once for a given plan comes from its timeline: :mod:`planner.simulator.core_sharing`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from planner.errors import InputError

DEFAULT_FILE = Path(__file__).resolve().parents[1] / "data" / "runtime_megatron_sailor.json"
ENV_VAR = "SAILOR_RUNTIME_CONSTANTS"


@dataclass(frozen=True)
class RuntimeConstants:
    """The measured constants of the megatron-sailor runtime preset, from one runtime constants file."""

    source: str
    machine: str
    per_microbatch_overhead_s: float
    memory_overhead_bytes: float
    activation_reserve_factor: float
    core_share_table: tuple[tuple[float, float], ...] = ()   # (ranks per core, compute slowdown vs 1 rank alone)
    cores: int = 0
    sharded_collective_scale: float = 1.0   # (reduce-scatter + all-gather) / all-reduce time, measured


def constants_path() -> Path:
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else DEFAULT_FILE


def load_runtime_constants(path: str | Path | None = None) -> RuntimeConstants:
    from planner.schema.parse import parse_json
    from planner.schema.quick import plainly_valid_runtime_constants
    p = Path(path) if path is not None else constants_path()
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read the runtime constants ({exc.strerror or exc})", source=str(p)) from None
    data = parse_json(text, str(p))
    if not plainly_valid_runtime_constants(data):     # pydantic decides (and words the error), as for every file
        from planner.schema.base import validate
        from planner.schema.files import RuntimeConstantsFile
        data = validate(RuntimeConstantsFile, data, source=str(p)).model_dump()
    table: tuple[tuple[float, float], ...] = ()
    cores = 0
    share = data.get("core_share")
    if share is not None:
        raw = sorted((float(r), float(x)) for r, x in share["ranks_per_core_slowdown"])
        # more ranks on the same cores never compute faster: a measured dip (noise) is held at the level before
        table = tuple((r, max(x for _, x in raw[:i + 1])) for i, (r, _) in enumerate(raw))
        cores = share["cores"]
        if len({r for r, _ in table}) != len(table):
            raise InputError("core_share.ranks_per_core_slowdown lists one ranks-per-core value twice, got "
                             f"{[r for r, _ in table]}", source=str(p))
    return RuntimeConstants(source=str(p), machine=data["machine"],
                            per_microbatch_overhead_s=float(data["per_microbatch_overhead_s"]),
                            memory_overhead_bytes=float(data["memory_overhead_bytes"]),
                            activation_reserve_factor=float(data["activation_reserve_factor"]),
                            core_share_table=table, cores=cores,
                            sharded_collective_scale=float(data.get("sharded_collective_scale") or 1.0))


def _slowdown(table: tuple[tuple[float, float], ...], per_core: float) -> float:
    """Measured slowdown at ``per_core`` ranks per core (1.0 at or below one rank per core without data)."""
    if not table:
        return max(1.0, per_core)
    if per_core <= table[0][0]:
        return table[0][1]
    for (r0, s0), (r1, s1) in zip(table, table[1:]):
        if per_core <= r1:
            return s0 + (s1 - s0) * (per_core - r0) / (r1 - r0)
    r_last, s_last = table[-1]
    return s_last * per_core / r_last


def core_share_scale(ranks: float, cores: int, profiled_ranks: float,
                     table: tuple[tuple[float, float], ...] = ()) -> float:
    """Compute-time multiplier for ``ranks`` busy ranks on ``cores`` cores when the profile was taken with
    ``profiled_ranks`` ranks on the same cores (the profile's times already hold its own sharing). ``ranks``
    may be fractional: :mod:`planner.simulator.core_sharing` passes the number of ranks computing at once
    that the simulator's own schedule gives."""
    if ranks <= 0 or cores < 1 or profiled_ranks <= 0:
        raise InputError(f"core sharing needs ranks and profiled ranks > 0 and cores >= 1, got {ranks}, {cores}, "
                         f"{profiled_ranks}")
    return max(1.0, _slowdown(table, ranks / cores) / _slowdown(table, profiled_ranks / cores))
