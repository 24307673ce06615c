"""sailor-elastic: re-plan on availability changes, checkpoint + stop the job, relaunch it on the new plan.

One job = one ``torchrun`` (c10d rendezvous, ``--max-restarts``): torchrun's elastic agent restarts every
worker from the last checkpoint when a rank dies (the workers always pass ``--load``); only if it gives up
does the controller re-plan on what the availability source reports and relaunch (``max_failures``).
On an availability change the controller plans (:mod:`launch.elastic.plans`), applies the switch
rule, writes ``stop`` to the job's control file (the job checkpoints at the next iteration boundary and
exits 0) and starts the new plan. Every step's timing comes from the jobs' event files
(:mod:`megatron_sailor.train.elastic_hooks`) and the controller's clock; all times are wall-clock on one machine.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import InputError

from launch.elastic.joblog import committed_iteration, last_error_line
from launch.elastic.plans import PlanChoice, decide, plan_fits
from launch.elastic.sources import Availability, total

logger = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ControllerConfig:
    work_dir: Path
    train_iters: int
    train_args: tuple[str, ...]            # passed to the training script (model, data, --save-interval, ...)
    script: str = str(REPO / "examples" / "gpt" / "pretrain_gpt.py")
    max_restarts: int = 3                  # torchrun's, per job
    max_failures: int = 4                  # the controller gives up at this many failed jobs
    horizon_s: float = 3600.0
    initial_cost_s: float = 15.0           # until a reconfiguration has been measured
    poll_s: float = 0.2
    hold_on_trace: bool = False            # iteration-unit traces: pause the job at each change point
    trace_points: tuple[int, ...] = ()     # iteration change points (with hold_on_trace)
    omp_threads: int = 1
    job_timeout_s: float = 3600.0
    job_env: tuple[tuple[str, str], ...] = ()   # extra environment for the jobs


@dataclass
class Job:
    index: int
    choice: PlanChoice
    proc: subprocess.Popen
    launched_unix_s: float
    events_path: Path
    reason: str
    rec: "Reconfiguration"
    control: Path = Path()
    go: Path = Path()
    stop_requested_unix_s: float | None = None
    exit_unix_s: float | None = None
    go_unix_s: float | None = None

    def events(self) -> list[dict[str, Any]]:
        if not self.events_path.is_file():
            return []
        return [json.loads(line) for line in self.events_path.read_text().splitlines() if line.strip()]


@dataclass
class Reconfiguration:
    reason: str
    change_unix_s: float
    available: int
    plan_s: float
    decision: str
    old_gpus: int | None
    new_gpus: int
    resume_hint: int = 0          # iterations done when it happened (next hold point for trace replays)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Controller:
    def __init__(self, cfg: ControllerConfig, source: Any, planner: Any) -> None:
        self.cfg, self.source, self.planner = cfg, source, planner
        self.work = cfg.work_dir.resolve()
        self.ckpt_dir = self.work / "checkpoints"
        self.metrics = self.work / "metrics.jsonl"
        self.jobs: list[Job] = []
        self.reconfigs: list[Reconfiguration] = []
        self.cost_s = cfg.initial_cost_s
        self.failures = 0
        self.start_unix_s = time.time()

    # ------------------------------------------------------------------ progress and the job
    def iterations_done(self) -> int:
        """Iterations done: the newest metrics line, or the newest committed checkpoint (a job resumed at its
        target iteration trains nothing and writes no metrics)."""
        done = committed_iteration(self.ckpt_dir) or 0
        if not self.metrics.is_file():
            return done
        lines = [ln for ln in self.metrics.read_text().splitlines() if ln.strip()]
        for ln in lines[-3:]:
            try:
                done = max(done, int(json.loads(ln)["iteration"]) + 1)
            except (ValueError, KeyError):
                continue
        return done

    def _next_hold(self, done: int) -> int | None:
        later = [t for t in self.cfg.trace_points if t > done]
        return min(later) if later else None

    def _write_control(self, job: Job, text: str) -> None:
        tmp = job.control.with_suffix(".tmp")
        tmp.write_text(text + "\n")
        os.replace(tmp, job.control)

    def launch(self, choice: PlanChoice, rec: "Reconfiguration", wait_for_go: bool = False) -> Job:
        """Start a torchrun job; with ``wait_for_go`` its ranks start up but load the checkpoint only once
        :meth:`go` is called (the previous job has committed its last checkpoint and exited)."""
        k = len(self.jobs)
        plan_path = self.work / f"plan_{k}.json"
        plan_path.write_text(json.dumps(choice.plan.to_dict(), indent=1))
        events, control, go = self.work / f"events_{k}.jsonl", self.work / f"control_{k}", self.work / f"go_{k}"
        n = choice.plan.world_size
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={n}",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{_free_port()}", f"--rdzv-id=sailor-elastic-{k}",
               f"--max-restarts={self.cfg.max_restarts}", self.cfg.script, "--sailor-plan", str(plan_path),
               "--train-iters", str(self.cfg.train_iters), "--save", str(self.ckpt_dir), "--load", str(self.ckpt_dir),
               "--elastic-control", str(control), "--elastic-events", str(events),
               "--metrics-file", str(self.metrics), *(["--elastic-wait", str(go)] if wait_for_go else []),
               *self.cfg.train_args]
        # TORCH_DISABLE_SHARE_RDZV_TCP_STORE: a restarted worker group must not share the rendezvous store
        # with the dead one (stale gloo addresses -> "connectFullMesh failed"; pytorch/pytorch#135712)
        env = dict(os.environ, OMP_NUM_THREADS=str(self.cfg.omp_threads), TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                   **dict(self.cfg.job_env))
        job = Job(k, choice, None, 0.0, events, rec.reason, rec, control=control, go=go)  # type: ignore[arg-type]
        hold = self._next_hold(rec.resume_hint) if self.cfg.hold_on_trace else None
        self._write_control(job, f"hold {hold}" if hold is not None else "run")
        log = open(self.work / f"job_{k}.log", "w")
        job.launched_unix_s = time.time()
        job.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.jobs.append(job)
        logger.info("job %d: %s, %d rank(s), plan %s%s, log %s", k, rec.reason, n, _plan_summary(choice.plan),
                    " (starting up while the previous job stops)" if wait_for_go else "",
                    self.work / f"job_{k}.log")
        return job

    def go(self, job: Job) -> None:
        job.go_unix_s = time.time()
        job.go.write_text("go\n")

    def request_stop(self, job: Job) -> None:
        if job.stop_requested_unix_s is None:
            job.stop_requested_unix_s = time.time()
            self._write_control(job, "stop")

    def terminate(self, job: Job) -> None:
        if job.proc.poll() is None:
            os.killpg(job.proc.pid, signal.SIGTERM)
            try:
                job.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(job.proc.pid, signal.SIGKILL)
                job.proc.wait()

    # ------------------------------------------------------------------ the loop
    def run(self) -> int:
        self.work.mkdir(parents=True, exist_ok=True)
        for stale in [self.metrics, *self.work.glob("control_*"), *self.work.glob("go_*")]:
            stale.unlink(missing_ok=True)
        done = committed_iteration(self.ckpt_dir)
        if done is not None and done >= self.cfg.train_iters:
            logger.info("training finished: the newest checkpoint in %s is at iteration %d of %d; nothing to run",
                        self.ckpt_dir, done, self.cfg.train_iters)
            self.write_report()
            return 0
        av = self.source.poll(0.0, 0)
        logger.info("availability source: %s; now %d GPU(s) %s", self.source.describe(), total(av), av)
        choice = self.planner.plan(av)
        rec = Reconfiguration("start", time.time(), total(av), choice.plan_s, "initial plan", None,
                              choice.plan.world_size)
        self.reconfigs.append(rec)
        self.job: Job | None = self.launch(choice, rec)
        self.successor: Job | None = None
        self.last_av = av
        try:
            while True:
                time.sleep(self.cfg.poll_s)
                status = self._step()
                if status is not None:
                    return status
        finally:
            for j in (self.job, self.successor):
                if j is not None and j.proc.poll() is None:
                    self.terminate(j)
            self.write_report()

    def _step(self) -> int | None:
        """One poll: hand over to a starting successor, notice exits, react to availability changes."""
        job, done = self.job, self.iterations_done()
        rc = job.proc.poll()
        if self.successor is not None:
            return self._handover(job, rc)
        if rc is not None:
            job.exit_unix_s = time.time()
            self._log_restarts(job)
            if rc == 0 and done >= self.cfg.train_iters:
                logger.info("training finished: %d iterations", done)
                return 0
            self.job = self._after_failure(job, rc, done)
            return 1 if self.job is None else None
        if time.time() - job.launched_unix_s > self.cfg.job_timeout_s:
            return None
        try:
            av = self.source.poll(time.time() - self.start_unix_s, done)
        except (InputError, OSError, subprocess.SubprocessError) as exc:   # e.g. a file caught mid-rewrite
            logger.warning("availability source failed (%s); keeping %s", exc, self.last_av)
            return None
        if av != self.last_av:
            self.last_av = av
            self._on_change(job, av, done)
        elif self.cfg.hold_on_trace:
            self._maybe_release_hold(job, done)
        return None

    def _handover(self, job: Job, rc: int | None) -> int | None:
        new = self.successor
        new_rc = new.proc.poll()
        if new_rc is not None:                   # the new job died before taking over
            self.failures += 1
            give_up = self.failures >= self.cfg.max_failures
            logger.warning("job %d exited with status %d before taking over: %s (failure %d of %d%s); log %s",
                           new.index, new_rc, self._job_error(new), self.failures, self.cfg.max_failures,
                           ": giving up" if give_up else f"; job {job.index} keeps running",
                           self.work / f"job_{new.index}.log")
            self.successor = None
            return 1 if give_up else None
        if rc == 0 and self.iterations_done() >= self.cfg.train_iters:
            logger.info("training finished: %d iterations (before job %d took over)", self.iterations_done(),
                        new.index)
            self.terminate(new)
            self.successor = None
            return 0
        if rc is None:
            if job.stop_requested_unix_s is None and any(e["event"] == "waiting" for e in new.events()):
                self.request_stop(job)           # optional switch: stop once the new job is ready to load
            return None
        job.exit_unix_s = time.time()
        self._log_restarts(job)
        if rc != 0:
            logger.warning("job %d exited with status %d while stopping; job %d loads the newest valid "
                           "checkpoint", job.index, rc, new.index)
        self.go(new)
        self.job, self.successor = new, None
        return None

    def _maybe_release_hold(self, job: Job, done: int) -> None:
        words = job.control.read_text().split() if job.control.is_file() else []
        if len(words) == 2 and words[0] == "hold" and done >= int(words[1]):
            nxt = self._next_hold(done)
            self._write_control(job, f"hold {nxt}" if nxt is not None else "run")

    def _on_change(self, job: Job, av: Availability, done: int) -> Any:
        change = time.time()
        self._update_cost()
        logger.info("availability changed at iteration %d: %d GPU(s) %s; re-planning with %s", done, total(av), av,
                    self.planner.name)
        new = self.planner.plan(av)
        fits = plan_fits(job.choice.plan, av)
        d = decide(job.choice, new, fits, self.cfg.horizon_s, self.cost_s)
        logger.info("plan: %s in %.3f s -> %s (%s)", _plan_summary(new.plan), new.plan_s,
                    "SWITCH" if d.switch else "stay", d.reason)
        rec = Reconfiguration("availability", change, total(av), new.plan_s, d.reason, job.choice.plan.world_size,
                              new.plan.world_size if d.switch else job.choice.plan.world_size, resume_hint=done)
        self.reconfigs.append(rec)
        if not d.switch:
            if self.cfg.hold_on_trace:
                self._maybe_release_hold(job, done)
            return
        # start the new job at once (start-up overlaps the stop); a forced switch stops the old job now,
        # an optional one keeps it training until the new job is ready to load (see _handover)
        self.successor = self.launch(new, rec, wait_for_go=True)
        if d.forced:
            self.request_stop(job)

    def _job_error(self, job: Job) -> str:
        line = last_error_line(sorted(self.work.glob(f"job_{job.index}.*log")))
        return line or "(the job printed nothing)"

    def _after_failure(self, job: Job, rc: int, done: int) -> Job | None:
        self.failures += 1
        give_up = self.failures >= self.cfg.max_failures
        logger.warning("job %d exited with status %d at iteration %d: %s (failure %d of %d%s); log %s",
                       job.index, rc, done, self._job_error(job), self.failures, self.cfg.max_failures,
                       ": giving up" if give_up else "", self.work / f"job_{job.index}.log")
        av = self.source.poll(time.time() - self.start_unix_s, done)
        self.last_av = av
        if give_up or total(av) == 0:
            if not give_up:
                logger.error("giving up: no GPU available after job %d failed", job.index)
            return None
        choice = self.planner.plan(av)
        rec = Reconfiguration("failure", time.time(), total(av), choice.plan_s, f"job exited with status {rc}",
                              job.choice.plan.world_size, choice.plan.world_size, resume_hint=done)
        self.reconfigs.append(rec)
        return self.launch(choice, rec)

    # ------------------------------------------------------------------ timings
    def _log_restarts(self, job: Job) -> None:
        """Log the worker-group restarts torchrun made inside ``job`` (a rank died; resumed from a checkpoint)."""
        ev = job.events()
        attempts = sorted({e["attempt"] for e in ev})
        for a in attempts[1:]:
            mine = {e["event"]: e for e in ev if e["attempt"] == a}
            if "first_iteration" in mine and "process_start" in mine:
                logger.info("job %d: torchrun restart %d resumed at iteration %s; process start -> first "
                            "iteration %.2f s", job.index, a, mine.get("loaded", {}).get("iteration", 0),
                            mine["first_iteration"]["t_unix_s"] - mine["process_start"]["t_unix_s"])

    def reconfiguration_timings(self) -> list[dict[str, Any]]:
        """Per relaunch: plan, checkpoint, stop, start, model build, load, first iteration, total (seconds)."""
        out = []
        for new in self.jobs[1:]:
            rec, old = new.rec, self.jobs[new.index - 1]
            t: dict[str, float] = {"plan_s": rec.plan_s}
            oe = {e["event"]: e for e in old.events()}
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
                old_steps = [e["t_unix_s"] for e in old.events() if e["event"] == "step"]
                if old_steps:       # no training progress between the old job's last and the new one's first
                    t["downtime_s"] = ne["first_iteration"]["t_unix_s"] - max(old_steps[-1], rec.change_unix_s)
            out.append({"reason": rec.reason, "gpus": [rec.old_gpus, rec.new_gpus], "decision": rec.decision,
                        "resumed_iteration": ne.get("loaded", {}).get("iteration", 0),
                        **{k: round(v, 3) for k, v in t.items()}})
        return out

    def _update_cost(self) -> None:
        """The switch rule's cost = the last measured change -> first new iteration (when known)."""
        measured = [t["total_s"] for t in self.reconfiguration_timings()
                    if t["reason"] == "availability" and "total_s" in t]
        if measured:
            self.cost_s = measured[-1]

    def write_report(self) -> None:
        timings = self.reconfiguration_timings()
        for t in timings:
            logger.info("reconfiguration %s %s: %s", t["reason"], t["gpus"],
                        ", ".join(f"{k} {v:.2f}" for k, v in t.items() if k.endswith("_s")))
        report = {"reconfigurations": timings, "jobs": [{"index": j.index, "reason": j.reason,
                  "ranks": j.choice.plan.world_size, "exit_status": j.proc.poll()} for j in self.jobs],
                  "decisions": [{"reason": r.reason, "available": r.available, "decision": r.decision,
                                 "plan_s": round(r.plan_s, 4)} for r in self.reconfigs],
                  "iterations_done": self.iterations_done()}
        (self.work / "report.json").write_text(json.dumps(report, indent=1))


def _plan_summary(plan: Any) -> str:
    stages = " | ".join(f"L{s.num_layers}:TP" + ",".join(str(r.tp) for r in s.replicas) for s in plan.stages)
    return f"[{stages}] mbs {plan.micro_batch_size} gbs {plan.global_batch_size}"
