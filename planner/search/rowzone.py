"""Zone-aware row sync and egress floors of a pool task (docs/PLANNER.md 2.6, round 4, session 13, helper s13v).

A row of a pool task puts every pipeline in one pool, so its stages' replicas (and the tied all-reduce's first and
last stage replicas) span exactly the zones the row uses, z_row. The task bound's sync floor per total pipeline
count d (``taskbound.task_bound``'s ``by_d``) takes the intra-zone ring wherever one zone can host d pipelines;
a row spanning z_row >= 2 zones cannot use it: every stage ring holds a cross-zone pair (flat) or spans exactly
z_row zones (hierarchical), so :func:`syncbound.sync_lower_bound`'s argument holds with its fewest zones raised
to z_row (:func:`zone_sync_table`).

The same rows pay egress: each stage with d >= 2 replicas over z_row >= 2 zones has z_row cross-zone ring edges
(``time._ring_cross_bytes``, flat or hierarchical), each carrying 2 (n - 1) / n >= 1 times the stage's moved
bytes (n >= 2), so the row's egress is >= z_row x (sum over stages of the moved bytes) x the least egress price
between two of the task's zones (:func:`egress_floor`).

Contract: ``zone_sync_table(...)[z, d]`` is <= the sync term ``task_bound`` adds for every plan of the task
with d pipelines over z zones (z >= 1); :func:`egress_floor` x z is <= the egress of every such plan with z >= 2.
"""
from __future__ import annotations

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.caps import caps_for, task_dmax
from planner.search.netvec import LinkCache
from planner.search.syncbound import sync_lower_bounds
from planner.simulator import formulas as F
from planner.simulator.tied import _vocab_shard_params

ZONE_SYNC = True        # the zone-aware row floors (False: off, tests only)
SCALE = 1.0             # x the floors (tests only: > 1 inflates them)


def zone_sync_table(ctx, cluster: ClusterSpec, tables, cache: LinkCache, task, n_mb: int) -> np.ndarray | None:
    """[Z + 1, d_max + 1]: per zone count z (row 0 unused: 0) and total pipeline count d, ``task_bound``'s sync
    term (stage ring + tied all-reduce, the distributed optimizer's factor) for plans spanning >= z zones; None
    when no split fits."""
    combo, s_num = task.tps, task.num_stages
    fits = tables.task_fits(combo, task.mbs, s_num, task.recompute, task.dist, task_dmax(cluster, combo, s_num, n_mb))
    if not fits.any():
        return None
    stats = [tables.split_stats(g, t, task.mbs, s_num, task.recompute) for g, t in combo]
    per_split = np.max([st.params_max[fits] for st in stats], axis=0)
    grad = F.grad_bytes(float(per_split.min()))
    cap = sum(c for g, t in combo for _, c in caps_for(cluster, g, t, s_num))
    d_hi = max(min(cap, n_mb), 1)
    d = np.arange(1, d_hi + 1, dtype=float)
    zones = sorted({z for g, t in combo for z, _ in caps_for(cluster, g, t, s_num)})
    out = np.zeros((len(zones) + 1, d_hi + 1))
    zns = tuple(range(1, len(zones) + 1))
    # sync_lower_bound raised to every zone count z_min: one sync_lower_bounds call for all of them
    stage = sync_lower_bounds(cluster, combo, s_num, grad, d, cache, 1, zns) \
        if ctx.settings.dp_sync_waits_for_all else None
    tied_all = None
    if tables.space.tie_embeddings and s_num >= 2:
        tied = 4.0 * _vocab_shard_params(ctx.model, min(t for _, t in combo))
        tied_all = sync_lower_bounds(cluster, combo, s_num, tied, d, cache, 2, zns)
    for zn in zns:
        sync = np.zeros(len(d))
        if stage is not None:
            sync = sync + stage[zn - 1]
        if tied_all is not None:
            sync = sync + tied_all[zn - 1]
        if task.dist:
            sync = sync * (1 - 1e-12 if tables.space.precision == "fp32" else 0.5)
        out[zn, 1:] = sync
    return out


def egress_floor(ctx, cluster: ClusterSpec, tables, task, n_mb: int) -> float:
    """Dollars per cross-zone ring edge of every plan of the task over >= 2 zones: the least over its fitting
    splits of the summed moved bytes of its stages (all shards; the distributed optimizer: the mean of the fp32
    gradient and the model-dtype parameters), times the least egress price between two of its zones."""
    combo, s_num = task.tps, task.num_stages
    zones = sorted({z for g, t in combo for z, _ in caps_for(cluster, g, t, s_num)})
    if len(zones) < 2:
        return 0.0
    price = min(ctx.network.egress_usd_per_byte(a, b) for a in zones for b in zones if a != b)
    fits = tables.task_fits(combo, task.mbs, s_num, task.recompute, task.dist, task_dmax(cluster, combo, s_num, n_mb))
    if not fits.any() or price <= 0:
        return 0.0
    full = np.max([tables.arrays(g, t, task.mbs, s_num, task.recompute).params[fits] * t for g, t in combo],
                  axis=0)                                                       # [splits, S] params x tp
    moved = F.grad_bytes(full)
    if task.dist:
        moved = (moved + full * F.bytes_per_element(tables.space.precision)) / 2
    return float(moved.sum(axis=1).min()) * price * (1 - 1e-9)


def row_zones(D: np.ndarray, cols: list) -> np.ndarray:
    """[R] the number of zones each row uses (``cols``: (zone, type, TP) per column)."""
    zones = sorted({c[0] for c in cols})
    out = np.zeros(len(D), dtype=np.int64)
    for z in zones:
        idx = [j for j, c in enumerate(cols) if c[0] == z]
        out += (D[:, idx].sum(axis=1) > 0)
    return out


def zone_terms(ctx, cluster: ClusterSpec, tables, cache: LinkCache, task, n_mb: int) -> tuple[np.ndarray, float] | None:
    """(:func:`zone_sync_table`, :func:`egress_floor`) of the task, memoised in ``tables.memo``; None when the
    task's pools lie in one zone or the floors are off."""
    if not ZONE_SYNC:
        return None
    key = ("row-zone", task.tps, task.mbs, task.num_stages, task.recompute, task.dist, n_mb)
    if key not in tables.memo:
        zones = {z for g, t in task.tps for z, _ in caps_for(cluster, g, t, task.num_stages)}
        table = zone_sync_table(ctx, cluster, tables, cache, task, n_mb) if len(zones) > 1 else None
        tables.memo[key] = None if table is None else (table, egress_floor(ctx, cluster, tables, task, n_mb))
    return tables.memo[key]


def zone_row_terms(terms: tuple, D: np.ndarray, cols: list, zt: tuple[np.ndarray, float], total: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(sync floor, egress floor) per row: the max of the task's sync floor ``terms[0]`` (None: 0) and the zone
    table at the row's zone count and total, and the zone count x the egress per edge on rows over >= 2 zones."""
    table, per_edge = zt
    z = row_zones(D, cols)
    ok = total < table.shape[1]
    zs = table[np.minimum(z, table.shape[0] - 1), np.where(ok, total, 0)] * SCALE
    zs = np.where(ok, zs, 0.0)
    slb = zs if terms[0] is None else np.maximum(terms[0], zs)
    egress = np.where(z >= 2, z * per_edge * SCALE, 0.0)
    return slb, egress
