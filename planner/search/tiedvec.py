"""Vectorised tied-embedding all-reduce of pool rows: a numpy mirror of
:func:`planner.simulator.tied.tied_sync_of_replicas` (the rule's one implementation; this module only evaluates
it for many rows at once and is tested equal to it on random rows, tests/planner/test_search_tiedvec.py).

A pool plan's first and last stages hold the same replica list: ``D[r, c]`` replicas of pool column ``c``, in
column order. The simulator sums the shared weight's gradient over that list twice (first + last stage), so
its ring is the list followed by itself: ``2 d`` members, each zone's members doubled, the same zone leaders.
Which endpoint pairs that ring holds depends only on which columns are present and which hold two or more
replicas (as in :mod:`planner.search.netvec`), except that a column alone in its ring (or in its zone's ring)
always meets itself (its copy in the second half follows it). Each ring's time is the largest of its present
pairs' ring times at the same sizes (the simulator's slowest-link-by-time rule), so per row the time and egress
equal the simulator's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.search.netvec import Group, LinkCache, _Rings, _ring
from planner.search.rows import int_row_sum, sorted_unique, unique_first
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext
from planner.simulator.tied import _vocab_shard_params


@dataclass(frozen=True)
class _TiedPattern:
    """Ring structure of the doubled replica list for one presence pattern (0, 1, >= 2 per column)."""

    flat: dict[tuple[int, int], int]
    zones: list[tuple[list[int], dict[tuple[int, int], int]]]
    leaders: dict[tuple[int, int], int]
    n_zones: int
    edge_prices: tuple[float, ...]       # USD per byte of each edge of a zone-ordered ring, in the simulator's order
    conc: int                            # the smallest TP present


def _doubled_ring(cols: list[int], key: np.ndarray) -> dict[tuple[int, int], int]:
    return _ring(cols, [bool(key[c] >= 2) or len(cols) == 1 for c in cols])


def _tied_pattern(ctx: SimContext, groups: list[Group], key: np.ndarray) -> _TiedPattern:
    cols = [i for i in range(len(groups)) if key[i] > 0]
    zones = sorted({groups[i].zone for i in cols})
    per_zone = []
    for z in zones:
        zc = [c for c in cols if groups[c].zone == z]
        per_zone.append((zc, _doubled_ring(zc, key)))
    leaders = [zc[0] for zc, _ in per_zone]
    nz = len(zones)
    prices = tuple(ctx.network.egress_usd_per_byte(zones[i], zones[(i + 1) % nz]) for i in range(nz)) \
        if nz > 1 else ()
    return _TiedPattern(_doubled_ring(cols, key), per_zone, _ring(leaders, [False] * nz), nz, prices,
                        min(groups[i].tp for i in cols))


def tied_rows(ctx: SimContext, cache: LinkCache, groups: list[Group], D: np.ndarray, hier0: np.ndarray,
              dist_bytes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, USD) per row of ``D`` ([R, P] replicas per pool column) of the tied all-reduce of a plan of
    several stages whose first and last stages both hold the row's replica list (column by column), synced
    hierarchically where ``hier0`` (stage 0's mode), else flat: ``TiedSync._price`` of every row at once."""
    t, usd = np.zeros(len(D)), np.zeros(len(D))
    if len(D) == 0:
        return t, usd
    D = np.asarray(D, dtype=np.int64)
    key = np.minimum(D, 2) @ (3 ** np.arange(D.shape[1], dtype=np.int64))
    first, inv = unique_first(key)
    inv = inv.reshape(-1)
    codes = key[first]
    keys = (codes[:, None] // (3 ** np.arange(D.shape[1], dtype=np.int64))[None, :]) % 3
    gkey = ("tied", tuple(groups))
    pats: list[_TiedPattern | None] = []
    for code, k in zip(codes.tolist(), keys):
        if not k.any():
            pats.append(None)
            continue
        if (gkey, code) not in cache.patterns:
            cache.patterns[(gkey, code)] = _tied_pattern(ctx, groups, k)
        pats.append(cache.patterns[(gkey, code)])
    conc = np.array([p.conc if p is not None else 0 for p in pats])
    for c in sorted_unique(conc[conc > 0]):
        rows = np.nonzero(conc[inv] == c)[0]
        sub = sorted(set(inv[rows].tolist()))
        remap = np.full(len(pats), -1)
        remap[sub] = np.arange(len(sub))
        t[rows], usd[rows] = _tied_conc(ctx, _Rings(cache, groups, int(c)), [pats[k] for k in sub],
                                        remap[inv[rows]], D[rows], np.asarray(hier0, dtype=bool)[rows], int(c),
                                        dist_bytes)
    return t, usd


def _tied_conc(ctx: SimContext, ch: _Rings, pats: list[_TiedPattern], inv: np.ndarray, D: np.ndarray,
               hier0: np.ndarray, tp: int, dist_bytes: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose smallest TP is ``tp`` (planner.simulator.tied's byte counts, zone_aware_sync's rings)."""
    shard = _vocab_shard_params(ctx.model, tp)
    nbytes = 4.0 * shard
    n = 2 * int_row_sum(D)
    grad = np.full(len(D), nbytes)
    if dist_bytes is None:
        param, moved = None, nbytes * tp
    else:
        pb = float(shard * dist_bytes)
        param, moved = np.full(len(D), pb), (nbytes + pb) * tp / 2
    flat = ch.ring([p.flat for p in pats], inv, n, grad, param)
    nz = np.array([p.n_zones for p in pats])[inv]
    hier = hier0 & (nz > 1)
    t = flat.copy()
    if np.any(hier):
        inner = np.zeros(len(D))
        for zi in range(max(p.n_zones for p in pats)):
            ranks = [p.zones[zi][1] if zi < p.n_zones else {} for p in pats]
            w = np.zeros((len(pats), D.shape[1]))
            for k, p in enumerate(pats):
                if zi < p.n_zones:
                    w[k, p.zones[zi][0]] = 1.0
            members = 2 * (D * w[inv]).sum(axis=1)
            if param is None:
                t_in = F.zone_reduce_broadcast_s(ch.ring(ranks, inv, members, grad))
            else:
                t_in = ch.ring(ranks, inv, members, grad, param, (2, 1))
            inner = np.maximum(inner, t_in)
        cross = ch.ring([p.leaders for p in pats], inv, nz, grad, param)
        # the simulator prices the flat ring first: a size refused there raises even when hierarchical
        t = np.where(np.isinf(flat), np.inf, np.where(hier, inner + cross, flat))
    per_edge = np.where(hier, F.ring_edge_bytes(nz, moved), F.ring_edge_bytes(n, moved))
    usd = np.zeros(len(D))
    for k in range(max(p.n_zones for p in pats)):       # the simulator's sum, edge by edge in its order
        price = np.array([p.edge_prices[k] if k < len(p.edge_prices) else 0.0 for p in pats])[inv]
        usd = np.where(nz > 1, usd + per_edge * price, usd)
    return t, usd
