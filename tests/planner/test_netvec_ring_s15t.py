"""netvec._Rings.ring computes the ring time once per distinct link (its ``link_params``) over the rows holding
any pair on it (session 15): ``sync_rows`` gives bit for bit what the pair-by-pair rule it replaced gives (kept
below as the reference), on random rows over several zones of one region (whose cross-zone links share
parameters) and of two regions, flat, hierarchical and auto, plain and distributed optimizer, with fewer
link-time evaluations."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from planner import api
from planner.cluster import parse_gpus
from planner.search import netvec
from planner.search.netvec import Group, LinkCache
from planner.simulator import formulas as F

SAILOR = Path(__file__).resolve().parents[3] / "shared" / "data" / "sailor"
ZONES = ("us-central1-a", "us-central1-b", "us-central1-c", "us-west1-b")


class _PairRings(netvec._Rings):
    """The rule before session 15: one link time per ring pair, over the rows whose pattern holds it."""

    def ring(self, ranks, inv, n, nbytes, param=None, halves=(1, 1)):
        out = np.zeros(len(inv))
        nn = np.maximum(n, 1)
        scale = self.cache.ctx.settings.sharded_collective_scale
        for q in sorted({q for r in ranks for q in r}):
            rows = np.flatnonzero(np.array([q in r for r in ranks])[inv] & (n > 1))
            if len(rows) == 0:
                continue
            lk = self.link(q)
            grad_t = netvec.link_time(lk, nbytes[rows] / nn[rows])      # elementwise: two calls as one
            t = F.ring_s(nn[rows], grad_t) if param is None else F.ring_halves_s(
                nn[rows], halves[0], grad_t, halves[1], netvec.link_time(lk, param[rows] / nn[rows]), scale)
            out[rows] = np.maximum(out[rows], t)
        return out


def _ctx(sailor: bool):
    if sailor:
        bundle = api.load_data(api.DataSource(model="OPT-350", sailor_data=str(SAILOR)))
        gpus = ",".join(f"A100-40@{z}=16,V100-16@{z}=16" for z in ZONES)
    else:
        bundle = api.load_data(api.DataSource(model="gpt-neo-2.7b"))
        gpus = ",".join(f"A100-40@{z}=16,H100-80@{z}=16" for z in ZONES)
    return api.context_for(api.make_context(bundle, None), parse_gpus(gpus, bundle.catalog))


@pytest.mark.parametrize("sailor", [False, True])
def test_ring_per_link_equals_ring_per_pair(sailor, monkeypatch):
    if sailor and not SAILOR.is_dir():
        pytest.skip("Sailor data not beside the checkout")
    base = _ctx(sailor)
    calls = {"n": 0}
    real = netvec.link_time

    def counted(link, nbytes):
        calls["n"] += 1
        return real(link, nbytes)
    monkeypatch.setattr(netvec, "link_time", counted)
    fewer = 0
    for seed, rule in enumerate(["auto", "flat", "hierarchical", "auto"]):
        ctx = replace(base, settings=replace(base.settings, grad_sync=rule))
        rng = np.random.default_rng(seed + (10 if sailor else 0))
        types = ("A100-40", "V100-16") if sailor else ("A100-40", "H100-80")
        groups = [Group(z, g, int(rng.choice([1, 2, 4]))) for z in ZONES for g in types]
        R = 300
        D = rng.integers(0, 4, size=(R, len(groups))) * (rng.random((R, len(groups))) < 0.5)
        sizes = rng.choice([2e7, 5e7, 3e8, 1.5e9], size=R)
        full, param = sizes * 4, (sizes / 2 if seed % 2 else None)
        calls["n"] = 0
        got = netvec._sync_rows(ctx, LinkCache(ctx), groups, D, sizes, full, param)
        n_new = calls["n"]
        monkeypatch.setattr(netvec, "_Rings", _PairRings)
        calls["n"] = 0
        want = netvec._sync_rows(ctx, LinkCache(ctx), groups, D, sizes, full, param)
        n_old = calls["n"]
        monkeypatch.undo()
        monkeypatch.setattr(netvec, "link_time", counted)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.tobytes() == w.tobytes()
        assert (want[0] > 0).any() and want[2].any() == (rule != "flat")
        assert n_new <= n_old
        fewer += n_new < n_old
    assert fewer        # links of equal parameters were merged somewhere

