"""``syncbound._ring_tables`` computed once per link and size (min of the link times, then the ring factor;
the zone-count table read from the member-count table; floor tables kept per gradient at the longest n_cap)
gives the same arrays, bit for bit, as the per-link expression it replaced (``_reference`` below), on random
networks of fitted links: falling and concave fits, fits refused below a valid start (floor times there) and
fits that are never positive (inf, so the n = 1 column is nan), with n_cap asked in rising and falling order."""
from __future__ import annotations

import random

import numpy as np
import pytest

from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import Link, NetworkModel
from planner.profiles import ProfileStore
from planner.search.netvec import Group, LinkCache
from planner.search.syncbound import _link_params, _ring_tables, floor_time
from planner.simulator import formulas as F
from planner.simulator.settings import OURS, SimContext

MODEL = ModelSpec("rt", num_layers=4, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=2048,
                  vocab_size=8192, max_position_embeddings=4096, tied_embeddings=False)
GPU = "A100-40"


def _reference(cache: LinkCache, groups, conc: int, grad_bytes: float, n_cap: int):
    """The per-link expression before the change (commit 1360507)."""
    intra = {_link_params(lk): lk for a in groups for b in groups if a.zone == b.zone
             for lk in [cache.get(a, b, conc)]}
    cross = {_link_params(lk): lk for a in groups for b in groups if a.zone != b.zone
             for lk in [cache.get(a, b, conc)]}
    n = np.arange(1, n_cap + 1, dtype=float)
    x = grad_bytes / n
    ring_intra = np.min([F.ring_s(n, floor_time(lk, x)) for lk in intra.values()], axis=0)
    ring_cross = c = None
    if cross:
        ring_cross = np.min([F.ring_s(n, floor_time(lk, x)) for lk in cross.values()], axis=0)
        zs = np.arange(2, len({g.zone for g in groups}) + 1, dtype=float)
        c = np.min([F.ring_s(zs, floor_time(lk, grad_bytes / zs)) for lk in cross.values()], axis=0)
    return ring_intra, ring_cross, c


def _random_link(rng: random.Random) -> Link:
    hi = rng.choice([10e9, 25e9, 100e9])
    lat = rng.choice([0.0, 1e-6, 5e-3])
    kind = rng.random()
    if kind < 0.2:
        return Link(hi, lat)
    if kind < 0.3:      # never positive: every size refused (inf)
        return Link(hi, lat, (-0.5, 0.0, -1.0))
    a = rng.uniform(-3, 3)
    return Link(hi, lat, (a, rng.uniform(-10, 10), rng.uniform(-5, 40)), rng.choice([None, hi * 0.05]))


def _ctx(rng: random.Random, zones: list[str]) -> SimContext:
    cat = GPUCatalog()
    npg = cat.get(GPU).gpus_per_node
    pairs = {(za, GPU, npg, zb, GPU, npg): _random_link(rng) for za in zones for zb in zones}
    return SimContext(MODEL, ProfileStore(MODEL, cat), NetworkModel(cat, pair_links=pairs), cat, OURS)


def _same(x, y) -> None:
    if x is None or y is None:
        assert x is None and y is None
        return
    assert x.shape == y.shape and x.tobytes() == y.tobytes(), (x, y)


@pytest.mark.parametrize("seed", range(12))
def test_ring_tables_bit_identical_to_the_per_link_expression(seed: int) -> None:
    rng = random.Random(seed)
    zones = [f"z{i}" for i in range(rng.choice([1, 2, 3, 5]))]
    ctx = _ctx(rng, zones)
    cache = LinkCache(ctx)
    groups = tuple(Group(z, GPU, 1) for z in zones)
    grads = [rng.choice([1.0, 3e3, 7e5]) * rng.uniform(1, 1e4) for _ in range(3)]
    for grad in grads:
        for n_cap in rng.sample([1, 2, 4, 7, 40, 300], 4):
            got = _ring_tables(cache, groups, 1, grad, n_cap)
            want = _reference(LinkCache(ctx), groups, 1, grad, n_cap)
            for g, w in zip(got, want):
                _same(g, w)
