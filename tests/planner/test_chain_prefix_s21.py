"""The chain search's prefix pruning (:func:`planner.search.chainprefix.prefix_pairs`): on random tables it
returns a subset of ``alive_pairs`` in the same order holding every pair that both later throughput checks
(``pair_prefilter`` and the chain bound ``chain_lower_keys``) keep, and with its sync floor every pair whose
chain scores within the threshold at some D (``iterate_d``), and it drops pairs; the search returns the same
plans with it as with the plain enumeration, with more chain runs too."""
from __future__ import annotations

import sys
from itertools import combinations
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from planner.cluster import parse_gpus
from planner.search import Objective, SearchSpace, plan_search
from planner.search.chainbound import pair_prefilter
from planner.search.chainprefix import min_sync_from, prefix_pairs
from planner.search.chains import chain_lower_keys, iterate_d, score_chains, _segment_of_stage
from planner.search.chainseq import alive_pairs, chain_sequences
from planner.search.chaintab import ChainGroups, range_tab

sys.path.insert(0, str(Path(__file__).parent))
from test_planner_bruteforce import sailor_ctx as sailor_opt  # noqa: E402,F401,F811 - the OPT-350 fixture

A, V = "A100-40", "V100-16"


def _case(seed: int):
    """A random chain unit with at least one alive (cut, sequence) pair (drawn again until it has one)."""
    rng = np.random.default_rng(4400 + seed)
    while True:
        case = _draw(rng, seed)
        if len(alive_pairs(case[4], len(case[2].names))[0]):
            return case


def _draw(rng, seed: int):
    s_num, n_g, n_p = int(rng.integers(3, 9)), int(rng.integers(2, 6)), int(rng.integers(1, 4))
    n_seg = int(rng.integers(2, min(5, s_num) + 1))
    comp = rng.uniform(0.1, 1.0, (n_g, s_num))
    if seed % 3 == 0:
        comp = np.round(comp, 1)            # ties
    upd = rng.uniform(0, 0.2, (n_g, s_num))
    p2p = rng.uniform(0, 0.3, (n_g, n_g)) * (rng.random((n_g, n_g)) < 0.8)
    caps = rng.integers(4, 40, size=n_p)
    d_cap = int(caps.max())
    # ring sync per (group, stage, D): 0 at D <= 1, otherwise random and not monotone in D
    sync = rng.uniform(0, 0.5, (n_g, s_num, d_cap + 1)) * rng.uniform(0.2, 1.0, (n_g, s_num, 1))
    sync[:, :, :2] = 0.0
    egress = rng.uniform(0, 1e-4, (n_g, n_g)) * (rng.random((n_g, n_g)) < 0.6)
    np.fill_diagonal(egress, 0.0)
    tab = SimpleNamespace(comp=comp, upd=upd, upd_floor=upd, fits=rng.random((n_g, s_num)) < 0.95, p2p=p2p,
                          egress=egress, dmin=np.ones((n_g, s_num), dtype=np.int64), sync=sync,
                          bwd=comp * 0.6, param_bytes=None)
    grp = ChainGroups([("g", f"z{i}", 1) for i in range(n_g)], rng.integers(0, n_p, size=n_g), caps,
                      rng.choice([1, 2, 4], size=n_g), rng.random(n_g) * 1e-3)
    cuts = np.array(list(combinations(range(1, s_num), n_seg - 1)), dtype=np.int64).reshape(-1, n_seg - 1)
    bounds = np.column_stack([np.zeros(len(cuts), dtype=np.int64), cuts, np.full(len(cuts), s_num)])
    rt = range_tab(tab)
    seg_alive = [rt.fits[bounds[:, i], bounds[:, i + 1]] & (rng.random((len(bounds), n_g)) < 0.9)
                 for i in range(n_seg)]
    ctx = SimpleNamespace(settings=SimpleNamespace(p2p_blocking=bool(seed % 2),
                                                   dp_sync_waits_for_all=seed % 4 != 3))
    return tab, rt, grp, bounds, seg_alive, int(rng.integers(1, 48)), ctx, s_num


def _best_keys(ctx, tab, grp, gs, n_mb, s_num, objective) -> np.ndarray:
    """Per chain its best key over every D (the search's exact scoring, ``iterate_d``; inf where no D is
    allowed)."""
    sc = score_chains(ctx, tab, grp, gs, n_mb)
    best = np.full(len(gs), np.inf)
    for _, sel, _, _, _, keys in iterate_d(ctx, sc, tab, n_mb, s_num, objective, False):
        best[sel] = np.minimum(best[sel], keys)
    return best


def _objective(seed: int, rng) -> Objective:
    """Throughput (plain, under a dollar cap, under a GPU cap), cost (plain, under a throughput floor), value."""
    pick = seed % 6
    if pick == 1:
        return Objective("throughput", max_cost_per_iter_usd=float(rng.uniform(0.01, 0.2)))
    if pick == 2:
        return Objective("throughput", max_gpus=int(rng.integers(3, 30)))
    if pick == 3:
        return Objective("cost")
    if pick == 4:
        return Objective("cost", min_throughput_iters_per_s=float(rng.uniform(0.02, 0.3)))
    if pick == 5:
        return Objective("value")
    return Objective("throughput")


@pytest.mark.parametrize("seed", range(72))
def test_prefix_pairs_keep_every_pair_the_later_checks_keep(seed: int) -> None:
    tab, rt, grp, bounds, seg_alive, n_mb, ctx, s_num = _case(seed)
    objective = _objective(seed, np.random.default_rng(seed))
    n_g, n_seg = len(grp.names), len(seg_alive)
    seqs = chain_sequences(n_g, n_seg)
    kk, qq = alive_pairs(seg_alive, n_g)
    assert len(kk) > 0
    gs = seqs[qq[:, None], _segment_of_stage(bounds[kk], np.arange(s_num))]
    chain_key = chain_lower_keys(score_chains(ctx, tab, grp, gs, n_mb), n_mb, s_num, objective)
    exact = _best_keys(ctx, tab, grp, gs, n_mb, s_num, objective)
    assert (exact[np.isfinite(exact)] >= chain_key[np.isfinite(exact)] * (1 - 1e-9)).all()
    finite = exact[np.isfinite(exact)]
    thresholds = [0.0] + [float(np.quantile(finite, q)) for q in (0.0, 0.05, 0.3, 0.7, 1.0)] if len(finite) else [1.0]
    order = kk * len(seqs) + qq
    dropped = {False: 0, True: 0}
    syncs = (False, True) if objective.kind == "throughput" else (False,)
    for thr in thresholds:
        rows = pair_prefilter(rt, grp, bounds, seqs, kk, qq, n_mb, objective, thr)
        pf_keep = np.zeros(len(kk), dtype=bool)
        pf_keep[np.arange(len(kk)) if rows is None else rows] = True
        for with_sync in syncs:
            pk, pq = prefix_pairs(seg_alive, n_g, rt, grp, bounds, n_mb, thr, tab.p2p, max_rows=7,
                                  sync_min=min_sync_from(tab.sync) if with_sync else None,
                                  every_stage_syncs=ctx.settings.dp_sync_waits_for_all, objective=objective,
                                  egress=tab.egress)
            got = pk * len(seqs) + pq
            assert np.isin(got, order).all() and (np.diff(got) > 0).all()    # a subset, in alive_pairs' order
            # every pair that would be pushed (some D scores <= thr) or, without the sync floor, that the
            # pre-filter and the chain bound keep
            needed = pf_keep & ((exact <= thr) if with_sync else (np.isfinite(chain_key) & (chain_key <= thr)))
            assert np.isin(order[needed], got).all()
            dropped[with_sync] += len(kk) - len(got)
    assert objective.kind != "throughput" or (dropped[False] > 0 and dropped[True] >= dropped[False])


@pytest.mark.parametrize("kind", ["cost", "value"])
def test_prefix_pairs_drop_pairs_under_cost_and_value(kind: str) -> None:
    """Over the random units the pruned enumeration drops pairs under the cost and value objectives too (the
    keep-everything half is the test above)."""
    dropped = 0
    for seed in range(40):
        tab, rt, grp, bounds, seg_alive, n_mb, ctx, s_num = _case(seed)
        objective = Objective(kind)
        n_g, n_seg = len(grp.names), len(seg_alive)
        seqs = chain_sequences(n_g, n_seg)
        kk, qq = alive_pairs(seg_alive, n_g)
        gs = seqs[qq[:, None], _segment_of_stage(bounds[kk], np.arange(s_num))]
        exact = _best_keys(ctx, tab, grp, gs, n_mb, s_num, objective)
        if not np.isfinite(exact).any():
            continue
        thr = float(np.quantile(exact[np.isfinite(exact)], 0.05))
        pk, _ = prefix_pairs(seg_alive, n_g, rt, grp, bounds, n_mb, thr, tab.p2p, objective=objective,
                             egress=tab.egress)
        dropped += len(kk) - len(pk)
    assert dropped > 0


def test_prefix_pairs_equal_the_plain_pairs_at_an_infinite_bound_margin() -> None:
    """With every term zero (nothing to prune) the pruned enumeration is ``alive_pairs`` exactly, also when it
    splits its work into pieces of at most ``max_rows`` rows."""
    for seed in range(20):
        tab, rt, grp, bounds, seg_alive, n_mb, ctx, s_num = _case(seed)
        n_g = len(grp.names)
        kk, qq = alive_pairs(seg_alive, n_g)
        for max_rows in (1, 5, 1 << 21):
            pk, pq = prefix_pairs(seg_alive, n_g, rt, grp, bounds, n_mb, np.finfo(float).max, tab.p2p, max_rows)
            assert np.array_equal(pk, kk) and np.array_equal(pq, qq)


@pytest.mark.parametrize("gpus,segments,objective", [
    (f"{A}@us-central1-a=8,{A}@us-central1-b=8,{A}@us-west1-b=8", 4, Objective("throughput")),
    (f"{A}@us-central1-a=6,{V}@us-central1-a=12,{A}@us-west1-b=6", 5, Objective("throughput")),
    (f"{A}@us-central1-a=8,{A}@us-central1-c=8,{A}@us-west1-b=8", 5,
     Objective("throughput", max_cost_per_iter_usd=2.0)),
    (f"{A}@us-central1-a=8,{A}@us-central1-b=8,{A}@us-west1-b=8", 5,
     Objective("cost", min_throughput_iters_per_s=0.5)),
    (f"{A}@us-central1-a=8,{A}@us-central1-b=8,{A}@us-west1-b=8", 5, Objective("value")),
])
def test_search_returns_the_same_plans_without_prefix_pruning(sailor_opt, monkeypatch, gpus, segments, objective):
    import planner.search.chains as chains
    ctx = sailor_opt
    cluster = parse_gpus(gpus, ctx.catalog)
    space = SearchSpace(max_stages=6, mbs_options=(1, 2), chain_segments=segments)
    monkeypatch.setattr(chains, "DENSE_MAX", 0)       # the pruned enumeration on these small units too
    fast = plan_search(ctx, cluster, 128, objective, space, top_k=3)
    calls = []

    def plain(seg_alive, n_groups, *rest, **kw):
        calls.append(1)
        return alive_pairs(seg_alive, n_groups)

    with monkeypatch.context() as m:
        m.setattr(chains, "prefix_pairs", plain)
        slow = plan_search(ctx, cluster, 128, objective, space, top_k=3)
    assert calls                    # the chain search ran through the pruned enumeration's place
    assert [c.key for c in fast.candidates] == [c.key for c in slow.candidates]
    assert [c.chain for c in fast.candidates] == [c.chain for c in slow.candidates]
    assert fast.stats.chains_exact <= slow.stats.chains_exact       # the sync floor scores fewer at every D
    assert fast.stats.chains_bounded <= slow.stats.chains_bounded


@pytest.mark.parametrize("seed", range(24))
def test_prefix_pairs_per_range_floors_equal_the_per_cut_ones(seed: int) -> None:
    """Where every cut's alive groups are its stage ranges' (the chain search's case), the floors taken once per
    range (``range_alive``) give the same pairs as the floors taken per cut."""
    tab, rt, grp, bounds, _, n_mb, ctx, s_num = _case(seed)
    rng = np.random.default_rng(700 + seed)
    range_alive = rt.fits & (rng.random(rt.fits.shape) < 0.85)
    n_seg = int(rng.integers(2, min(5, s_num) + 1))
    cuts = np.array(list(combinations(range(1, s_num), n_seg - 1)), dtype=np.int64).reshape(-1, n_seg - 1)
    bounds = np.column_stack([np.zeros(len(cuts), dtype=np.int64), cuts, np.full(len(cuts), s_num)])
    seg_alive = [range_alive[bounds[:, i], bounds[:, i + 1]] for i in range(n_seg)]
    objective = _objective(seed, rng)
    sync = min_sync_from(tab.sync) if objective.kind == "throughput" else None
    for thr in (0.5, 1.0, 2.0, 4.0, 8.0, np.finfo(float).max):
        args = (seg_alive, len(grp.names), rt, grp, bounds, n_mb, thr, tab.p2p)
        kw = dict(max_rows=11, sync_min=sync, every_stage_syncs=ctx.settings.dp_sync_waits_for_all,
                  objective=objective, egress=tab.egress)
        a = prefix_pairs(*args, **kw)
        b = prefix_pairs(*args, **kw, range_alive=range_alive)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_decode_sequences_equals_the_table() -> None:
    """The chain search reads group sequences from their index (:func:`decode_sequences`): the same rows as
    :func:`chain_sequences`."""
    from planner.search.chainseq import decode_sequences
    for n_groups, n_seg in [(2, 2), (2, 5), (3, 3), (5, 4), (7, 2), (4, 5)]:
        table = chain_sequences(n_groups, n_seg)
        idx = np.arange(len(table))
        assert np.array_equal(decode_sequences(idx, n_groups, n_seg), table)
        pick = np.random.default_rng(n_groups * 10 + n_seg).integers(0, len(table), size=17)
        assert np.array_equal(decode_sequences(pick, n_groups, n_seg), table[pick])
