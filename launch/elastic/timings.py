"""sailor-elastic's records of jobs and reconfigurations, and the per-reconfiguration timings built from the
jobs' event files (:mod:`megatron_sailor.train.elastic_hooks`) and the controller's clock (one machine's
wall clock: ``time.time()``).

Steps (seconds): ``plan_s`` (planner), ``checkpoint_s`` (the stop checkpoint, inside the old job),
``stop_s`` (stop request -> old job exited), ``start_s`` (new job launched -> process group ready),
``model_build_s``, ``wait_for_old_job_s`` (new job ready -> old job's checkpoint committed), ``load_s``,
``first_iteration_s`` (load -> end of the first new iteration), ``total_s`` (change observed -> end of the
first new iteration), ``downtime_s`` (no progress: max(last old iteration, change) -> first new one).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launch.elastic.plans import PlanChoice

logger = logging.getLogger(__name__)


@dataclass
class Reconfiguration:
    reason: str                   # "start", "availability", "failure", "resume" (controller restarted)
    change_unix_s: float
    available: int
    plan_s: float
    decision: str
    old_gpus: int | None
    new_gpus: int
    resume_hint: int = 0          # iterations done when it happened (next hold point for trace replays)


@dataclass
class Job:
    index: int
    choice: PlanChoice
    proc: Any                     # launch.elastic.jobs.NodeProcesses (or a SLURM job)
    launched_unix_s: float
    events_path: Path
    reason: str
    rec: Reconfiguration
    control: Path = Path()
    go: Path = Path()
    assignment: Any = None        # launch.assign.Assignment
    stop_requested_unix_s: float | None = None
    exit_unix_s: float | None = None
    go_unix_s: float | None = None
    nodes: tuple[str, ...] = field(default=())

    def events(self) -> list[dict[str, Any]]:
        if not self.events_path.is_file():
            return []
        out = []
        for line in self.events_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:        # a line being appended right now
                continue
        return out


def _one(old: Job, new: Job) -> dict[str, Any]:
    rec = new.rec
    t: dict[str, float] = {"plan_s": rec.plan_s}
    old_events = old.events()
    oe = {e["event"]: e for e in old_events}
    ne = {e["event"]: e for e in new.events() if e["attempt"] == 0}
    if "saved" in oe and rec.reason == "availability":
        t["checkpoint_s"] = oe["saved"]["save_s"]
    if old.stop_requested_unix_s and old.exit_unix_s:
        t["stop_s"] = old.exit_unix_s - old.stop_requested_unix_s
    if "dist_ready" in ne:
        t["start_s"] = ne["dist_ready"]["t_unix_s"] - new.launched_unix_s
    if "model_ready" in ne and "dist_ready" in ne:
        t["model_build_s"] = ne["model_ready"]["t_unix_s"] - ne["dist_ready"]["t_unix_s"]
    if "loaded" in ne:
        t["load_s"] = ne["loaded"]["load_s"]
    if new.go_unix_s and "waiting" in ne:
        t["wait_for_old_job_s"] = max(0.0, new.go_unix_s - ne["waiting"]["t_unix_s"])
    if "first_iteration" in ne:
        base = ne.get("loaded", ne.get("model_ready"))
        t["first_iteration_s"] = ne["first_iteration"]["t_unix_s"] - base["t_unix_s"]
        t["total_s"] = ne["first_iteration"]["t_unix_s"] - rec.change_unix_s
        old_steps = [e["t_unix_s"] for e in old_events if e["event"] == "step"]
        if old_steps:       # no training progress between the old job's last and the new one's first
            t["downtime_s"] = ne["first_iteration"]["t_unix_s"] - max(old_steps[-1], rec.change_unix_s)
    return {"reason": rec.reason, "gpus": [rec.old_gpus, rec.new_gpus], "decision": rec.decision,
            "job": new.index, "nodes": list(new.nodes), "resumed_iteration": ne.get("loaded", {}).get("iteration", 0),
            **{k: round(v, 3) for k, v in t.items()}}


def reconfiguration_timings(jobs: list[Job]) -> list[dict[str, Any]]:
    """Per relaunch (every job after the first one this controller knows of), the steps above."""
    return [_one(old, new) for old, new in zip(jobs, jobs[1:])]


def log_restarts(job: Job) -> None:
    """Log the worker-group restarts torchrun made inside ``job`` (a rank died; resumed from a checkpoint)."""
    ev = job.events()
    for a in sorted({e["attempt"] for e in ev})[1:]:
        mine = {e["event"]: e for e in ev if e["attempt"] == a}
        if "first_iteration" in mine and "process_start" in mine:
            logger.info("job %d: torchrun restart %d resumed at iteration %s; process start -> first "
                        "iteration %.2f s", job.index, a, mine.get("loaded", {}).get("iteration", 0),
                        mine["first_iteration"]["t_unix_s"] - mine["process_start"]["t_unix_s"])


def write_report(work: Path, jobs: list[Job], reconfigs: list[Reconfiguration], failures: int,
                 iterations_done: int) -> None:
    """Log every reconfiguration's timings and write ``WORK/report.json`` (atomically)."""
    timings = reconfiguration_timings(jobs)
    for t in timings:
        logger.info("reconfiguration %s %s: %s", t["reason"], t["gpus"],
                    ", ".join(f"{k} {v:.2f}" for k, v in t.items() if k.endswith("_s")))
    report = {"reconfigurations": timings,
              "jobs": [{"index": j.index, "reason": j.reason, "ranks": j.choice.plan.world_size,
                        "nodes": list(j.nodes), "exit_status": j.proc.poll()} for j in jobs],
              "decisions": [{"reason": r.reason, "available": r.available, "decision": r.decision,
                             "plan_s": round(r.plan_s, 4)} for r in reconfigs],
              "failures": failures, "iterations_done": iterations_done}
    tmp = work / "report.json.tmp"
    tmp.write_text(json.dumps(report, indent=1))
    os.replace(tmp, work / "report.json")
