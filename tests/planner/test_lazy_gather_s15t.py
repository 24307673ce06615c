"""Tables.arrays gathers compute and parameters in full only for a table it keeps (some split fits); a table with
no fitting split holds them as grids.GatheredRows, and every table its optimizer step (session 15). What every
reader gets is unchanged: every field equals the per-split computation (``stage_arrays``), the kept table's compute
and parameters are plain arrays, its per-split maxima (``split_stats``, the step's from the parameters') equal
the eager ones, and the rows the chain plans read from a dropped table (``raw_arrays``) equal the per-split
computation, bit for bit."""
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
                    if got is not None:         # kept: compute and parameters plain arrays (ndarray methods)
                        kept += 1
                        assert got is plain
                        assert all(type(getattr(got, f)) is np.ndarray for f in ("compute_s", "params"))
                        stats = tables.split_stats(g, tp, mbs, s_num, False)
                        for f, v in (("upd_max", want.update_s.max(axis=1)), ("params_max", want.params.max(axis=1)),
                                     ("comp_max", want.compute_s.max(axis=1)),
                                     ("comp_sum", want.compute_s.sum(axis=1))):
                            assert _same(getattr(stats, f), v), f
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


@pytest.mark.parametrize("seed", range(3))
def test_split_stats_step_maximum_from_the_parameters(ctx, seed) -> None:
    """split_stats takes the slowest stage's optimizer step as the step of the largest stage's parameters: equal,
    bit for bit, to the maximum over the stages' steps (stage_arrays), at random per-parameter steps and update
    scales, with and without recomputation and tied embeddings."""
    from dataclasses import replace
    rng = np.random.default_rng(seed)
    L = ctx.model.num_layers
    checked = 0
    for _ in range(8):
        c = replace(ctx, settings=replace(ctx.settings, update_scale=float(rng.choice([1.0, rng.uniform(0.1, 3.0)]))))
        space = SearchSpace(split=str(rng.choice(["family", "even_last"])), tie_embeddings=bool(rng.random() < 0.3))
        tables = T.Tables(c, space)
        g, tp, mbs = str(rng.choice(["A100-40", "V100-16"])), int(rng.choice([1, 2, 4])), int(rng.choice([1, 2]))
        tt = tables._tt[(g, tp, mbs)] = replace(tables.table(g, tp, mbs),
                                                usable_bytes=1e15, update_s_per_param=float(rng.uniform(1e-12, 1e-8)))
        s_num, rc = int(rng.integers(1, L + 1)), bool(rng.random() < 0.5)
        want = stage_arrays(c, tt, T.splits_for(space, L, s_num), space.precision, space.optimizer, rc,
                            space.tie_embeddings)
        got = tables.split_stats(g, tp, mbs, s_num, rc)
        assert _same(got.upd_max, want.update_s.max(axis=1)) and _same(got.params_max, want.params.max(axis=1))
        checked += 1
    assert checked == 8


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
        assert _same(getattr(full, f), getattr(eager, f)), f
    assert type(full.compute_s) is np.ndarray and type(full.params) is np.ndarray
    assert isinstance(full.update_s, GatheredRows) and isinstance(full.bwd_s, GatheredRows)
