"""``netvec.link_time`` after the look-ups by ``take`` and the one fit-table cache (``_fit_tables``) gives the
same arrays, bit for bit, as the expression it replaced (``_reference`` below, commit 1360507), on random
links (constant, convex, concave, never positive, with and without a bandwidth floor, with latency) and sizes
(0, 1 byte, below a fit's valid start, around its turns, huge), 1-D and 2-D."""
from __future__ import annotations

import random

import numpy as np
import pytest

from planner.network import Link
from planner.search import netvec
from planner.search.netvec import _envelope_array, _turns_arrays, _valid_start, link_time


def _reference(link: Link, nbytes: np.ndarray) -> np.ndarray:
    nbytes = np.asarray(nbytes, dtype=float)
    hi = link.max_bw_bytes_per_s
    fit = link.fit_gb_per_s
    if fit is None:
        out = np.where(nbytes <= 0, 0.0, link.latency_s + nbytes / np.full(nbytes.shape, hi, dtype=float))
        v = hi / 1e9
        if np.isfinite(v) and v > 0:
            return out
        return np.where(nbytes > 0, np.inf, out)
    lo = link.min_bw_bytes_per_s if link.min_bw_bytes_per_s is not None else hi * 0.01
    a, b, c = fit
    u = np.log2(np.maximum(nbytes, 1.0) / 1e6)
    if a < 0:
        u = np.minimum(u, -b / (2 * a))
    v = a * u * u + b * u + c
    raw = nbytes / np.minimum(hi, np.maximum(lo, v * 1e9))
    grid = _envelope_array(fit, hi, link.min_bw_bytes_per_s)
    i = np.clip(np.floor(np.log2(np.maximum(nbytes, 1.0)) * 4).astype(np.int64), 0, len(grid) - 1)
    raw = np.maximum(raw, grid[i])
    sizes, peaks = _turns_arrays(fit, hi, link.min_bw_bytes_per_s)
    if len(sizes):
        j = np.searchsorted(sizes, nbytes, side="right") - 1
        raw = np.where(j >= 0, np.maximum(raw, peaks[np.maximum(j, 0)]), raw)
    out = np.where(nbytes <= 0, 0.0, link.latency_s + raw)
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(v) & (v > 0))
    start = _valid_start(fit, hi, link.min_bw_bytes_per_s)
    return np.where((nbytes > 0) & (bad | (nbytes < 2.0 ** (start / 4))), np.inf, out)


def _random_link(rng: random.Random) -> Link:
    hi = rng.choice([1e9, 10e9, 25e9, 100e9])
    lat = rng.choice([0.0, 1e-6, 5e-3])
    kind = rng.random()
    if kind < 0.15:
        return Link(hi, lat)
    if kind < 0.25:
        return Link(hi, lat, (-0.5, 0.0, -1.0))
    return Link(hi, lat, (rng.uniform(-3, 3), rng.uniform(-10, 10), rng.uniform(-5, 40)),
                rng.choice([None, hi * 0.05, hi * 0.3]))


def _sizes(rng: random.Random, link: Link, shape) -> np.ndarray:
    special = [0.0, 1.0, 0.5, 2.0 ** 40, 1e15]
    if link.fit_gb_per_s is not None:
        turns, _ = _turns_arrays(link.fit_gb_per_s, link.max_bw_bytes_per_s, link.min_bw_bytes_per_s)
        start = 2.0 ** (_valid_start(link.fit_gb_per_s, link.max_bw_bytes_per_s, link.min_bw_bytes_per_s) / 4)
        special += [start, np.nextafter(start, 0), *turns, *(np.nextafter(t, 0) for t in turns)]
    x = np.array([rng.choice(special) if rng.random() < 0.2 else 2.0 ** rng.uniform(-2, 42)
                  for _ in range(int(np.prod(shape)))])
    return x.reshape(shape)


@pytest.mark.parametrize("seed", range(10))
def test_link_time_bit_identical_to_the_previous_expression(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(40):
        link = _random_link(rng)
        for shape in [(0,), (1,), (rng.randint(2, 300),), (rng.randint(1, 5), rng.randint(1, 40))]:
            x = _sizes(rng, link, shape)
            got, want = link_time(link, x), _reference(link, x)
            assert got.shape == want.shape and got.tobytes() == want.tobytes(), (link, x, got, want)
            if x.size:
                assert netvec.checked_time(link, float(x.reshape(-1)[0])) == float(want.reshape(-1)[0])
