"""The fill-rate bound on a task's makespan (docs/PLANNER.md, *Rate bounds on a task's makespan*) and
the split-free times' line front (:func:`planner.search.taskfloor.split_free_times`):

- ``fill_rate_span`` is <= the smallest makespan of every count vector of d pipelines (>= 1 of
  every type, <= its capacity), every assignment of N micro-batches, brute force on many random small cases, and
  reach it within 1e-6 on some (not vacuous);
- ``best_slot_sums`` (the greedy) is the largest sum over every count vector;
- ``split_free_times`` equals the minimum over every split of ``pipeline_s`` bit for bit;
- the task bounds (cheap and refined) stay below the best plan of every task of random small clusters against
  the brute force of tests/planner/test_search_bounds_h13y.py (other seeds than that file's), under the
  throughput, cost and value objectives.
"""
from __future__ import annotations

import itertools
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.search import Objective
from planner.search.taskbound import fill_rate_span, task_bound
from planner.search.taskfloor import split_free_times
from planner.simulator import formulas as F
from planner.simulator.settings import OURS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_search_bounds_h13y import _ctx, _gpus, task_setup  # noqa: E402

REL = 1e-9


def _best_makespan(period, fill, counts, n_mb) -> float:
    """The smallest t at which pipelines (``counts[j]`` of type j, time ``(m - 1) P_j + F_j`` for m >= 1
    micro-batches) can run ``n_mb`` micro-batches in all: the smallest candidate time whose capacities add up."""
    cands = sorted({(m - 1) * period[j] + fill[j] for j in range(len(period)) for m in range(1, n_mb + 1)})
    for t in cands:
        runs = sum(c * sum(1 for m in range(1, n_mb + 1) if (m - 1) * period[j] + fill[j] <= t)
                   for j, c in enumerate(counts))
        if runs >= n_mb:
            return t
    return np.inf


@pytest.mark.parametrize("seed", range(4))
def test_rate_bounds_are_below_every_count_vector(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    ratios_fill = []
    for case in range(40):
        n = int(rng.integers(1, 4))
        n_mb = int(rng.integers(1, 30))
        period = rng.uniform(0.1, 2.0, n)
        # fill >= period (the cheap bound's case: the summed compute against the busiest stage) or any fill
        fill = period * rng.uniform(1.0, 8.0, n) if case % 2 else rng.uniform(0.01, 5.0, n)
        caps = rng.integers(1, 5, n)
        d = np.arange(n, int(caps.sum()) + 1)
        got_fill = fill_rate_span(period[None], fill[None], caps[None], d.astype(float), n_mb)[0]
        for i, dd in enumerate(d):
            best = min((_best_makespan(period, fill, cnt, n_mb)
                        for cnt in itertools.product(*[range(1, c + 1) for c in caps]) if sum(cnt) == dd),
                       default=np.inf)
            assert got_fill[i] <= best * (1 + REL), (case, dd, got_fill[i], best)
            ratios_fill.append(got_fill[i] / best)
    # not vacuous: somewhere the bound reaches the exact makespan (so 1e-6 more would fail)
    assert max(ratios_fill) > 1 - 1e-6, max(ratios_fill)


def test_fill_rate_span_is_zero_only_in_rows_without_finite_periods() -> None:
    """A combo whose type has no finite period gets 0; the other combos of the batch keep their bound (the same
    as alone)."""
    period, fill = np.array([[1.0, np.inf], [1.0, 2.0]]), np.array([[2.0, np.inf], [2.0, 3.0]])
    caps, d = np.array([[2, 2], [2, 2]]), np.arange(2, 5, dtype=float)
    got = fill_rate_span(period, fill, caps, d, 10)
    assert (got[0] == 0).all()
    assert (got[1] > 0).all() and np.array_equal(got[1], fill_rate_span(period[1:], fill[1:], caps[1:], d, 10)[0])


def test_split_free_times_match_every_split_bit_for_bit() -> None:
    rng = np.random.default_rng(5)
    for case in range(300):
        k, s_num, n_mb = int(rng.integers(1, 30)), int(rng.integers(1, 10)), int(rng.integers(1, 100))
        raw = rng.choice([0.1, 0.2, 0.25, 0.3, 0.7], size=(k, s_num + 1)) if case % 2 else rng.random((k, s_num + 1))
        levels = np.sort(raw, axis=1)
        fill = rng.random(k) * 3 if case % 3 else rng.choice([1.0, 2.0], k)
        m = np.arange(1, n_mb + 1)
        want = F.pipeline_s(m[None, :], levels[:, np.minimum(m, s_num + 1) - 1], fill[:, None]).min(axis=0)
        assert np.array_equal(split_free_times(levels, fill, n_mb), want), case


@pytest.mark.parametrize("seed", [7, 8])
def test_task_bounds_below_the_brute_force(seed: int) -> None:
    """Cheap and refined task bounds <= the task's best plan (throughput, cost, value), on random small
    clusters; and close to it somewhere (a bound 5% higher would fail)."""
    ctx = _ctx(OURS, seed % 2 == 1)
    cluster, gbs, space, tables, cache, by_task = task_setup(ctx, _gpus(random.Random(2000 + seed)), seed)
    ratios = []
    for (s_num, mbs, combo, dist), plans in by_task.items():
        n_mb = gbs // mbs
        for objective in (Objective("throughput"), Objective("cost"), Objective("value")):
            best = min(objective.key(e.iteration_time_s, e.cost_per_iteration_usd) for _, e in plans)
            for with_sync in (True, False):
                b = task_bound(ctx, cluster, tables, combo, s_num, mbs, n_mb, objective, cache, with_sync=with_sync,
                               dist=dist)
                assert b <= best * (1 + REL), (combo, s_num, mbs, dist, objective.kind, with_sync, b, best)
                if objective.kind == "throughput" and with_sync:
                    ratios.append(b / best)
    assert max(ratios) * 1.05 > 1 + REL, max(ratios)


def test_best_slot_sums_match_every_count_vector() -> None:
    """The greedy (one of each type, then the largest values) is the largest sum over every count vector."""
    from planner.search.taskbound import best_slot_sums
    rng = np.random.default_rng(11)
    for _ in range(60):
        n = int(rng.integers(1, 4))
        v = rng.choice([0.0, 0.5, 1.0, 2.5, 3.0], size=(1, 2, n))
        caps = rng.integers(1, 4, size=(1, n))
        d = np.arange(n, int(caps.sum()) + 1, dtype=float)
        got = best_slot_sums(v, caps, d)
        for b in range(2):
            for i, dd in enumerate(d):
                want = max(sum(c * v[0, b, j] for j, c in enumerate(cnt))
                           for cnt in itertools.product(*[range(1, c + 1) for c in caps[0]]) if sum(cnt) == dd)
                assert got[0, b, i] == pytest.approx(want, rel=1e-12), (v, caps, dd)
