"""Cap-bound middle stages: the layer splits a pool plan needs beyond the split family when memory caps the
early middle stages (docs/PLANNER.md 1 item 4 and 2.1, "Uneven middle stages").

Contract: for one pipeline depth S and the search's (GPU type -> (micro-batch size, TP) options),
:func:`cap_vectors` lists every per-middle-stage layer cap vector a pool-plan task can have: per task (types,
TPs, micro-batch size, recomputation, distributed optimizer) the largest layer count middle stage s holds on
every type of the task with S - s micro-batches in flight; with the distributed optimizer one vector per range of
the replica count D over which it is constant (every D >= 1). :func:`cap_bound_splits` turns them into the
splits :func:`planner.search.splits.middle_candidates` gives under those caps at the levels where a cap binds
(a candidate equal to the cap-free one at its level is a staircase: the family holds the lowest one, higher
ones stay outside, 2.1 (b)), every first and last stage size, less those already in the family. The search
adds them to the family's splits of that depth (:meth:`planner.search.tasks.Tables.splits`); they go through
the same evaluator and memory checks as every other split, so a vector that is a superset of a task's needs
costs time, never exactness. Pure given the context: memory from :mod:`planner.search.tables`' formulas.
"""
from __future__ import annotations

from itertools import combinations, product
import math

import numpy as np

from planner.search.splits import front_loaded
from planner.search.tables import NEVER, dist_min_dp, memory_terms_of
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext


def _probe(num_layers: int, s_num: int) -> np.ndarray:
    """[C, S] splits whose middle stages all hold c = 1 .. L - S + 1 layers (first and last: one layer; a
    middle stage's memory reads only its own layer count and position)."""
    top = num_layers - s_num + 1
    out = np.ones((top, s_num), dtype=np.int64)
    out[:, 1:-1] = np.arange(1, top + 1)[:, None]
    return out


def type_dmin(ctx: SimContext, tables, g: str, tp: int, mbs: int, s_num: int, recompute: bool,
              dist: bool, shards: int = 1) -> np.ndarray:
    """[C, S - 2] per middle layer count c (row c - 1) and middle stage: the smallest replica count D at which
    that stage fits on (g, tp, mbs) (plain: 1 where it fits, :data:`NEVER` where not), made non-decreasing in c
    (a cap is a prefix of fitting counts)."""
    key = ("midcap", g, tp, mbs, s_num, recompute, dist, shards)
    if key not in tables.memo:
        sp = tables.space
        counts = _probe(ctx.model.num_layers, s_num)
        tt = tables.table(g, tp, mbs)
        terms = memory_terms_of(ctx, tt, counts, sp.precision, sp.optimizer, recompute, sp.tie_embeddings)
        if dist:
            d = dist_min_dp(ctx, tt, counts, sp.precision, sp.optimizer, recompute, shards, sp.tie_embeddings, terms)
        else:
            d = np.where(F.memory_total(terms) <= tt.usable_bytes, 1, NEVER)
        tables.memo[key] = np.maximum.accumulate(np.asarray(d, dtype=np.int64)[:, 1:-1], axis=0)
    return tables.memo[key]


def _caps_at(dmins: list[np.ndarray], d: int) -> tuple[int, ...]:
    """The cap vector at replica count d: per middle stage the most layers every type holds."""
    return tuple(int(x) for x in np.min([(m <= d).sum(axis=0) for m in dmins], axis=0))


def cap_vectors(ctx: SimContext, tables, options: dict[str, list[tuple[int, int]]], s_num: int
                ) -> set[tuple[int, ...]]:
    """Every cap vector (length S - 2) of a pool-plan task of depth S over ``options`` that binds somewhere
    (some cap below L - S + 1, the largest middle stage; a cap of 0: no middle fits, left out). Tasks as
    :func:`planner.search.tasks.unit_tasks` forms them (type subsets up to ``max_gpu_types``, one TP per type)
    without the pool-capacity filter, a superset."""
    sp = tables.space
    top = ctx.model.num_layers - s_num + 1
    if s_num < 4 or top < 2:
        return set()
    types = sorted(options)
    max_types = min(len(types), sp.max_gpu_types or len(types))
    out: set[tuple[int, ...]] = set()
    for mbs in sorted({m for g in types for m, _ in options[g]}):
        # every TP (tp_rule "min_fit" keeps one per type after filters: a subset of these)
        choices = {g: sorted({t for m, t in options[g] if m == mbs}) for g in types}
        for rc, dist in product(sp.recompute, sp.distributed_optimizer):
            for k in range(1, max_types + 1):
                for subset in combinations(types, k):
                    for tps in product(*(choices[g] for g in subset)):
                        lcm = math.lcm(*tps)
                        dmins = [type_dmin(ctx, tables, g, t, mbs, s_num, rc, dist, lcm // t if dist else 1)
                                 for g, t in zip(subset, tps)]
                        levels = sorted({int(x) for m in dmins for x in np.unique(m) if x < NEVER}) or [1]
                        for d in levels:
                            cap = _caps_at(dmins, d)
                            if min(cap) >= 1 and min(cap) < top:
                                out.add(cap)
    return out


def cap_bound_middles(total: int, caps: tuple[int, ...]) -> list[tuple[int, ...]]:
    """:func:`front_loaded` under ``caps`` at every level where it differs from the cap-free middle of that level
    (a cap binds), ``total`` layers on ``len(caps)`` middle stages."""
    n = len(caps)
    free = [total] * n
    out = []
    for level in range(-(-total // n), total - n + 2):
        if min(caps) >= level:
            continue                # no cap binds at this level
        c = front_loaded(total, caps, level)
        if c is not None and c != front_loaded(total, free, level):
            out.append(c)
    return out


def cap_bound_splits(num_layers: int, s_num: int, caps: set[tuple[int, ...]], family: np.ndarray) -> np.ndarray:
    """[K, S] the splits of :func:`cap_bound_middles` for every cap vector, every first and last stage size,
    less those in ``family``; sorted."""
    L, n = num_layers, s_num - 2
    have = {tuple(int(x) for x in r) for r in family}
    rows: set[tuple[int, ...]] = set()
    for total in range(n, L - 1):
        mids = {m for cap in caps for m in cap_bound_middles(total, cap)}
        for m in mids:
            for a in range(1, L - total):
                row = (a,) + m + (L - total - a,)
                if row not in have:
                    rows.add(row)
    return np.array(sorted(rows), dtype=np.int64).reshape(-1, s_num)
