"""A data-parallel ring waits for its slowest link by time (``planner.simulator.time.zone_aware_sync``), so the
modelled gradient sync is non-decreasing in the gradient and the search's split dominance is sound
(docs/PLANNER.md 2.1, *Split dominance*).

(a) the simulator's sync never falls as the gradient grows, on random fitted networks whose bandwidth fits
cross and whose latencies differ (hypothesis); (b) the hand-made fitted network on which the earlier rule
(least bandwidth at the chunk size, latency ignored) made ``plan_search`` miss the brute force's optimum now
gives the optimum; (c) the search's vectorised mirror (``netvec.sync_rows``) equals ``zone_aware_sync``
on random rings mixing link classes of such a network; (d) ``Link.time_s`` is non-decreasing
between the envelope's grid points too (the rule's monotonicity rests on it)."""
from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.cluster import parse_gpus
from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import Endpoint, Link, NetworkModel
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search import netvec
from planner.search.netvec import Group, LinkCache
from planner.simulator import simulate
from planner.simulator.settings import OURS, SimContext
from planner.simulator.time import zone_aware_sync

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_planner_bruteforce import brute_force_best  # noqa: E402
from test_search_bounds_fitted import _ctx as falling_fit_ctx  # noqa: E402

MODEL = ModelSpec("wbt", num_layers=4, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=2048,
                  vocab_size=8192, max_position_embeddings=4096, tied_embeddings=False)
TYPES = ("A100-40", "V100-16")
ZONES = ("us-a", "us-b", "us-c")


def _network(links: dict) -> SimContext:
    cat = GPUCatalog()
    npg = {g: cat.get(g).gpus_per_node for g in TYPES}
    pairs = {(za, ga, npg[ga], zb, gb, npg[gb]): links[(za, ga, zb, gb)]
             for za in ZONES for ga in TYPES for zb in ZONES for gb in TYPES}
    return SimContext(MODEL, ProfileStore(MODEL, cat), NetworkModel(cat, pair_links=pairs), cat, OURS)


fits = st.one_of(
    st.none(),
    st.tuples(st.floats(0.5, 30), st.floats(-2, 8), st.floats(0.5, 12)).map(
        lambda t: (t[0], -2 * t[0] * t[1], t[0] * t[1] ** 2 + t[2])),          # convex: falls, then rises
    st.tuples(st.floats(0.2, 3), st.floats(2, 9), st.floats(2, 40)).map(
        lambda t: (-t[0], 2 * t[0] * t[1], -t[0] * t[1] ** 2 + t[2])))        # concave: rises to its vertex
link_st = st.builds(lambda fit, lat, hi: Link(hi, lat, fit), fits,
                    st.sampled_from([0.0, 1e-6, 2e-5, 5e-4, 5e-3, 2e-2]), st.floats(2e9, 3e11))
keys = [(za, ga, zb, gb) for za in ZONES for ga in TYPES for zb in ZONES for gb in TYPES]


@settings(max_examples=150, deadline=None)
@given(links=st.lists(link_st, min_size=len(keys), max_size=len(keys)),
       members=st.lists(st.tuples(st.sampled_from(TYPES), st.sampled_from(ZONES)), min_size=2, max_size=9),
       rule=st.sampled_from(["flat", "hierarchical", "auto"]), conc=st.sampled_from([1, 2, 4]),
       dist=st.booleans(), g_lo=st.floats(1e5, 3e9), growth=st.floats(1.0, 8.0))
def test_sync_is_non_decreasing_in_the_gradient(links, members, rule, conc, dist, g_lo, growth) -> None:
    ctx = _network(dict(zip(keys, links)))
    ends = [Endpoint(g, z) for g, z in members]
    times = []
    for g in (g_lo, g_lo * growth):
        try:
            sc = zone_aware_sync(ends, ctx, rule, g, 4 * g, conc, g / 2 if dist else None)
        except InputError:       # a fit refused at a size (below its valid range): no plan sends it
            return
        times.append(sc.time_s)
    assert times[1] >= times[0] * (1 - 1e-12), times


def test_the_old_rules_counterexample_now_gives_the_optimum() -> None:
    """docs/PLANNER.md 2.1: an intra-zone link whose fitted bandwidth falls with the size (convex fit, vertex at
    u = 4.6, 6 GB/s there) beside a constant 10 GB/s cross-zone link with 5 ms latency; 4 + 2 A100s, 2 stages.
    With the least-bandwidth rule the 3|1 split's larger gradient switched its 3-pipeline ring from the
    high-latency cross-zone link to the intra-zone one, its sync dropped, the split dominance dropped it, and
    ``plan_search`` returned 0.0622 s/iteration against the brute force's 0.0608 s (gbs 36; also off at 18, 21,
    27). Timed by its slowest link, the sync grows with the gradient and the two agree."""
    ctx = falling_fit_ctx(20.0, 4.6, 6.0, 0.005)
    cluster = parse_gpus("A100-40@us-a=4,A100-40@us-b=2", ctx.catalog)
    space = SearchSpace(max_stages=2, mbs_options=(1,), tp_options=(1,), recompute=(False,),
                        distributed_optimizer=(False,), precision="fp32")
    objective = Objective("throughput")
    for gbs in (21,):          # gbs 36 too (0.0622 against 0.0608 s before), but its brute force is slow
        res = plan_search(ctx, cluster, gbs, objective, space)
        got = simulate(build_plan(res.best, ctx.model.num_layers, gbs, None), ctx).iteration_time_s
        best, plan, n = brute_force_best(ctx, cluster, gbs, objective, 2, (1,), (1,), (False,), dist_opts=(False,),
                                         precision="fp32")
        assert n > 0 and plan is not None
        assert got == pytest.approx(best, rel=1e-9), (gbs, got, best, plan)
    # and the ring that crossed over: the cross-zone link is the slowest by time at both gradient sizes
    a, b = Endpoint("A100-40", "us-a"), Endpoint("A100-40", "us-b")
    small = zone_aware_sync([a, a, b], ctx, "flat", 50e6, 150e6, 1).time_s
    large = zone_aware_sync([a, a, b], ctx, "flat", 63e6, 189e6, 1).time_s
    assert small <= large
    assert small >= 4 * 0.005       # 2 (n - 1) = 4 steps, each at least the cross-zone link's latency


_rng = np.random.default_rng(41)
RANDOM_FALLING = [(float(_rng.uniform(10, 30)), float(_rng.uniform(4.2, 5.0)), float(_rng.uniform(4, 8)),
                   float(_rng.choice([2e-3, 5e-3, 1e-2])), 4, int(_rng.choice([2, 3])),
                   int(_rng.choice([18, 21]))) for _ in range(5)]


@pytest.mark.parametrize("c0,vertex_u,floor,lat,na,nb,gbs", RANDOM_FALLING)
def test_search_equals_brute_force_on_falling_fits(c0, vertex_u, floor, lat, na, nb, gbs) -> None:
    """The split dominance against the brute force on random networks of the counterexample's kind (an
    intra-zone fit falling with the size beside a high-latency cross-zone link), 2 zones, up to 2 stages."""
    ctx = falling_fit_ctx(c0, vertex_u, floor, lat)
    cluster = parse_gpus(f"A100-40@us-a={na},A100-40@us-b={nb}", ctx.catalog)
    space = SearchSpace(max_stages=2, mbs_options=(1,), tp_options=(1,), recompute=(False,),
                        distributed_optimizer=(False,), precision="fp32")
    objective = Objective("throughput")
    res = plan_search(ctx, cluster, gbs, objective, space)
    got = simulate(build_plan(res.best, ctx.model.num_layers, gbs, None), ctx).iteration_time_s
    best, plan, _ = brute_force_best(ctx, cluster, gbs, objective, 2, (1,), (1,), (False,), dist_opts=(False,),
                                     precision="fp32")
    assert got == pytest.approx(best, rel=1e-9), (got, best, plan)


@pytest.mark.parametrize("seed", range(6))
def test_netvec_equals_the_simulator_on_rings_mixing_link_classes(seed: int) -> None:
    rng = np.random.default_rng(700 + seed)
    links = {}
    for k in keys:
        kind = int(rng.choice(3, p=[0.35, 0.45, 0.2]))
        lat = float(rng.choice([0.0, 1e-6, 2e-5, 5e-4, 5e-3]))
        hi = float(10 ** rng.uniform(9.5, 11.5))
        if kind == 0:
            fit = None
        elif kind == 1:         # convex, positive everywhere
            a, v, m = rng.uniform(0.5, 30), rng.uniform(2, 8), rng.uniform(0.5, 12)
            fit = (float(a), float(-2 * a * v), float(a * v * v + m))
        else:                   # concave, held at its vertex; refused below its valid range (netvec: inf)
            a, v, m = rng.uniform(0.2, 3), rng.uniform(2, 9), rng.uniform(2, 40)
            fit = (float(-a), float(2 * a * v), float(-a * v * v + m))
        links[k] = Link(hi, lat, fit)
    ctx = _network(links)
    rule = ["auto", "flat", "hierarchical"][seed % 3]
    c = replace(ctx, settings=replace(ctx.settings, grad_sync=rule))
    groups = [Group(z, g, int(rng.choice([1, 2, 4]))) for z in ZONES for g in TYPES]
    R = 300
    D = rng.integers(0, 4, size=(R, len(groups))) * (rng.random((R, len(groups))) < 0.5)
    D[D.sum(axis=1) == 0, int(rng.integers(len(groups)))] = 2
    sizes = rng.choice([3e6, 2e7, 5e7, 3e8, 1e9], size=R)
    full = sizes * 4
    param = sizes / 2 if seed % 2 else None
    t, usd, hier = netvec.sync_rows(c, LinkCache(c), groups, D, sizes, full, param)
    compared = refused = 0
    for r in range(R):
        ends = [Endpoint(g.gpu_type, g.zone) for g, n in zip(groups, D[r]) for _ in range(int(n))]
        if len(ends) < 2:
            assert t[r] == 0.0 and not hier[r]
            continue
        conc = min(g.tp for g, n in zip(groups, D[r]) if n > 0)
        try:
            want = zone_aware_sync(ends, c, rule, float(sizes[r]), float(full[r]), conc,
                                   None if param is None else float(param[r]))
        except InputError:
            assert t[r] == math.inf                 # refused: the mirror prices the row inf
            refused += 1
            continue
        assert t[r] == want.time_s                  # bit for bit
        assert bool(hier[r]) == (want.mode == "hierarchical")
        compared += 1
    assert compared > R // 3 and refused > 0, (compared, refused)


def test_link_time_is_non_decreasing_between_grid_points() -> None:
    """``Link.checked_time_s`` never falls as the size grows, on a fine size grid (not only on the envelope's
    quarter-octave points), for random fits of both curvatures (up to rounding of the peak points)."""
    rng = np.random.default_rng(5)
    xs = np.exp(np.linspace(np.log(1e3), np.log(1e11), 2001))
    dropped_before = 0
    for _ in range(60):
        link = Link(float(10 ** rng.uniform(9, 11)), float(rng.choice([0.0, 1e-5])),
                    (float(rng.normal(0, 3)), float(rng.normal(0, 5)), float(rng.uniform(0.5, 20))))
        t = []
        for x in xs:
            try:
                t.append(link.checked_time_s(float(x)))
            except InputError:
                t.append(np.nan)
        t = np.array(t)
        ok = ~np.isnan(t)
        assert (np.diff(t[ok]) >= -1e-12 * t[ok][:-1]).all()
        # the mirror: equal up to numpy's log2 differing from math.log2 by 1 ulp at a few sizes
        np.testing.assert_allclose(netvec.link_time(link, xs[ok]), t[ok], rtol=1e-14, atol=0)
        dropped_before += _grid_only_drops(link, xs)
    assert dropped_before > 0       # not vacuous: the grid-only envelope fell on some of these fits


def _grid_only_drops(link: Link, xs: np.ndarray) -> int:
    """1 if the envelope on grid points alone (without the turn points) falls somewhere on ``xs``."""
    import planner.network as N
    prev, out = -1.0, 0
    for x in xs:
        try:
            link.check_size(float(x))
        except InputError:
            continue
        raw = link._raw_transfer_s(float(x))
        grid = N._envelope(link.fit_gb_per_s, link.max_bw_bytes_per_s, link.min_bw_bytes_per_s)
        i = min(len(grid) - 1, max(0, int(math.floor(math.log2(x) * 4))))
        t = max(raw, grid[i])
        out |= t < prev * (1 - 1e-12)
        prev = t
    return int(out)
