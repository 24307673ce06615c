"""Uneven per-zone spreads of pool plans: for every row of pipeline counts, the spread with the same pools used
and the same per-type totals whose fullest zone holds the fewest replicas (docs/PLANNER.md section 9).

Contract: :func:`spread_rows` returns the rows it is given followed by, for each row where two used types share
a zone and some other spread of the same support and type totals has a smaller largest zone total ``M``, one
such spread of least ``M`` (each at most once). With class links (no fitted node-pair links) a pool plan's
iteration time and cost depend on its spread only through the pools used, the type totals and ``M``, and are
non-decreasing in ``M`` where the in-zone link has no bandwidth fit (section 9, lemma), so the rows returned
hold an optimum over every spread of each (support, totals) the input rows hold. Water-filled rows where no
zone hosts two used types are already of least ``M`` and get no companion.
"""
from __future__ import annotations

from collections import deque
from functools import lru_cache

import numpy as np

Cols = tuple[tuple[str, str], ...]       # (zone, gpu type) per column, sorted


def spread_rows(D: np.ndarray, cols: list[tuple[str, str]], caps: np.ndarray) -> np.ndarray:
    """``D`` ([R, P] pipelines per pool, columns ``cols`` = (zone, type) sorted) plus the least-``M`` spreads
    (see the module doc); ``caps`` [P]: the most pipelines each pool hosts."""
    if len(D) == 0:
        return D
    zones = sorted({z for z, _ in cols})
    types = sorted({g for _, g in cols})
    if len(zones) < 2 or len(types) < 2:
        return D
    zone_of = np.array([zones.index(z) for z, _ in cols])
    onehot = (zone_of[:, None] == np.arange(len(zones))[None, :]).astype(np.int64)       # [P, Z]
    per_zone_used = (D > 0).astype(np.int64) @ onehot
    shared = (per_zone_used >= 2).any(axis=1) & ((per_zone_used > 0).sum(axis=1) >= 2)
    if not shared.any():
        return D
    rows = D[shared]
    better = least_m_rows(rows, cols, np.asarray(caps))
    moved = np.any(better != rows, axis=1)
    if not moved.any():
        return D
    return np.concatenate([D, better[moved].astype(D.dtype)], axis=0)


def least_m_rows(D: np.ndarray, cols: list[tuple[str, str]], caps: np.ndarray) -> np.ndarray:
    """For every row, a spread with the same used pools and type totals whose fullest zone holds the fewest
    replicas (the row itself where it already does), all rows at once.

    Augmenting paths over zones: a unit of type g moves from zone z to zone z' when g's pool in z holds two or
    more and g's pool in z' is used and below its cap; along a path each intermediate zone keeps its total.
    Each round takes a fullest zone s (total M) and, if a zone of total <= M - 2 is reachable from s, moves
    k = min(path capacity, (M - its total) // 2) >= 1 units along a shortest path (the sum of squared zone totals
    falls, so the rounds end). When none is reachable from s, M is least: let R be the zones reachable from s
    (totals >= M - 1, s at M). A type with a movable unit in R has every used pool outside R at its cap, and a
    type without one sits at one per used pool in R, so no spread of the same pools and totals holds fewer
    replicas in R; their average exceeds M - 1, so some zone of R holds >= M in every such spread."""
    zones = sorted({z for z, _ in cols})
    types = sorted({g for _, g in cols})
    nz, nt = len(zones), len(types)
    zi = np.array([zones.index(z) for z, _ in cols])
    ti = np.array([types.index(g) for _, g in cols])
    X = np.zeros((len(D), nt, nz), dtype=np.int64)
    X[:, ti, zi] = D
    cap = np.zeros((nt, nz), dtype=np.int64)
    cap[ti, zi] = caps
    used = X > 0
    active = np.arange(len(D))
    eye = np.eye(nz, dtype=bool)
    while len(active):
        x, u = X[active], used[active]
        load = x.sum(axis=1)                                                   # [A, Z]
        src = np.argmax(load, axis=1)
        m = load[np.arange(len(active)), src]
        out = np.where(u, x - 1, 0)                                            # movable units per pool
        room = np.where(u, cap[None] - x, 0)
        pair = np.minimum(out[:, :, :, None], room[:, :, None, :])              # [A, T, Z, Z']
        edge_type = np.argmax(pair, axis=1)                                    # [A, Z, Z']
        edge = np.max(pair, axis=1)
        edge[:, eye] = 0
        # shortest paths from src: BFS layer by layer, the first parent (lowest zone index) kept
        reach = np.zeros((len(active), nz), dtype=bool)
        reach[np.arange(len(active)), src] = True
        parent = np.full((len(active), nz), -1)
        frontier = reach.copy()
        for _ in range(nz - 1):
            step = frontier[:, :, None] & (edge > 0) & ~reach[:, None, :]     # [A, Z, Z']
            new = step.any(axis=1)
            if not new.any():
                break
            parent = np.where(new, np.argmax(step, axis=1), parent)
            reach |= new
            frontier = new
        target_load = np.where(reach & (load <= m[:, None] - 2), load, np.iinfo(np.int64).max)
        dst = np.argmin(target_load, axis=1)
        ok = target_load[np.arange(len(active)), dst] < np.iinfo(np.int64).max
        if not ok.any():
            break
        rows = np.nonzero(ok)[0]
        k = (m[rows] - load[rows, dst[rows]]) // 2
        # the path's capacity, walking back from dst
        v = dst[rows].copy()
        while True:
            at = v != src[rows]
            if not at.any():
                break
            p = np.where(at, parent[rows, v], v)
            k = np.where(at, np.minimum(k, edge[rows, p, v]), k)
            v = p
        v = dst[rows].copy()
        a = active[rows]
        while True:
            at = v != src[rows]
            if not at.any():
                break
            p = np.where(at, parent[rows, v], v)
            g = edge_type[rows, p, v]
            sel = np.nonzero(at)[0]
            X[a[sel], g[sel], p[sel]] -= k[sel]
            X[a[sel], g[sel], v[sel]] += k[sel]
            v = p
        active = a
    return X[:, ti, zi]


@lru_cache(maxsize=1 << 16)
def least_m_spread(cols: Cols, caps: tuple[int, ...], row: tuple[int, ...]) -> tuple[int, ...] | None:
    """A spread with the row's support (the pools holding >= 1) and per-type totals whose largest zone total is
    the least possible; None when the row's own is already the least. Binary search on the level M, each level
    a feasibility max-flow (types -> zones, pool capacities, zone capacity M; lower bounds 1 on used pools)."""
    zones = sorted({z for z, _ in cols})
    types = sorted({g for _, g in cols})
    zi = [zones.index(z) for z, _ in cols]
    ti = [types.index(g) for _, g in cols]
    per_zone = [0] * len(zones)
    lo_zone = [0] * len(zones)
    for p, n in enumerate(row):
        per_zone[zi[p]] += n
        lo_zone[zi[p]] += 1 if n else 0
    m_row = max(per_zone)
    total = sum(row)
    n_used_zones = sum(1 for x in lo_zone if x)
    lo_m = max(max(lo_zone), -(-total // max(1, n_used_zones)))
    if lo_m >= m_row:
        return None
    best = None
    lo, hi = lo_m, m_row - 1          # the least feasible level in [lo, hi], if any
    while lo <= hi:
        mid = (lo + hi) // 2
        x = _feasible(zi, ti, caps, row, len(zones), len(types), mid)
        if x is None:
            lo = mid + 1
        else:
            best, hi = x, mid - 1
    return best


def _feasible(zi: list[int], ti: list[int], caps: tuple[int, ...], row: tuple[int, ...], nz: int, nt: int,
              level: int) -> tuple[int, ...] | None:
    """A spread with every used pool in [1, cap], unused pools 0, per-type totals of ``row`` and every zone
    total <= ``level``, or None. Lower bounds shifted out: supply d_g - (used pools of g), pool capacity
    cap - 1, zone capacity level - (used pools in the zone); integral max-flow by shortest augmenting paths."""
    used = [p for p, n in enumerate(row) if n]
    supply = [0] * nt
    zone_cap = [level] * nz
    for p in used:
        supply[ti[p]] += row[p] - 1
        zone_cap[zi[p]] -= 1
    if min(zone_cap) < 0:
        return None
    # nodes: 0 source, 1..nt types, nt+1..nt+nz zones, nt+nz+1 sink
    n_nodes = nt + nz + 2
    sink = n_nodes - 1
    cap = [[0] * n_nodes for _ in range(n_nodes)]
    for g in range(nt):
        cap[0][1 + g] = supply[g]
    for p in used:
        cap[1 + ti[p]][1 + nt + zi[p]] += caps[p] - 1
    for z in range(nz):
        cap[1 + nt + z][sink] = zone_cap[z]
    flow = [[0] * n_nodes for _ in range(n_nodes)]
    need = sum(supply)
    got = 0
    while got < need:
        parent = [-1] * n_nodes
        parent[0] = 0
        queue = deque([0])
        while queue and parent[sink] < 0:
            u = queue.popleft()
            for v in range(n_nodes):
                if parent[v] < 0 and cap[u][v] - flow[u][v] > 0:
                    parent[v] = u
                    queue.append(v)
        if parent[sink] < 0:
            return None
        push, v = need - got, sink
        while v != 0:
            u = parent[v]
            push = min(push, cap[u][v] - flow[u][v])
            v = u
        v = sink
        while v != 0:
            u = parent[v]
            flow[u][v] += push
            flow[v][u] -= push
            v = u
        got += push
    out = list(row)
    for p in used:
        out[p] = 1
    # split each (type, zone) flow over that type's used pools in the zone (one pool per (zone, type) column)
    for p in used:
        out[p] += flow[1 + ti[p]][1 + nt + zi[p]]
    return tuple(out)
