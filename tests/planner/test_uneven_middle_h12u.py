"""Cap-bound middles (helper h12u; docs/PLANNER.md 1 item 4 and 2.1, "Uneven middle stages"): pool plans are
searched over the split family plus :mod:`planner.search.midcaps`' front-loaded middles under every task's
memory caps, which holds an optimum of every contiguous split.

- :func:`cap_bound_middles` is the lowest-level :func:`middle_candidates` middle where the family's staircase
  does not fit under the caps, and nothing where it does;
- :func:`cap_vectors` holds the caps ``simulate`` gives every pool-plan structure of random cases (S - s
  micro-batches in flight; with the distributed optimizer at the structure's own pipeline count);
- on random small cases where memory binds a middle stage, ``plan_search`` (pool plans) equals the best pool
  plan over every contiguous split, scored by ``simulate``; without the cap-bound middles it does not.
"""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from benchmarks.uneven_middle import compositions, random_case
from planner.cluster import parse_gpus
from planner.search import Objective, SearchSpace, plan_search
from planner.search import tasks as T
from planner.search.midcaps import cap_bound_middles, cap_vectors, lowest_middles
from planner.search.splits import front_loaded, middle_candidates
from planner.simulator import simulate
from tests.planner.test_planner_bruteforce import _plan, count_splits, structures

REL = 1e-9


def test_cap_bound_middles_are_the_lowest_candidate_where_the_staircase_does_not_fit():
    """Where the family's staircase (level ceil(total / n)) fits under the caps, none (the family holds it);
    else the front-loaded middle at the lowest level that fits, the first of ``middle_candidates``; the
    vectorised :func:`lowest_middles` gives the same middles."""
    rng = random.Random(12)
    for _ in range(600):
        n = rng.randint(1, 6)
        total = rng.randint(n, 16)
        caps = tuple(sorted(rng.randint(0, total) for _ in range(n)))
        got = cap_bound_middles(total, caps)
        stair = front_loaded(total, [total] * n, -(-total // n))
        cands = middle_candidates(total, caps)
        if all(c <= u for c, u in zip(stair, caps)) or not cands:
            assert got == (), (total, caps)
        else:
            assert got == (cands[0],), (total, caps)
            assert max(got[0]) > max(stair) or got[0] != stair
        vec = {tuple(r) for r in lowest_middles(total, np.array([caps], dtype=np.int64))[0].tolist()}
        assert vec == set(got), (total, caps)


def _space(case, max_stages: int = 5) -> SearchSpace:
    return SearchSpace(max_stages=max_stages, mbs_options=(1,), tp_options=(1,), recompute=(case.recompute,),
                       distributed_optimizer=(case.dist,), chain_segments=1)


def _cluster(case):
    return parse_gpus(",".join(f"{g}@{z}={n}" for g, z, n in case.pools), case.ctx.catalog)


def _small(seed: int):
    """A random case of the benchmark with at most two pools of at most 6 GPUs (a small brute force)."""
    case = random_case(seed)
    return replace(case, pools=tuple((g, z, min(n, 6)) for g, z, n in case.pools[:2]))


def _extra_splits(case) -> int:
    space = _space(case)
    tables = T.Tables(case.ctx, space, T.cluster_options(case.ctx, _cluster(case), space), _cluster(case))
    fam = {s: len(T.splits_for(space, case.ctx.model.num_layers, s)) for s in (4, 5)}
    return sum(len(tables.splits(s)) - fam[s] for s in (4, 5) if s <= case.ctx.model.num_layers)


# the first 14 seeds from 1000 on whose cases get cap-bound splits (_extra_splits > 0; checked below)
BINDING = [1029, 1066, 1074, 1075, 1080, 1109, 1129, 1137, 1198, 1214, 1244, 1277, 1292, 1308]


def test_the_binding_cases_get_cap_bound_splits():
    assert [s for s in range(1000, 1309) if _extra_splits(_small(s)) > 0] == BINDING


def test_cap_vectors_hold_every_structures_caps():
    """For every pool-plan structure (S = 4, 5) of the binding cases: the largest layer count each stage fits
    per ``simulate`` (S micro-batches per pipeline) is one of the search's cap vectors (first, middles, last)
    whenever some middle cap is below L - S + 1."""
    checked = 0
    for seed in BINDING[:6]:
        case = _small(seed)
        ctx, L = case.ctx, case.ctx.model.num_layers
        space = _space(case)
        tables = T.Tables(ctx, space, T.cluster_options(ctx, _cluster(case), space), _cluster(case))
        for S in (4, 5):
            if S > L:
                continue
            vectors = cap_vectors(ctx, tables, tables.options, S, tables.cluster)
            seen = set()
            for split, mbs, pools, reps, rc, do in structures(ctx, _cluster(case), case.gbs, S, (1,), (1,),
                                                              (case.recompute,), (case.dist,)):
                if len(split) != S or (tuple(reps), rc, do) in seen:
                    continue
                seen.add((tuple(reps), rc, do))
                caps = []
                for s in range(S):
                    c = 0
                    while c < L - S + 1:
                        probe = [1] * S
                        probe[s] = c + 1
                        probe[0 if s == S - 1 else -1] += L - sum(probe)    # a valid split; stage s's fit is read
                        est = simulate(_plan(tuple(probe), reps, 1, S * len(reps), [S] * len(reps), rc, do), ctx)
                        if not est.stages[s].fits_in_memory:
                            break
                        c += 1
                    caps.append(c)
                if min(caps) >= 1 and min(caps[1:-1]) < L - S + 1:
                    assert tuple(caps) in vectors, (seed, S, reps, caps, vectors)
                    checked += 1
    assert checked >= 3


def _best_pool_plan(case, max_stages: int = 5) -> float:
    """The best iteration time of every pool plan over every contiguous split (micro-batch 1, TP 1)."""
    best = float("inf")
    for split, mbs, pools, reps, rc, do in structures(case.ctx, _cluster(case), case.gbs, max_stages, (1,), (1,),
                                                      (case.recompute,), (case.dist,)):
        for per_pool in count_splits(case.gbs, [p[3] for p in pools]):
            counts = [m for seq in per_pool for m in seq]
            est = simulate(_plan(split, reps, 1, case.gbs, counts, rc, do), case.ctx)
            if est.fits_in_memory:
                best = min(best, est.iteration_time_s)
    return best


@pytest.mark.parametrize("seed", BINDING)
def test_search_equals_the_best_pool_plan_over_every_contiguous_split(seed):
    case = _small(seed)
    best = _best_pool_plan(case)
    got = plan_search(case.ctx, _cluster(case), case.gbs, Objective("throughput"), _space(case)).best
    assert got is not None and got.iteration_s == pytest.approx(best, rel=REL), (seed, got.layers_per_stage)


def test_without_the_cap_bound_middles_the_search_loses(monkeypatch):
    """The same check fails on a binding case when the cap-bound middles are taken away (the test can fail)."""
    case = replace(random_case(1109), pools=(("V100-16", "us-a", 5),))
    best = _best_pool_plan(case)
    monkeypatch.setattr(T, "cap_bound_splits", lambda L, S, caps, fam: fam[:0])
    got = plan_search(case.ctx, _cluster(case), case.gbs, Objective("throughput"), _space(case)).best
    assert got.iteration_s > best * 1.1


def test_tasks_where_memory_does_not_bind_get_no_extra_splits():
    case = replace(random_case(1109), pools=(("A100-40", "us-a", 5),))
    ctx = case.ctx.__class__(case.ctx.model, case.ctx.profiles, case.ctx.network,
                             case.ctx.catalog.with_entries({"A100-40": {"memory_bytes": 64 * 1024 ** 3}}),
                             case.ctx.settings)
    case = replace(case, ctx=ctx)
    assert _extra_splits(case) == 0
    assert [len(m) for m in compositions(3, 2)] == [2, 2]
