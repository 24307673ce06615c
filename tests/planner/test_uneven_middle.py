"""Uneven middle stages (docs/PLANNER.md 1 item 4 and 2.1 "Uneven middle stages"), against every contiguous split.

- the candidate rule (:mod:`planner.search.splits`): for every pool-plan structure of random small cases and
  every (first, last) stage size, the best of *all* middles equals the best front-loaded candidate at the
  per-stage memory caps (brute force with ``simulate``, ``benchmarks/uneven_middle.py``);
- its two ingredients: memory monotone in a middle stage's size and position, and the front-loaded middle's
  prefix sums the largest of all middles within the caps; with blocking p2p the round-trip bounds never bind;
- the planner is exact over every contiguous split on deep (S <= 5) memory-bound cases, and a middle that only
  fits under memory caps (outside the split family, one of the search's cap-bound middles) is found.
"""
from __future__ import annotations

import random
from dataclasses import replace
from itertools import product

import numpy as np
import pytest

from benchmarks.uneven_middle import compositions, in_old_family, random_case, run_case
from planner.cluster import parse_gpus
from planner.search import Objective, SearchSpace, plan_search
from planner.search.splits import front_loaded, middle_candidates
from planner.search.tables import split_family
from planner.simulator import formulas as F
from planner.simulator import simulate
from tests.planner.test_planner_bruteforce import _plan, _pool_choices, check_exact, count_splits, in_family

REL = 1e-9


def _middles(total: int, caps: list[int], level: int):
    return [m for m in compositions(total, len(caps)) if all(c <= min(u, level) for c, u in zip(m, caps))]


def test_front_loaded_has_the_largest_prefix_sums():
    """Against every middle within the caps and the level: same sum, inside the bounds, every prefix sum at
    least as large; None exactly when no middle exists."""
    rng = random.Random(5)
    for _ in range(400):
        n = rng.randint(1, 5)
        total = rng.randint(n, 14)
        caps = sorted(rng.randint(0, 8) for _ in range(n))
        level = rng.randint(1, 9)
        got = front_loaded(total, caps, level)
        every = _middles(total, caps, level)
        assert (got is None) == (not every), (total, caps, level)
        if got is None:
            continue
        assert sum(got) == total and all(1 <= c <= min(u, level) for c, u in zip(got, caps))
        pre = np.cumsum(got)
        assert all((pre >= np.cumsum(m)).all() for m in every), (total, caps, level, got)


def test_middle_candidates_cover_every_level():
    """One candidate per reachable largest size, each the front-loaded middle of some level."""
    for total, caps in [(6, [1, 2, 3]), (9, [4, 4, 4]), (7, [2, 2, 3]), (5, [5, 5])]:
        cands = middle_candidates(total, caps)
        assert len(set(cands)) == len(cands)
        levels = {max(m) for m in _middles(total, caps, max(caps))}
        assert {max(c) for c in cands} == levels
    assert middle_candidates(7, [2, 2, 3]) == [(2, 2, 3)]
    assert middle_candidates(6, [1, 1, 3]) == []


def test_round_trip_bounds_never_bind_with_blocking_p2p():
    """With blocking p2p every stage's busy time holds two transfers per adjacent boundary, so each
    round-trip bound (a suffix mean of compute plus less than two transfers) is below the busiest stage:
    the period is the busiest stage at every micro-batch level, whatever the order of the stages."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        s_num = int(rng.integers(2, 9))
        comp = rng.uniform(0.0, 1.0, size=(1, s_num))
        p2p = float(rng.uniform(0.0, 2.0))
        busy = F.busy_s(comp, p2p, True).max(axis=-1)
        levels = F.period_levels(busy, F.round_trip_bounds(comp, p2p))
        assert np.allclose(levels, busy[:, None], rtol=0, atol=0)


def test_declared_family_holds_the_staircase_at_the_smallest_level():
    """The declared family = the even middle (larger stages last) + the front-loaded middle without caps at
    the smallest largest stage, for every first and last; S <= 3: every composition."""
    for L, S in [(7, 5), (9, 6), (8, 4), (6, 3)]:
        fam = {tuple(int(x) for x in r) for r in split_family(L, S)}
        assert len(fam) == len(split_family(L, S))
        want = set()
        for split in compositions(L, S):
            mid = split[1:-1]
            if S <= 3:
                want.add(split)
                continue
            total, n = sum(mid), len(mid)
            even = max(mid) - min(mid) <= 1 and list(mid) == sorted(mid)
            if even or mid == front_loaded(total, [total] * n, -(-total // n)):
                want.add(split)
        assert fam == want
        assert all(in_family(sp) == (sp in fam) for sp in compositions(L, S))     # the brute force's copy


@pytest.mark.parametrize("first_seed", [1000, 1050])
def test_front_loaded_candidates_hold_the_best_of_every_contiguous_split(first_seed):
    """Random small cases (both runtime presets, recomputation / distributed optimizer on or off, memory near
    an even pipeline's need): per structure and (first, last), the best middle of all is a front-loaded
    candidate at the memory caps, and memory is monotone in a middle stage's size and position."""
    structures = 0
    for seed in range(first_seed, first_seed + 25):
        for r in run_case(random_case(seed)):
            structures += 1
            assert r.monotone, seed
            assert r.rule_ratio <= 1 + REL, (seed, r)
            assert r.family_ratio >= 1 - REL and r.old_ratio >= 1 - REL
    assert structures >= 40


def _all_splits_best(case, keep=lambda split: True, max_stages: int = 5) -> tuple[float, tuple[int, ...]]:
    """(best iteration time, its split) over every pool plan whose split ``keep`` accepts, of any contiguous
    split (S <= max_stages, TP 1, mbs 1, every micro-batch count split)."""
    ctx, L = case.ctx, case.ctx.model.num_layers
    cluster = _cluster(case)
    types = cluster.gpu_types()
    zones = {g: sorted(p.zone for p in cluster.pools if p.gpu_type == g) for g in types}
    best = (float("inf"), ())
    for S in range(1, min(L, max_stages) + 1):
        for split in filter(keep, compositions(L, S)):
            for tps in product(*[[0, 1] for _ in types]):
                if not any(tps):
                    continue
                for sp, mbs, pools, reps in _pool_choices(ctx, cluster, case.gbs, S, split, 1, dict(zip(types, tps)),
                                                         zones, case.recompute, case.dist):
                    for per_pool in count_splits(case.gbs, [p[3] for p in pools]):
                        counts = [m for seq in per_pool for m in seq]
                        est = simulate(_plan(split, reps, 1, case.gbs, counts, case.recompute, case.dist), ctx)
                        best = min(best, (est.iteration_time_s, split))
    return best


def _cluster(case):
    return parse_gpus(",".join(f"{g}@{z}={n}" for g, z, n in case.pools), case.ctx.catalog)


def _one_pool(seed: int, gpu: str):
    """A random case of the benchmark on one pool of 5 GPUs of one type (a one-pipeline 5-stage plan fits)."""
    return replace(random_case(seed), pools=((gpu, "us-a", 5),))


def _search(case):
    space = SearchSpace(max_stages=5, mbs_options=(1,), tp_options=(1,), recompute=(case.recompute,),
                        distributed_optimizer=(case.dist,), chain_segments=1)
    return plan_search(case.ctx, _cluster(case), case.gbs, Objective("throughput"), space).best


@pytest.mark.parametrize("seed,gpu", [(1104, "A100-40"), (1109, "V100-16")])
def test_search_is_exact_over_every_contiguous_split_on_deep_memory_bound_cases(seed, gpu):
    """The planner equals the brute force over every contiguous split (S <= 5) on cases where the middle
    stages matter."""
    case = _one_pool(seed, gpu)
    check_exact(case.ctx, _cluster(case), case.gbs, Objective("throughput"), max_stages=5, mbs_opts=(1,),
                tp_opts=(1,), recompute=(case.recompute,), dist=(case.dist,))


def test_a_staircase_beats_the_even_middle_when_round_trips_bind():
    """Non-blocking p2p, five stages: the best of every contiguous split puts the larger middle stages first,
    (1, 2, 2, 1, 1) (smaller round-trip bounds than (1, 1, 2, 2, 1)); the planner returns it, and the best
    plan whose middle is even with the larger stages last is slower."""
    case = _one_pool(1104, "A100-40")
    best_s, best_split = _all_splits_best(case)
    got = _search(case)
    assert got.iteration_s == pytest.approx(best_s, rel=REL)
    assert got.layers_per_stage == best_split == (1, 2, 2, 1, 1)
    assert _all_splits_best(case, in_old_family)[0] > best_s * (1 + 1e-3)


def test_a_middle_that_fits_only_under_memory_caps_is_found():
    """Memory binds the early middle stages: the best of every contiguous split, (1, 1, 2, 3, 1), grows the
    middle stages towards the end as their caps allow; it is not in the split family (whose best is more than
    10 % slower) but it is one of the cap-bound middles the search adds (docs/PLANNER.md 2.1), and the planner
    returns it."""
    case = _one_pool(1109, "V100-16")
    best_s, best_split = _all_splits_best(case)
    assert best_split == (1, 1, 2, 3, 1) and not in_family(best_split)
    assert _all_splits_best(case, in_family)[0] > 1.1 * best_s
    got = _search(case)
    assert got.iteration_s == pytest.approx(best_s, rel=REL) and got.layers_per_stage == best_split
