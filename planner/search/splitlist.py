"""The layer splits of a depth (docs/PLANNER.md 1 item 4): :func:`splits_for` gives the space's split rule
(the split family, Sailor's even splits); :meth:`planner.search.tasks.Tables.splits` adds the cap-bound middles
of :mod:`planner.search.midcaps` to the family for the GPU options of the search, which :func:`remember_options`
keeps per context for a :class:`~planner.search.tasks.Tables` built without them (:func:`last_options`)."""
from __future__ import annotations

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.space import SearchSpace
from planner.search.tables import split_family
from planner.simulator.settings import SimContext


def even_last(num_layers: int, s_num: int) -> np.ndarray:
    """[1, S] Sailor's split: the layers evenly over S stages, the extra layers on the last stages."""
    q, r = divmod(num_layers, s_num)
    return np.array([[q] * (s_num - r) + [q + 1] * r], dtype=np.int64)


def splits_for(space: SearchSpace, num_layers: int, s_num: int) -> np.ndarray | None:
    """[K, S] the splits of ``space.split`` for depth ``s_num`` (None: none, e.g. "even" where S does not divide
    L); the family without the cap-bound middles."""
    if space.split == "family":
        return split_family(num_layers, s_num)
    if space.split == "even":
        if num_layers % s_num:
            return None
        return np.full((1, s_num), num_layers // s_num, dtype=np.int64)
    if space.split == "even_last":
        return even_last(num_layers, s_num)
    ids = np.array_split(np.arange(num_layers + 2), s_num)
    counts = [len(x) for x in ids]
    counts[0] -= 1
    counts[-1] -= 1
    if any(c < 1 for c in counts) and s_num > 1:
        return None
    return np.array([counts], dtype=np.int64)


# The options cluster_options last returned per context (the context kept, so an id is never reused): a
# Tables built without options takes them for its cap-bound splits (midcaps) the first time it reads a split
# (plan_search builds its Tables before it calls cluster_options; passing them to Tables is the cleaner way).
_LAST_OPTIONS: dict[int, tuple[SimContext, SearchSpace, dict[str, list[tuple[int, int]]], ClusterSpec]] = {}


def remember_options(ctx: SimContext, space: SearchSpace, options: dict[str, list[tuple[int, int]]],
                     cluster: ClusterSpec) -> None:
    """Keep ``options`` and ``cluster`` for ``ctx`` and ``space`` (:func:`last_options`)."""
    if len(_LAST_OPTIONS) > 64:
        _LAST_OPTIONS.clear()
    _LAST_OPTIONS[id(ctx)] = (ctx, space, options, cluster)


def last_options(ctx: SimContext, space: SearchSpace
                 ) -> tuple[dict[str, list[tuple[int, int]]], ClusterSpec | None]:
    """(options, cluster) :func:`remember_options` last kept for ``ctx`` and a space equal to ``space``
    (({}, None): none)."""
    hit = _LAST_OPTIONS.get(id(ctx))
    if hit is not None and hit[0] is ctx and hit[1] == space:
        return hit[2], hit[3]
    return {}, None
