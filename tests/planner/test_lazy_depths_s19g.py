"""Session 19 (helper s19g): each depth's split list is built on its first use, not all at once at the first
unit (docs/PLANNER.md 2.3). The depth grids' blocks now come from the split rule alone
(:func:`planner.search.splitlist.depth_blocks`), so they must equal the blocks the full lists gave (the eager
rule); every depth's list, level needs and stage arrays must be the same whatever order the depths are built in;
and the vectorised pieces (:func:`planner.search.tables.split_family`, ``levelbatch._front_loaded_rows``) must
equal the loops they replace, kept here as references."""
from __future__ import annotations

import random

import numpy as np
import pytest

from benchmarks.uneven_middle import random_case
from planner import api
from planner.cluster import parse_gpus
from planner.search import SearchSpace
from planner.search import tasks as T
from planner.search.grids import grid_index
from planner.search.levelbatch import _front_loaded_rows
from planner.search.splitlist import depth_blocks
from planner.search.splits import front_loaded
from planner.search.tables import split_family, stage_arrays

FIELDS = ("compute_s", "bwd_s", "params", "update_s", "memory_bytes", "fits", "counts")


def reference_split_family(L: int, S: int) -> np.ndarray:
    """The split family as the loops of sessions up to 18 built it, row by row."""
    rows: list[list[int]] = []
    if S == 1:
        rows = [[L]]
    elif S == 2:
        rows = [[a, L - a] for a in range(1, L)]
    mid = S - 2
    for a in range(1, L - mid) if S > 2 else ():
        for c in range(1, L - mid - a + 1):
            q, r = divmod(L - a - c, mid)
            rows.append([a] + [q] * (mid - r) + [q + 1] * r + [c])
    if S >= 4:
        seen = {tuple(x) for x in rows}
        for a in range(1, L - mid):
            for c in range(1, L - mid - a + 1):
                t = L - a - c
                m = front_loaded(t, [L] * mid, -(-t // mid))
                if (a,) + m + (c,) not in seen:
                    rows.append([a, *m, c])
    return np.array(rows, dtype=np.int64).reshape(-1, S)


@pytest.mark.parametrize("L", [1, 2, 3, 4, 5, 7, 12, 24, 32, 40])
def test_split_family_equals_the_loops(L):
    for S in range(1, L + 3):
        got, want = split_family(L, S), reference_split_family(L, S)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), (L, S)
        assert not got.flags.writeable


def test_front_loaded_rows_equal_front_loaded_row_by_row():
    rng = random.Random(19)
    for n in (1, 2, 3, 5, 9, 17):
        totals, caps, levels, want = [], [], [], []
        while len(want) < 300:
            t = rng.randint(n, 3 * n + 6)
            cap = [rng.randint(1, t) for _ in range(n)]
            level = rng.randint(1, t)
            m = front_loaded(t, cap, level)
            if m is not None:
                totals.append(t), caps.append(cap), levels.append(level), want.append(m)
        got = _front_loaded_rows(np.array(totals), np.array(caps, dtype=np.int64), np.array(levels))
        assert got.shape == (len(want), n) and got.tolist() == [list(m) for m in want], n


def _neo(gpus: str) -> T.Tables:
    bundle = api.load_data(api.DataSource(model="gpt-neo-2.7b"))
    cluster = parse_gpus(gpus, bundle.catalog)
    ctx = api.context_for(api.make_context(bundle, None), cluster)
    space = SearchSpace(recompute=(False, True), distributed_optimizer=(False, True))
    return T.Tables(ctx, space, T.cluster_options(ctx, cluster, space), cluster)


def _small(seed: int) -> T.Tables:
    """A made-up case: a few layers, one or two GPU types with memory that binds (benchmarks.uneven_middle)."""
    case = random_case(seed)
    space = SearchSpace(mbs_options=(1, 2), tp_options=(1, 2, 4), recompute=(False, True),
                        distributed_optimizer=(False, True))
    cluster = parse_gpus(",".join(f"{g}@{z}={n * 4}" for g, z, n in case.pools), case.ctx.catalog)
    return T.Tables(case.ctx, space, T.cluster_options(case.ctx, cluster, space), cluster)


SETUPS = [("neo 80+240", lambda: _neo("A100-40@us-central1-a=80,V100-16@us-central1-a=240")),
          ("neo 3 types", lambda: _neo("A100-40@us-central1-a=32,V100-16@us-central1-a=64,H100-80@us-west1-b=16")),
          ("small 2000", lambda: _small(2000)), ("small 2005", lambda: _small(2005)),
          ("small 2011", lambda: _small(2011))]


def _max_s(tables: T.Tables) -> int:
    L = tables.ctx.model.num_layers
    return min(L, tables.space.max_stages or L)


@pytest.mark.parametrize("name,make", SETUPS, ids=[s[0] for s in SETUPS])
def test_depth_blocks_equal_the_blocks_of_the_full_lists(name, make):
    """The eager rule: every depth whose full list (family, cap-bound and level middles) gives every stage a
    layer, with that list's largest stage."""
    tables = make()
    want = []
    for s in range(1, _max_s(tables) + 1):
        full = tables.splits(s)
        if full is not None and grid_index(full) is not None:
            want.append((s, int(full.max())))
    assert depth_blocks(tables.space, tables.ctx.model.num_layers, _max_s(tables)) == tuple(want)
    extra = sum(len(tables.splits(s)) - len(split_family(tables.ctx.model.num_layers, s))
                for s in range(1, _max_s(tables) + 1))
    assert extra > 0, name      # the full lists add cap-bound or level middles (the comparison is not vacuous)


def _options(tables: T.Tables):
    return [(g, tp, mbs) for g, opts in sorted(tables.options.items()) for mbs, tp in opts]


@pytest.mark.parametrize("name,make", SETUPS, ids=[s[0] for s in SETUPS])
def test_lazy_lists_and_arrays_equal_the_eager_ones(name, make):
    """One Tables builds every depth's list first, in order (the eager build); another builds them on first use
    in a shuffled order, chain rows read in between: the same lists, level needs, stage arrays and smallest
    replica counts, bit for bit; and the arrays equal the per-split computation."""
    eager, lazy = make(), make()
    depths = list(range(1, _max_s(eager) + 1))
    for s in depths:
        eager.splits(s)
    rng = random.Random(name)
    order = depths[:]
    rng.shuffle(order)
    opts = _options(eager)
    for s in order:
        g, tp, mbs = rng.choice(opts)
        row = np.array([split_family(eager.ctx.model.num_layers, s)[0]])
        lazy.raw_arrays(g, tp, mbs, row, False)           # a chain's split: no list needed for it
        for rc in (False, True):
            for g, tp, mbs in opts:
                a, b = lazy.arrays(g, tp, mbs, s, rc), eager.arrays(g, tp, mbs, s, rc)
                assert (a is None) == (b is None), (name, s, g, tp, mbs, rc)
                da = lazy.dist_dmin(g, tp, mbs, s, rc, per_stage=True)
                db = eager.dist_dmin(g, tp, mbs, s, rc, per_stage=True)
                assert da.dtype == db.dtype and np.array_equal(da, db), (name, s, g, tp, mbs, rc)
                if a is None:
                    continue
                for f in FIELDS:
                    x, y = np.asarray(getattr(a, f)), np.asarray(getattr(b, f))
                    assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), (name, s, f)
        got, want = lazy.splits(s), eager.splits(s)
        assert got.shape == want.shape and np.array_equal(got, want), (name, s)
        ln, le = lazy.memo.get(("level-need", s)), eager.memo.get(("level-need", s))
        assert (ln is None) == (le is None) and (ln is None or (ln[0] == le[0] and np.array_equal(ln[1], le[1])))
    s = order[0]
    for g, tp, mbs in opts:
        a = lazy.arrays(g, tp, mbs, s, False)
        if a is not None:
            ref = stage_arrays(lazy.ctx, lazy.table(g, tp, mbs), lazy.splits(s), lazy.space.precision,
                               lazy.space.optimizer, False, lazy.space.tie_embeddings)
            for f in FIELDS:
                assert np.array_equal(np.asarray(getattr(a, f)), getattr(ref, f)), (name, s, f)


def test_chain_rows_do_not_build_a_depths_list():
    """Reading a chain's split of a depth whose arrays were never asked for leaves that depth's list unbuilt
    (the split is gathered from the grids, which need only the split rule)."""
    tables = _neo("A100-40@us-central1-a=80,V100-16@us-central1-a=240")
    L = tables.ctx.model.num_layers
    g, tp, mbs = _options(tables)[0]
    for s in (L - 1, L - 4):
        row = np.array([split_family(L, s)[-1]])
        got = tables.raw_arrays(g, tp, mbs, row, False)
        want = stage_arrays(tables.ctx, tables.table(g, tp, mbs), row, tables.space.precision,
                            tables.space.optimizer, False, tables.space.tie_embeddings)
        for f in FIELDS:
            assert np.array_equal(np.asarray(getattr(got, f)), getattr(want, f)), (s, f)
        assert ("splits", s) not in tables.memo
    tables.arrays(g, tp, mbs, L - 4, False)
    assert ("splits", L - 4) in tables.memo and ("splits", L - 1) not in tables.memo
