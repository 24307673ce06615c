"""Progress display for long command-line waits (rich, on stderr, only when stderr is a terminal).

Contract: :func:`progress_iter` yields the items of an iterable unchanged; on a terminal it shows a
transient rich progress bar labelled ``label`` (nothing is printed when stderr is a file or a pipe, so
logs and tests see only the command's own output).
"""
from __future__ import annotations

import sys
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def progress_iter(items: Iterable[T], label: str, total: int | None = None) -> Iterator[T]:
    if not sys.stderr.isatty():
        yield from items
        return
    from rich.console import Console
    from rich.progress import Progress
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        for item in items:
            yield item
            bar.advance(task)
