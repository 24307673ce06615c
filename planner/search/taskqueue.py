"""The engine's tasks, built unit by unit when the best-first search reaches them (docs/PLANNER.md 2.3,
*Lazy task list*).

Contract: :class:`TaskQueue` holds every unit of the task loop with its bound (:mod:`planner.search.unitbound`);
:meth:`TaskQueue.start` gives a heap of the units, and popping a unit gives its tasks
(:func:`planner.search.tasks.unit_tasks`, built once and kept for later passes) as heap entries keyed by the largest
of their cheap bound, the unit's bound and their capacity floor (:func:`planner.search.unitbound.task_floors`).
Every entry is ``(key, kind, cheap bound, unit order, position, ...)``: a unit's entry sorts before each of its
tasks' (its key is <= theirs and its kind -1 < 0), so a task is never keyed below an entry popped before its unit.
A unit whose bound is >= the threshold when popped is never built.
"""
from __future__ import annotations

import heapq

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.space import Objective, SearchSpace
from planner.search.tasks import Tables, Task, unit_tasks
from planner.search.unitbound import Unit, task_floors, unit_bounds
from planner.simulator.settings import SimContext

UNIT = -1       # the kind of a unit's heap entry (tasks: 0 unrefined, 1 refined, 2 floored)


class TaskQueue:
    """The units of one cluster and the tasks of those built so far."""

    def __init__(self, ctx: SimContext, cluster: ClusterSpec, tables: Tables,
                 options: dict[str, list[tuple[int, int]]], gbs: int, objective: Objective,
                 space: SearchSpace) -> None:
        self.args = (ctx, cluster, tables, options, gbs, objective, space)
        self.units = unit_bounds(ctx, cluster, tables, options, gbs, objective, space)
        self._tasks: dict[int, list[Task]] = {}
        self._floors: dict[int, list[float]] = {}
        self._built = 0         # tasks built so far (the engine reads it at every step: kept, not summed)

    @property
    def built(self) -> int:
        """Tasks built so far."""
        return self._built

    def live_units(self) -> int:
        """Units with a finite bound."""
        return sum(1 for u in self.units if u.bound < np.inf)

    def start(self) -> list[tuple]:
        """A heap of every unit with a finite bound."""
        heap = [(u.bound, UNIT, u.bound, u.order, 0) for u in self.units if u.bound < np.inf]
        heapq.heapify(heap)
        return heap

    def tasks(self, order: int) -> list[Task]:
        """The tasks of unit ``order`` (built on first use)."""
        if order not in self._tasks:
            u: Unit = self.units[order]
            self._tasks[order] = unit_tasks(*self.args, u.num_stages, u.mbs, u.recompute, u.dist)
            self._built += len(self._tasks[order])
            ctx, cluster, tables, _, gbs, objective, _ = self.args
            self._floors[order] = task_floors(ctx, cluster, tables, self._tasks[order], gbs, objective)
        return self._tasks[order]

    def expand(self, heap: list[tuple], entry: tuple) -> None:
        """Push the tasks of the unit of ``entry`` (popped from ``heap``)."""
        key, _, _, order, _ = entry
        for j, (t, floor) in enumerate(zip(self.tasks(order), self._floors[order])):
            heapq.heappush(heap, (max(t.bound, key, floor), 0, t.bound, order, j))

    def task(self, entry: tuple) -> Task:
        return self._tasks[entry[3]][entry[4]]

    def build_all(self) -> None:
        """Build every unit's tasks (their stage arrays record the smallest memory overflow, which an empty
        result reports: :attr:`Tables.min_overflow_bytes`)."""
        for u in self.units:
            self.tasks(u.order)
