"""Lower bounds on the gradient sync of any plan of a task, per total pipeline count d.

Contract: :func:`sync_lower_bound` is <= the gradient sync :func:`planner.simulator.simulate` prices for
every plan of the task with d pipelines (flat ring in one zone, flat ring across zones, or hierarchical),
from the fastest candidate links only; the ring tables are memoised in the link cache.
"""
from __future__ import annotations

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.caps import caps_for
from planner.search.netvec import Group, LinkCache, bandwidth, link_time
from planner.simulator import formulas as F


def _suffix_min(x: np.ndarray) -> np.ndarray:
    return np.minimum.accumulate(x[::-1])[::-1]


def sync_lower_bound(cluster: ClusterSpec, combo, s_num: int, grad_bytes: float, d: np.ndarray,
                     cache: LinkCache) -> np.ndarray:
    """A lower bound on the gradient sync of any plan of the task with d pipelines (0 for d = 1).

    One zone: a flat ring over d replicas, at least the fastest candidate link's ring time. Several zones:
    either a flat ring holding a cross-zone pair (its worst link is at most as fast as the fastest
    cross-zone link: raw transfer time without latency) or hierarchical: a cross ring over Z' >= 2 zone
    leaders plus 1.5 rings inside the fullest zone (>= ceil(d / Z') members); ring times enter through their
    suffix minimum over the member count, so no monotonicity is assumed.
    """
    groups = tuple(Group(z, g, t) for g, t in combo for z, _ in caps_for(cluster, g, t, s_num))
    conc = min(t for _, t in combo)
    per_zone: dict[str, int] = {}
    for g, t in combo:
        for z, c in caps_for(cluster, g, t, s_num):
            per_zone[z] = per_zone.get(z, 0) + c
    n_cap = max(int(d.max()) if len(d) else 1, sum(per_zone.values()))
    ring_intra, raw, c = _ring_tables(cache, groups, conc, grad_bytes, n_cap)
    di = d.astype(np.int64)
    out = np.where(d <= max(per_zone.values()), ring_intra[di - 1], np.inf)   # one zone holds them all
    if raw is not None:
        out = np.minimum(out, F.ring_s(d, raw[di - 1]))
        inner = _suffix_min(F.zone_reduce_broadcast_s(ring_intra))
        for z, cz in zip(range(2, len(c) + 2), c):
            fullest = np.ceil(d / z).astype(np.int64)
            out = np.where(d >= z, np.minimum(out, cz + inner[np.maximum(fullest, 1) - 1]), out)
    return np.where(d > 1, out, 0.0)


def _ring_tables(cache: LinkCache, groups: tuple[Group, ...], conc: int, grad_bytes: float, n_cap: int):
    """(fastest intra-zone ring time per member count, fastest cross-zone raw chunk time per count, fastest
    cross ring per zone count 2..Z), memoised: tasks differing only in micro-batch size share them."""
    key = ("ring-bounds", groups, conc, grad_bytes, n_cap)
    if key in cache.patterns:
        return cache.patterns[key]
    # links with the same parameters have the same times: one of each (the minimum over links is unchanged)
    intra = {_link_params(lk): lk for a in groups for b in groups if a.zone == b.zone
             for lk in [cache.get(a, b, conc)]}
    cross = {_link_params(lk): lk for a in groups for b in groups if a.zone != b.zone
             for lk in [cache.get(a, b, conc)]}
    n = np.arange(1, n_cap + 1, dtype=float)
    ring_intra = np.min([F.ring_s(n, link_time(lk, grad_bytes / n)) for lk in intra.values()], axis=0)
    raw = c = None
    if cross:
        raw = np.min([(grad_bytes / n) / bandwidth(lk, grad_bytes / n) for lk in cross.values()], axis=0)
        zs = np.arange(2, len({g.zone for g in groups}) + 1, dtype=float)
        c = np.min([F.ring_s(zs, link_time(lk, grad_bytes / zs)) for lk in cross.values()], axis=0)
    cache.patterns[key] = (ring_intra, raw, c)
    return cache.patterns[key]


def _link_params(link) -> tuple:
    """What :func:`link_time` and :func:`bandwidth` read of a link."""
    return (link.max_bw_bytes_per_s, link.latency_s, link.fit_gb_per_s, link.min_bw_bytes_per_s)
