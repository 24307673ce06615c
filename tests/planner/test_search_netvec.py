"""The search's vectorised link times refuse the sizes ``simulate`` refuses (issue 14): a fit that is not a
positive finite bandwidth there, or a size below the fit's valid range, gives an infinite time (no plan that
sends such a message is chosen); elsewhere the times equal ``Link.checked_time_s``."""
from __future__ import annotations

import numpy as np
import pytest

from planner.errors import InputError
from planner.network import Link
from planner.search.netvec import fit_refused, link_time

LINKS = [
    Link(12e9, 2e-5, (-0.05, 1.2, 3.0), None, True, "concave"),
    Link(25e9, 1e-5, (0.02, 0.9, -1.5), None, True, "negative below ~1 MB"),
    Link(8e9, 0.0, (0.0, 0.0, -1.0), None, True, "negative everywhere"),
    Link(8e9, 3e-6),
]


@pytest.mark.parametrize("link", LINKS, ids=lambda l: l.label or "no fit")
def test_link_time_refuses_exactly_where_the_simulator_does(link):
    sizes = np.concatenate([[0.0, 1.0, 100.0], np.geomspace(1e3, 1e10, 300)])
    refused = fit_refused(link, sizes)
    times = link_time(link, sizes)
    for n, bad, t in zip(sizes, refused, times):
        try:
            want = link.checked_time_s(float(n))
        except InputError:
            assert bad and np.isinf(t), n
            continue
        assert not bad, n
        assert t == pytest.approx(want, rel=1e-12, abs=0.0), n
    assert refused[1:].all() == (link.label == "negative everywhere")   # size 0 sends nothing: never refused
    assert refused.any() == (link.fit_gb_per_s is not None)
