"""sailor-elastic's state file ``WORK/state.json`` (written atomically: temp file, fsync, ``os.replace``).

It records what a restarted controller needs: the next job index (logs are never overwritten), the failure
count, the measured reconfiguration cost, and the jobs that were running (their index, control / go / events
files and process-group ids, or SLURM job ids). A controller started on a work folder whose state says it
did not finish first stops those jobs: a job that had not taken over yet is terminated, the running one gets
``stop`` in its control file (it checkpoints at its next iteration boundary and exits), and after
``timeout_s`` whatever is left is killed. Training then resumes from the newest committed checkpoint.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)
NAME = "state.json"


def save(work: Path, state: dict[str, Any]) -> None:
    tmp = work / (NAME + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, work / NAME)


def load(work: Path) -> dict[str, Any] | None:
    """The state of a controller that did not finish (None: no state, or it finished)."""
    try:
        state = json.loads((work / NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("finished"):
        return None
    return state


def job_record(job: Any, took_over: bool) -> dict[str, Any]:
    """What a restarted controller needs to stop ``job`` (``took_over``: it is the training job, not a
    successor still waiting for its go file)."""
    procs = getattr(job.proc, "procs", [])
    return {"index": job.index, "control": str(job.control), "pgids": [p.pid for p in procs],
            "slurm_id": getattr(job.proc, "job_id", None), "took_over": took_over}


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _slurm_alive(job_id: str) -> bool:
    try:
        out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(out.stdout.strip())


def _signal(pgids: list[int], sig: int) -> None:
    for g in pgids:
        try:
            os.killpg(g, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_left_over(work: Path, state: dict[str, Any], timeout_s: float) -> None:
    """Stop the jobs a dead controller left running (see the module docstring)."""
    jobs = state.get("live_jobs", [])
    for rec in jobs:
        if rec["took_over"]:
            tmp = Path(rec["control"] + ".tmp")
            tmp.write_text("stop\n")
            os.replace(tmp, rec["control"])
        else:
            _signal(rec["pgids"], signal.SIGTERM)
            if rec.get("slurm_id"):
                subprocess.run(["scancel", str(rec["slurm_id"])], capture_output=True, timeout=30)
    deadline = time.monotonic() + timeout_s
    for rec in jobs:
        while time.monotonic() < deadline and (any(_alive(g) for g in rec["pgids"])
                                               or (rec.get("slurm_id") and _slurm_alive(str(rec["slurm_id"])))):
            time.sleep(0.2)
        if any(_alive(g) for g in rec["pgids"]):
            logger.warning("job %d did not stop within %.0f s; killing it", rec["index"], timeout_s)
            _signal(rec["pgids"], signal.SIGKILL)
        logger.info("job %d left by the previous controller has stopped", rec["index"])
