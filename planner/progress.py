"""Progress display for command-line waits (rich, on stderr, only when stderr is a terminal); torch-free.

Contract: :func:`progress_iter` yields the items of an iterable unchanged and, on a terminal, shows a
transient progress bar labelled ``label``; :func:`status` is a context manager that, on a terminal, shows a
transient spinner with ``label`` and the elapsed seconds while its body runs (for a wait with no count);
:func:`progress_bar` is a context manager yielding ``update(completed)`` for a bar of ``total`` units that the
caller moves itself (seconds of a timed replay, bytes, ...).
When stderr is a file or a pipe nothing is printed, so logs and tests see only the command's own output.
Callers (CLIs, benchmarks): ``from planner.progress import progress_iter, status``::

    for case in progress_iter(cases, "cases", total=len(cases)): ...
    with status("drawing runs/timeline.png"): fig.savefig(...)
    with progress_bar("replaying the trace", total=480) as update: ... update(elapsed_s) ...
"""
from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")


def on_terminal() -> bool:
    """Whether progress is shown (stderr is a terminal)."""
    return sys.stderr.isatty()


def progress_iter(items: Iterable[T], label: str, total: int | None = None) -> Iterator[T]:
    if not on_terminal():
        yield from items
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        for item in items:
            yield item
            bar.advance(task)


@contextlib.contextmanager
def status(label: str) -> Iterator[None]:
    if not on_terminal():
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        bar.add_task(label, total=None)
        yield


@contextlib.contextmanager
def progress_bar(label: str, total: float) -> Iterator[Callable[[float], None]]:
    if not on_terminal():
        yield lambda completed: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda completed: bar.update(task, completed=min(completed, total))
