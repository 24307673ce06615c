"""``--warm-standby``: start single-node local jobs by forking them from a warm interpreter
(:mod:`megatron_sailor.train.standby`, which has imported torch, megatron-core and the runtime) instead of
torchrun + fresh interpreters. The controller talks to it through files in ``WORK/standby`` (see that
module). Jobs on several nodes or on remote hosts still go through :class:`launch.elastic.jobs.LocalBackend`.

A forked job has no torchrun agent: a rank that dies makes the standby kill its siblings and the controller
relaunches the job (a failure); torchrun's in-place restarts (``--max-restarts``) do not apply.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

from launch.assign import Assignment
from launch.elastic.jobs import LocalBackend
from planner.ports import free_port
from launch.runner import is_local_host
from launch.torchrun_cmds import NodeCommand

logger = logging.getLogger(__name__)
REPO = Path(__file__).resolve().parents[2]


class WarmJob:
    """A job forked by the standby: ``poll()`` reads ``job_K.rc``; ``terminate()`` signals the ranks."""

    def __init__(self, d: Path, name: str) -> None:
        self.d, self.name = d, name

    @property
    def procs(self) -> list:
        """The ranks (each leads its own process group), for the controller's state file."""
        return [SimpleNamespace(pid=p) for p in self.pids()]

    def pids(self) -> list[int]:
        try:
            return json.loads((self.d / f"{self.name}.pids").read_text())
        except (OSError, ValueError):
            return []

    def poll(self) -> int | None:
        try:
            codes = json.loads((self.d / f"{self.name}.rc").read_text())["codes"]
        except (OSError, ValueError, KeyError):
            return None
        return next((c for c in codes if c != 0), 0)

    def terminate(self, grace_s: float = 15.0) -> None:
        deadline = time.monotonic() + grace_s
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                try:
                    os.killpg(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            while self.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.poll() is not None:
                return
            deadline = time.monotonic() + 5.0


class WarmBackend:
    overlap = True

    def __init__(self, work: Path, env: dict[str, str] | None = None) -> None:
        self.d = work / "standby"
        self.env = env or {}
        self.fallback = LocalBackend()
        self.proc: subprocess.Popen | None = None

    def ensure_started(self) -> None:
        if self.proc is not None:
            return
        self.d.mkdir(parents=True, exist_ok=True)
        for stale in self.d.iterdir():
            stale.unlink()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
                   **self.env)
        log = open(self.d.parent / "standby.log", "a")
        self.proc = subprocess.Popen([sys.executable, "-m", "megatron_sailor.train.standby", str(self.d)], cwd=REPO,
                                     env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        logger.info("warm standby started (pid %d)", self.proc.pid)

    def wait_ready(self, timeout_s: float = 600.0) -> None:
        self.ensure_started()
        deadline = time.monotonic() + timeout_s
        while not (self.d / "ready").exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"warm standby did not start (see {self.d.parent / 'standby.log'})")
            time.sleep(0.05)

    def start(self, commands: Sequence[NodeCommand], assignment: Assignment, work: Path, index: int,
              workdir: Path, after: object = None):  # noqa: ANN201
        if len(commands) != 1 or not is_local_host(commands[0].host):
            return self.fallback.start(commands, assignment, work, index, workdir, after)
        self.wait_ready()
        cmd = commands[0]
        argv = list(cmd.argv)
        script_args = argv[argv.index("--sailor-plan"):]
        n = assignment.nodes[0].nproc
        base = {**dict(cmd.env), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n), "GROUP_RANK": "0",
                "TORCHELASTIC_RESTART_COUNT": "0"}
        ranks = [{"env": {**base, "RANK": str(r), "LOCAL_RANK": str(r)}, "argv": script_args} for r in range(n)]
        name = f"job_{index}"
        tmp = self.d / f"{name}.json.tmp"
        tmp.write_text(json.dumps({"ranks": ranks, "log": str(work / f"job_{index}.log")}))
        os.replace(tmp, self.d / f"{name}.json")
        return WarmJob(self.d, name)

    def close(self) -> None:
        if self.proc is None:
            return
        (self.d / "shutdown").write_text("")
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
