"""Lower bounds on the gradient sync of any plan of a task, per total pipeline count d, and on the
tied-embedding all-reduce that follows it.

Contract: :func:`sync_lower_bound` is <= the gradient sync :func:`planner.simulator.simulate` prices for
every plan of the task with d pipelines (flat ring in one zone, flat ring across zones, or hierarchical),
from the task's candidate links only; :func:`tied_lower_bound` is <= the tied-embedding all-reduce of every
several-stage plan of the task with d pipelines (docs/PLANNER.md 2.1, *Task bound* and *Tied all-reduce
bound*). The ring tables are memoised in the link cache.
"""
from __future__ import annotations

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.caps import caps_for
from planner.search.netvec import Group, LinkCache, bandwidth, link_time
from planner.simulator import formulas as F
from planner.simulator.tied import _vocab_shard_params


def _suffix_min(x: np.ndarray) -> np.ndarray:
    return np.minimum.accumulate(x[::-1])[::-1]


def zones_needed(zone_caps: list[int], d: np.ndarray) -> np.ndarray:
    """[len(d)] the fewest zones whose pipeline capacities (``zone_caps``, per zone the task's pipelines it can
    host) sum to at least d: every row with d pipelines spans at least that many zones (len + 1: none)."""
    cum = np.cumsum(sorted(zone_caps, reverse=True))
    return np.searchsorted(cum, d, side="left") + 1


def sync_lower_bound(cluster: ClusterSpec, combo, s_num: int, grad_bytes: float, d: np.ndarray,
                     cache: LinkCache, copies: int = 1, grad_hi_bytes: float | None = None) -> np.ndarray:
    """A lower bound on the gradient sync of any plan of the task with d pipelines (0 for d = 1 and one copy).

    ``copies``: how many times each replica appears in the ring (the tied all-reduce: 2, the first and the last
    stage's replica lists, :func:`tied_lower_bound`). With n = copies x d members: one zone (only if one zone
    can host d pipelines), a flat ring over n members, at least the fastest candidate link's ring time.
    Several zones (at least :func:`zones_needed`): either a flat ring holding a cross-zone pair, whose worst
    (least-bandwidth) link is a candidate link no faster than the fastest cross-zone link at that size, so
    each chunk takes at least the smallest time of such a link; or hierarchical over Z' zones, a cross ring
    over Z' leaders plus 1.5 rings inside the fullest zone (>= copies x ceil(d / Z') members); ring times
    enter through their suffix minimum over the member count, so no monotonicity is assumed.

    The bound holds for every gradient size in ``[grad_bytes, grad_hi_bytes]`` (default: ``grad_bytes`` alone):
    a task's splits have different largest-stage gradients, and which links can be a ring's worst one changes
    with the size, so the worst-link term admits every link that is no faster than the fastest cross-zone link
    somewhere in that range (:func:`_bandwidth_range`), each at the smallest size (link times are
    non-decreasing in the size); the other terms read only non-decreasing link times at the smallest size.
    """
    grad_hi = grad_bytes if grad_hi_bytes is None else max(grad_bytes, grad_hi_bytes)
    groups = tuple(Group(z, g, t) for g, t in combo for z, _ in caps_for(cluster, g, t, s_num))
    conc = min(t for _, t in combo)
    per_zone: dict[str, int] = {}
    for g, t in combo:
        for z, c in caps_for(cluster, g, t, s_num):
            per_zone[z] = per_zone.get(z, 0) + c
    n_cap = copies * max(int(d.max()) if len(d) else 1, sum(per_zone.values()))
    ring_intra, chunk, c = _ring_tables(cache, groups, conc, grad_bytes, n_cap, grad_hi)
    di = d.astype(np.int64)
    n = copies * di                                                            # ring members
    z_lo = zones_needed(list(per_zone.values()), di)
    out = np.where(z_lo <= 1, ring_intra[n - 1], np.inf)                     # one zone holds them all
    if chunk is not None:
        out = np.where(di >= 2, np.minimum(out, F.ring_s(n, chunk[n - 1])), out)
        inner = _suffix_min(F.zone_reduce_broadcast_s(ring_intra))
        for z, cz in zip(range(2, len(c) + 2), c):
            fullest = copies * np.ceil(d / z).astype(np.int64)
            out = np.where((di >= z) & (z_lo <= z), np.minimum(out, cz + inner[np.maximum(fullest, 1) - 1]), out)
    return np.where(n > 1, out, 0.0)


def tied_lower_bound(ctx, cluster: ClusterSpec, combo, s_num: int, d: np.ndarray, cache: LinkCache) -> np.ndarray:
    """A lower bound on the tied-embedding all-reduce of any plan of the task with d pipelines and
    ``s_num`` >= 2 stages (0 for one stage): the simulator sums the word-embedding shard's fp32 gradient of
    the smallest TP (every type of the task is on every stage of a pool plan, so the task's smallest) over
    the first and the last stages' replicas, 2 d members, with the stage syncs' rings
    (:func:`planner.simulator.tied.tied_sync_of_replicas`): :func:`sync_lower_bound` with two copies."""
    if s_num < 2:
        return np.zeros(len(d))
    tp = min(t for _, t in combo)
    nbytes = 4.0 * _vocab_shard_params(ctx.model, tp)
    return sync_lower_bound(cluster, combo, s_num, nbytes, d, cache, copies=2)


def _ring_tables(cache: LinkCache, groups: tuple[Group, ...], conc: int, grad_bytes: float, n_cap: int,
                 grad_hi: float | None = None):
    """(fastest intra-zone ring time per member count, the smallest chunk time of a flat ring holding a
    cross-zone pair per member count for any gradient in [grad_bytes, grad_hi], fastest cross ring per zone
    count 2..Z), memoised: tasks differing only in micro-batch size share them."""
    grad_hi = grad_bytes if grad_hi is None else grad_hi
    key = ("ring-bounds-3", groups, conc, grad_bytes, grad_hi, n_cap)
    if key in cache.patterns:
        return cache.patterns[key]
    # links with the same parameters have the same times: one of each (the minimum over links is unchanged)
    intra = {_link_params(lk): lk for a in groups for b in groups if a.zone == b.zone
             for lk in [cache.get(a, b, conc)]}
    cross = {_link_params(lk): lk for a in groups for b in groups if a.zone != b.zone
             for lk in [cache.get(a, b, conc)]}
    n = np.arange(1, n_cap + 1, dtype=float)
    x = grad_bytes / n
    ring_intra = np.min([F.ring_s(n, link_time(lk, x)) for lk in intra.values()], axis=0)
    chunk = c = None
    if cross:
        # the ring's worst link w (least bandwidth at the plan's chunk size x' in [x, x_hi], the simulator's
        # choice) has bw_w(x') <= bw_c(x') <= the fastest cross-zone bandwidth at x': w is one of the links whose
        # least bandwidth over [x, x_hi] is <= the largest cross-zone bandwidth over it, and its chunk takes
        # >= its time at x (non-decreasing in the size); a cross-zone link always qualifies
        x_hi = grad_hi / n
        every = list({**intra, **cross}.values())
        bw_lo = np.array([_bandwidth_range(lk, x, x_hi)[0] for lk in every])     # [links, n]
        top = np.max([_bandwidth_range(lk, x, x_hi)[1] for lk in cross.values()], axis=0)
        times = np.array([link_time(lk, x) for lk in every])
        chunk = np.where(bw_lo <= top[None, :], times, np.inf).min(axis=0)
        zs = np.arange(2, len({g.zone for g in groups}) + 1, dtype=float)
        c = np.min([F.ring_s(zs, link_time(lk, grad_bytes / zs)) for lk in cross.values()], axis=0)
    cache.patterns[key] = (ring_intra, chunk, c)
    return cache.patterns[key]


def _bandwidth_range(link, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(least, largest) :func:`bandwidth` of ``link`` over the sizes ``[lo, hi]`` (elementwise), exactly: the
    bandwidth is a clipped quadratic in u = log2(size / 1e6), held at the vertex beyond it when concave, so its
    extremes over an interval lie at the two ends or at the vertex (clipping is monotone)."""
    pts = [bandwidth(link, lo), bandwidth(link, hi)]
    if link.fit_gb_per_s is not None and link.fit_gb_per_s[0] != 0:
        a, b, _ = link.fit_gb_per_s
        vertex = 1e6 * 2.0 ** (-b / (2 * a))
        pts.append(bandwidth(link, np.clip(vertex, lo, hi)))
    return np.minimum.reduce(pts), np.maximum.reduce(pts)


def _link_params(link) -> tuple:
    """What :func:`link_time` and :func:`bandwidth` read of a link."""
    return (link.max_bw_bytes_per_s, link.latency_s, link.fit_gb_per_s, link.min_bw_bytes_per_s)
