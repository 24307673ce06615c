"""netvec.floor_times: every candidate link of a cluster in one pass equals syncbound.floor_time link by link, bit
for bit (nan and inf where they are), on sizes across and below the fits' valid ranges."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.hardware import GPUCatalog
from planner.network import Endpoint, Link, NetworkModel
from planner.search.netvec import floor_times
from planner.search.syncbound import floor_time

SAILOR = Path(__file__).resolve().parents[3] / "shared" / "data" / "sailor"


def _links() -> list[Link]:
    from planner import api
    nets = [NetworkModel(GPUCatalog()), api.load_data(api.DataSource(model="gpt-neo-2.7b")).network]
    if SAILOR.is_dir():     # the measured fits (quadratic bandwidth curves with valid ranges)
        nets.append(api.load_data(api.DataSource(model="OPT-350", sailor_data=str(SAILOR))).network)
    zones = ("us-central1-a", "us-central1-b", "us-west1-b")
    out = []
    for net in nets:
        for g1 in ("A100-40", "V100-16"):
            for g2 in ("A100-40", "V100-16"):
                for z1 in zones:
                    for z2 in zones:
                        for conc in (1, 2, 8):
                            out.append(net.link(Endpoint(g1, z1), Endpoint(g2, z2), concurrent=conc))
    out += [Link(1e10, 2e-5), Link(5e9, 0.0, fit_gb_per_s=(-0.4, 3.0, 2.0)),
            Link(5e9, 1e-6, fit_gb_per_s=(0.1, 0.5, -3.0)), Link(2e10, 3e-6, fit_gb_per_s=(-1.0, 0.0, -1.0))]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_floor_times_equal_floor_time_per_link(seed):
    rng = np.random.default_rng(seed)
    links = list(rng.permutation(np.array(_links(), dtype=object)))
    x = np.concatenate([[0.0, 1.0, 3.0], 10.0 ** rng.uniform(0, 11, 200), rng.uniform(1e5, 1e7, 50)])
    if seed % 2:
        x = np.sort(x)[::-1] / np.arange(1, len(x) + 1)
    got = floor_times(links, x)
    want = np.array([floor_time(lk, x) for lk in links])
    assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True)
    assert np.isinf(want).any() and np.isfinite(want).any()     # both kinds of value are compared


def test_non_finite_sizes_fall_back_link_by_link():
    links = _links()[:7]
    x = np.array([np.inf, 1e6, 2e3])
    assert np.array_equal(floor_times(links, x), np.array([floor_time(lk, x) for lk in links]), equal_nan=True)
