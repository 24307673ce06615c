"""A search's time budget, its progress reports and the best-K holder with an external incumbent.

Contract: :class:`Budget` says when a phase of :func:`planner.search.engine.plan_search` must stop (never
before a first plan is held: the limit is soft until then) and reports progress, rate-limited, to a callback
``progress(done, total, elapsed_s, phase)``. :class:`TopK` keeps the K best candidates of the exact search;
an *incumbent* list (plans of the declared space found first by a restricted search) only lowers its pruning
threshold, nudged up by a relative 1e-9 so that a plan tying with the incumbent is still found: when the
exact search finishes, the returned candidates are the ones it returns without incumbents, up to which of
exactly equally scored plans is returned (on clusters of >= 8 pools the order tasks are opened in changes;
docs/PLANNER.md 2.4).
"""
from __future__ import annotations

import heapq
import time
from typing import Callable

import numpy as np

from planner.search.space import Candidate

Progress = Callable[[int, int, float, str], None]     # progress(done, total, elapsed_s, phase)
INCUMBENT_SLACK = 1e-9
LATE = 1 << 40


class OutOfTime(Exception):
    """Raised inside a phase when its budget is spent (and a plan is held)."""


class Budget:
    """Deadlines (fractions of ``limit_s``; None: no limit) and rate-limited progress reports."""

    def __init__(self, limit_s: float | None, progress: Progress | None, t0: float | None = None,
                 every_s: float = 0.2) -> None:
        self.t0 = time.perf_counter() if t0 is None else t0
        self.limit_s = limit_s
        self.progress = progress
        self.every_s = every_s
        self._last = -np.inf

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.t0

    def expired(self, share: float = 1.0) -> bool:
        """``share`` of the usable time has passed: the limit less a reserve (10 %, at most 5 s) for the bound
        and for building and checking the plans after the search."""
        if self.limit_s is None:
            return False
        return self.elapsed_s() >= share * (self.limit_s - min(5.0, 0.1 * self.limit_s))

    def tick(self, phase: str, done: int, total: int) -> None:
        if self.progress is None:
            return
        now = self.elapsed_s()
        if now - self._last >= self.every_s:
            self._last = now
            self.progress(done, total, now, phase)


class TopK:
    """The K best candidates (ties: fewer GPUs, then the earlier found), plus an incumbent threshold."""

    def __init__(self, k: int) -> None:
        self.k = k
        self._heap: list[tuple[float, int, int, Candidate]] = []
        self._n = 0
        self.incumbents: list[Candidate] = []
        self._ext = np.inf

    def own_threshold(self) -> float:
        return -self._heap[0][0] if len(self._heap) >= self.k else np.inf

    def threshold(self) -> float:
        return min(self.own_threshold(), self._ext)

    def set_incumbents(self, cands: list[Candidate]) -> None:
        """Plans of the declared space found by a restricted search: with K of them, nothing worse than the
        K-th (plus a relative 1e-9) can enter the final K."""
        self.incumbents = list(cands)
        if len(cands) >= self.k:
            kth = sorted(c.key for c in cands)[self.k - 1]
            self._ext = kth * (1 + INCUMBENT_SLACK) if kth > 0 else kth * (1 - INCUMBENT_SLACK)

    def has_plan(self) -> bool:
        return bool(self._heap) or bool(self.incumbents)

    def best(self) -> Candidate:
        """The lowest-key plan held, incumbents included (call only when :meth:`has_plan`)."""
        return min(self.sorted()[:1] + self.incumbents, key=lambda c: c.key)

    def late(self) -> "_Late":
        """A view whose pushes lose ties against every later ordinary push (chain plans searched before the
        pool plans keep the tie order of a search that scores pool plans first)."""
        return _Late(self)

    def push(self, cand: Candidate, late: bool = False) -> None:
        self._n += 1
        item = (-cand.key, -cand.gpus, -(self._n + (LATE if late else 0)), cand)
        if len(self._heap) < self.k:
            heapq.heappush(self._heap, item)
        elif item > self._heap[0]:
            heapq.heapreplace(self._heap, item)

    def merge_incumbents(self) -> None:
        """After a search stopped at its deadline: add the incumbents it has not found itself (they lose
        ties). A finished search needs none: the incumbents are plans of the space it searched exactly."""
        held = {_shape(c) for *_, c in self._heap}
        for c in self.incumbents:
            if _shape(c) not in held:
                self.push(c)

    def best_key(self) -> float:
        """The best key held, incumbents included."""
        own = -max(self._heap)[0] if self._heap else np.inf
        return min([own] + [c.key for c in self.incumbents])

    def sorted(self) -> list[Candidate]:
        return [c for *_, c in sorted(self._heap, key=lambda x: (-x[0], -x[1], -x[2]))]


class _Late:
    def __init__(self, top: TopK) -> None:
        self.top, self.k = top, top.k

    def threshold(self) -> float:
        return self.top.threshold()

    def push(self, cand: Candidate) -> None:
        self.top.push(cand, late=True)


def _shape(c: Candidate) -> tuple:
    return (c.num_stages, c.mbs, c.layers_per_stage, c.pools, c.chain, c.recompute, c.microbatches)
