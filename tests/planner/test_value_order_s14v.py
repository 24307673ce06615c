"""The value objective's order on large clusters (docs/PLANNER.md 2.4, session 14): the chain plans first, then
an incumbent level of one-zone rows (`rows.ONE_ZONE`) in the order of the task floors, then the exact search.
The one-zone rows are declared rows, so a finished search returns what it returns without incumbents; checked
on random small clusters with the incumbent phases forced, and against the independent brute force."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

import planner.search.engine as engine
from planner.cluster import parse_gpus
from planner.search import Objective, SearchSpace, plan_search
from planner.search.budget import TopK
from planner.search.netvec import LinkCache
from planner.search.rows import ONE_ZONE, coarse_options, one_zone_rows, zone_splits
from planner.search.space import SearchStats
from planner.search.taskrun import run_task
from planner.search.tasks import Tables, cluster_options, enumerate_tasks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_planner_bruteforce import bf_ctx, check_exact  # noqa: E402

TYPES = ("A100-40", "V100-16", "GH-96")
ZONES = ("us-a", "us-b", "eu-c")
VALUES = [Objective("value"), Objective("value", max_gpus=6), Objective("value", min_throughput_iters_per_s=5.0)]


def _gpus(rng: random.Random, min_pools: int, max_pools: int, max_gpus: int) -> str:
    pools = rng.sample([(g, z) for g in TYPES for z in ZONES], rng.randint(min_pools, max_pools))
    counts = [rng.randint(1, 4) for _ in pools]
    while sum(counts) > max_gpus:
        counts[counts.index(max(counts))] -= 1
    return ",".join(f"{g}@{z}={n}" for (g, z), n in zip(pools, counts) if n > 0)


def _shape(c):
    return (c.key, c.num_stages, c.mbs, c.layers_per_stage, c.pools, c.chain, c.recompute, c.microbatches)


def test_one_zone_options_are_the_declared_one_zone_rows() -> None:
    for caps in [(3,), (3, 3), (3, 0, 2), (4, 4, 4, 4), (1, 5, 2)]:
        for max_total in (2, 5, 100):
            opts = zone_splits(caps, max_total)
            got = {tuple(r) for r in coarse_options(opts, ONE_ZONE)}
            want = {tuple(r) for r in opts if (np.asarray(r) > 0).sum() == 1}
            assert got == want and len(got) == sum(min(c, max_total) for c in caps)


@pytest.mark.parametrize("seed", range(5))
def test_one_zone_rows_equal_a_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    zones = ["a", "b", "c"]
    cols = sorted((z, g) for z in zones for g in ("x", "y") if rng.random() < 0.8) or [("a", "x")]
    D = rng.integers(0, 3, size=(300, len(cols))) * (rng.random((300, len(cols))) < 0.4)
    want = np.array([len({z for (z, _), d in zip(cols, row) if d > 0}) == 1 for row in D])
    assert np.array_equal(one_zone_rows(D, cols), want) and want.any() and not want.all()


@pytest.mark.parametrize("seed", range(4))
def test_one_zone_level_pushes_only_one_zone_plans(seed: int) -> None:
    """Every plan the one-zone level finds uses one zone, and the best of them is the best one-zone plan of the
    full task (the full run's one-zone plans, top K large enough to hold them all)."""
    rng = random.Random(300 + seed)
    ctx, cat = bf_ctx()
    cluster = parse_gpus(_gpus(rng, 3, 5, 10), cat)
    space = SearchSpace(max_stages=2, mbs_options=(1,), tp_options=(1, 2))
    tables, cache = Tables(ctx, space), LinkCache(ctx)
    objective = Objective("value")
    seen = 0
    for task in enumerate_tasks(ctx, cluster, tables, cluster_options(ctx, cluster, space), 8, objective, space,
                                cache):
        one, full = TopK(1), TopK(10 ** 6)
        run_task(ctx, cluster, tables, cache, task, 8, objective, space, one, SearchStats(), coarse=ONE_ZONE)
        run_task(ctx, cluster, tables, cache, task, 8, objective, space, full, SearchStats())
        one_zone = [c for c in full.sorted() if len({p.zone for p in c.pools}) == 1]
        got = one.sorted()
        assert len({p.zone for c in got for p in c.pools}) <= 1
        if one_zone:
            assert got and got[0].key == one_zone[0].key
            seen += 1
        else:
            assert not got
    assert seen > 0


@pytest.mark.parametrize("seed", range(12))
def test_value_order_leaves_the_result_unchanged(monkeypatch, seed: int) -> None:
    """Forcing the incumbent phases (chain plans first, the one-zone level) on small clusters returns exactly
    what the search returns without incumbents: the same K candidates in the same order."""
    rng = random.Random(400 + seed)
    ctx, cat = bf_ctx(small_memory=seed % 3 == 2)
    cluster = parse_gpus(_gpus(rng, 3, 6, 12), cat)
    objective = VALUES[seed % len(VALUES)]
    space = SearchSpace(max_stages=3, mbs_options=(1, 2), tp_options=(1, 2), distributed_optimizer=(False, True),
                        tie_embeddings=True, chain_segments=2)
    top_k = rng.choice((1, 3))
    monkeypatch.setattr(engine, "INCUMBENT_MIN_POOLS", 1)
    monkeypatch.setattr(engine, "ONE_ZONE_FLOORS", seed % 2 == 1)      # both orders of the one-zone level
    fast = plan_search(ctx, cluster, 8, objective, space, top_k=top_k)
    monkeypatch.setattr(engine, "INCUMBENT_MIN_POOLS", 10 ** 9)
    plain = plan_search(ctx, cluster, 8, objective, space, top_k=top_k)
    _assert_same_up_to_exact_ties(fast.candidates, plain.candidates)
    assert fast.stats.complete and plain.stats.complete


def _assert_same_up_to_exact_ties(a: list, b: list) -> None:
    """The same keys in the same order, and the same plan wherever a key is held once (2.4: the task floors change
    the order tasks are opened in, so plans whose keys tie exactly may resolve differently; main before
    session 14 differs on seed 3 the same way)."""
    assert a and [c.key for c in a] == [c.key for c in b]
    keys = [c.key for c in a]
    for x, y in zip(a, b):
        if keys.count(x.key) == 1 and (len(a) == 1 or x.key != max(keys)):
            assert _shape(x) == _shape(y)


# both parities (small memory, value objective); seeds 1 and 2 (about 45 s each on a loaded machine) ran until
# the tracker's CI of stop 30 took 3,465 s of its 1,800 s budget
@pytest.mark.parametrize("seed", [0, 3, 4])
def test_value_order_matches_brute_force(monkeypatch, seed: int) -> None:
    rng = random.Random(500 + seed)
    ctx, cat = bf_ctx(small_memory=seed % 2 == 1)
    cluster = parse_gpus(_gpus(rng, 2, 4, 8), cat)
    monkeypatch.setattr(engine, "INCUMBENT_MIN_POOLS", 1)
    check_exact(ctx, cluster, 8, VALUES[seed % 2])
