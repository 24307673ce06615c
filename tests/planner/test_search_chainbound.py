"""The chain bound's threshold pre-filter (``segment_lower_keys(..., threshold)``) keeps exactly the chains the full
bound keeps (key finite and <= the threshold), with the same keys, on random range tables."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from planner.search.chains import segment_lower_keys
from planner.search.chainseq import chain_sequences
from planner.search.chaintab import ChainGroups, RangeTab
from planner.search.space import Objective
from tests.planner.test_search_speed_h13z import _old_segment_lower_keys


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
    seqs_all = chain_sequences(n_g, n_seg)
    c = 400
    cuts = np.sort(np.stack([rng.choice(np.arange(1, s_num), size=n_seg - 1, replace=False) for _ in range(c)]),
                   axis=1)
    bounds = np.column_stack([np.zeros(c, dtype=np.int64), cuts, np.full(c, s_num)])
    seqs = seqs_all[rng.integers(0, len(seqs_all), size=c)]
    objective = Objective(["throughput", "throughput", "cost", "value"][seed % 4],
                          max_cost_per_iter_usd=float(rng.uniform(0.05, 1)) if seed % 5 == 0 else None,
                          max_gpus=int(rng.integers(4, 200)) if seed % 7 == 0 else None)
    return tab, rt, grp, bounds, seqs, int(rng.integers(1, 64)), objective, rng


@pytest.mark.parametrize("seed", range(60))
def test_threshold_prefilter_keeps_the_same_chains_with_the_same_keys(seed: int) -> None:
    tab, rt, grp, bounds, seqs, n_mb, objective, rng = _case(seed)
    full = _old_segment_lower_keys(tab, rt, grp, bounds, seqs, n_mb, objective)
    assert np.array_equal(segment_lower_keys(tab, rt, grp, bounds, seqs, n_mb, objective), full)
    finite = full[np.isfinite(full)]
    thresholds = [np.inf, 0.0] + ([] if len(finite) == 0 else
                                  [float(np.quantile(finite, q)) for q in (0.01, 0.1, 0.5, 0.9)] + [float(finite[0])])
    skipped = 0
    for thr in thresholds:
        new = segment_lower_keys(tab, rt, grp, bounds, seqs, n_mb, objective, thr)
        assert new.shape == full.shape and new.dtype == full.dtype
        keep_full = np.isfinite(full) & (full <= thr)
        assert np.array_equal(np.isfinite(new) & (new <= thr), keep_full)
        assert np.array_equal(new[keep_full], full[keep_full])
        # only entries the full bound drops may differ, and only to inf
        differ = new != full
        assert not keep_full[differ].any() and np.isinf(new[differ]).all()
        skipped += int(differ.sum())
    if objective.kind != "throughput":
        assert skipped == 0          # the pre-filter is for the throughput objective only
    elif len(finite) > 10:
        assert skipped > 0           # the pre-filter did drop chains (the bound's key is above the 1% quantile)
