"""network._valid_from and network._envelope read one inlined pass over the size grid (``_grid_values``, session 15):
the same index and the same floats, bit for bit, as the per-size ``Link`` method calls they replaced (kept below
as the reference), on measured fits, made-up fits (convex, concave, negative somewhere, never positive) and
clip bounds with and without a given floor."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.network import _GRID, Link, _envelope, _valid_from

SAILOR = Path(__file__).resolve().parents[3] / "shared" / "data" / "sailor"


def _ref_valid_from(fit, hi, lo) -> int:
    """The rule before session 15: one Link method call per size."""
    link = Link(hi, 0.0, fit, lo)
    j = _GRID - 1
    while j >= 0 and link.fit_value_gb_per_s(2.0 ** (j / 4)) > 0:
        j -= 1
    run = range(j + 1, _GRID)
    if not run:
        return _GRID
    return min(run, key=lambda i: link._raw_transfer_s(2.0 ** (i / 4)))


def _ref_envelope(fit, hi, lo) -> tuple[float, ...]:
    link = Link(hi, 0.0, fit, lo)
    start = _ref_valid_from(fit, hi, lo)
    out, best = [], 0.0
    for i in range(_GRID):
        raw = link._raw_transfer_s(2.0 ** (i / 4))
        if i < start:
            out.append(raw)
            continue
        best = max(best, raw)
        out.append(best)
    return tuple(out)


def _bits(xs) -> list[str]:
    return [float(x).hex() for x in xs]


def _cases(seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(60):
        a = float(rng.choice([0.0, 1.0, -1.0]) * 10.0 ** rng.uniform(-4, 0))
        b = float(rng.normal(0, 2))
        c = float(rng.normal(0, 20))
        hi = float(10.0 ** rng.uniform(8, 11.5))
        lo = None if rng.random() < 0.5 else float(hi * rng.uniform(0.001, 0.5))
        out.append(((a, b, c), hi, lo))
    out += [((-0.4, 3.0, 2.0), 5e9, None), ((0.1, 0.5, -3.0), 5e9, 1e7), ((-1.0, 0.0, -1.0), 2e10, None),
            ((0.0, 0.0, 5.0), 1e10, None), ((0.0, 1.0, 0.0), 1e10, 2e8)]
    return out


def _measured() -> list[tuple]:
    if not SAILOR.is_dir():
        return []
    from planner import api
    from planner.network import Endpoint
    net = api.load_data(api.DataSource(model="OPT-350", sailor_data=str(SAILOR))).network
    out = []
    for g1 in ("A100-40", "V100-16"):
        for g2 in ("A100-40", "V100-16"):
            for z2 in ("us-central1-a", "us-central1-b", "us-west1-b"):
                for conc in (1, 2, 8):
                    lk = net.link(Endpoint(g1, "us-central1-a"), Endpoint(g2, z2), concurrent=conc)
                    if lk.fit_gb_per_s is not None:
                        out.append((lk.fit_gb_per_s, lk.max_bw_bytes_per_s, lk.min_bw_bytes_per_s))
    return out


@pytest.mark.parametrize("seed", range(3))
def test_grid_rules_equal_the_per_size_calls(seed):
    cases = _cases(seed) + (_measured() if seed == 0 else [])
    starts = set()
    for fit, hi, lo in cases:
        want_start = _ref_valid_from(fit, hi, lo)
        assert _valid_from(fit, hi, lo) == want_start, (fit, hi, lo)
        assert _bits(_envelope(fit, hi, lo)) == _bits(_ref_envelope(fit, hi, lo)), (fit, hi, lo)
        starts.add(want_start)
    # the cases reach the three kinds of start: from the first size, inside the grid, none (never positive)
    assert 0 in starts and _GRID in starts and any(0 < s < _GRID for s in starts)

