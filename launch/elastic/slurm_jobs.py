"""sailor-elastic on SLURM: every job is a batch script (a heterogeneous job, one component per pool of
identical nodes: :func:`launch.slurm.render_sbatch`) written to ``WORK/job_K.sbatch`` and submitted with
``sbatch --parsable``; the next job is submitted at once with ``--dependency=afterany:<previous id>``, so
SLURM starts it when the previous one, told to stop through its control file, has checkpointed and ended
(no overlap: the nodes are the previous job's). ``squeue -h -j ID -o %T`` says whether a job is still queued
or running, ``sacct -j ID -n -X -P -o ExitCode`` how it ended; ``scancel ID`` stops it. The work folder
must be on a filesystem the nodes share (control, events, metrics and checkpoint files).
"""
from __future__ import annotations

import dataclasses
import logging
import subprocess
import time
from pathlib import Path
from typing import Sequence

from planner.errors import InputError

from launch.assign import Assignment
from launch.slurm import SlurmOptions, render_sbatch
from launch.torchrun_cmds import NodeCommand

logger = logging.getLogger(__name__)


def _run(argv: list[str], timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)


class SlurmJob:
    """A submitted job seen like a process: ``poll()`` is None while queued or running, then its exit code."""

    def __init__(self, job_id: str, log: Path, min_poll_s: float = 2.0) -> None:
        self.job_id, self.log, self.min_poll_s = job_id, log, min_poll_s
        self._rc: int | None = None
        self._last_poll = 0.0

    @property
    def procs(self) -> list:
        return []

    def poll(self) -> int | None:
        if self._rc is not None or time.monotonic() - self._last_poll < self.min_poll_s:
            return self._rc
        self._last_poll = time.monotonic()
        try:
            if _run(["squeue", "-h", "-j", self.job_id, "-o", "%T"]).stdout.strip():
                return None
            out = _run(["sacct", "-j", self.job_id, "-n", "-X", "-P", "-o", "ExitCode"]).stdout.split()
        except (OSError, subprocess.SubprocessError) as exc:
            logger.warning("cannot query SLURM job %s (%s)", self.job_id, exc)
            return None
        try:
            self._rc = int(out[0].split(":")[0]) if out else 1
        except ValueError:
            self._rc = 1
        return self._rc

    def terminate(self) -> None:
        if self._rc is None:
            _run(["scancel", self.job_id])
            self._rc = -15


class FailedSubmission:
    """A job that could not be submitted: it 'exited' with status 1 and its log says why."""

    job_id = None
    procs: list = []

    def poll(self) -> int:
        return 1

    def terminate(self) -> None:
        return None


@dataclasses.dataclass
class SlurmBackend:
    opts: SlurmOptions
    min_poll_s: float = 2.0
    overlap = False            # the next job waits for the previous one's nodes: stop it at once

    def start(self, commands: Sequence[NodeCommand], assignment: Assignment, work: Path, index: int,
              workdir: Path, after: object = None) -> SlurmJob | FailedSubmission:
        log = work / f"job_{index}.log"
        if any(c.isspace() for c in str(log)):
            raise InputError(f"work folder {work} contains white space: SLURM #SBATCH lines cannot hold it")
        script = work / f"job_{index}.sbatch"
        script.write_text(render_sbatch(assignment, commands, dataclasses.replace(self.opts, output=str(log))))
        prev = getattr(getattr(after, "proc", None), "job_id", None)
        argv = ["sbatch", "--parsable", *([f"--dependency=afterany:{prev}"] if prev else []), str(script)]
        try:
            out = _run(argv)
        except (OSError, subprocess.SubprocessError) as exc:
            out = subprocess.CompletedProcess(argv, 127, "", str(exc))
        job_id = out.stdout.strip().split(";")[0]
        if out.returncode != 0 or not job_id.isdigit():
            log.write_text(f"error: sbatch {script}: exit status {out.returncode}: "
                           f"{(out.stderr or out.stdout).strip()[:300]}\n")
            return FailedSubmission()
        logger.info("job %d submitted to SLURM as %s%s (%s)", index, job_id,
                    f" after {prev}" if prev else "", script)
        return SlurmJob(job_id, log, self.min_poll_s)
