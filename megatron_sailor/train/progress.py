"""Progress display for long command-line waits (rich, on stderr, only when stderr is a terminal).

Contract: the runtime side's name for :mod:`planner.progress` (one implementation): :func:`progress_iter`
yields the items of an iterable unchanged, showing a transient progress bar labelled ``label`` on a
terminal; :func:`status` shows a transient spinner with elapsed seconds around a wait with no count.
Nothing is printed when stderr is a file or a pipe, so logs and tests see only the command's own output.
"""
from __future__ import annotations

from planner.progress import on_terminal, progress_iter, status

__all__ = ["on_terminal", "progress_iter", "status"]
