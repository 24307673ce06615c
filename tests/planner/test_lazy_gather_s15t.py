"""Tables.arrays gathers compute, parameters and optimizer step in full only for a table it keeps (some split
fits); a table with no fitting split holds them as grids.GatheredRows (session 15). What every reader gets is
unchanged: the kept table's fields are plain arrays equal to the eager gather, and the rows the chain plans read
from a dropped table (``raw_arrays``) equal the per-split computation (``stage_arrays``), bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from planner import api
from planner.cluster import parse_gpus
from planner.search import tasks as T
from planner.search.grids import GatheredRows, gathered_in_full, gathered_stage_arrays
from planner.search.space import SearchSpace
from planner.search.tables import stage_arrays

FIELDS = ("compute_s", "bwd_s", "params", "update_s", "memory_bytes", "fits", "counts")


@pytest.fixture(scope="module")
def ctx():
    data = api.load_data(api.DataSource(model="gpt-neo-2.7b"))
    cluster = parse_gpus("A100-40@us-central1-a=32,V100-16@us-central1-a=64", data.catalog)
    return api.context_for(api.make_context(data, None), cluster)


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_kept_and_dropped_tables_read_as_before(ctx) -> None:
    rng = np.random.default_rng(15)
    space = SearchSpace(split="family")
    L = ctx.model.num_layers
    kept = dropped = 0
    for g in ("A100-40", "V100-16"):
        for tp in (1, 2, 4):
            for mbs in (1, 4):
                tables = T.Tables(ctx, space)
                tt = tables.table(g, tp, mbs)
                for s_num in sorted({1, 2, 4, int(rng.integers(3, L + 1))}):
                    counts = T.splits_for(space, L, s_num)
                    want = stage_arrays(ctx, tt, counts, space.precision, space.optimizer, False,
                                        space.tie_embeddings)
                    got = tables.arrays(g, tp, mbs, s_num)
                    plain = tables._arr[("plain", g, tp, mbs, s_num, False)]
                    assert all(_same(getattr(plain, f), getattr(want, f)) for f in FIELDS)
                    if got is not None:         # kept: plain arrays (np.ndarray methods), as before
                        kept += 1
                        assert got is plain
                        assert all(type(getattr(got, f)) is np.ndarray for f in ("compute_s", "params", "update_s"))
                        continue
                    dropped += 1
                    assert isinstance(plain.params, GatheredRows)
                    for k in sorted({0, len(counts) - 1, int(rng.integers(len(counts)))}):
                        one = counts[k:k + 1]
                        row = tables.raw_arrays(g, tp, mbs, one, False)
                        ref = stage_arrays(ctx, tt, one, space.precision, space.optimizer, False,
                                           space.tie_embeddings)
                        assert all(_same(getattr(row, f), getattr(ref, f)) for f in FIELDS)
    assert kept and dropped         # both kinds of table were read


def test_gathered_in_full_equals_the_eager_gather() -> None:
    rng = np.random.default_rng(5)
    from types import SimpleNamespace
    tt = SimpleNamespace(usable_bytes=0.5)
    grid = SimpleNamespace(params=rng.random((6, 3)), update_s=rng.random((6, 3)), memory_bytes=rng.random((6, 3)))
    cgrid = (rng.random((4, 9, 9)), rng.random((4, 9, 9)))
    counts = rng.integers(1, 7, size=(20, 3))
    index = (counts - 1) * 3 + np.arange(3)
    cindex = rng.integers(0, 4 * 81, size=(20, 3))
    eager = gathered_stage_arrays(tt, counts, grid, index, cgrid, cindex)
    full = gathered_in_full(gathered_stage_arrays(tt, counts, grid, index, cgrid, cindex, lazy=True))
    for f in FIELDS:
        assert type(getattr(full, f)) is type(getattr(eager, f)) and _same(getattr(full, f), getattr(eager, f)), f
