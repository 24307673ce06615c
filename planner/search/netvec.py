"""Vectorised link times and gradient-sync times (numpy mirrors of :mod:`planner.network` and
:func:`planner.simulator.time.stage_sync`).

A stage's replicas are ordered by (zone, GPU type) in every plan the search builds, so a stage's ring is a
sequence of *groups* (zone, type, tp, count). Which ring pairs exist depends only on the groups present and on
whether a group holds one replica or more; the sync time then depends on the group sizes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.network import Endpoint, Link, _envelope
from planner.simulator.settings import SimContext


def bandwidth(link: Link, nbytes: np.ndarray) -> np.ndarray:
    hi = link.max_bw_bytes_per_s
    lo = link.min_bw_bytes_per_s if link.min_bw_bytes_per_s is not None else hi * 0.01
    if link.fit_gb_per_s is None:
        return np.full(np.shape(nbytes), hi, dtype=float)
    a, b, c = link.fit_gb_per_s
    u = np.log2(np.maximum(nbytes, 1.0) / 1e6)
    if a < 0:
        u = np.minimum(u, -b / (2 * a))
    return np.minimum(hi, np.maximum(lo, (a * u * u + b * u + c) * 1e9))


def link_time(link: Link, nbytes: np.ndarray) -> np.ndarray:
    """:meth:`Link.time_s` for an array of sizes."""
    nbytes = np.asarray(nbytes, dtype=float)
    raw = nbytes / bandwidth(link, nbytes)
    if link.fit_gb_per_s is not None:
        grid = np.asarray(_envelope(link.fit_gb_per_s, link.max_bw_bytes_per_s, link.min_bw_bytes_per_s))
        i = np.clip(np.floor(np.log2(np.maximum(nbytes, 1.0)) * 4).astype(np.int64), 0, len(grid) - 1)
        raw = np.maximum(raw, grid[i])
    return np.where(nbytes <= 0, 0.0, link.latency_s + raw)


def ring_s(n: np.ndarray, nbytes: float, links: list[Link], worst_at: np.ndarray) -> np.ndarray:
    """``_ring_s(n, nbytes, worst(links at worst_at))``: the first link of minimal bandwidth is used."""
    n = np.asarray(n)
    best_bw = None
    chosen = np.zeros(n.shape, dtype=np.int64)
    for i, link in enumerate(links):
        bw = bandwidth(link, worst_at)
        if best_bw is None:
            best_bw = bw
        else:
            better = bw < best_bw
            chosen = np.where(better, i, chosen)
            best_bw = np.where(better, bw, best_bw)
    nn = np.maximum(n, 1)
    out = np.zeros(n.shape, dtype=float)
    for i, link in enumerate(links):
        sel = chosen == i
        if np.any(sel):
            out = np.where(sel, 2 * (nn - 1) * link_time(link, nbytes / nn), out)
    return np.where((n <= 1) | (nbytes <= 0), 0.0, out)


@dataclass(frozen=True)
class Group:
    zone: str
    gpu_type: str
    tp: int


def ring_pairs(groups: list[Group], many: list[bool]) -> list[tuple[Group, Group]]:
    """Distinct (a, b) neighbour pairs of the ring over the groups, in order of first appearance."""
    seq: list[tuple[Group, Group]] = []
    n = len(groups)
    for i, g in enumerate(groups):
        if many[i]:
            seq.append((g, g))
        if n > 1:
            seq.append((g, groups[(i + 1) % n]))
    out: list[tuple[Group, Group]] = []
    for p in seq:
        if p not in out:
            out.append(p)
    return out


class LinkCache:
    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        self._links: dict[tuple, Link] = {}

    def get(self, a: Group, b: Group, conc: int) -> Link:
        key = (a.zone, a.gpu_type, b.zone, b.gpu_type, conc)
        if key not in self._links:
            self._links[key] = self.ctx.network.link(Endpoint(a.gpu_type, a.zone), Endpoint(b.gpu_type, b.zone),
                                                     concurrent=conc)
        return self._links[key]


@dataclass
class SyncResult:
    time_s: np.ndarray
    hierarchical: np.ndarray       # bool per row
    cross_usd: np.ndarray          # egress USD per iteration of this stage's sync
    cross_bytes: np.ndarray


def stage_sync_vec(ctx: SimContext, cache: LinkCache, groups: list[Group], counts: np.ndarray,
                   grad_bytes: float, full_bytes: float) -> SyncResult:
    """Sync of one stage for rows of group sizes ``counts`` ([R, G], every entry >= 1, same many-pattern)."""
    d = counts.sum(axis=1)
    r = len(d)
    conc = min(g.tp for g in groups)
    many = [bool(counts[0, i] >= 2) for i in range(len(groups))]
    flat_links = [cache.get(a, b, conc) for a, b in ring_pairs(groups, many)]
    worst_at = grad_bytes / np.maximum(d, 1)
    flat = ring_s(d, grad_bytes, flat_links, worst_at)
    zones = sorted({g.zone for g in groups})
    zero = np.zeros(r)
    if len(zones) == 1 or ctx.settings.grad_sync == "flat" or (r and d[0] <= 1):
        if len(zones) == 1 or (r and d[0] <= 1):
            return SyncResult(flat, np.zeros(r, dtype=bool), zero, zero)
        usd, nb = _cross(ctx, zones, d, full_bytes)
        return SyncResult(flat, np.zeros(r, dtype=bool), usd, nb)
    inner = np.zeros(r)
    leaders: list[Group] = []
    for z in zones:
        idx = [i for i, g in enumerate(groups) if g.zone == z]
        leaders.append(groups[idx[0]])
        nz = counts[:, idx].sum(axis=1)
        sub = [groups[i] for i in idx]
        sub_many = [many[i] for i in idx]
        if len(sub) == 1 and not sub_many[0]:
            continue
        links = [cache.get(a, b, conc) for a, b in ring_pairs(sub, sub_many)]
        inner = np.maximum(inner, 1.5 * ring_s(nz, grad_bytes, links, worst_at))
    lead_links = [cache.get(a, b, conc) for a, b in ring_pairs(leaders, [False] * len(leaders))]
    cross = ring_s(np.full(r, len(zones)), grad_bytes, lead_links, worst_at)
    hier = inner + cross
    use_flat = (flat < hier) if ctx.settings.grad_sync == "auto" else np.zeros(r, dtype=bool)
    f_usd, f_b = _cross(ctx, zones, d, full_bytes)
    h_usd, h_b = _cross(ctx, zones, np.full(r, len(zones)), full_bytes)
    return SyncResult(np.where(use_flat, flat, hier), ~use_flat, np.where(use_flat, f_usd, h_usd),
                      np.where(use_flat, f_b, h_b))


def _cross(ctx: SimContext, zones: list[str], n: np.ndarray, full_bytes: float) -> tuple[np.ndarray, np.ndarray]:
    """Egress of a ring ordered by zone: every cross-zone edge carries 2 (n-1)/n of the gradient."""
    z = len(zones)
    per_edge = 2 * (n - 1) / np.maximum(n, 1) * full_bytes
    edges = {(zones[i], zones[(i + 1) % z]) for i in range(z)}
    price = sum(ctx.network.egress_usd_per_byte(a, b) for a, b in edges)
    return per_edge * price, per_edge * len(edges)
