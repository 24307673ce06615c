"""Middle-stage layer counts that contain an optimum of every contiguous split (docs/PLANNER.md 1, item 4).

Contract: pure functions on integers, no cost model. For a pool plan with first and last stage sizes fixed,
``R`` layers on ``n`` middle stages and per-middle-stage memory caps ``caps`` (the most layers middle stage
``s`` can hold; non-decreasing in ``s`` because later stages keep fewer micro-batches in flight),
:func:`middle_candidates` returns the *front-loaded* middles, one per largest stage size ``M``:
:func:`front_loaded` gives every middle stage ``min(caps_s, M)`` layers from the front while leaving one layer
to each later stage. Among all middles with ``1 <= c_s <= min(caps_s, M)`` summing to ``R`` it has the
largest prefix sums (so the smallest suffix sums: the 1F1B round-trip bounds are non-decreasing in them) and
its largest stage is <= ``M`` (busiest stage, largest gradient and slowest optimizer step are non-decreasing
in it). docs/PLANNER.md 2.1, "Uneven middle stages", states the argument and its assumptions;
``tests/planner/test_uneven_middle.py`` checks it against every contiguous split with ``simulate``.
"""
from __future__ import annotations

from collections.abc import Sequence


def front_loaded(total: int, caps: Sequence[int], level: int) -> tuple[int, ...] | None:
    """Middle sizes ``c`` with ``1 <= c_s <= min(caps[s], level)``, ``sum(c) == total`` and the largest prefix
    sums (each one at once), or None when no such middle exists."""
    n = len(caps)
    if n == 0:
        return () if total == 0 else None
    room = [min(int(c), level) for c in caps]
    if min(room) < 1 or sum(room) < total or total < n:
        return None
    out, used = [], 0
    for s, u in enumerate(room):
        c = min(u, total - used - (n - 1 - s))      # leave one layer to every later middle stage
        out.append(c)
        used += c
    return tuple(out)


def middle_candidates(total: int, caps: Sequence[int]) -> list[tuple[int, ...]]:
    """:func:`front_loaded` at every level ``M`` from ``ceil(total / n)`` to ``total - n + 1``, without
    repeats (a level above every cap gives the same middle as the largest cap)."""
    n = len(caps)
    if n == 0:
        return [()] if total == 0 else []
    seen: dict[tuple[int, ...], None] = {}
    for level in range(-(-total // n), total - n + 2):
        c = front_loaded(total, caps, level)
        if c is not None:
            seen.setdefault(c, None)
    return list(seen)
