"""The layer splits of a depth (docs/PLANNER.md 1 item 4): :func:`splits_for` gives the space's split rule
(the split family, Sailor's even splits); :meth:`planner.search.tasks.Tables.splits` adds the cap-bound middles
of :mod:`planner.search.midcaps` to the family for the GPU options of the search, given to
:class:`~planner.search.tasks.Tables`."""
from __future__ import annotations

import numpy as np

from planner.search.grids import grid_index
from planner.search.space import SearchSpace
from planner.search.tables import split_family


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


def depth_blocks(space: SearchSpace, num_layers: int, max_stages: int) -> tuple[tuple[int, int], ...]:
    """((S, C), ...) the depths 1 .. ``max_stages`` of :class:`planner.search.grids.DepthGrids` and the largest
    stage size each holds: every depth whose :func:`splits_for` splits give every stage a layer, with their
    largest stage. From the split rule alone, so the grids do not wait for every depth's full list (the
    cap-bound and level middles, built on a depth's first use): those add splits of the same L layers on S
    stages, so where every stage keeps a layer, none is above the family's largest, L - S + 1 (a split that
    is not held is computed without the grids: ``Tables._grid``)."""
    out = []
    for s_num in range(1, max_stages + 1):
        base = splits_for(space, num_layers, s_num)
        if base is not None and grid_index(base) is not None:
            out.append((s_num, int(base.max())))
    return tuple(out)
