"""The search's time budget and what makes large clusters tractable (docs/PLANNER.md 2.4): the split-free
row floor, the incumbent from coarse pipeline counts, the chunked row product, the alive-pair enumeration of
chain plans, and `sailor-plan --time-limit-s`. Every speed-up must leave the result unchanged; the new
pruning is checked against the independent brute force on random small cases."""
from __future__ import annotations

import json
import random
import sys
from itertools import product
from pathlib import Path

import numpy as np
import pytest

import planner.search.engine as engine
import planner.search.taskrun as taskrun
from planner.cluster import parse_gpus
from planner.search import Objective, SearchSpace, plan_search
from planner.search.chainseq import alive_pairs, chain_sequences
from planner.search.netvec import LinkCache
from planner.search.rowfloor import floor_keys, pool_floors
from planner.search.rows import coarse_options, product_chunks, product_rows, zone_splits
from planner.search.tasks import Tables, cluster_options, enumerate_tasks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_planner_bruteforce import bf_ctx, check_exact  # noqa: E402

TYPES = ("A100-40", "V100-16", "GH-96")
ZONES = ("us-a", "us-b", "eu-c")
OBJECTIVES = [Objective("throughput"), Objective("cost"), Objective("value"),
              Objective("cost", min_throughput_iters_per_s=5.0), Objective("throughput", max_gpus=6)]


def random_gpus(rng: random.Random, max_pools: int = 4, max_gpus: int = 10) -> str:
    pools = rng.sample([(g, z) for g in TYPES for z in ZONES], rng.randint(1, max_pools))
    counts = [rng.randint(1, 4) for _ in pools]
    while sum(counts) > max_gpus:
        counts[counts.index(max(counts))] -= 1
    return ",".join(f"{g}@{z}={n}" for (g, z), n in zip(pools, counts) if n > 0)


@pytest.mark.parametrize("dense_max", [0, 1 << 30])
def test_alive_pairs_equal_the_dense_mask(monkeypatch, dense_max: int) -> None:
    import planner.search.chainseq as chainseq
    monkeypatch.setattr(chainseq, "DENSE_MAX", dense_max)
    rng = np.random.default_rng(0)
    for n_groups, n_seg, cuts in product((2, 3, 5), (2, 3, 4), (1, 7)):
        seqs = chain_sequences(n_groups, n_seg)
        for density in (0.0, 0.3, 1.0):
            seg = [rng.random((cuts, n_groups)) < density for _ in range(n_seg)]
            dense = np.ones((cuts, len(seqs)), dtype=bool)
            for i in range(n_seg):
                dense &= seg[i][:, seqs[:, i]]
            kk, qq = alive_pairs(seg, n_groups)
            ek, eq = np.nonzero(dense)
            assert np.array_equal(kk, ek) and np.array_equal(qq, eq)


def test_product_chunks_equal_product_rows() -> None:
    rng = np.random.default_rng(1)
    for _ in range(20):
        opts = [rng.integers(0, 4, size=(int(rng.integers(1, 9)), int(rng.integers(1, 3)))) for _ in
                range(int(rng.integers(1, 4)))]
        cap = int(rng.integers(1, 12))
        want = np.concatenate(list(product_rows(opts, cap)), axis=0)
        got = np.concatenate(list(product_chunks(opts, cap, chunk=5)), axis=0)
        assert np.array_equal(want, got)


def test_coarse_options_are_declared_rows() -> None:
    for caps in [(3,), (3, 3), (3, 1, 2), (4, 4, 4, 4)]:
        opts = zone_splits(caps, 100)
        declared = {tuple(r) for r in opts}
        for level in (1, 2):
            coarse = coarse_options(opts, level)
            assert len(coarse) > 0 and {tuple(r) for r in coarse} <= declared
            assert (coarse > 0).all()
        assert {tuple(r) for r in coarse_options(opts, 1)} <= {tuple(r) for r in coarse_options(opts, 2)}


@pytest.mark.parametrize("seed", range(10))
def test_row_floor_is_below_every_splits_cheap_key(seed: int) -> None:
    """The split-free row floor (rowfloor.py) never exceeds the per-split cheap key of any row of any task (the
    exact task floor is checked against the brute force in test_search_bounds_h13y.py)."""
    rng = random.Random(seed)
    ctx, cat = bf_ctx(small_memory=seed % 2 == 1)
    cluster = parse_gpus(random_gpus(rng, max_pools=5, max_gpus=12), cat)
    gbs, objective = 8, rng.choice(OBJECTIVES)
    space = SearchSpace(max_stages=3, mbs_options=(1, 2), tp_options=(1, 2))
    tables, cache = Tables(ctx, space), LinkCache(ctx)
    options = cluster_options(ctx, cluster, space)
    checked = floored = 0
    for task in enumerate_tasks(ctx, cluster, tables, options, gbs, objective,
                                space, cache):
        n_mb = gbs // task.mbs
        idx = np.nonzero(tables.task_fits(task.tps, task.mbs, task.num_stages, task.recompute))[0]
        models = {int(k): taskrun.pool_models(ctx, cluster, tables, cache, task, int(k), n_mb, space) for k in idx}
        if not models:
            continue
        for D, cols in taskrun.row_grid(cluster, task, n_mb):
            common = taskrun.row_terms([models[next(iter(models))][c] for c in cols], D, None)
            floor = floor_keys(*pool_floors(models, cols), D, n_mb, objective, *common)
            for by_col in models.values():
                keys, _, _ = taskrun.cheap_keys([by_col[c] for c in cols], D, n_mb, objective, *common)
                assert np.all(floor <= keys)
                checked += int(np.isfinite(keys).sum())
                floored += int(np.isfinite(floor).sum())
    assert checked > 0 and floored > 0


def _shape(c):
    return (c.key, c.num_stages, c.mbs, c.layers_per_stage, c.pools, c.chain, c.recompute, c.microbatches)


@pytest.mark.parametrize("seed", range(8))
def test_incumbent_and_row_floor_leave_the_result_unchanged(monkeypatch, seed: int) -> None:
    """Forcing the incumbent phases on small clusters (and the row floor, always on) returns exactly what the
    search returns with the row floor off and no incumbent: the same K candidates in the same order."""
    rng = random.Random(100 + seed)
    ctx, cat = bf_ctx(small_memory=seed % 3 == 2)
    cluster = parse_gpus(random_gpus(rng, max_pools=5, max_gpus=12), cat)
    objective = rng.choice(OBJECTIVES)
    space = SearchSpace(max_stages=3, mbs_options=(1, 2), tp_options=(1, 2))
    top_k = rng.choice((1, 3))
    monkeypatch.setattr(engine, "INCUMBENT_MIN_POOLS", 1)
    fast = plan_search(ctx, cluster, 8, objective, space, top_k=top_k)
    monkeypatch.setattr(engine, "INCUMBENT_MIN_POOLS", 10 ** 9)
    monkeypatch.setattr(taskrun, "floor_keys", lambda *a, **k: np.full(len(a[3]), -np.inf))
    plain = plan_search(ctx, cluster, 8, objective, space, top_k=top_k)
    assert [_shape(c) for c in fast.candidates] == [_shape(c) for c in plain.candidates]
    assert fast.stats.complete and plain.stats.complete


# seed 4 (about 30 s on a loaded machine) ran until session 16 cut CI time
@pytest.mark.parametrize("seed", range(4))
def test_incumbent_path_matches_brute_force(monkeypatch, seed: int) -> None:
    rng = random.Random(200 + seed)
    ctx, cat = bf_ctx(small_memory=seed % 2 == 1)
    cluster = parse_gpus(random_gpus(rng, max_pools=4, max_gpus=8), cat)
    monkeypatch.setattr(engine, "INCUMBENT_MIN_POOLS", 1)
    check_exact(ctx, cluster, 8, rng.choice(OBJECTIVES[:3]))


def test_time_limit_returns_a_plan_and_a_sound_bound() -> None:
    """A limit too short to finish: a plan is still returned (the limit is soft until one is held), marked
    incomplete, with a lower bound at most the exact optimum; a generous limit changes nothing."""
    ctx, cat = bf_ctx()
    cluster = parse_gpus("A100-40@us-a=4,V100-16@us-a=4,GH-96@us-b=4", cat)
    space = SearchSpace(max_stages=4, mbs_options=(1, 2), tp_options=(1, 2))
    exact = plan_search(ctx, cluster, 16, Objective(), space)
    short = plan_search(ctx, cluster, 16, Objective(), space, time_limit_s=1e-6)
    assert exact.stats.complete and exact.stats.lower_bound_key is None
    assert short.best is not None and not short.stats.complete
    assert short.stats.lower_bound_key <= exact.best.key * (1 + 1e-12) <= short.best.key * (1 + 1e-12)
    long = plan_search(ctx, cluster, 16, Objective(), space, time_limit_s=3600.0)
    assert long.stats.complete and [_shape(c) for c in long.candidates] == [_shape(c) for c in exact.candidates]


def test_progress_reports_phases() -> None:
    ctx, cat = bf_ctx()
    cluster = parse_gpus("A100-40@us-a=4,V100-16@us-a=4", cat)
    seen: list[tuple] = []
    plan_search(ctx, cluster, 8, Objective(), SearchSpace(max_stages=3), progress=lambda *a: seen.append(a))
    assert seen and all(len(a) == 4 and isinstance(a[3], str) for a in seen)
    assert any(a[3].startswith("building the task list") for a in seen)


def run_cli(capsys, *argv):
    from planner.cli_plan import main
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "abc", ""])
def test_bad_time_limit_is_one_line_exit_2(capsys, tmp_path, value: str) -> None:
    path = tmp_path / "plan.json"
    rc, out, err = run_cli(capsys, "--model", "tiny", "--gpus", "A100-40@z=4", "--time-limit-s", value,
                           "-o", str(path))
    assert rc == 2 and err.startswith("error: --time-limit-s") and err.count("\n") == 1 and not path.exists()


def test_cli_says_whether_the_search_finished(capsys) -> None:
    rc, out, _ = run_cli(capsys, "--model", "tiny", "--gpus", "A100-40@z=4", "--no-comparator")
    assert rc == 0 and "search finished" in out
    rc, out, _ = run_cli(capsys, "--model", "tiny", "--gpus", "A100-40@z=4,V100-16@z=4", "--no-comparator",
                         "--json", "--time-limit-s", "none")
    assert rc == 0 and json.loads(out)["search"] == {"complete": True}


def test_progress_lines_on_a_pipe_only_when_asked(capsys) -> None:
    """Not a terminal: with lines asked for, one plain stderr line after 3 s, then at most one per 10 s,
    nothing before 3 s; not asked (sailor-plan's default), nothing, so a late error is still one line."""
    from planner.progress import search_progress
    for lines in (True, False):
        with search_progress("sailor-plan", lines=lines) as cb:
            for t in (0.5, 2.9, 3.1, 5.0, 12.0, 13.2, 14.0):
                cb(1, 10, t, "exact search")
        err = capsys.readouterr().err
        assert err.splitlines() == (["sailor-plan: 3 s: exact search 1/10", "sailor-plan: 13 s: exact search 1/10"]
                                    if lines else [])
