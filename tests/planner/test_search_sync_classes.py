"""``netvec.sync_rows`` computes each class of rows (same presence pattern, replicas per zone and byte sizes)
once: on many random rows, full of such repeats, it returns exactly what computing every row gives; and both
equal the simulator's ``zone_aware_sync`` priced row by row (the per-class slowest-link choice included)."""
from __future__ import annotations

import numpy as np
import pytest

from planner import api
from planner.cluster import parse_gpus
from planner.search import netvec
from planner.search.netvec import Group, LinkCache

GPUS = ("A100-40@us-central1-a=32,V100-16@us-central1-a=64,V100-16@us-central1-b=32,H100-80@us-central1-b=16,"
        "GH-96@us-central1-c=16,H100-80@us-west1-b=16")
KINDS = [("A100-40", "us-central1-a"), ("V100-16", "us-central1-a"), ("V100-16", "us-central1-b"),
         ("H100-80", "us-central1-b"), ("GH-96", "us-central1-c"), ("H100-80", "us-west1-b")]


@pytest.fixture(scope="module")
def ctx():
    bundle = api.load_data(api.DataSource(model="gpt-neo-2.7b"))
    return api.context_for(api.make_context(bundle, None), parse_gpus(GPUS, bundle.catalog))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("rule", ["auto", "flat", "hierarchical"])
def test_row_classes_give_what_every_row_gives(ctx, seed, rule) -> None:
    from dataclasses import replace
    c = replace(ctx, settings=replace(ctx.settings, grad_sync=rule))
    rng = np.random.default_rng(seed)
    groups = [Group(z, g, int(rng.choice([1, 2, 4]))) for g, z in sorted(KINDS, key=lambda k: (k[1], k[0]))]
    R = 3000
    D = rng.integers(0, 5, size=(R, len(groups))) * (rng.random((R, len(groups))) < 0.5)
    sizes = rng.choice([2e7, 5e7, 3e8], size=R)
    full, param = sizes * 4, (sizes / 2 if seed % 2 else None)
    got = netvec.sync_rows(c, LinkCache(c), groups, D, sizes, full, param)
    want = netvec._sync_rows(c, LinkCache(c), groups, D, sizes, full, param)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    first, _ = netvec.same_sync_rows(groups, D, sizes, full, param)
    assert len(first) < 0.8 * R                 # the classes did merge rows
    assert (got[0] > 0).any() and got[2].any() == (rule != "flat")


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rule", ["auto", "flat", "hierarchical"])
def test_sync_rows_equal_the_simulators_zone_aware_sync(ctx, seed, rule) -> None:
    """The rows' sync, including each ring's slowest-link choice made once per class of rows, against the
    simulator's own rule (``planner.simulator.time.zone_aware_sync``) priced row by row on the same replicas
    in the same ring order: seconds and the mode bit-for-bit in value (rel 1e-12), egress dollars from the
    simulator's cross-zone bytes at the network's prices."""
    from dataclasses import replace

    from planner.network import Endpoint
    from planner.simulator.time import zone_aware_sync
    c = replace(ctx, settings=replace(ctx.settings, grad_sync=rule))
    rng = np.random.default_rng(100 + seed)
    groups = [Group(z, g, int(rng.choice([1, 2, 4]))) for g, z in sorted(KINDS, key=lambda k: (k[1], k[0]))]
    R = 400
    D = rng.integers(0, 4, size=(R, len(groups))) * (rng.random((R, len(groups))) < 0.5)
    D[D.sum(axis=1) == 0, int(rng.integers(len(groups)))] = 2
    sizes = rng.choice([2e7, 5e7, 3e8], size=R)
    full = sizes * 4
    param = sizes / 2 if seed % 2 else None
    t, usd, hier = netvec.sync_rows(c, LinkCache(c), groups, D, sizes, full, param)
    for r in range(R):
        ends = [Endpoint(g.gpu_type, g.zone) for g, n in zip(groups, D[r]) for _ in range(int(n))]
        if len(ends) < 2:
            assert t[r] == 0.0 and usd[r] == 0.0 and not hier[r]
            continue
        conc = min(g.tp for g, n in zip(groups, D[r]) if n > 0)
        want = zone_aware_sync(ends, c, rule, float(sizes[r]), float(full[r]), conc,
                               None if param is None else float(param[r]))
        assert t[r] == pytest.approx(want.time_s, rel=1e-12, abs=0.0)
        assert bool(hier[r]) == (want.mode == "hierarchical")
        price = sum(b * c.network.egress_usd_per_byte(za, zb) for (za, zb), b in want.cross_zone_bytes.items())
        assert usd[r] == pytest.approx(price, rel=1e-12, abs=1e-300)
    assert (t > 0).any() and (hier.any() == (rule != "flat"))
