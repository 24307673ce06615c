"""The cyclic garbage collector paused while a command-line tool starts (imports its modules, loads its inputs).

Start-up allocates several hundred thousand long-lived objects (modules, classes, functions, the loaded data);
each allocation burst triggers a collection that walks them, and none of them is garbage. ``paused()`` turns
the collector off for that phase; ``resume()`` (called once the inputs are loaded, before the search) moves
every object alive then to the permanent generation (:func:`gc.freeze`), so later collections walk only what
the work itself allocates, and turns the collector back on. On leaving ``paused()`` the previous state is
restored: frozen objects are unfrozen (if this module froze them) and the collector is on again if it was.
Nothing a program computes depends on when the collector runs; only CPU time does (about 0.02 s of a small
``sailor-plan`` run, more on a long one).
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def paused() -> Iterator[Callable[[], None]]:
    """``with paused() as resume:`` the collector is off until ``resume()`` freezes what is alive and turns it
    back on; on exit the collector's state is as it was on entry."""
    was_enabled = gc.isenabled()
    froze = False

    def resume() -> None:
        nonlocal froze
        if was_enabled and not froze:
            gc.freeze()
            froze = True
            gc.enable()

    gc.disable()
    try:
        yield resume
    finally:
        if froze:
            gc.unfreeze()
        if was_enabled:
            gc.enable()
