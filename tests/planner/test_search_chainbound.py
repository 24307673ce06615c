"""The chain bound's throughput pre-filter (:func:`planner.search.chainbound.pair_prefilter`) keeps every
(cut, sequence) pair whose full chain bound is finite and <= the threshold, on random range tables, and the
search returns the same plans with it and without it."""
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
from planner.search.chains import segment_lower_keys
from planner.search.chainseq import alive_pairs, chain_sequences
from planner.search.chaintab import ChainGroups, RangeTab

sys.path.insert(0, str(Path(__file__).parent))
from test_planner_bruteforce import sailor_ctx as sailor_opt  # noqa: E402,F401 - the OPT-350 fixture
from test_search_speed_h13z import _old_segment_lower_keys  # noqa: E402

A, V = "A100-40", "V100-16"
ZA, ZB = "us-central1-a", "us-central1-b"


def _case(seed: int):
    rng = np.random.default_rng(9100 + seed)
    s_num, n_g, n_p = int(rng.integers(2, 10)), int(rng.integers(2, 7)), int(rng.integers(1, 4))
    n_seg = int(rng.integers(2, min(4, s_num) + 1))
    shape = (s_num + 1, s_num + 1, n_g)
    comp_max = rng.random(shape)
    if seed % 3 == 0:       # repeated values: ties at the threshold
        comp_max = np.round(comp_max, 1)
    rt = RangeTab(rng.random(shape) < 0.9, comp_max, comp_max * rng.uniform(1, 5, shape), rng.random(shape) * 0.1)
    grp = ChainGroups([("g", "z", i) for i in range(n_g)], rng.integers(0, n_p, size=n_g),
                      rng.integers(4, 64, size=n_p), rng.choice([1, 2, 4], size=n_g), rng.random(n_g) * 1e-3)
    tab = SimpleNamespace(egress=rng.random((n_g, n_g)) * (rng.random((n_g, n_g)) < 0.5))
    seqs = chain_sequences(n_g, n_seg)
    cuts = np.array(list(combinations(range(1, s_num), n_seg - 1)), dtype=np.int64).reshape(-1, n_seg - 1)
    bounds = np.column_stack([np.zeros(len(cuts), dtype=np.int64), cuts, np.full(len(cuts), s_num)])
    n_pairs = 500
    kk = np.sort(rng.integers(0, len(bounds), size=n_pairs))
    qq = rng.integers(0, len(seqs), size=n_pairs)
    objective = Objective(["throughput", "throughput", "throughput", "cost", "value"][seed % 5],
                          max_cost_per_iter_usd=float(rng.uniform(0.05, 1)) if seed % 4 == 0 else None,
                          max_gpus=int(rng.integers(4, 200)) if seed % 7 == 0 else None)
    return tab, rt, grp, bounds, seqs, kk, qq, int(rng.integers(1, 64)), objective


@pytest.mark.parametrize("seed", range(80))
def test_prefilter_keeps_every_pair_the_full_bound_keeps(seed: int) -> None:
    tab, rt, grp, bounds, seqs, kk, qq, n_mb, objective = _case(seed)
    full = _old_segment_lower_keys(tab, rt, grp, bounds[kk], seqs[qq], n_mb, objective)
    assert np.array_equal(segment_lower_keys(tab, rt, grp, bounds[kk], seqs[qq], n_mb, objective), full)
    finite = full[np.isfinite(full)]
    thresholds = [np.inf, 0.0] + ([] if len(finite) == 0 else
                                  [float(np.quantile(finite, q)) for q in (0.01, 0.1, 0.5, 0.9)] + [float(finite[0])])
    dropped = 0
    for thr in thresholds:
        rows = pair_prefilter(rt, grp, bounds, seqs, kk, qq, n_mb, objective, thr)
        if objective.kind != "throughput" or thr == np.inf:
            assert rows is None
            continue
        kept = np.arange(len(kk)) if rows is None else rows
        assert (np.diff(kept) > 0).all()
        keep_full = np.flatnonzero(np.isfinite(full) & (full <= thr))
        assert np.isin(keep_full, kept).all()           # every pair the full bound keeps passes the filter
        dropped += len(kk) - len(kept)
    if objective.kind == "throughput" and len(finite) > 10:
        assert dropped > 0          # the filter did drop pairs (every threshold below the 1% quantile and 0)


@pytest.mark.parametrize("gpus,objective", [
    (f"{A}@{ZA}=16,{V}@{ZA}=24,{A}@{ZB}=8", Objective("throughput")),
    (f"{A}@{ZA}=8,{A}@{ZB}=8,{V}@{ZB}=16", Objective("throughput", max_cost_per_iter_usd=5.0)),
])
def test_search_returns_the_same_plans_without_the_prefilter(sailor_opt, monkeypatch, gpus, objective):
    import planner.search.chains as chains
    ctx = sailor_opt
    cluster = parse_gpus(gpus, ctx.catalog)
    space = SearchSpace(max_stages=6, mbs_options=(1,), chain_segments=3)
    # the pairs enumerated without the prefix pruning (session 21, chainprefix), which would leave the
    # pre-filter nothing to drop here
    monkeypatch.setattr(chains, "prefix_pairs", lambda seg, n, *a, **k: alive_pairs(seg, n))
    fast = plan_search(ctx, cluster, 256, objective, space, top_k=3)
    calls = []
    with monkeypatch.context() as m:
        m.setattr(chains, "pair_prefilter", lambda *a: calls.append(1))
        slow = plan_search(ctx, cluster, 256, objective, space, top_k=3)
    assert calls                    # the chain search ran through the pre-filter's place
    assert [c.key for c in fast.candidates] == [c.key for c in slow.candidates]
    assert [c.chain for c in fast.candidates] == [c.chain for c in slow.candidates]
    assert fast.stats.chains_bounded == slow.stats.chains_bounded
