"""Progress display for command-line waits (rich, on stderr, only when stderr is a terminal); torch-free.

Contract: :func:`progress_iter` yields the items of an iterable unchanged and, on a terminal, shows a
transient progress bar labelled ``label``; :func:`status` is a context manager that, on a terminal, shows a
transient spinner with ``label`` and the elapsed seconds while its body runs (for a wait with no count);
:func:`progress_bar` is a context manager yielding ``update(completed)`` for a bar of ``total`` units that the
caller moves itself (seconds of a timed replay, bytes, ...); :func:`search_progress` yields the callback
``update(done, total, elapsed_s, phase)`` of a long search (a bar on a terminal; plain lines only when asked).
When stderr is a file or a pipe nothing is printed (except :func:`search_progress`'s lines, when asked), so
logs and tests see only the command's own output, and an error is still its one line.
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


@contextlib.contextmanager
def search_progress(prog: str, lines: bool = False) -> Iterator[Callable[..., None]]:
    """``update(done, total, elapsed_s, phase="searching")`` for a search that reports its own clock: on a
    terminal a transient bar (phase, done/total; an empty bar when total is 0) once it has run 1 s; with
    ``lines`` and no terminal, one plain ``PROG: N s: PHASE done/total`` line on stderr once it has run 3 s,
    then at most one per 10 s; otherwise nothing."""
    tty = on_terminal()
    state: dict = {"bar": None, "task": None, "next_line_s": 3.0}

    def update(done: int, total: int, elapsed_s: float, phase: str = "searching") -> None:
        text = f"{phase} {done}/{total}" if total else phase
        if not tty:
            if lines and elapsed_s >= state["next_line_s"]:
                state["next_line_s"] = elapsed_s + 10.0
                sys.stderr.write(f"{prog}: {elapsed_s:.0f} s: {text}\n")
                sys.stderr.flush()
            return
        if elapsed_s <= 1.0:
            return
        if state["bar"] is None:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            state["bar"] = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                                    console=Console(stderr=True), transient=True)
            state["bar"].start()
            state["task"] = state["bar"].add_task("", total=1)
        from rich.markup import escape
        state["bar"].update(state["task"], completed=done if total else 0, total=max(total, 1),
                            description=escape(text))

    try:
        yield update
    finally:
        if state["bar"] is not None:
            state["bar"].stop()
