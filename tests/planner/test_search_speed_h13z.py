"""Result-neutral speed-ups of helper h13z: each new computation against the one it replaced, on random cases."""
from __future__ import annotations

import numpy as np
import pytest

from planner.search.rows import unique_first


def _table_unique_first(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first-occurrence table unique_first used for every key range below 2**22 before (the old path)."""
    key = np.asarray(key).reshape(-1)
    size = int(key.max()) + 1
    first = np.full(size, len(key), dtype=np.int64)
    np.minimum.at(first, key, np.arange(len(key), dtype=np.int64))
    present = np.nonzero(first < len(key))[0]
    rank = np.full(size, -1, dtype=np.int64)
    rank[present] = np.arange(len(present))
    return first[present], rank[key]


@pytest.mark.parametrize("seed", range(40))
def test_unique_first_equals_the_table_and_np_unique(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    hi = int(rng.choice([2, 50, n, 10 * n, 200_000, 3_000_000]))
    key = rng.integers(0, hi, size=n)
    if seed % 3 == 0:
        key = key.reshape(-1, 1)            # any shape: flattened
    first, inv = unique_first(key)
    t_first, t_inv = _table_unique_first(key)
    _, u_first, u_inv = np.unique(np.asarray(key).reshape(-1), return_index=True, return_inverse=True)
    for a, b in ((first, t_first), (inv, t_inv), (first, u_first), (inv, u_inv.reshape(-1))):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def test_unique_first_sparse_keys_take_the_sort_and_dense_keys_the_table() -> None:
    key = np.array([3_000_000, 5, 3_000_000, 7, 5], dtype=np.int64)
    first, inv = unique_first(key)
    assert first.tolist() == [1, 3, 0] and inv.tolist() == [2, 0, 2, 1, 0]
    dense = np.array([2, 0, 2, 1], dtype=np.int64)
    first, inv = unique_first(dense)
    assert first.tolist() == [1, 3, 0] and inv.tolist() == [2, 0, 2, 1]


def _old_link_time(link, nbytes: np.ndarray) -> np.ndarray:
    """link_time as it was: bandwidth, the envelope floor and fit_refused, each computing the fit itself."""
    from planner.network import _envelope
    from planner.search.netvec import bandwidth, fit_refused
    nbytes = np.asarray(nbytes, dtype=float)
    raw = nbytes / bandwidth(link, nbytes)
    if link.fit_gb_per_s is not None:
        grid = np.asarray(_envelope(link.fit_gb_per_s, link.max_bw_bytes_per_s, link.min_bw_bytes_per_s))
        i = np.clip(np.floor(np.log2(np.maximum(nbytes, 1.0)) * 4).astype(np.int64), 0, len(grid) - 1)
        raw = np.maximum(raw, grid[i])
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
