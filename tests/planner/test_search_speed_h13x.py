"""Speed-ups of helper h13x (docs/PLANNER.md 2.3) compute exactly what they replace: the stage arrays of the
space's splits gathered from per-(layers, stage) and per-(start, end) grids, and the distributed optimizer's
smallest replica counts computed per grid entry, equal the per-(split, stage) computations bit for bit, on
random per-layer profiles, runtime settings, precisions, recomputation and tied embeddings."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planner import api
from planner.cluster import parse_gpus
from planner.search import tasks as T
from planner.search.space import SearchSpace
from planner.search.grids import compute_grid, compute_index, depth_grids, grid_index
from planner.search.tables import dist_min_dp, memory_terms_of, params_and_update, stage_arrays
from planner.simulator import formulas as F

GPUS = "A100-40@us-central1-a=32,V100-16@us-central1-a=64,H100-80@us-west1-b=16"
FIELDS = ("compute_s", "bwd_s", "params", "update_s", "memory_bytes", "fits", "counts")


@pytest.fixture(scope="module")
def ctx():
    bundle = api.load_data(api.DataSource(model="gpt-neo-2.7b"))
    return api.context_for(api.make_context(bundle, None), parse_gpus(GPUS, bundle.catalog))


def _random_table(rng, tt):
    """``tt`` with per-layer times that differ layer by layer (profiles read today repeat one layer) and
    random embedding / head times."""
    n = len(tt.cum_fwd_s) - 1
    fwd, bwd = rng.uniform(1e-4, 3e-2, n), rng.uniform(1e-4, 6e-2, n)
    return replace(tt, cum_fwd_s=np.concatenate([[0.0], np.cumsum(fwd)]),
                   cum_bwd_s=np.concatenate([[0.0], np.cumsum(bwd)]), emb_fwd_s=float(rng.uniform(0, 1e-2)),
                   emb_bwd_s=float(rng.uniform(0, 1e-2)), head_fwd_s=float(rng.uniform(0, 2e-2)),
                   head_bwd_s=float(rng.uniform(0, 2e-2)))


def assert_same_arrays(got, want) -> None:
    """Every field of two :class:`StageArrays` has the same dtype, shape and values, bit for bit."""
    for f in FIELDS:
        a, b = getattr(got, f), getattr(want, f)
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), f


def _cases(ctx, n: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        settings = replace(ctx.settings, compute_scale=float(rng.choice([1.0, rng.uniform(0.5, 2.0)])),
                           update_scale=float(rng.choice([1.0, rng.uniform(0.5, 2.0)])),
                           per_microbatch_overhead_s=float(rng.choice([0.0, rng.uniform(0, 1e-2)])))
        c = replace(ctx, settings=settings)
        space = SearchSpace(precision=str(rng.choice(["fp32", "bf16"])), tie_embeddings=bool(rng.random() < 0.3),
                            split=str(rng.choice(["family", "family", "even_last", "even_ids"])))
        g = str(rng.choice(["A100-40", "V100-16", "H100-80"]))
        tp, mbs = int(rng.choice([1, 2, 4])), int(rng.choice([1, 2, 4]))
        s_num = int(rng.integers(1, c.model.num_layers + 1))
        yield c, space, g, tp, mbs, s_num, bool(rng.random() < 0.5), rng


def test_gathered_stage_arrays_equal_the_per_split_computation(ctx) -> None:
    checked = gathered = 0
    for c, space, g, tp, mbs, s_num, rc, rng in _cases(ctx, 120, 7):
        tables = T.Tables(c, space)
        tt = tables.table(g, tp, mbs)
        if rng.random() < 0.5:
            tt = tables._tt[(g, tp, mbs)] = _random_table(rng, tt)
        counts = T.splits_for(space, c.model.num_layers, s_num)
        if counts is None:
            continue
        got = tables.arrays(g, tp, mbs, s_num, rc)
        want = stage_arrays(c, tt, counts, space.precision, space.optimizer, rc, space.tie_embeddings)
        if got is None:          # nothing fits: compare what the table held before it said so
            got = tables._arr[("plain", g, tp, mbs, s_num, rc)]
        assert_same_arrays(got, want)
        gathered += tables._grid(g, tp, mbs, s_num, rc)[0] is not None
        checked += 1
    assert checked > 80 and gathered == checked


def test_dist_dmin_per_grid_entry_equals_the_per_split_computation(ctx) -> None:
    checked = never = 0
    for c, space, g, tp, mbs, s_num, rc, rng in _cases(ctx, 120, 11):
        space = replace(space, split="family")
        tables = T.Tables(c, space)
        tt = tables.table(g, tp, mbs)
        counts = T.splits_for(space, c.model.num_layers, s_num)
        for shards in (1, int(rng.choice([2, 4, 8]))):
            got = tables.dist_dmin(g, tp, mbs, s_num, rc, shards, per_stage=True)
            want = dist_min_dp(c, tt, counts, space.precision, space.optimizer, rc, shards, space.tie_embeddings)
            assert got.dtype == want.dtype and np.array_equal(got, want)
            assert np.array_equal(tables.dist_dmin(g, tp, mbs, s_num, rc, shards), want.max(axis=1))
            never += int((want == T.NEVER).any())
            checked += 1
    assert checked == 240 and never > 0


def test_grid_indices_address_each_stage_and_its_layers(ctx) -> None:
    """The flat indices read entry (c - 1, s) of a [C, S] grid and entry (position class, start, end) of a
    compute grid."""
    L = ctx.model.num_layers
    for s_num in (1, 2, 3, 7, L):
        counts = T.splits_for(SearchSpace(), L, s_num)
        idx = grid_index(counts)
        cmax = int(counts.max())
        rows, cols = np.divmod(idx, s_num)
        assert np.array_equal(rows + 1, counts) and np.array_equal(cols, np.broadcast_to(np.arange(s_num), counts.shape))
        assert idx.max() < cmax * s_num
        cls, rest = np.divmod(compute_index(counts, L), (L + 1) ** 2)
        start, end = np.divmod(rest, L + 1)
        assert np.array_equal(end - start, counts) and np.array_equal(end, np.cumsum(counts, axis=1))
        assert set(np.unique(cls[:, 0])) == {3 if s_num == 1 else 1}
        assert set(np.unique(cls[:, -1])) == {3 if s_num == 1 else 2}
    assert grid_index(np.array([[2, 0, 3]])) is None
    tt = T.Tables(ctx, SearchSpace()).table("A100-40", 1, 1)
    grids = depth_grids(ctx, tt, ((1, 5), (4, 3)), "fp32", "adamw")
    assert grids.grid(4).memory_bytes.shape == (3, 4) and grids.grid(2) is None
    assert compute_grid(ctx, tt, False)[0].shape == (4, L + 1, L + 1)


def test_all_depths_at_once_equal_one_depth_at_a_time(ctx) -> None:
    """Every depth's block of the flat all-depth grids equals the same expressions on that depth's own
    [C, S] grid (tied embeddings change the head at S = 1), and so does the distributed optimizer's D."""
    checked = 0
    for c, space, g, tp, mbs, _, rc, rng in _cases(ctx, 40, 5):
        tt = T.Tables(c, space).table(g, tp, mbs)
        depths = sorted({int(x) for x in rng.integers(1, c.model.num_layers + 1, size=4)} | {1})
        blocks = tuple((s, int(rng.integers(1, c.model.num_layers - s + 2))) for s in depths)
        grids = depth_grids(c, tt, blocks, space.precision, space.optimizer, rc, space.tie_embeddings)
        shards = int(rng.choice([1, 2, 4]))
        flat_d = dist_min_dp(c, tt, grids.counts, space.precision, space.optimizer, rc, shards,
                             space.tie_embeddings, grids.terms, (grids.first, grids.last, grids.params))
        for s_num, cmax in blocks:
            counts = np.repeat(np.arange(1, cmax + 1, dtype=np.int64)[:, None], s_num, axis=1)
            terms = memory_terms_of(c, tt, counts, space.precision, space.optimizer, rc, space.tie_embeddings)
            params, upd = params_and_update(c, tt, counts, space.tie_embeddings)
            got = grids.grid(s_num)
            for a, b in ((got.params, params), (got.update_s, upd), (got.memory_bytes, F.memory_total(terms))):
                assert a.dtype == b.dtype and np.array_equal(a, b)
            want_d = dist_min_dp(c, tt, counts, space.precision, space.optimizer, rc, shards, space.tie_embeddings)
            assert np.array_equal(grids.block(flat_d, s_num), want_d)
            checked += 1
    assert checked >= 100
