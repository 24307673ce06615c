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
from planner.search.netvec import Group, LinkCache, floor_prep, floor_times, link_time
from planner.search.netvec import link_params as _link_params
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
                     cache: LinkCache, copies: int = 1, z_min: int = 1) -> np.ndarray:
    """A lower bound on the gradient sync of any plan of the task with d pipelines (0 for d = 1 and one copy)
    whose largest stage gradient is at least ``grad_bytes``; ``z_min``: only plans whose rings span at least
    that many zones (the fewest zones :func:`zones_needed` raised to it; 1: every plan).

    ``copies``: how many times each replica appears in the ring (the tied all-reduce: 2, the first and the last
    stage's replica lists, :func:`tied_lower_bound`). With n = copies x d members: one zone (only if one zone
    can host d pipelines), a flat ring over n members, at least the fastest candidate link's ring time.
    Several zones (at least :func:`zones_needed`): either a flat ring holding a cross-zone pair, which takes
    at least the ring time on that pair's link (the simulator times a ring on its slowest link by time), so at
    least the fastest cross-zone candidate's ring time; or hierarchical over Z' zones, a cross ring over Z'
    leaders plus 1.5 rings inside the fullest zone (>= copies x ceil(d / Z') members); ring times enter
    through their suffix minimum over the member count, so no monotonicity in the count is assumed.

    Every term reads link times at ``grad_bytes`` (per member), and link times are non-decreasing in the size
    over the sizes the simulator accepts (below a fit's valid range it refuses, so a size there is read at the
    range's start, :func:`floor_time`): the bound holds for every gradient >= ``grad_bytes`` (an earlier
    least-bandwidth rule needed the task's whole gradient range, docs/PLANNER.md 2.1, *Task bound*).
    """
    return sync_lower_bounds(cluster, combo, s_num, grad_bytes, d, cache, copies, (z_min,))[0]


def sync_lower_bounds(cluster: ClusterSpec, combo, s_num: int, grad_bytes: float, d: np.ndarray, cache: LinkCache,
                      copies: int = 1, z_mins: tuple[int, ...] = (1,)) -> list[np.ndarray]:
    """:func:`sync_lower_bound` at each ``z_min`` of ``z_mins`` (one call per zone count in
    :func:`planner.search.rowzone.zone_sync_table`): the terms that do not depend on ``z_min`` (the ring tables'
    reads, the hierarchical sums) computed once, then per ``z_min`` the same choices of the same values (a
    minimum and a selection are exact, so each entry is that call's, bit for bit)."""
    groups = tuple(Group(z, g, t) for g, t in combo for z, _ in caps_for(cluster, g, t, s_num))
    conc = min(t for _, t in combo)
    per_zone: dict[str, int] = {}
    for g, t in combo:
        for z, c in caps_for(cluster, g, t, s_num):
            per_zone[z] = per_zone.get(z, 0) + c
    n_cap = copies * max(int(d.max()) if len(d) else 1, sum(per_zone.values()))
    ring_intra, ring_cross, c, inner = _ring_tables(cache, groups, conc, grad_bytes, n_cap)
    di = d.astype(np.int64)
    n = copies * di                                                            # ring members
    needed = zones_needed(list(per_zone.values()), di)
    intra = ring_intra[n - 1]
    if ring_cross is not None:
        cross, two = ring_cross[n - 1], di >= 2
        # per zone count z of a hierarchical sync: its time, and the rows with at least z pipelines
        hier = [(z, di >= z, cz + inner[np.maximum(copies * np.ceil(d / z).astype(np.int64), 1) - 1])
                for z, cz in zip(range(2, len(c) + 2), c)]
    outs = []
    for z_min in z_mins:
        z_lo = np.maximum(needed, z_min)
        out = np.where(z_lo <= 1, intra, np.inf)                                 # one zone holds them all
        if ring_cross is not None:
            out = np.where(two, np.minimum(out, cross), out)
            for z, at_least, t_z in hier:
                out = np.where(at_least & (z_lo <= z), np.minimum(out, t_z), out)
        outs.append(np.where(n > 1, out, 0.0))
    return outs


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


def _ring_tables(cache: LinkCache, groups: tuple[Group, ...], conc: int, grad_bytes: float, n_cap: int):
    """(fastest intra-zone ring time per member count, fastest ring time over a cross-zone link per member
    count, fastest cross ring per zone count 2..Z, the suffix minimum of the zone reduce-and-broadcast of the
    first (None without cross-zone links)), memoised: tasks differing only in micro-batch size share them.

    Computed from the links' floor times, once per link and size (:func:`_floor_tables`): a ring time
    ``2 (n - 1) t`` is a product by a non-negative factor fixed per n, and rounding is monotone, so the
    minimum over links of the products is the product of the minimum time, bit for bit, except at n = 1
    where ``0 * inf`` is nan: that column is taken over the links as before."""
    key = ("ring-bounds-5", groups, conc, grad_bytes, n_cap)
    if key in cache.patterns:
        return cache.patterns[key]
    t_intra, t_cross = _floor_tables(cache, groups, conc, grad_bytes, n_cap)
    n = np.arange(1, n_cap + 1, dtype=float)
    ring_intra = _min_ring(n, t_intra)
    ring_cross = c = inner = None
    if t_cross is not None:
        # a flat ring holding a cross-zone pair takes at least the ring time on that pair's link
        ring_cross = _min_ring(n, t_cross)
        n_zones = len({g.zone for g in groups})
        zs = np.arange(2, n_zones + 1, dtype=float)
        if n_zones <= n_cap:        # grad_bytes / zs is x[zs - 1] (the same division): the same link times
            c = F.ring_s(zs, np.min(t_cross[:, 1:n_zones], axis=0))
        else:
            c = F.ring_s(zs, np.min([floor_time(lk, grad_bytes / zs) for lk in _links(cache, groups, conc)[1]],
                                    axis=0))
        inner = _suffix_min(F.zone_reduce_broadcast_s(ring_intra))
    cache.patterns[key] = (ring_intra, ring_cross, c, inner)
    return cache.patterns[key]


def _min_ring(n: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``np.min([F.ring_s(n, row) for row in t], axis=0)`` bit for bit (see :func:`_ring_tables`)."""
    out = F.ring_s(n, np.min(t, axis=0))
    if len(n) and n[0] == 1:    # two columns, so that numpy reduces as on the whole table (the nan's sign)
        out[:2] = np.min(F.ring_s(n[None, :2], t[:, :2]), axis=0)   # each row's two products, as row by row
    return out


def _links(cache: LinkCache, groups: tuple[Group, ...], conc: int) -> tuple[list, list]:
    """(intra-zone, cross-zone) candidate links of ``groups``, one per distinct :func:`_link_params` (links
    with the same parameters have the same times: the minimum over links is unchanged), memoised."""
    key = ("ring-links", groups, conc)
    if key not in cache.patterns:
        intra = {_link_params(lk): lk for a in groups for b in groups if a.zone == b.zone
                 for lk in [cache.get(a, b, conc)]}
        cross = {_link_params(lk): lk for a in groups for b in groups if a.zone != b.zone
                 for lk in [cache.get(a, b, conc)]}
        cache.patterns[key] = (list(intra.values()), list(cross.values()))
    return cache.patterns[key]


def _floor_tables(cache: LinkCache, groups: tuple[Group, ...], conc: int, grad_bytes: float, n_cap: int):
    """([intra links, n_cap], [cross links, n_cap] or None): :func:`floor_time` of each candidate link at
    ``grad_bytes / n`` for n = 1..n_cap, memoised per gradient size at the largest n_cap asked (the times are
    elementwise, so a prefix of a longer table is the shorter table)."""
    key = ("ring-floors", groups, conc, grad_bytes)
    have = cache.patterns.get(key)
    if have is None or have[0].shape[1] < n_cap:
        intra, cross = _links(cache, groups, conc)
        pkey = ("ring-links-prep", groups, conc)        # the links' columns, built once (netvec.floor_prep)
        if pkey not in cache.patterns:
            cache.patterns[pkey] = (floor_prep(intra), floor_prep(cross) if cross else None)
        p_intra, p_cross = cache.patterns[pkey]
        x = grad_bytes / np.arange(1, n_cap + 1, dtype=float)
        # floor_times: row j is floor_time(links[j], x), bit for bit, the links in one pass
        have = cache.patterns[key] = (floor_times(intra, x, p_intra),
                                      floor_times(cross, x, p_cross) if cross else None)
    t_intra, t_cross = have
    return t_intra[:, :n_cap], None if t_cross is None else t_cross[:, :n_cap]


def floor_time(link, nbytes: np.ndarray) -> np.ndarray:
    """A lower bound on :meth:`Link.checked_time_s` at every size >= ``nbytes`` the simulator accepts: the
    link's time at ``nbytes``, or at the start of its fit's valid range where ``nbytes`` lies below it (the
    simulator refuses smaller sizes; from the start on, link times are non-decreasing in the size)."""
    nbytes = np.asarray(nbytes, dtype=float)
    if link.fit_gb_per_s is not None:
        nbytes = np.maximum(nbytes, link.valid_from_bytes())
    return link_time(link, nbytes)
