"""Emulated GPU types for the closed-loop benchmarks (benchmarks/closed_loop.py, benchmarks/emulated_uneven.py):
an emulated type ``<type>-slow<S>`` is the profiled CPU type whose ranks sleep ``(S - 1) x`` each measured
forward/backward (megatron_sailor.runtime.emulation, what the launcher's ``emulate: {slowdown: S}`` does).
This module writes its profile and catalog entry, gives each rank of a plan its emulation, and states the
core demand the simulator's core-sharing term uses for it. No torch at import.
"""
from __future__ import annotations

import json
from pathlib import Path

SLOW_TYPE_SLOWDOWN = 2.0     # emulated slow GPU type of the closed loop's slow-type plans


def gpu_type_of(files: dict[str, Path]) -> str:
    return json.loads(files["profile"].read_text())["gpu_type"]


def slow_type_of(gpu: str, slowdown: float = SLOW_TYPE_SLOWDOWN) -> str:
    return f"{gpu}-slow{slowdown:g}"


def emulated_type_files(files: dict[str, Path], slowdown: float, gpus_per_node: dict[str, int]) -> dict:
    """``files`` plus an emulated GPU type ``slowdown`` x slower than the profiled one, written beside
    ``files["profile"]``: its profile (the measured one with forward/backward x ``slowdown``, which is what
    the runtime's emulation does to a rank), both profiles under "profiles", and a catalog with both types
    (the slow one's FLOP/s / ``slowdown``) under "catalog", with the given GPUs per node."""
    from megatron_sailor.profiler.io import emulated_catalog_entry, emulated_costs, write_profile
    from planner.profiles import parse_profile_file
    fast = gpu_type_of(files)
    slow = slow_type_of(fast, slowdown)
    prof = files["profile"]
    slow_prof = prof.with_name(f"{prof.stem}_{slow}.json")
    write_profile(slow_prof, json.loads(prof.read_text())["model"], slow,
                  emulated_costs(parse_profile_file(prof), slow, slowdown), {"emulated_from": fast, "slowdown": slowdown})
    base = json.loads(files["catalog"].read_text())[fast]
    catalog = {fast: dict(base, gpus_per_node=gpus_per_node[fast]),
               slow: dict(emulated_catalog_entry(base, slowdown), gpus_per_node=gpus_per_node[slow])}
    cat = prof.with_name(f"catalog_{slow}_{gpus_per_node[fast]}x{gpus_per_node[slow]}.json")
    cat.write_text(json.dumps(catalog, indent=1))
    return dict(files, profiles=[prof, slow_prof], catalog=cat, slow_profile=slow_prof)


def rank_emulation(job: dict, plan_path: str, gpu_type: str):  # noqa: ANN201
    """The emulation of one rank of one plan: the plan's emulated links and its GPU type's emulated slowdown
    (None when nothing is emulated; then the environment's, as the launcher sets it)."""
    from megatron_sailor.runtime.emulation import Emulation, emulation_from
    emu = dict(job.get("emulation", {}).get(plan_path) or {})
    slowdown = job.get("slowdown_by_type", {}).get(gpu_type, 1.0)
    if slowdown != 1.0:
        emu["slowdown"] = slowdown
    return Emulation(**emu) if emu else emulation_from()


def core_demand_by_type(gpu: str) -> dict[str, float]:
    """The emulated slow type's ranks hold a core for the first 1/S of each (emulated) compute: then they
    sleep."""
    return {slow_type_of(gpu): 1.0 / SLOW_TYPE_SLOWDOWN}
