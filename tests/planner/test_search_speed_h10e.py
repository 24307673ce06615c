"""Speed-ups of helper h10e that compute exactly what they replace: one split's stage arrays
(:meth:`Tables.raw_arrays`, the chain plans' tables) and its smallest replica counts under the distributed
optimizer (:meth:`Tables.dist_dmin` with ``counts``) gathered from the depth grids when the space's arrays of
that depth were never built (the lazy task list builds few of them) equal the per-split computation bit for
bit, on random per-layer profiles, runtime settings, precisions, recomputation and tied embeddings."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from planner.search import tasks as T
from planner.search.tables import dist_min_dp, stage_arrays

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_search_speed_h13x import _cases, _random_table, assert_same_arrays, ctx  # noqa: E402,F401  (the module's fixture)

def _random_split(rng, num_layers: int, s_num: int) -> np.ndarray:
    cuts = np.sort(rng.choice(np.arange(1, num_layers), size=s_num - 1, replace=False))
    return np.diff(np.concatenate([[0], cuts, [num_layers]])).reshape(1, -1).astype(np.int64)


def test_one_split_gathered_from_the_grids_equals_the_per_split_computation(ctx) -> None:  # noqa: F811
    checked = gathered = 0
    for c, space, g, tp, mbs, s_num, rc, rng in _cases(ctx, 150, 23):
        tables = T.Tables(c, space)
        tt = tables.table(g, tp, mbs)
        if rng.random() < 0.5:
            tt = tables._tt[(g, tp, mbs)] = _random_table(rng, tt)
        family = T.splits_for(space, c.model.num_layers, s_num)
        if rng.random() < 0.5 and family is not None:
            counts = family[int(rng.integers(len(family)))].reshape(1, -1).copy()
        else:       # any contiguous split (the grids may not hold its largest stage: computed then)
            counts = _random_split(rng, c.model.num_layers, s_num)
        got = tables.raw_arrays(g, tp, mbs, counts, rc)
        want = stage_arrays(c, tt, counts, space.precision, space.optimizer, rc, space.tie_embeddings)
        assert_same_arrays(got, want)
        shards = int(rng.choice([1, 2, 4]))
        d_got = tables.dist_dmin(g, tp, mbs, s_num, rc, shards, counts, per_stage=True)
        d_want = dist_min_dp(c, tt, counts, space.precision, space.optimizer, rc, shards, space.tie_embeddings)
        assert d_got.dtype == d_want.dtype and np.array_equal(d_got, d_want)
        gathered += tables._grid_index_of(g, tp, mbs, counts, rc) is not None
        checked += 1
    assert checked > 100 and 0 < gathered < checked, (checked, gathered)
