"""Floors on link, ring, gradient-sync and p2p times over every link a plan on a cluster can use (part of the
upper bound on throughput, :mod:`planner.search.bound`; the proof is docs/PLANNER.md 6.2, item 5).

Every link's time at any size and concurrency is >= latency + bytes / peak (``Link.time_s`` never goes above
the peak; sharing only slows), so each floor takes the smallest such time over the links of
:func:`link_floor`. numpy only.
"""
from __future__ import annotations

import numpy as np

from planner.cluster import ClusterSpec
from planner.network import Endpoint, Link
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext


def link_floor(ctx: SimContext, cluster: ClusterSpec) -> list[tuple[float, float]]:
    """(latency s, peak B/s) of every link a plan on the cluster's pools can use between two nodes: each
    link's time at any size and concurrency is >= latency + bytes / peak (``Link.time_s``)."""
    net = ctx.network
    # a replica's node size is its type's in the context (``SimContext.replica_node_size`` for a plan)
    ends = {(p.zone, p.gpu_type, net.node_gpus(Endpoint(p.gpu_type, p.zone, ctx.node_size(p.gpu_type))))
            for p in cluster.nonempty().pools}
    links: list[Link] = []
    if net.pair_links:
        if ctx.replica_node_gpus:           # node sizes declared per replica: any size of the pool's zone and type
            ends = {(z, g, n) for (z, g, _) in ends for n in range(1, 1025)}
        links = [l for (za, ga, na, zb, gb, nb), l in net.pair_links.items()
                 if (za, ga, na) in ends and (zb, gb, nb) in ends] or list(net.pair_links.values())
    else:
        links = list(net.class_links.values())
    return [(l.latency_s, l.max_bw_bytes_per_s) for l in links]


def _t_floor(links: list[tuple[float, float]], nbytes):
    nbytes = np.asarray(nbytes, dtype=float)
    return np.min([lat + nbytes / bw for lat, bw in links], axis=0)


def _ring_floor(links, n, grad_b: float, param_b: float, inner: bool = False) -> np.ndarray:
    """Floor on a ring over n members (0 for n <= 1), the smaller of the plain and the distributed-optimizer
    form. Flat / cross-zone ring: ``F.ring_s`` or one gradient + one parameter half (``F.ring_halves_s``);
    ``inner`` (a zone's reduce to its leader and broadcast back): 1.5 rings, or two gradient halves + one
    parameter half (``planner.simulator.time.stage_sync``)."""
    n = np.asarray(n, dtype=float)
    safe = np.maximum(n, 1.0)
    g_chunk, p_chunk = _t_floor(links, grad_b / safe), _t_floor(links, param_b / safe)
    plain = F.ring_s(n, g_chunk)
    if inner:
        plain = F.zone_reduce_broadcast_s(plain)
    dist = F.ring_halves_s(n, 2 if inner else 1, g_chunk, 1, p_chunk, 1.0)   # a floor: the real scale is >= 1
    return np.where(n > 1, np.minimum(plain, dist), 0.0)


def sync_floor(links, d, grad_b: float, param_b: float, zones: int) -> np.ndarray:
    """Floor on a stage's gradient sync over d replicas holding grad_b gradient (param_b parameter) bytes per
    GPU: the smaller of the flat ring and every hierarchical split over 2..zones zones (the largest zone then
    has >= ceil(d / z) members; the sync is its reduce + broadcast plus the ring of the z leaders)."""
    d = np.asarray(d, dtype=float)
    best = _ring_floor(links, d, grad_b, param_b)
    for z in range(2, zones + 1):
        hier = _ring_floor(links, np.ceil(d / z), grad_b, param_b, inner=True) + \
            _ring_floor(links, float(z), grad_b, param_b)
        best = np.where(d >= z, np.minimum(best, hier), best)
    return np.where(d > 1, best, 0.0)


def p2p_floor(ctx: SimContext, links, mbs: int, elem: int) -> float:
    """Floor on one boundary crossing (``p2p_transfer_s``: the mean of two transfers of the activation)."""
    return float(_t_floor(links, ctx.model.boundary_activation_bytes(mbs, elem)))


def affine_sync(links, d: np.ndarray, elem: int, zones: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, c): every stage sync over d replicas of G gradient bytes per GPU takes >= a + c G, for every mode
    :func:`sync_floor` covers (chunk times >= the smallest latency + bytes / the largest peak; a hierarchical
    sync's inner part dropped; its leaders' ring has >= 2 members)."""
    lat = min(l for l, _ in links)
    bw = max(w for _, w in links)
    d = np.asarray(d, dtype=float)
    frac = (d - 1) / np.maximum(d, 1.0)
    slope = np.minimum(2 * frac, frac * (1 + elem / F.GRAD_BYTES_PER_PARAM)) / bw
    a = 2 * (d - 1) * lat
    if zones >= 2:
        slope = np.minimum(slope, min(1.0, (1 + elem / F.GRAD_BYTES_PER_PARAM) / 2) / bw)
        a = np.minimum(a, 2 * lat)
    return np.where(d > 1, a, 0.0), np.where(d > 1, slope, 0.0)
