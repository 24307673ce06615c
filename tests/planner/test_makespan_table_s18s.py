"""makespan.min_makespan (the per-class count tables gathered at the breakpoints, session 18) equals the
definition read off :func:`capacity` by a linear scan: the smallest T_p(m) at which the rows' capacity reaches n
(inf where none does or the rows hold more pipelines than n), on sorted times with ties, inf tails and classes
that cannot run one micro-batch."""
from __future__ import annotations

import numpy as np
import pytest

from planner.search.makespan import capacity, min_makespan


def _by_scan(D: np.ndarray, T: list[np.ndarray], n: int) -> np.ndarray:
    bps = np.unique(np.concatenate(T))
    out = np.full(len(D), np.inf)
    for r in range(len(D)):
        if D[r].sum() > n:
            continue
        for t in bps:
            if capacity(np.array([t]), D[r:r + 1], T)[0] >= n:
                out[r] = t
                break
    return out


@pytest.mark.parametrize("seed", range(4))
def test_min_makespan_equals_the_scan_over_breakpoints(seed: int) -> None:
    rng = np.random.default_rng(seed)
    seen = []
    for _ in range(25):
        n = int(rng.integers(1, 30))
        T = [np.sort(np.round(np.cumsum(rng.random(n) * rng.choice([1.0, 0.01])), int(rng.integers(0, 3)))
                     + rng.random()) for _ in range(int(rng.integers(1, 5)))]
        if rng.random() < 0.3:
            T[0][-int(rng.integers(1, n + 1)):] = np.inf        # a class that cannot take that many
        if rng.random() < 0.2:
            T[-1][:] = np.inf                                 # a class that cannot run even one
        D = rng.integers(0, 4, size=(int(rng.integers(1, 40)), len(T)))
        got, want = min_makespan(D, T, n), _by_scan(D, T, n)
        assert got.tobytes() == want.tobytes(), (D, T, n)
        seen.append(want)
    seen = np.concatenate(seen)
    assert np.isfinite(seen).any() and np.isinf(seen).any()     # both kinds of answer are compared
