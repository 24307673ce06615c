"""The search's vectorised tied-embedding all-reduce of pool rows (planner/search/tiedvec.py) equals the
simulator's rule (planner.simulator.tied.tied_sync_of_replicas, via ``TiedSync._price``) on many random rows:
seconds and egress dollars, flat and hierarchical stage-0 modes, plain and distributed-optimizer syncs, several
zones, mixed TP degrees, pools that repeat a (type, zone), columns holding 0, 1 or many replicas."""
from __future__ import annotations

import numpy as np
import pytest

from planner import api
from planner.cluster import parse_gpus
from planner.plan import Replica
from planner.search.netvec import Group, LinkCache
from planner.search.tied import TiedSync
from planner.search.tiedvec import tied_rows

GPUS = ("A100-40@us-central1-a=32,V100-16@us-central1-a=64,V100-16@us-central1-b=32,H100-80@us-central1-b=16,"
        "GH-96@us-central1-c=16,H100-80@us-west1-b=16")


@pytest.fixture(scope="module")
def ctx():
    bundle = api.load_data(api.DataSource(model="gpt-neo-2.7b"))
    return api.context_for(api.make_context(bundle, None), parse_gpus(GPUS, bundle.catalog))


def _reference(ctx, groups, D, hier0, dist_bytes):
    ts = TiedSync(ctx)
    t, usd = np.zeros(len(D)), np.zeros(len(D))
    for i, row in enumerate(D):
        reps = tuple(Replica(gpu_type=g.gpu_type, tp=g.tp, zone=g.zone) for g, d in zip(groups, row)
                     for _ in range(int(d)))
        if reps:
            t[i], usd[i] = ts._price(reps, reps, 3, "hierarchical" if hier0[i] else "flat", dist_bytes)
    return t, usd


KINDS = [("A100-40", "us-central1-a"), ("V100-16", "us-central1-a"), ("V100-16", "us-central1-b"),
         ("H100-80", "us-central1-b"), ("GH-96", "us-central1-c"), ("H100-80", "us-west1-b")]


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_tied_rows_equal_the_simulator(ctx, seed) -> None:
    rng = np.random.default_rng(seed)
    for trial in range(12):
        n_cols = int(rng.integers(1, 7))
        picks = rng.choice(len(KINDS), size=n_cols, replace=bool(rng.random() < 0.3)).tolist()
        if trial % 4 < 2:      # the search's column order (zone, type); the other half in any order
            picks = sorted(picks, key=lambda i: (KINDS[i][1], KINDS[i][0]))
        groups = [Group(KINDS[i][1], KINDS[i][0], int(rng.choice([1, 2, 4, 8]))) for i in picks]
        R = 40
        D = rng.integers(0, 4, size=(R, n_cols)) * (rng.random((R, n_cols)) < 0.6)
        D[rng.random(R) < 0.2] *= int(rng.integers(2, 20))          # some large counts
        hier0 = rng.random(R) < 0.5
        dist = None if trial % 2 else int(rng.choice([2, 4]))
        want_t, want_u = _reference(ctx, groups, D, hier0, dist)
        got_t, got_u = tied_rows(ctx, LinkCache(ctx), groups, D, hier0, dist)
        np.testing.assert_array_equal(got_t, want_t)
        np.testing.assert_array_equal(got_u, want_u)


def test_cases_cover_the_shapes_that_matter(ctx) -> None:
    """One zone / several zones, a lone replica, a lone column, hierarchical with several zones: each priced
    non-trivially and equal to the simulator."""
    groups = [Group("us-central1-a", "A100-40", 1), Group("us-central1-a", "V100-16", 4),
              Group("us-central1-b", "V100-16", 2), Group("us-west1-b", "H100-80", 1)]
    D = np.array([[1, 0, 0, 0], [0, 3, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [2, 0, 3, 1], [0, 0, 0, 0]])
    for hier in (False, True):
        h = np.full(len(D), hier)
        want = _reference(ctx, groups, D, h, None)
        got = tied_rows(ctx, LinkCache(ctx), groups, D, h, None)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert (got[0][:5] > 0).all() and got[0][5] == 0.0
        assert (got[1][3:5] > 0).all() and (got[1][:3] == 0).all()
