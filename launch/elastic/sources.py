"""Availability sources for sailor-elastic: what GPUs the job may use now.

An availability is ``{"TYPE@ZONE": count}``. Sources:

* a Sailor JSON trace ``[{"Time": s, "GPUs": n}, ...]`` (one pool: ``--gpu-type`` / ``--zone``);
* a Sailor CSV trace (``,Timestamp,<GPU>_<zone>,...``; rows are timed relative to the first Timestamp);
* a file the cluster manager rewrites (a number, ``{"GPUs": n}`` or ``{"TYPE@ZONE": n, ...}``);
* a command to poll (its stdout in the same forms).

Trace times are seconds since the controller started, scaled by ``time_scale`` (``0.1`` replays a trace ten
times faster), or training iterations (``unit="iter"``: the availability changes when the job reaches that
iteration; deterministic replays for tests and demos).
"""
from __future__ import annotations

import csv
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from planner.errors import InputError

Availability = dict[str, int]


def pool_key(gpu_type: str, zone: str) -> str:
    return f"{gpu_type}@{zone}"


def total(av: Availability) -> int:
    return sum(av.values())


def parse_availability(text: str, default_pool: str, source: str) -> Availability:
    """A number, ``{"GPUs": n}`` or ``{"TYPE@ZONE": n}`` -> availability."""
    text = text.strip()
    try:
        value = json.loads(text)
    except ValueError:
        raise InputError(f"availability must be a number or a JSON object, got {text[:60]!r}",
                         source=source) from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {default_pool: int(value)}
    if isinstance(value, dict) and "GPUs" in value:
        return {default_pool: int(value["GPUs"])}
    if isinstance(value, dict) and all(isinstance(v, (int, float)) for v in value.values()):
        return {str(k): int(v) for k, v in value.items()}
    raise InputError(f"availability must be a number, {{\"GPUs\": n}} or {{\"TYPE@ZONE\": n}}, got {text[:60]!r}",
                     source=source)


class Source(Protocol):
    def poll(self, elapsed_s: float, iteration: int) -> Availability: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class TraceSource:
    """Step function over time (seconds or iterations)."""

    points: tuple[tuple[float, Availability], ...]   # ascending times
    unit: str = "s"                                  # "s" or "iter"
    time_scale: float = 1.0
    name: str = "trace"

    def poll(self, elapsed_s: float, iteration: int) -> Availability:
        now = iteration if self.unit == "iter" else elapsed_s / self.time_scale
        current = self.points[0][1]
        for t, av in self.points:
            if t <= now:
                current = av
        return dict(current)

    def describe(self) -> str:
        steps = ", ".join(f"{t:g}{'it' if self.unit == 'iter' else 's'}:{total(av)}" for t, av in self.points)
        return f"{self.name} [{steps}]"


def load_json_trace(path: str, default_pool: str) -> list[tuple[float, Availability]]:
    try:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read trace ({exc})", source=path) from None
    if not isinstance(rows, list) or not rows:
        raise InputError('expected a non-empty list [{"Time": s, "GPUs": n}, ...]', source=path)
    points = []
    for n, row in enumerate(rows):
        if not isinstance(row, dict) or "Time" not in row or "GPUs" not in row:
            raise InputError(f'row {n}: expected {{"Time": s, "GPUs": n}}, got {row!r}', source=path)
        if int(row["GPUs"]) < 0:
            raise InputError(f"row {n}: GPUs must be >= 0, got {row['GPUs']}", source=path)
        points.append((float(row["Time"]), {default_pool: int(row["GPUs"])}))
    return sorted(points, key=lambda p: p[0])


def load_csv_trace(path: str) -> list[tuple[float, Availability]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read trace ({exc})", source=path) from None
    reader = csv.DictReader(text.splitlines())
    cols = [c for c in (reader.fieldnames or []) if c and c != "Timestamp" and "_" in c]
    if not cols or "Timestamp" not in (reader.fieldnames or []):
        raise InputError("expected columns Timestamp and '<GPU>_<zone>'", source=path)
    points, t0 = [], None
    for n, row in enumerate(reader):
        try:
            t = float(row["Timestamp"])
            av = {pool_key(*c.split("_", 1)): int(float(row[c])) for c in cols}
        except (TypeError, ValueError):
            raise InputError(f"row {n}: not a number", source=path) from None
        t0 = t if t0 is None else t0
        points.append((t - t0, av))
    if not points:
        raise InputError("no rows", source=path)
    return points


def trace_source(path: str, default_pool: str, unit: str = "s", time_scale: float = 1.0) -> TraceSource:
    points = load_csv_trace(path) if path.endswith(".csv") else load_json_trace(path, default_pool)
    return TraceSource(tuple(points), unit=unit, time_scale=time_scale, name=Path(path).name)


@dataclass(frozen=True)
class FileSource:
    """A file rewritten by the cluster manager; an unreadable file keeps the last value."""

    path: str
    default_pool: str

    def poll(self, elapsed_s: float, iteration: int) -> Availability:
        return parse_availability(Path(self.path).read_text(encoding="utf-8"), self.default_pool, self.path)

    def describe(self) -> str:
        return f"file {self.path}"


def command_output(command: str, timeout_s: float) -> str:
    """Standard output of the operator's own ``--*-command`` (a command-line flag, run through the shell as
    written; never a string from a file); a failure is one InputError naming the command."""
    out = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=timeout_s)
    if out.returncode != 0:
        raise InputError(f"exit status {out.returncode}: {out.stderr.strip()[:200]}", source=command)
    return out.stdout


@dataclass(frozen=True)
class CommandSource:
    """A shell command printing the availability."""

    command: str
    default_pool: str
    timeout_s: float = 10.0

    def poll(self, elapsed_s: float, iteration: int) -> Availability:
        return parse_availability(command_output(self.command, self.timeout_s), self.default_pool, self.command)

    def describe(self) -> str:
        return f"command {self.command!r}"
