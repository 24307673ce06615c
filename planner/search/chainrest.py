"""A lower bound on every chain plan a stopped chain search left unsearched (docs/PLANNER.md 2.6).

Contract: :func:`rest_floor` is <= the key of every chain plan of the units :func:`planner.search.chains.
chain_units` lists from index ``start`` on (the unit being searched when the search stopped included): the
smallest over those units and their segment counts of :func:`planner.search.chainfloor.unit_floors`, each of
which bounds every chain of its unit and segment count (2.1, 2.6), inf when none has a chain. Units before
``start`` were searched to the end (every chain of them that could enter the top K was pushed). The floors
are those of the even split: with ``space.chain_splits == "segment"`` it returns -inf (no bound).
"""
from __future__ import annotations

from itertools import islice

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.chainfloor import unit_floors
from planner.search.chains import chain_units
from planner.search.chaintab import Linked
from planner.search.netvec import LinkCache
from planner.search.space import Objective, SearchSpace
from planner.search.tasks import Tables
from planner.simulator.settings import SimContext


def rest_floor(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache,
               options: dict[str, list[tuple[int, int]]], gbs: int, objective: Objective, space: SearchSpace,
               start: int, threshold: float = np.inf) -> float:
    """min over the units from ``start`` on of their :func:`unit_floors` (segment counts 2 ..)."""
    if space.chain_splits == "segment":    # the floors below bound the even split's chains only
        return -np.inf
    out = np.inf
    units = islice(chain_units(ctx, cluster, options, gbs, space), start, None)
    for s_num, counts, mbs, n_mb, grp, d_cap, rc, dist in units:
        tab = Linked(ctx, cache, tables, grp, mbs, counts, rc, d_cap, space.precision, dist).for_floors(objective)
        floors = unit_floors(tab, grp, n_mb, objective, min(space.chain_segments, s_num), threshold,
                             extra=True)     # with the Hoelder term (2.6, round 2)
        out = min(out, float(floors[2:].min(initial=np.inf)))
    return out
