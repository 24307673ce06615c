"""A start-up status line for ``python -m launch.runner --status LABEL``: on a terminal, a transient rich
spinner ``LABEL ... N s`` on stderr from the start of the command until its first line of output (torch
imports, rendezvous and process-group creation take seconds on CPU ranks); off a terminal, nothing.

Contract: :class:`StartupStatus` ``.start()`` / ``.done()`` (idempotent, thread-safe); :func:`relay_stdout`
forwards a child's stdout line by line to ours, calling ``done()`` before the first line. Torchrun warning
lines (``W1201 ...``, the ``*****`` banner about OMP_NUM_THREADS) are recognised by :func:`is_torchrun_noise`.
"""
from __future__ import annotations

import re
import sys
import threading
from typing import IO, Any

_NOISE = re.compile(r"^(W\d|\*{3})|OMP_NUM_THREADS")


def is_torchrun_noise(line: str) -> bool:
    """torchrun's own warning lines (``W...`` log lines, the ``***`` banner, the OMP_NUM_THREADS notice)."""
    return bool(_NOISE.search(line))


class StartupStatus:
    """A spinner on stderr while a command starts (only when stderr is a terminal)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty()
        self._lock = threading.Lock()
        self._bar: Any = None

    def start(self) -> "StartupStatus":
        if self.enabled:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
            with self._lock:
                self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                     console=Console(stderr=True), transient=True, redirect_stdout=False,
                                     redirect_stderr=False)
                self._bar.add_task(self.label, total=None)
                self._bar.start()
        return self

    def done(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None


def relay_stdout(stream: IO[str], status: StartupStatus, out: IO[str] | None = None) -> threading.Thread:
    """Forward ``stream`` to ``out`` (default stdout) line by line in a thread; ``status.done()`` first."""
    def pump() -> None:
        for line in stream:
            status.done()
            target = out or sys.stdout
            target.write(line)
            target.flush()
    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread
