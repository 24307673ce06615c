"""Start and stop one training job of sailor-elastic through the launcher (docs/LAUNCH.md).

A job is a plan placed on the nodes present (:func:`launch.assign.assign`) and one torchrun per used node
(:func:`launch.torchrun_cmds.build_commands`): local nodes run as subprocesses, remote ones through ssh
(:func:`launch.runner.process_argv`); each process gets its own session so that stopping the job stops its
workers. ``job_K.log`` holds node 0's output, ``job_K.nR.log`` node R's.

Restarts: a single-node job keeps torchrun's ``--max-restarts`` (its worker group restarts from the last
checkpoint; ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` so a restarted gloo group does not read the dead
group's addresses, pytorch/pytorch#135712). A multi-node job needs torchrun's agent store for the plan-rank
remap (``SAILOR_RANK_MAP``, planner.rank_env), which that variable would disable, so it runs with
``--max-restarts=0`` and the controller relaunches it on the nodes then present.
"""
from __future__ import annotations

import logging
import os
import signal

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from planner.errors import InputError
from planner.ports import free_port

from launch.assign import Assignment
from launch.runner import is_local_host, process_argv
from launch.torchrun_cmds import LaunchConfig, NodeCommand, build_commands

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobSpec:
    """What every node of job ``index`` runs (the controller's side of the launch)."""

    index: int
    plan_path: str
    script: str | None
    script_args: tuple[str, ...]
    torchrun: tuple[str, ...]
    max_restarts: int
    omp_threads: int
    extra_env: tuple[tuple[str, str], ...]
    base_port: int = 29500            # rendezvous port base when node 0 is remote (+ job index)


def job_commands(assignment: Assignment, spec: JobSpec) -> tuple[NodeCommand, ...]:
    """One torchrun command per used node (see the module docstring for restarts)."""
    single = len(assignment.nodes) == 1
    env = spec.extra_env + ((("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),) if single else ())
    host0 = assignment.nodes[0].node.host
    port = free_port() if is_local_host(host0) else spec.base_port + spec.index % 1000
    try:
        cfg = LaunchConfig(plan_path=spec.plan_path, script=spec.script, script_args=spec.script_args,
                           master_port=port, run_id=f"sailor-elastic-{spec.index}", torchrun=spec.torchrun,
                           omp_threads=spec.omp_threads, max_restarts=spec.max_restarts if single else 0,
                           extra_env=env)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return build_commands(assignment, cfg)


def log_path(work: Path, index: int, node_rank: int) -> Path:
    return work / (f"job_{index}.log" if node_rank == 0 else f"job_{index}.n{node_rank}.log")


class NodeProcesses:
    """The per-node processes of one job, seen as one: ``poll()`` is the first non-zero exit status, 0 once
    every node exited 0, else None."""

    def __init__(self, procs: Sequence[subprocess.Popen], names: Sequence[str]) -> None:
        self.procs, self.names = list(procs), list(names)

    @property
    def pid(self) -> int:
        return self.procs[0].pid

    def poll(self) -> int | None:
        codes = [p.poll() for p in self.procs]
        failed = [c for c in codes if c not in (None, 0)]
        if failed:
            return failed[0]
        return 0 if all(c == 0 for c in codes) else None

    def wait(self, timeout: float | None = None) -> int | None:
        for p in self.procs:
            p.wait(timeout=timeout)
        return self.poll()

    def terminate(self, grace_s: float = 15.0) -> None:
        """SIGTERM every node's process group, SIGKILL what is left after ``grace_s``."""
        live = [p for p in self.procs if p.poll() is None]
        for p in live:
            _signal_group(p, signal.SIGTERM)
        for p in live:
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def start_processes(commands: Sequence[NodeCommand], workdir: Path, work: Path, index: int) -> NodeProcesses:
    """Start every node's command (local: subprocess, remote: ssh), each in its own session."""
    procs = []
    for cmd in commands:
        argv, env = process_argv(cmd, str(workdir))
        with open(log_path(work, index, cmd.node_rank), "w") as log:
            procs.append(subprocess.Popen(argv, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        logger.debug("job %d node %d (%s on %s): %s", index, cmd.node_rank, cmd.node_name, cmd.host, cmd.shell())
    return NodeProcesses(procs, [c.node_name for c in commands])


class LocalBackend:
    """Run jobs through the launcher from this machine (local subprocesses, ssh for remote hosts)."""

    overlap = True          # the next job may start up while the previous one checkpoints

    def start(self, commands: Sequence[NodeCommand], assignment: Assignment, work: Path, index: int,
              workdir: Path, after: object = None) -> NodeProcesses:
        return start_processes(commands, workdir, work, index)
