"""Tied input/output embeddings in the search: the shared weight's gradient all-reduce, priced exactly as the
simulator prices it (:func:`planner.simulator.tied.tied_sync_of_replicas`, called on the first and last stages'
replica lists the built plan will have and stage 0's sync mode as the search models it, so there is one
implementation of the rule).

The all-reduce depends only on the replicas of the first and last stages (their types, zones, TP degrees and
order) and on stage 0's mode, not otherwise on the layer split, so it is memoised per (layout, mode). It adds
a non-negative time and egress cost after the stage syncs; the task bounds, the cheap row keys and the row and
task floors add a lower bound on its time per pipeline count (:func:`planner.search.syncbound.tied_lower_bound`,
through the task's sync bound per d); the largest-stage sync bound just before the exact pass leaves it out.
Pool rows (many plans at once) are priced by :func:`planner.search.tiedvec.tied_rows`, a numpy mirror of the
same rule tested equal to it on random rows.
"""
from __future__ import annotations

from planner.plan import Replica
from planner.simulator.settings import SimContext
from planner.simulator.tied import tied_sync_of_replicas


class TiedSync:
    """Memoised (seconds, egress USD) of the tied-embedding all-reduce per first/last-stage layout."""

    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        self._memo: dict[tuple, tuple[float, float]] = {}
        self._chains: dict[tuple, tuple[float, float]] = {}

    def of(self, first: tuple[Replica, ...], last: tuple[Replica, ...], num_stages: int, mode: str = "flat",
           dist_bytes: int | None = None) -> tuple[float, float]:
        """``mode``: stage 0's sync mode, which the tied all-reduce follows (planner.layout's rule);
        ``dist_bytes``: the distributed optimizer's bytes per parameter element (None: off)."""
        key = (first, last, num_stages, mode, dist_bytes)
        if key not in self._memo:
            self._memo[key] = self._price(first, last, num_stages, mode, dist_bytes)
        return self._memo[key]

    def _price(self, first: tuple[Replica, ...], last: tuple[Replica, ...], num_stages: int, mode: str,
               dist_bytes: int | None) -> tuple[float, float]:
        """:meth:`of` without its memo (the tests compare :mod:`planner.search.tiedvec` with it row by row)."""
        t, moved = tied_sync_of_replicas(first, last, self.ctx, mode, dist_bytes) if num_stages > 1 \
            else (0.0, {})
        usd = sum(b * self.ctx.network.egress_usd_per_byte(za, zb) for (za, zb), b in moved.items())
        return float(t), float(usd)

    def chain(self, first: tuple[str, str, int], last: tuple[str, str, int], d: int, num_stages: int,
              dist_bytes: int | None = None) -> tuple[float, float]:
        """A chain plan: d pipelines, stage 0 on ``first`` and the last stage on ``last`` ((type, zone, tp)).
        Stage 0's replicas share one zone, so its sync (and the tied all-reduce's mode) is flat."""
        key = (first, last, d, num_stages, dist_bytes)
        if key not in self._chains:
            a = (Replica(gpu_type=first[0], tp=first[2], zone=first[1]),) * d
            b = (Replica(gpu_type=last[0], tp=last[2], zone=last[1]),) * d
            self._chains[key] = self.of(a, b, num_stages, "flat", dist_bytes)
        return self._chains[key]
