"""Result-neutral speed-ups of helper h13z: each new computation against the one it replaced, on random cases."""
from __future__ import annotations

import numpy as np
import pytest


def bandwidth(link, nbytes: np.ndarray) -> np.ndarray:
    """The vectorised ``Link.bandwidth_bytes_per_s`` as netvec had it (removed there with the least-bandwidth
    ring pick it served; kept here as the reference it was)."""
    hi = link.max_bw_bytes_per_s
    lo = link.min_bw_bytes_per_s if link.min_bw_bytes_per_s is not None else hi * 0.01
    if link.fit_gb_per_s is None:
        return np.full(np.shape(nbytes), hi, dtype=float)
    a, b, c = link.fit_gb_per_s
    u = np.log2(np.maximum(nbytes, 1.0) / 1e6)
    if a < 0:
        u = np.minimum(u, -b / (2 * a))
    return np.minimum(hi, np.maximum(lo, (a * u * u + b * u + c) * 1e9))


def _old_link_time(link, nbytes: np.ndarray) -> np.ndarray:
    """link_time as it was: bandwidth, the envelope floor and fit_refused, each computing the fit itself."""
    from planner.network import _envelope
    from planner.search.netvec import fit_refused
    nbytes = np.asarray(nbytes, dtype=float)
    raw = nbytes / bandwidth(link, nbytes)
    if link.fit_gb_per_s is not None:
        grid = np.asarray(_envelope(link.fit_gb_per_s, link.max_bw_bytes_per_s, link.min_bw_bytes_per_s))
        i = np.clip(np.floor(np.log2(np.maximum(nbytes, 1.0)) * 4).astype(np.int64), 0, len(grid) - 1)
        raw = np.maximum(raw, grid[i])
        # the envelope between grid points (added later, planner.network._turns), composed the same way
        from planner.network import _turns
        sizes, peaks = (np.asarray(x) for x in _turns(link.fit_gb_per_s, link.max_bw_bytes_per_s,
                                                      link.min_bw_bytes_per_s))
        j = np.searchsorted(sizes, nbytes, side="right") - 1
        raw = np.where(j >= 0, np.maximum(raw, peaks[np.maximum(j, 0)] if len(peaks) else 0.0), raw)
    out = np.where(nbytes <= 0, 0.0, link.latency_s + raw)
    return np.where(fit_refused(link, nbytes), np.inf, out)


@pytest.mark.parametrize("seed", range(60))
def test_link_time_equals_bandwidth_envelope_and_refusal_composed(seed: int) -> None:
    from planner.network import Link
    from planner.search.netvec import link_time
    rng = np.random.default_rng(1000 + seed)
    hi = float(10 ** rng.uniform(8, 11))
    fit = None if seed % 5 == 0 else (float(rng.normal(0, 0.3)), float(rng.normal(0, 2)), float(rng.normal(5, 5)))
    lo = None if seed % 2 else float(hi * rng.uniform(0.001, 0.5))
    link = Link(hi, float(rng.choice([0.0, 1e-5, 3e-4])), fit, lo)
    nbytes = np.concatenate([[0.0, 1.0, 0.5], 10 ** rng.uniform(0, 11, size=200)])
    if seed % 4 == 1:
        nbytes = nbytes.reshape(-1, 7)
    new, old = link_time(link, nbytes), _old_link_time(link, nbytes)
    assert new.shape == old.shape and new.dtype == old.dtype
    assert np.array_equal(new, old)            # bit-equal, inf where refused
    assert np.array_equal(link_time(link, nbytes), new)     # the cached envelope is not changed by a call


def _old_segment_lower_keys(tab, rt, grp, bounds, seqs, n_mb, objective):
    """chains.segment_lower_keys as it was (the pool's GPUs gathered through the group's pool index)."""
    n_seg = seqs.shape[1]
    s1, n_g = rt.comp_max.shape[1], rt.comp_max.shape[2]
    cmax_f, csum_f, upd_f = rt.comp_max.reshape(-1), rt.comp_sum.reshape(-1), rt.upd.reshape(-1)
    pools, frac = [], []
    for i in range(n_seg):
        lo, hi, g = bounds[:, i], bounds[:, i + 1], seqs[:, i]
        flat = (lo * s1 + hi) * n_g + g
        units = grp.tp[g] * (hi - lo)
        if i == 0:
            comp_max, comp_sum, upd = cmax_f[flat], csum_f[flat], upd_f[flat]
            usd, gpus = units * grp.usd_per_s[g], units.astype(float)
        else:
            comp_max = np.maximum(comp_max, cmax_f[flat])
            comp_sum = comp_sum + csum_f[flat]
            upd = np.maximum(upd, upd_f[flat])
            usd = usd + units * grp.usd_per_s[g]
            gpus = gpus + units
        pools.append(grp.pool[g])
        frac.append(units / grp.caps[grp.pool[g]])
    same = {(i, j): pools[i] == pools[j] for i in range(n_seg) for j in range(i + 1, n_seg)}
    use = None
    for i in range(n_seg):
        share = None
        for j in range(n_seg):
            t = frac[j] if i == j else np.where(same[min(i, j), max(i, j)], frac[j], 0.0)
            share = t if share is None else share + t
        use = share if use is None else np.maximum(use, share)
    egress = sum(tab.egress[seqs[:, i], seqs[:, i + 1]] for i in range(n_seg - 1))
    it = (np.maximum(n_mb * comp_max * use, comp_sum) + upd) * (1 - 1e-12)
    cost = (n_mb * comp_max * usd + n_mb * egress) * (1 - 1e-12)
    ok = objective.allows(it, cost, gpus) & (use <= 1.0)
    return np.where(ok, objective.key(it, cost), np.inf)


@pytest.mark.parametrize("seed", range(40))
def test_segment_lower_keys_equals_the_old_computation(seed: int) -> None:
    from types import SimpleNamespace

    from planner.search.chains import segment_lower_keys
    from planner.search.chainseq import chain_sequences
    from planner.search.chaintab import ChainGroups, RangeTab
    from planner.search.space import Objective
    rng = np.random.default_rng(7000 + seed)
    s_num, n_g, n_p = int(rng.integers(2, 9)), int(rng.integers(2, 6)), int(rng.integers(1, 4))
    n_seg = int(rng.integers(2, min(4, s_num) + 1))
    shape = (s_num + 1, s_num + 1, n_g)
    rt = RangeTab(rng.random(shape) < 0.9, rng.random(shape), rng.random(shape) * 5, rng.random(shape) * 0.1)
    grp = ChainGroups([("g", "z", i) for i in range(n_g)], rng.integers(0, n_p, size=n_g),
                      rng.integers(16, 128, size=n_p), rng.choice([1, 2, 4], size=n_g), rng.random(n_g) * 1e-3)
    tab = SimpleNamespace(egress=rng.random((n_g, n_g)) * (rng.random((n_g, n_g)) < 0.5))
    seqs_all = chain_sequences(n_g, n_seg)
    c = 300
    cuts = np.sort(np.stack([rng.choice(np.arange(1, s_num), size=n_seg - 1, replace=False) for _ in range(c)]), axis=1)
    bounds = np.column_stack([np.zeros(c, dtype=np.int64), cuts, np.full(c, s_num)])
    seqs = seqs_all[rng.integers(0, len(seqs_all), size=c)]
    kind = ["throughput", "cost", "value"][seed % 3]
    objective = Objective(kind, max_cost_per_iter_usd=float(rng.uniform(0.01, 1)) if seed % 4 == 0 else None,
                          max_gpus=int(rng.integers(4, 200)) if seed % 5 == 0 else None)
    n_mb = int(rng.integers(1, 64))
    new = segment_lower_keys(tab, rt, grp, bounds, seqs, n_mb, objective)
    old = _old_segment_lower_keys(tab, rt, grp, bounds, seqs, n_mb, objective)
    assert new.dtype == old.dtype and np.array_equal(new, old)
    assert np.isfinite(old).any() or seed % 4 == 0 or seed % 5 == 0


@pytest.mark.parametrize("seed", range(30))
def test_segment_of_stage_and_chain_rows_equal_the_old_indexing(seed: int) -> None:
    from planner.search.chains import _segment_of_stage
    from planner.search.chainseq import chain_sequences
    rng = np.random.default_rng(9000 + seed)
    s_num = int(rng.integers(2, 12))
    n_seg = int(rng.integers(2, min(5, s_num) + 1))
    c = int(rng.integers(0, 200))
    cuts = np.sort(np.stack([rng.choice(np.arange(1, s_num), size=n_seg - 1, replace=False) for _ in range(c)]),
                   axis=1) if c else np.zeros((0, n_seg - 1), dtype=np.int64)
    b = np.column_stack([np.zeros(c, dtype=np.int64), cuts, np.full(c, s_num)]).astype(np.int64)
    stages = np.arange(s_num)
    old_seg = (b[:, 1:-1][:, :, None] <= stages[None, None, :]).sum(axis=1)
    new_seg = _segment_of_stage(b, stages)
    assert new_seg.dtype == old_seg.dtype and np.array_equal(new_seg, old_seg)
    seqs = chain_sequences(int(rng.integers(2, 5)), n_seg)
    qq = rng.integers(0, len(seqs), size=c)
    assert np.array_equal(seqs[qq[:, None], new_seg], seqs[qq][np.arange(c)[:, None], old_seg])


@pytest.mark.parametrize("seed", range(80))
def test_ordered_product_chunks_equal_the_permuted_chunks(seed: int) -> None:
    from planner.search.rows import ordered_product_chunks, product_chunks, zone_splits
    rng = np.random.default_rng(11000 + seed)
    n_types = int(rng.integers(1, 4))
    options = [zone_splits(tuple(int(c) for c in rng.integers(0, 12, size=int(rng.integers(1, 4)))),
                           int(rng.integers(1, 30))) for _ in range(n_types)]
    if any(len(o) == 0 for o in options):
        return
    width = sum(o.shape[1] for o in options)
    order = [int(i) for i in rng.permutation(width)]
    max_total = int(rng.integers(0, 40))
    chunk = int(rng.choice([3, 50, 400_000]))          # small chunks: several per head, and the mixed-radix path
    old = [c[:, order] for c in product_chunks(options, max_total, chunk)]
    new = list(ordered_product_chunks(options, max_total, order, chunk))
    assert len(new) == len(old)
    for a, b in zip(new, old):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
