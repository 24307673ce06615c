"""Per-iteration metrics and their JSON-lines writer (global rank 0 writes)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class StepMetrics:
    iteration: int
    loss: float
    iteration_time_s: float
    tokens_per_s: float
    grad_norm: float
    skipped: bool = False        # fp16: the step was skipped on every rank (inf/nan gradient)
    loss_scale: float = 1.0      # the loss scale this iteration used (fp16), 1 otherwise
    memory: dict | None = None   # this rank's bytes (runtime.memory); the metrics file lists every rank's


class MetricsWriter:
    """Appends one JSON object per iteration to a file; a no-op when ``path`` is None."""

    def __init__(self, path: str | None) -> None:
        self._fh: IO[str] | None = None
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(path, "w", encoding="utf-8")

    def write(self, m: StepMetrics) -> None:
        if self._fh is not None:
            self._fh.write(json.dumps(asdict(m)) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
