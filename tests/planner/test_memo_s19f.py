"""Session 19 (s19f): the memoised and batched forms of the search's bounds and syncs give what the direct
computation gives, bit for bit.

- ``netvec.stacked_sync_rows`` (every stage's exact sync in one call on the rows stacked) against one
  ``sync_rows`` call per stage, on random rows of two clusters (several zones, and one zone), each sync rule,
  with and without the distributed optimizer's parameter bytes;
- ``syncbound.sync_lower_bounds`` (several ``z_min`` in one pass, the suffix minimum memoised with the ring
  tables) against the expression it replaced, one call per ``z_min`` (``_old_sync_lower_bound``), on a made-up
  small multi-zone cluster and on one zone;
- the chain units' look-ups cached on a ``ChainGroups`` (``with_pairs``' p2p and egress tables, per link cache)
  against ``pair_tables`` computed afresh (and ``stage_core``'s rows, twins across zones included, against
  ``raw_arrays`` per group), and ``chainfloor.iteration_levels`` (its per-group-list terms cached, the pools'
  minima in one ``reduceat`` where the pools come in runs) against its expression before the change
  (``_old_iteration_levels``) on random tables, pools in runs and not.
"""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from planner import api
from planner.cluster import parse_gpus
from planner.search import SearchSpace
from planner.search import netvec
from planner.search.chainbudget import run_dmax
from planner.search.chainfloor import RUN_COVER, RUNS, SAFETY, SEG_SLACK, _dual_weights, iteration_levels
from planner.search.chaintab import ChainGroups, chain_groups, pair_tables, stage_core, with_pairs
from planner.search.netvec import Group, LinkCache
from planner.search.rows import sorted_unique
from planner.search.syncbound import _ring_tables, _suffix_min, sync_lower_bound, sync_lower_bounds, zones_needed
from planner.search.caps import caps_for
from planner.search.tasks import Tables, cluster_options
from planner.simulator import formulas as F

MULTI = "A100-40@us-central1-a=8,A100-40@us-central1-b=24,V100-16@us-central1-a=16,V100-16@us-west1-b=12"
ONE = "A100-40@us-central1-a=16,V100-16@us-central1-a=32"


@pytest.fixture(scope="module")
def bundle():
    return api.load_data(api.DataSource(model="gpt-neo-2.7b"))


def _ctx(bundle, gpus: str):
    cluster = parse_gpus(gpus, bundle.catalog)
    return api.context_for(api.make_context(bundle, None), cluster), cluster


def _same(x, y) -> None:
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), (x, y)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("rule", ["auto", "flat", "hierarchical"])
@pytest.mark.parametrize("gpus", [MULTI, ONE])
def test_stacked_sync_rows_equal_one_call_per_stage(bundle, seed, rule, gpus) -> None:
    ctx, cluster = _ctx(bundle, gpus)
    ctx = replace(ctx, settings=replace(ctx.settings, grad_sync=rule))
    rng = np.random.default_rng(seed)
    kinds = sorted({(p.zone, p.gpu_type) for p in cluster.pools})
    groups = [Group(z, g, int(rng.choice([1, 2]))) for z, g in kinds]
    R, S = 700, int(rng.integers(2, 5))
    D = rng.integers(0, 4, size=(R, len(groups))) * (rng.random((R, len(groups))) < 0.6)
    grad = rng.choice([2e7, 5e7, 3e8], size=(R, S))
    grad[:, 1] = grad[:, 0]             # a stage equal to another (the caller merges those: still the same)
    sizes = [(grad[:, s], grad[:, s] * 4, grad[:, s] / 2 if seed % 2 else None) for s in range(S)]
    got = netvec.stacked_sync_rows(ctx, LinkCache(ctx), groups, D, sizes)
    assert len(got) == S
    for s in range(S):
        want = netvec.sync_rows(ctx, LinkCache(ctx), groups, D, *sizes[s])
        for g, w in zip(got[s], want):
            _same(g, w)
    assert (got[0][0] > 0).any()
    if gpus == MULTI:
        assert got[0][2].any() == (rule != "flat") and (got[0][1] > 0).any()


def _old_sync_lower_bound(cluster, combo, s_num, grad_bytes, d, cache, copies=1, z_min=1):
    """``syncbound.sync_lower_bound`` before session 19 (one call per z_min; the ring tables' first three)."""
    groups = tuple(Group(z, g, t) for g, t in combo for z, _ in caps_for(cluster, g, t, s_num))
    conc = min(t for _, t in combo)
    per_zone: dict[str, int] = {}
    for g, t in combo:
        for z, c in caps_for(cluster, g, t, s_num):
            per_zone[z] = per_zone.get(z, 0) + c
    n_cap = copies * max(int(d.max()) if len(d) else 1, sum(per_zone.values()))
    ring_intra, ring_cross, c = _ring_tables(cache, groups, conc, grad_bytes, n_cap)[:3]
    di = d.astype(np.int64)
    n = copies * di
    z_lo = np.maximum(zones_needed(list(per_zone.values()), di), z_min)
    out = np.where(z_lo <= 1, ring_intra[n - 1], np.inf)
    if ring_cross is not None:
        out = np.where(di >= 2, np.minimum(out, ring_cross[n - 1]), out)
        inner = _suffix_min(F.zone_reduce_broadcast_s(ring_intra))
        for z, cz in zip(range(2, len(c) + 2), c):
            fullest = copies * np.ceil(d / z).astype(np.int64)
            out = np.where((di >= z) & (z_lo <= z), np.minimum(out, cz + inner[np.maximum(fullest, 1) - 1]), out)
    return np.where(n > 1, out, 0.0)


@pytest.mark.parametrize("gpus", [MULTI, ONE])
def test_sync_lower_bounds_equal_one_old_call_per_zone_count(bundle, gpus) -> None:
    ctx, cluster = _ctx(bundle, gpus)
    rng = np.random.default_rng(7)
    checked, finite = 0, 0
    for combo in ((("A100-40", 1),), (("A100-40", 2), ("V100-16", 1)), (("V100-16", 4),)):
        for s_num in (1, 2, 4):
            if not all(caps_for(cluster, g, t, s_num) for g, t in combo):
                continue
            for copies in (1, 2):
                grad = float(rng.choice([3e5, 4e7, 2e9]))
                d = np.arange(int(rng.integers(1, 3)), int(rng.integers(3, 40)), dtype=float)
                zs = (1, 2, 3, 4)
                got = sync_lower_bounds(cluster, combo, s_num, grad, d, LinkCache(ctx), copies, zs)
                for z, g in zip(zs, got):
                    _same(g, _old_sync_lower_bound(cluster, combo, s_num, grad, d, LinkCache(ctx), copies, z))
                    _same(sync_lower_bound(cluster, combo, s_num, grad, d, LinkCache(ctx), copies, z), g)
                checked += 1
                finite += int(np.isfinite(got[0][1:]).any())
    assert checked >= 8 and finite >= 4          # real bounds compared, not only inf


def test_chain_tables_cached_on_the_groups_equal_the_direct_tables(bundle) -> None:
    ctx, cluster = _ctx(bundle, MULTI)
    space = SearchSpace()
    options = cluster_options(ctx, cluster, space)
    tables = Tables(ctx, space)
    cache = LinkCache(ctx)
    grp = chain_groups(cluster, options, 1, ctx)
    names = [(g, tp) for g, _, tp in grp.names]
    assert len(set(names)) < len(names)         # some (type, TP) in several zones: twins copied
    for s_num, rc in ((2, False), (3, True)):
        q, r = divmod(ctx.model.num_layers, s_num)
        counts = np.array([[q] * (s_num - r) + [q + 1] * r], dtype=np.int64)
        tab = stage_core(ctx, tables, grp, 1, counts, rc, 16, space.precision)
        for gi, (g, _, tp) in enumerate(grp.names):
            arr = tables.raw_arrays(g, tp, 1, counts, rc)
            _same(tab.comp[gi], arr.compute_s[0])
            _same(tab.params[gi], arr.params[0].astype(float))
            _same(tab.fits[gi], arr.memory_bytes[0] <= tables.table(g, tp, 1).usable_bytes)
        nbytes = ctx.model.boundary_activation_bytes(1, F.bytes_per_element(space.precision))
        want = pair_tables(ctx, LinkCache(ctx), [Group(z, g, tp) for g, z, tp in grp.names], nbytes)
        for c in (cache, cache, LinkCache(ctx)):        # memoised on the groups, per link cache
            linked = with_pairs(ctx, c, grp, tab, 1, space.precision)
            _same(linked.p2p, want[0])
            _same(linked.egress, want[1])
        assert (want[1] > 0).any()


def _old_iteration_levels(tab, grp, n_mb, coupled=True, threshold=np.inf, n_seg=None):
    """``chainfloor.iteration_levels`` before session 19."""
    comp = np.where(tab.fits, tab.comp, np.inf)
    if not np.isfinite(comp).any(axis=0).all():
        return None
    levels = sorted_unique(comp[np.isfinite(comp) & (comp >= comp.min(axis=0).max())])
    hidden = comp[None] > levels[:, None, None]
    frac = np.broadcast_to((grp.tp / grp.caps[grp.pool])[None, :, None], hidden.shape).copy()
    frac[hidden] = np.inf
    pools = sorted_unique(grp.pool)
    by_pool = np.stack([frac[:, grp.pool == p].min(axis=1) for p in pools])
    y = _dual_weights(tuple(int(c) for c in grp.caps))[:, pools]
    with np.errstate(invalid="ignore"):
        terms = y[:, :, None, None] * by_pool[None]
    terms[np.isnan(terms)] = np.inf
    share = terms.min(axis=1).sum(axis=2).max(axis=0)
    u_low = np.maximum(share, frac.min(axis=1).max(axis=1))
    if n_seg is not None:
        u_low = np.maximum(u_low, frac.min(axis=1).sum(axis=1) / (n_seg * SEG_SLACK))
    with np.errstate(divide="ignore"):
        d_max = np.floor((1.0 + 1e-9) / u_low)
        if n_seg is not None and RUN_COVER:
            d_max = np.minimum(d_max, np.floor(RUNS * run_dmax(~hidden, grp.tp, grp.caps[grp.pool], n_seg, d_max)))
        m_low = np.where(d_max >= 1, np.ceil(n_mb / np.maximum(d_max, 1.0)), np.inf)
    comp_k = np.broadcast_to(comp[None], hidden.shape).copy()
    comp_k[hidden] = np.inf
    c_sum = comp_k.min(axis=1).sum(axis=1)
    upd_k = np.broadcast_to(tab.upd_floor[None], hidden.shape).copy()
    upd_k[hidden] = np.inf
    step = upd_k.min(axis=1).max(axis=1)
    s_num = comp.shape[1]
    p2p = float(tab.p2p.min()) if tab.p2p is not None and s_num > 1 else 0.0
    fill = np.maximum(levels, c_sum) + 2 * (s_num - 1) * p2p
    period = np.where(m_low >= s_num + 1, np.maximum(levels, fill / s_num), levels)
    it = (m_low - 1) * period + fill + step
    if not coupled:
        return levels, it, d_max, fill + step
    near = np.flatnonzero(~(it * SAFETY > threshold))
    if len(near) == 0:
        return levels, it, d_max, fill + step
    f_g = grp.tp / grp.caps[grp.pool]
    y_g = _dual_weights(tuple(int(c) for c in grp.caps))[:, grp.pool]
    if n_seg is not None:
        y_g = np.concatenate([y_g, np.full((1, len(f_g)), 1.0 / (n_seg * SEG_SLACK))])
    price = (n_mb * levels[near])[None, :, None, None] * (y_g * f_g[None])[:, None, :, None]
    lagrange = (price + comp_k[near][None]).min(axis=2).sum(axis=2).max(axis=0)
    it[near] = np.maximum(it[near], lagrange - levels[near] + 2 * (s_num - 1) * p2p + step[near])
    return levels, it, d_max, fill + step


@pytest.mark.parametrize("seed", range(30))
def test_iteration_levels_equal_the_expression_before(seed: int) -> None:
    rng = np.random.default_rng(1900 + seed)
    s_num, n_g, n_p = int(rng.integers(1, 9)), int(rng.integers(2, 12)), int(rng.integers(1, 7))
    comp = rng.random((n_g, s_num))
    if seed % 3 == 0:
        comp = np.round(comp, 1)        # ties between levels
    tab = SimpleNamespace(comp=comp, fits=rng.random((n_g, s_num)) < 0.85, upd_floor=rng.random((n_g, s_num)) * 0.1,
                          p2p=rng.random((n_g, n_g)) * 1e-2 if seed % 4 else None)
    grp = ChainGroups([("g", "z", i) for i in range(n_g)], np.sort(rng.integers(0, n_p, size=n_g)) if seed % 2
                      else rng.integers(0, n_p, size=n_g), rng.integers(4, 64, size=n_p),
                      rng.choice([1, 2, 4], size=n_g), rng.random(n_g) * 1e-3)
    n_mb = int(rng.integers(1, 200))
    for n_seg in (None, 2, 3):
        ref = _old_iteration_levels(tab, grp, n_mb, n_seg=n_seg)
        thresholds = [np.inf, 0.0] + ([] if ref is None else [float(np.median(ref[1]))])
        for thr in thresholds:
            want = _old_iteration_levels(tab, grp, n_mb, threshold=thr, n_seg=n_seg)
            for _ in range(2):          # the second call reads the terms cached on grp
                got = iteration_levels(tab, grp, n_mb, threshold=thr, n_seg=n_seg)
                assert (got is None) == (want is None)
                if want is not None:
                    for g, w in zip(got, want):
                        _same(g, w)


def test_min_ring_first_columns_equal_row_by_row() -> None:
    """``syncbound._min_ring``'s n = 1, 2 columns (one array expression) against the minimum of one ring time per
    row, bit for bit, on tables holding inf, 0, -0 and nan (the nan's sign and the 0 x inf case)."""
    from planner.search.syncbound import _min_ring
    rng = np.random.default_rng(19)
    nan_seen = 0
    with np.errstate(invalid="ignore"):
        for _ in range(500):
            t = rng.choice([np.inf, 0.0, -0.0, 1.5, np.nan, 3e-3], size=(int(rng.integers(1, 12)),
                                                                          int(rng.integers(2, 9))))
            n = np.arange(1, t.shape[1] + 1, dtype=float)
            want = np.min([F.ring_s(n, row) for row in t], axis=0)
            _same(_min_ring(n, t), want)
            nan_seen += int(np.isnan(want[:2]).any())
    assert nan_seen > 0
