"""The elastic controller's configuration and the small pure rules it applies (torch-free).

:class:`ControllerConfig` is what ``sailor-elastic`` hands the controller; :func:`job_fits` says whether a
running job's nodes are all still present; :func:`plan_summary` is the one-line plan description of its log;
:func:`write_control` replaces a job's control file atomically (the job polls it between iterations).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launch.assign import Assignment
from launch.elastic.nodes import Nodes


@dataclass(frozen=True)
class ControllerConfig:
    work_dir: Path
    train_iters: int
    train_args: tuple[str, ...]            # passed to the training script (model, data, --save-interval, ...)
    script: str | None = None              # None: the training module (planner.rank_env.train_entry)
    max_restarts: int = 3                  # torchrun's, per single-node job
    max_failures: int = 4                  # the controller gives up at this many failed jobs
    horizon_s: float = 3600.0
    initial_cost_s: float = 15.0           # until a reconfiguration has been measured
    poll_s: float = 0.2
    hold_on_trace: bool = False            # iteration-unit traces: pause the job at each change point
    trace_points: tuple[int, ...] = ()     # iteration change points (with hold_on_trace)
    omp_threads: int = 1
    job_env: tuple[tuple[str, str], ...] = ()   # extra environment for the jobs
    torchrun: tuple[str, ...] = (sys.executable, "-m", "torch.distributed.run")
    stop_timeout_s: float = 120.0          # restarted controller: wait this long for a left-over job's checkpoint


def plan_summary(plan: Any) -> str:
    stages = " | ".join(f"L{s.num_layers}:TP" + ",".join(str(r.tp) for r in s.replicas) for s in plan.stages)
    return f"[{stages}] mbs {plan.micro_batch_size} gbs {plan.global_batch_size}"


def job_fits(assignment: Assignment | None, nodes: Nodes) -> bool:
    """Are all nodes the job runs on still present (same host, at least the GPUs it uses)?"""
    if assignment is None:
        return False
    present = {n.name: n for n in nodes}
    return all(na.node.name in present and present[na.node.name].host == na.node.host
               and present[na.node.name].gpus_per_node >= na.nproc for na in assignment.nodes)


def write_control(path: Path, text: str) -> None:
    """Write ``text`` to a job's control file in one step (a temporary file, then ``os.replace``)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)
