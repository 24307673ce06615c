"""Read Sailor ``plan_config`` JSON files as our :class:`~planner.plan.Plan` (auto-detected by loaders).

Sailor numbers layers ``0`` = embedding, ``1..L`` = transformer layers, ``L+1`` = LM head + loss. A stage's
``layers_per_stage`` entry lists those ids; ``tmp_per_stage[s][j] = [[[gpu_type, gpus_per_node, zone]], tp]``
is replica ``j`` of stage ``s``. The importer also returns the GPUs per node each *replica* declared (Sailor's
planner gives each replica a node of its own size, so one GPU type may sit on nodes of 1 and 2 GPUs in one
plan); the simulator picks each link's fit by the node sizes of its two ends.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from planner.errors import InputError
from planner.plan import Plan, Replica, Stage
from planner.textio import read_text
@dataclass(frozen=True)
class SailorPlanInfo:
    """What a Sailor plan file carries beyond our plan: node sizes and measured results, if any."""

    gpus_per_node: dict[str, int]          # the largest node declared per GPU type (TP-fits-a-node check)
    replica_node_gpus: tuple[tuple[int, ...], ...] = ()   # [stage][replica] GPUs per node, as declared
    measured_iteration_s: float | None = None
    measured_peak_memory_bytes: int | None = None
    measured_grad_reduce_s: float | None = None


def is_sailor_plan(data: Any) -> bool:
    return isinstance(data, Mapping) and "pipeline_list" in data


def plan_from_sailor(data: Mapping[str, Any], *, precision: str = "fp32", optimizer: str = "adamw",
                     model: str | None = None) -> tuple[Plan, SailorPlanInfo]:
    """Convert a parsed Sailor plan_config object."""
    try:
        pipe = data["pipeline_list"][0]
        layers_per_stage = pipe["layers_per_stage"]
        tmp_per_stage = pipe["tmp_per_stage"]
        mbs, gbs = data["mbs"], data["gbs"]
    except (KeyError, IndexError, TypeError) as exc:
        raise InputError(f"Sailor plan is missing field {exc}") from None
    if len(data["pipeline_list"]) != 1:
        raise InputError(f"Sailor plan has {len(data['pipeline_list'])} pipeline templates; only 1 is supported")
    if not isinstance(layers_per_stage, list) or len(layers_per_stage) != len(tmp_per_stage):
        raise InputError("Sailor plan: 'layers_per_stage' and 'tmp_per_stage' must list the same stages")
    all_ids = [i for ids in layers_per_stage for i in ids]
    if all_ids != list(range(len(all_ids))) or len(all_ids) < 3:
        raise InputError(f"Sailor plan: 'layers_per_stage' must list layer ids 0..N-1 in order, got {all_ids}")
    num_layers = len(all_ids) - 2
    gpn: dict[str, int] = {}
    node_gpus: list[tuple[int, ...]] = []
    stages = []
    for s, (ids, reps) in enumerate(zip(layers_per_stage, tmp_per_stage)):
        blocks = [i - 1 for i in ids if 1 <= i <= num_layers]
        first = blocks[0] if blocks else (0 if s == 0 else num_layers)
        replicas, sizes = [], []
        for j, rep in enumerate(reps):
            try:
                (gpu_type, per_node, zone), tp = rep[0][0], rep[1]
            except (TypeError, ValueError, IndexError):
                raise InputError(f"Sailor plan: tmp_per_stage[{s}][{j}] must be [[[gpu, gpus_per_node, zone]], "
                                 f"tp], got {rep!r}") from None
            replicas.append(Replica(gpu_type=gpu_type, tp=tp, zone=zone))
            if isinstance(per_node, bool) or not isinstance(per_node, int) or per_node < tp:
                raise InputError(f"Sailor plan: tmp_per_stage[{s}][{j}] gpus_per_node must be an integer >= its "
                                 f"TP {tp}, got {per_node!r}")
            gpn[gpu_type] = max(gpn.get(gpu_type, 0), per_node)
            sizes.append(per_node)
        node_gpus.append(tuple(sizes))
        stages.append(Stage(first_layer=first, num_layers=len(blocks), replicas=tuple(replicas)))
    plan = Plan(num_layers=num_layers, stages=tuple(stages), micro_batch_size=mbs,
                global_batch_size=gbs, precision=precision, optimizer=optimizer, model=model)
    info = SailorPlanInfo(gpus_per_node=gpn, replica_node_gpus=tuple(node_gpus),
                          measured_iteration_s=data.get("real"),
                          measured_peak_memory_bytes=data.get("max_mem"),
                          measured_grad_reduce_s=data.get("red_grads"))
    return plan, info


def load_any_plan(path: str | Path, *, model: str | None = None) -> tuple[Plan, SailorPlanInfo | None]:
    """Load our plan JSON or a Sailor plan_config JSON (auto-detected). Errors name the file."""
    from planner.schema.base import parse_json, validate
    from planner.schema.files import SailorPlanFile
    text = read_text(path)
    data = parse_json(text, str(path))
    try:
        if is_sailor_plan(data):
            validate(SailorPlanFile, data)
            return plan_from_sailor(data, model=model)
        return Plan.from_dict(data), None
    except InputError as exc:
        raise exc.with_source(str(path)) from None
