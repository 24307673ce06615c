"""sailor-elastic: re-plan on node-inventory changes, checkpoint + stop the job, relaunch it on the new plan.

The controller polls a node source (:mod:`launch.elastic.nodes`: a rewritten inventory file, a command, a
trace mapped onto an inventory, or this machine alone), plans on the GPUs of the nodes present
(:mod:`launch.elastic.plans`), places the plan on those nodes (:func:`launch.assign.assign`), refuses
unreachable hosts, applies the switch rule and relaunches through the launcher (:mod:`launch.elastic.jobs`:
one torchrun per node; or a SLURM job, :mod:`launch.elastic.slurm_jobs`). On a switch the new job starts at
once and waits (``--elastic-wait go_K``) while the old one checkpoints at its next iteration boundary and
exits 0 (``stop`` in its control file); then ``go_K`` lets the new job load that checkpoint.

No feasible plan on the new nodes: the current job keeps running if its nodes are all still there, else it
is stopped with a checkpoint and the controller waits for nodes. A job that fails (torchrun gave up) is
relaunched on the nodes then present, up to ``max_failures`` failed jobs in all. The controller's own state
(jobs, failures, measured cost) is written atomically to ``WORK/state.json``; a controller restarted on the
same work folder stops what the dead one left running (with a checkpoint) and resumes from there.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from planner.errors import InputError

from launch.assign import Assignment, assign
from launch.elastic import state as state_file
from launch.elastic.config import ControllerConfig, job_fits, plan_summary, write_control
from launch.elastic.jobs import JobSpec, LocalBackend, job_commands
from launch.elastic.joblog import committed_iteration, last_error_line
from launch.elastic.nodes import Nodes, availability_of, describe_nodes
from launch.elastic.plans import PlanChoice, decide
from launch.elastic.sources import total
from launch.elastic.timings import Job, Reconfiguration, log_restarts, reconfiguration_timings, write_report
from launch.inventory import Inventory
from launch.runner import check_hosts
from launch.torchrun_cmds import NodeCommand

logger = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]


class Controller:
    def __init__(self, cfg: ControllerConfig, source: Any, planner: Any, backend: Any = None,
                 resolver: Any = None) -> None:
        self.cfg, self.source, self.planner = cfg, source, planner
        self.backend = backend or LocalBackend()
        self.resolver = resolver                 # host check (default getaddrinfo); tests inject one
        self.work = cfg.work_dir.resolve()
        self.ckpt_dir = self.work / "checkpoints"
        self.metrics = self.work / "metrics.jsonl"
        self.jobs: list[Job] = []
        self.reconfigs: list[Reconfiguration] = []
        self.cost_s = cfg.initial_cost_s
        self.failures = 0
        self.next_index = 0
        self.start_unix_s = time.time()
        self.job: Job | None = None
        self.successor: Job | None = None
        self.parked = False                      # job stopped for lack of nodes; waiting for a feasible plan
        self.last_nodes: Nodes = ()

    # ------------------------------------------------------------------ progress
    def iterations_done(self) -> int:
        """The newest metrics line, or the newest committed checkpoint (a job resumed at its target iteration
        trains nothing and writes no metrics)."""
        done = committed_iteration(self.ckpt_dir) or 0
        if not self.metrics.is_file():
            return done
        for ln in self.metrics.read_text().splitlines()[-3:]:
            try:
                done = max(done, int(json.loads(ln)["iteration"]) + 1)
            except (ValueError, KeyError, TypeError):
                continue
        return done

    def _next_hold(self, done: int) -> int | None:
        later = [t for t in self.cfg.trace_points if t > done]
        return min(later) if later else None

    def _write_control(self, job: Job, text: str) -> None:
        write_control(job.control, text)

    # ------------------------------------------------------------------ planning and launching
    def plan_on(self, nodes: Nodes) -> tuple[PlanChoice, Assignment]:
        """Check that every host resolves, plan on ``nodes``' GPUs, place the plan; InputError says why not."""
        if not nodes:
            raise InputError("no nodes present")
        check_hosts([NodeCommand(n.name, n.host, i, (), ()) for i, n in enumerate(nodes)], self.resolver)
        choice = self.planner.plan(availability_of(nodes))
        return choice, assign(choice.plan, Inventory(nodes))

    def launch(self, choice: PlanChoice, rec: Reconfiguration, wait_for_go: bool = False,
               assignment: Assignment | None = None) -> Job:
        """Start job K on ``assignment``; with ``wait_for_go`` its ranks start up but load the checkpoint only
        once :meth:`go` is called (the previous job has committed its last checkpoint and exited)."""
        k = self.next_index
        self.next_index += 1
        plan_path = self.work / f"plan_{k}.json"
        plan_path.write_text(json.dumps(choice.plan.to_dict(), indent=1))
        events, control, go = self.work / f"events_{k}.jsonl", self.work / f"control_{k}", self.work / f"go_{k}"
        script_args = ("--train-iters", str(self.cfg.train_iters), "--save", str(self.ckpt_dir), "--load",
                       str(self.ckpt_dir), "--elastic-control", str(control), "--elastic-events", str(events),
                       "--metrics-file", str(self.metrics), *(["--elastic-wait", str(go)] if wait_for_go else []),
                       *self.cfg.train_args)
        env = (("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))),
               ("SAILOR_ELASTIC_JOB", str(k)), *self.cfg.job_env)
        spec = JobSpec(k, str(plan_path), self.cfg.script, script_args, self.cfg.torchrun, self.cfg.max_restarts,
                       self.cfg.omp_threads, env)
        commands = job_commands(assignment, spec)
        job = Job(k, choice, None, 0.0, events, rec.reason, rec, control=control, go=go, assignment=assignment,
                  nodes=tuple(na.node.name for na in assignment.nodes))
        hold = self._next_hold(rec.resume_hint) if self.cfg.hold_on_trace else None
        self._write_control(job, f"hold {hold}" if hold is not None else "run")
        job.launched_unix_s = time.time()
        job.proc = self.backend.start(commands, assignment, self.work, k, REPO, after=self.job)
        self.jobs.append(job)
        logger.info("job %d: %s, %d rank(s) on %s, plan %s%s, log %s", k, rec.reason, choice.plan.world_size,
                    ", ".join(f"{na.node.name}:{na.nproc}" for na in assignment.nodes), plan_summary(choice.plan),
                    " (starting up while the previous job stops)" if wait_for_go else "", self.work / f"job_{k}.log")
        return job

    def go(self, job: Job) -> None:
        job.go_unix_s = time.time()
        job.go.write_text("go\n")

    def request_stop(self, job: Job) -> None:
        if job.stop_requested_unix_s is None:
            job.stop_requested_unix_s = time.time()
            self._write_control(job, "stop")

    def terminate(self, job: Job) -> None:
        job.proc.terminate()

    # ------------------------------------------------------------------ the loop
    def run(self) -> int:
        previous = state_file.load(self.work)
        if previous is not None:
            self._take_over(previous)
        done = committed_iteration(self.ckpt_dir)
        if done is not None and done >= self.cfg.train_iters:
            logger.info("training finished: the newest checkpoint in %s is at iteration %d of %d; nothing to run",
                        self.ckpt_dir, done, self.cfg.train_iters)
            self.save_state(finished=True)
            self.write_report()
            return 0
        nodes = self.source.poll(0.0, done or 0)
        logger.info("node source: %s; now %s (%d GPU(s))", self.source.describe(), describe_nodes(nodes),
                    total(availability_of(nodes)))
        choice, assignment = self.plan_on(nodes)         # InputError: exit 2, nothing written or started
        self.work.mkdir(parents=True, exist_ok=True)
        if previous is None:
            for stale in [self.metrics, *self.work.glob("control_*"), *self.work.glob("go_*")]:
                stale.unlink(missing_ok=True)
        reason = "resume" if previous is not None else "start"
        rec = Reconfiguration(reason, time.time(), total(availability_of(nodes)), choice.plan_s, "initial plan",
                              None, choice.plan.world_size, resume_hint=done or 0)
        self.reconfigs.append(rec)
        self.last_nodes = nodes
        self.job = self.launch(choice, rec, assignment=assignment)
        self.save_state()
        try:
            while True:
                time.sleep(self.cfg.poll_s)
                status = self._step()
                self._save_if_changed()
                if status is not None:
                    return status
        finally:
            for j in (self.job, self.successor):
                if j is not None and j.proc.poll() is None:
                    self.terminate(j)
            self.save_state(finished=True)
            self.write_report()
            if hasattr(self.backend, "close"):
                self.backend.close()

    def _take_over(self, previous: dict[str, Any]) -> None:
        """A controller died with jobs running: stop them (checkpoint first) and continue its numbering."""
        self.failures = int(previous.get("failures", 0))
        self.next_index = int(previous.get("next_index", 0))
        self.cost_s = float(previous.get("cost_s", self.cost_s))
        self.start_unix_s = float(previous.get("start_unix_s", self.start_unix_s))   # seconds traces go on
        logger.info("resuming from %s: %d job(s) started before, %d failure(s)", self.work / "state.json",
                    self.next_index, self.failures)
        state_file.stop_left_over(self.work, previous, self.cfg.stop_timeout_s)

    def _step(self) -> int | None:
        """One poll: hand over to a starting successor, notice exits, react to node changes."""
        job, done = self.job, self.iterations_done()
        if job is None:
            return self._unpark(done)
        rc = job.proc.poll()
        if self.successor is not None:
            return self._handover(job, rc)
        if rc is not None:
            job.exit_unix_s = time.time()
            self._log_restarts(job)
            if rc == 0 and done >= self.cfg.train_iters:
                logger.info("training finished: %d iterations", done)
                return 0
            if rc == 0 and job.stop_requested_unix_s is not None and not self.parked:
                return self._relaunch_stopped(job, done)
            if rc == 0 and self.parked:
                logger.info("job %d stopped with a checkpoint at iteration %d; waiting for nodes", job.index, done)
                self.job = None
                return self._unpark(done)
            self.job = self._after_failure(job, rc, done)
            return 1 if self.job is None else None
        try:
            nodes = self.source.poll(time.time() - self.start_unix_s, done)
        except (InputError, OSError, ValueError) as exc:    # e.g. a file caught mid-rewrite
            logger.warning("node source failed (%s); keeping %s", exc, describe_nodes(self.last_nodes))
            return None
        if nodes != self.last_nodes:
            self.last_nodes = nodes
            self._on_change(job, nodes, done)
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
            self.terminate(new)                  # the nodes of it that are still up
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
            logger.warning("job %d exited with status %d while stopping (%s); job %d loads the newest valid "
                           "checkpoint", job.index, rc, self._job_error(job), new.index)
        self.go(new)
        self.job, self.successor = new, None
        return None

    def _maybe_release_hold(self, job: Job, done: int) -> None:
        words = job.control.read_text().split() if job.control.is_file() else []
        if len(words) == 2 and words[0] == "hold" and done >= int(words[1]):
            nxt = self._next_hold(done)
            self._write_control(job, f"hold {nxt}" if nxt is not None else "run")

    def _on_change(self, job: Job, nodes: Nodes, done: int) -> None:
        change = time.time()
        self._update_cost()
        av = availability_of(nodes)
        logger.info("nodes changed at iteration %d: %s (%d GPU(s)); re-planning with %s", done,
                    describe_nodes(nodes), total(av), self.planner.name)
        fits = job_fits(job.assignment, nodes)
        try:
            new, assignment = self.plan_on(nodes)
        except InputError as exc:
            self._no_plan(job, nodes, done, change, fits, exc)
            return
        d = decide(job.choice, new, fits, self.cfg.horizon_s, self.cost_s)
        logger.info("plan: %s in %.3f s -> %s (%s)", plan_summary(new.plan), new.plan_s,
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
        self.successor = self.launch(new, rec, wait_for_go=True, assignment=assignment)
        if d.forced or not self.backend.overlap:
            self.request_stop(job)

    def _no_plan(self, job: Job, nodes: Nodes, done: int, change: float, fits: bool, exc: InputError) -> None:
        """No feasible plan on ``nodes``: keep the job if it still fits, else stop it with a checkpoint."""
        what = f"job {job.index} keeps running" if fits else f"job {job.index} lost nodes: stopping it with a checkpoint"
        logger.warning("nodes changed at iteration %d: no feasible plan on %s (%s); %s", done,
                       describe_nodes(nodes), exc, what)
        self.reconfigs.append(Reconfiguration("availability", change, total(availability_of(nodes)), 0.0,
                                              f"no feasible plan: {exc}", job.choice.plan.world_size,
                                              job.choice.plan.world_size if fits else 0, resume_hint=done))
        if fits:
            if self.cfg.hold_on_trace:
                self._maybe_release_hold(job, done)
        else:
            self.parked = True
            self.request_stop(job)

    def _unpark(self, done: int, allow_iteration_trace: bool = False) -> int | None:
        """No job (stopped for lack of nodes): launch as soon as a plan is feasible."""
        if self.cfg.hold_on_trace and not allow_iteration_trace:
            logger.error("giving up: no feasible plan at iteration %d and an iteration-unit trace cannot advance "
                         "without a job", done)
            return 1
        nodes = self.source.poll(time.time() - self.start_unix_s, done)
        if nodes == self.last_nodes:
            return None
        self.last_nodes = nodes
        try:
            choice, assignment = self.plan_on(nodes)
        except InputError as exc:
            logger.warning("nodes changed: still no feasible plan on %s (%s)", describe_nodes(nodes), exc)
            return None
        rec = Reconfiguration("availability", time.time(), total(availability_of(nodes)), choice.plan_s,
                              "nodes back", 0, choice.plan.world_size, resume_hint=done)
        self.reconfigs.append(rec)
        self.parked = False
        self.job = self.launch(choice, rec, assignment=assignment)
        return None

    def _relaunch_stopped(self, job: Job, done: int) -> int | None:
        """The job stopped (checkpoint) for a switch whose new job then failed: relaunch on the nodes present."""
        logger.info("job %d stopped with a checkpoint at iteration %d but its successor failed; relaunching on "
                    "the nodes present", job.index, done)
        self.job = None
        self.last_nodes = ()                     # makes _unpark plan on whatever the source reports now
        return self._unpark(done, allow_iteration_trace=True)

    def _job_error(self, job: Job) -> str:
        return last_error_line(sorted(self.work.glob(f"job_{job.index}.*log"))) or "(the job printed nothing)"

    def _after_failure(self, job: Job, rc: int, done: int) -> Job | None:
        self.failures += 1
        give_up = self.failures >= self.cfg.max_failures
        logger.warning("job %d exited with status %d at iteration %d: %s (failure %d of %d%s); log %s",
                       job.index, rc, done, self._job_error(job), self.failures, self.cfg.max_failures,
                       ": giving up" if give_up else "", self.work / f"job_{job.index}.log")
        if give_up:
            return None
        try:
            nodes = self.source.poll(time.time() - self.start_unix_s, done)
            self.last_nodes = nodes
            choice, assignment = self.plan_on(nodes)
        except (InputError, OSError) as exc:
            logger.error("giving up: cannot relaunch after job %d failed (%s)", job.index, exc)
            return None
        rec = Reconfiguration("failure", time.time(), total(availability_of(nodes)), choice.plan_s,
                              f"job exited with status {rc}", job.choice.plan.world_size, choice.plan.world_size,
                              resume_hint=done)
        self.reconfigs.append(rec)
        return self.launch(choice, rec, assignment=assignment)

    # ------------------------------------------------------------------ state, timings, report
    def _save_if_changed(self) -> None:
        key = (getattr(self.job, "index", None), getattr(self.successor, "index", None), self.failures,
               getattr(self.job, "stop_requested_unix_s", None))
        if key != getattr(self, "_saved_key", None):
            self._saved_key = key
            self.save_state()

    def save_state(self, finished: bool = False) -> None:
        live = [state_file.job_record(j, took_over=j is self.job) for j in (self.job, self.successor) if j is not None]
        state_file.save(self.work, {"next_index": self.next_index, "failures": self.failures, "cost_s": self.cost_s,
                                    "start_unix_s": self.start_unix_s,
                                    "finished": finished, "live_jobs": [] if finished else live})

    def _log_restarts(self, job: Job) -> None:
        log_restarts(job)

    def reconfiguration_timings(self) -> list[dict[str, Any]]:
        return reconfiguration_timings(self.jobs)

    def _update_cost(self) -> None:
        """The switch rule's cost = the last measured change -> first new iteration (when known)."""
        measured = [t["total_s"] for t in self.reconfiguration_timings()
                    if t["reason"] == "availability" and "total_s" in t]
        if measured:
            self.cost_s = measured[-1]

    def write_report(self) -> None:
        write_report(self.work, self.jobs, self.reconfigs, self.failures, self.iterations_done())
