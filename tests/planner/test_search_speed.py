"""The search's speed-ups compute exactly what the plain computations they replace compute (docs/PLANNER.md 2.3):
the vectorised cheap task bounds equal ``task_bound(with_sync=False)`` bit for bit, the sweeping Pareto filter
equals the one-row-at-a-time filter, the first-occurrence table equals ``np.unique``, and the one-key grouping
of sync-equivalent rows equals the column grouping."""
from __future__ import annotations

from itertools import combinations, product
from types import SimpleNamespace

import numpy as np
import pytest

from planner import api
from planner.cluster import parse_gpus
from planner.search import tasks as T
from planner.search.caps import caps_for
from planner.search.taskbound import cheap_bounds, task_bound
from planner.search.netvec import Group, LinkCache
from planner.search.pools import _distinct_rows
from planner.search.rows import pareto_min, unique_first
from planner.search.space import Objective, SearchSpace

CLUSTERS = [
    ("A100-40@us-central1-a=24,V100-16@us-central1-a=40,H100-80@us-central1-b=16", Objective()),
    ("A100-40@us-central1-a=16,A100-40@us-central1-b=8,GH-96@us-central1-a=8",
     Objective("cost", min_throughput_iters_per_s=0.01)),
    ("V100-16@us-central1-a=32,H100-80@us-central1-c=8", Objective(max_cost_per_iter_usd=2.0, max_gpus=24)),
]


@pytest.mark.parametrize("gpus,objective", CLUSTERS)
def test_cheap_bounds_equal_task_bound_bit_for_bit(gpus: str, objective: Objective) -> None:
    bundle = api.load_data(api.DataSource(model="gpt-neo-2.7b"))
    cluster = parse_gpus(gpus, bundle.catalog)
    ctx = api.context_for(api.make_context(bundle, None), cluster)
    space, gbs = SearchSpace(), 256
    tables, cache = T.Tables(ctx, space), LinkCache(ctx)
    options = T.cluster_options(ctx, cluster, space)
    checked = finite = 0
    for s_num, mbs, rc in product((1, 2, 3, 5), (1, 2, 4), (False, True)):
        choices = {g: [t for m, t in options.get(g, []) if m == mbs and caps_for(cluster, g, t, s_num)
                       and tables.arrays(g, t, mbs, s_num, rc) is not None] for g in options}
        for k in range(1, len(options) + 1):
            for subset in combinations(sorted(options), k):
                combos = [tuple(zip(subset, tps)) for tps in product(*(choices[g] for g in subset))]
                got = cheap_bounds(ctx, cluster, tables, combos, s_num, mbs, gbs // mbs, objective, rc)
                for combo, b in zip(combos, got):
                    want = task_bound(ctx, cluster, tables, combo, s_num, mbs, gbs // mbs, objective, cache,
                                      with_sync=False, recompute=rc)
                    assert b == want or (np.isinf(b) and np.isinf(want)), (combo, s_num, mbs, rc, b, want)
                    checked += 1
                    finite += bool(np.isfinite(want))
    assert checked > 50 and finite > 10


def _pareto_reference(crit: np.ndarray) -> np.ndarray:
    """One row at a time against every row kept so far (the plain filter)."""
    if len(crit) <= 1:
        return np.arange(len(crit))
    order = np.lexsort(crit.T[::-1])
    c = crit[order]
    keep: list[int] = []
    for i in range(len(c)):
        if keep and np.any(np.all(c[keep] <= c[i], axis=1)):
            continue
        keep.append(i)
    return np.sort(order[keep])


def test_pareto_min_equals_the_row_by_row_filter() -> None:
    rng = np.random.default_rng(7)
    for trial in range(400):
        k = int(rng.integers(1, 400 if trial % 20 == 0 else 50))
        crit = rng.integers(0, int(rng.integers(1, 6)), size=(k, int(rng.integers(1, 6)))).astype(float)
        assert np.array_equal(pareto_min(crit), _pareto_reference(crit))
    for trial in range(40):             # continuous values: many rows are non-dominated
        k, c = int(rng.integers(1, 300)), int(rng.integers(1, 4))
        crit = rng.random((k, c))
        crit[rng.random(k) < 0.1] = np.inf
        assert np.array_equal(pareto_min(crit), _pareto_reference(crit))


def test_unique_first_equals_numpy_unique() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 3000))
        key = rng.integers(0, int(10 ** rng.integers(1, 8)), n)
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        got_first, got_inv = unique_first(key, max_size=int(rng.integers(1, 10 ** 7)))
        assert np.array_equal(got_first, first) and np.array_equal(got_inv, inv.reshape(-1))


def test_distinct_rows_group_like_the_column_grouping() -> None:
    rng = np.random.default_rng(11)
    for _ in range(30):
        n_pools = int(rng.integers(2, 8))
        zones = [f"z{rng.integers(0, 3)}" for _ in range(n_pools)]
        zones[0] = "za" if len(set(zones)) == 1 else zones[0]
        pools = [SimpleNamespace(group=Group(z, "A100-40", 1)) for z in zones]
        D = rng.integers(0, int(rng.integers(2, 200)), size=(int(rng.integers(4096, 12000)), n_pools))
        names = sorted(set(zones))
        ind = np.array([[z == y for y in names] for z in zones], dtype=np.int64)
        code = np.minimum(D, 2) @ (3 ** np.arange(n_pools, dtype=np.int64))
        _, first, inv = np.unique(np.column_stack([code, D.sum(axis=1), D @ ind]), axis=0, return_index=True,
                                  return_inverse=True)
        got_first, got_inv = _distinct_rows(pools, D)
        assert sorted(got_first.tolist()) == sorted(first.tolist())
        assert np.array_equal(got_first[got_inv], first[inv.reshape(-1)])   # each row, the same representative


def test_chain_stage_arrays_read_from_the_split_tables_equal_the_one_split_computation() -> None:
    """Tables.raw_arrays takes a chain's split from the space's split tables when they are built (the formulas
    act row by row): every field equals stage_arrays on that one split."""
    from planner.search.tables import stage_arrays
    bundle = api.load_data(api.DataSource(model="gpt-neo-2.7b"))
    cluster = parse_gpus("A100-40@us-central1-a=16,V100-16@us-central1-a=16", bundle.catalog)
    ctx = api.context_for(api.make_context(bundle, None), cluster)
    space = SearchSpace()
    tables = T.Tables(ctx, space)
    L, reused = ctx.model.num_layers, 0
    for g, tp, mbs, s_num, rc in product(("A100-40", "V100-16"), (1, 2), (1, 2), (2, 3, 7, L), (False, True)):
        q, r = divmod(L, s_num)
        counts = np.array([[q] * (s_num - r) + [q + 1] * r], dtype=np.int64)
        tables.arrays(g, tp, mbs, s_num, rc)
        reused += ("plain", g, tp, mbs, s_num, rc) in tables._arr
        got = tables.raw_arrays(g, tp, mbs, counts, rc)
        want = stage_arrays(ctx, tables.table(g, tp, mbs), counts, space.precision, space.optimizer, rc,
                            space.tie_embeddings)
        for f in ("compute_s", "bwd_s", "params", "update_s", "memory_bytes", "fits", "counts"):
            np.testing.assert_array_equal(getattr(got, f), getattr(want, f))
    assert reused > 20
