"""``Tables.dist_dmin`` of one of the space's splits given as ``counts`` (the chain search's Sailor split) reads
that split's row of the memoised per-split table when there is one: equal to computing it for that split alone
(``dist_min_dp`` of ``counts``), on random per-layer profiles, settings, precisions and shard counts."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from planner.search import tasks as T
from planner.search.tables import dist_min_dp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_search_speed_h13x import _cases, ctx  # noqa: E402,F401 - the GPT-Neo context fixture


def test_dist_dmin_of_a_space_split_reads_its_row(ctx) -> None:  # noqa: F811
    read = checked = never = 0
    for c, space, g, tp, mbs, s_num, rc, rng in _cases(ctx, 80, 23):
        tables = T.Tables(c, space)
        tt = tables.table(g, tp, mbs)
        splits = T.splits_for(space, c.model.num_layers, s_num)
        if splits is None:
            continue
        for shards in (1, int(rng.choice([2, 4]))):
            whole = tables.dist_dmin(g, tp, mbs, s_num, rc, shards, per_stage=True)      # memoised
            for k in rng.choice(len(splits), size=min(3, len(splits)), replace=False):
                counts = splits[k:k + 1].copy()
                got = tables.dist_dmin(g, tp, mbs, s_num, rc, shards, counts, per_stage=True)
                want = dist_min_dp(c, tt, counts, space.precision, space.optimizer, rc, shards, space.tie_embeddings)
                assert got.dtype == want.dtype and got.shape == want.shape == (1, s_num)
                assert np.array_equal(got, want) and np.array_equal(got, whole[k:k + 1])
                assert np.array_equal(tables.dist_dmin(g, tp, mbs, s_num, rc, shards, counts), want.max(axis=1))
                read += tables._split_row(counts) == k
                never += int((want == T.NEVER).any())
                checked += 1
    assert checked > 150 and read == checked and never > 0
