"""What a training process does for sailor-elastic: timing events, the stop request, append-mode metrics,
and (tests only) fault injection.

* Events: JSON lines ``{"event", "t_unix_s", ...}`` appended by global rank 0 to ``--elastic-events``:
  ``process_start`` (first line of the script), ``dist_ready``, ``model_ready``, ``waiting`` (with ``--elastic-wait``: ready to load,
  waiting for the previous job to commit its checkpoint), ``loaded`` (with
  ``load_s``), ``step`` (every iteration: ``iteration``, ``loss``, ``first_sample``, ``consumed_samples``
  = samples consumed after it), ``first_iteration`` (end of the first iteration of this process), ``stop_seen``, ``saved``
  (with ``save_s``), ``exit``. The controller turns them into per-step reconfiguration timings.
* Stop request: rank 0 reads ``--elastic-control`` after every iteration; the word ``stop`` in it makes
  every rank (one MAX all-reduce of a flag) save a checkpoint and exit 0; ``hold N`` pauses the job after
  iteration N until the controller decides (deterministic trace replays).
* Faults (``SAILOR_FAULT_INJECT``, tests only): ``attempt=A,rank=R,iteration=I,when=step|save|start``
  with optional ``job=K`` (only in sailor-elastic's job K: ``SAILOR_ELASTIC_JOB``) and
  ``action=kill|kill-node|sleep:S``, separated by ``;``. On torchrun restart attempt A
  (TORCHELASTIC_RESTART_COUNT), rank R acts during iteration I (``step``), after writing its first checkpoint
  file of iteration I (``save``), or once the model is built, before loading (``start``; I is ignored).
  ``kill`` SIGKILLs the rank; ``kill-node`` SIGKILLs its torchrun agent and every worker of that agent (the
  node dies); ``sleep:S`` pauses the rank S seconds (a slow checkpoint).
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

PROCESS_START_S = time.time()


class EventLog:
    """Append-only JSON lines (a no-op unless ``path`` is set and this is rank 0)."""

    def __init__(self, path: str | None, rank: int) -> None:
        self.path = path if rank == 0 else None
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    def emit(self, event: str, t_unix_s: float | None = None, **fields: Any) -> None:
        if not self.path:
            return
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        rec = {"event": event, "t_unix_s": time.time() if t_unix_s is None else t_unix_s,
               "pid": os.getpid(), "attempt": self.attempt, **fields}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")


def _read_control(control_file: str) -> list[str]:
    try:
        return Path(control_file).read_text(encoding="utf-8").split()
    except OSError:
        return []


def _rank0_action(control_file: str, done: int, hold_timeout_s: float) -> bool:
    """True = stop. ``hold N`` with ``done >= N`` waits here until the file says something else."""
    deadline, held = time.monotonic() + hold_timeout_s, False
    while True:
        words = _read_control(control_file)
        if words[:1] == ["stop"]:
            return True
        if words or not held:      # an empty read while held = the file is being rewritten: keep waiting
            held = len(words) == 2 and words[0] == "hold" and words[1].isdigit() and done >= int(words[1])
        if not held or time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def stop_requested(control_file: str | None, rank: int, world_group: Any, done: int = 0,
                   hold_timeout_s: float = 60.0) -> bool:
    """Collective when ``control_file`` is set: True on every rank if rank 0 reads ``stop`` in it.

    ``hold N`` (written by sailor-elastic replaying a trace in iterations) pauses the job once ``N``
    iterations are done until the controller answers ``stop`` or anything else (e.g. ``run``); the other
    ranks wait in the all-reduce meanwhile (keep ``hold_timeout_s`` below the collective timeout)."""
    if not control_file:
        return False
    import torch
    import torch.distributed as dist
    flag = 1.0 if rank == 0 and _rank0_action(control_file, done, hold_timeout_s) else 0.0
    t = torch.tensor([flag])
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=world_group)
    return bool(t.item() > 0)


def wait_for_go(path: str | None, rank: int, timeout_s: float) -> None:
    """Rank 0 waits until ``path`` exists (the other ranks wait in the load's broadcast meanwhile)."""
    if not path or rank != 0:
        return
    deadline = time.monotonic() + timeout_s
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank 0: no go signal ({path}) within {timeout_s:.0f} s")
        time.sleep(0.02)


class MetricsAppender:
    """Per-iteration JSON lines from rank 0; a resumed (--load) or restarted run appends to the file.

    Each line is the runtime's StepMetrics (schema unchanged); sample accounting goes to the event log."""

    def __init__(self, path: str | None, rank: int, append: bool) -> None:
        self._fh = None
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        if path and rank == 0:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(path, "a" if append or self.attempt > 0 else "w", encoding="utf-8")

    def write(self, metrics: Any) -> None:
        if self._fh is None:
            return
        from dataclasses import asdict
        rec = asdict(metrics)
        self._fh.write(json.dumps(rec) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def parse_faults(spec: str) -> list[dict[str, Any]]:
    faults = []
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        kv = dict(item.split("=", 1) for item in part.split(","))
        faults.append({"attempt": int(kv["attempt"]), "rank": int(kv["rank"]),
                       "iteration": int(kv.get("iteration", "-1")), "when": kv.get("when", "step"),
                       "job": int(kv["job"]) if "job" in kv else None, "action": kv.get("action", "kill")})
    return faults


def _kill_node() -> None:
    """SIGKILL this worker's torchrun agent and all of the agent's workers (Linux /proc), then itself."""
    agent = os.getppid()
    workers: list[int] = []
    for task in Path(f"/proc/{agent}/task").glob("*/children"):
        workers += [int(x) for x in task.read_text().split()]
    os.kill(agent, signal.SIGKILL)
    for pid in workers:
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    os.kill(os.getpid(), signal.SIGKILL)


class FaultInjector:
    """Tests only: kill or pause this process at a chosen point (see the module docstring)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        job = os.environ.get("SAILOR_ELASTIC_JOB")
        spec = os.environ.get("SAILOR_FAULT_INJECT", "")
        self.faults = [f for f in parse_faults(spec) if f["attempt"] == attempt and f["rank"] == rank
                       and (f["job"] is None or str(f["job"]) == job)]
        for f in self.faults:
            if f["when"] == "start":
                self._act(f)

    @staticmethod
    def _act(f: dict[str, Any]) -> None:
        if f["action"] == "kill-node":
            _kill_node()
        elif f["action"].startswith("sleep:"):
            time.sleep(float(f["action"][6:]))
        else:
            os.kill(os.getpid(), signal.SIGKILL)

    def __call__(self, when: str, iteration: int) -> None:
        for f in self.faults:
            if f["when"] == when and f["iteration"] == iteration:
                self._act(f)
