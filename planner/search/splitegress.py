"""Per-class egress of a task's layer splits, as split-dominance criteria (docs/PLANNER.md 2.1, *Split dominance*;
10.8.4).

Under ``grad_sync = "auto"`` each stage of a row over several zones takes the faster of the flat and the
hierarchical ring, whose cross-zone bytes differ, so a stage's egress is not monotone in its bytes and a split's
egress is not a function of its summed bytes. But on one row both modes' egress is linear in the stage's bytes:
``price 2 (n - 1) / n`` times them, n the replicas d (flat) or the zones z (hierarchical), and d >= z. So a split
pays ``c_h F + (c_f - c_h) Phi`` there (F its stages' cross-zone bytes, Phi those of its flat stages, c_f >= c_h >=
0), and a split no larger in F and Phi on every row pays no more egress on any. Which mode a stage takes is read
per *sync class* of the task's rows (rows with the same presence pattern and replicas per zone,
:func:`netvec.same_sync_rows`) and distinct stage (the vector of its per-GPU parameters under each (type, TP) of the
task) from :func:`netvec.stacked_sync_rows` on the byte sizes :func:`pools._row_gradients` gives the class's used
pools: the scorer's own functions on the same numbers. With tied embeddings the shared weight's all-reduce runs in
stage 0's mode (:func:`tiedvec.tied_rows`), so the columns can also hold stage 0's mode per class, both signs (equal
modes: equal tied seconds and egress).
"""
from __future__ import annotations

import logging
from typing import Iterable

import numpy as np

from planner.search.netvec import Group, LinkCache, same_sync_rows, stacked_sync_rows
from planner.search.pools import PoolModel, _row_gradients
from planner.search.rows import int_row_sum

log = logging.getLogger(__name__)

MAX_SYNCS = 30_000       # (sync class, distinct stage) pairs computed at most; beyond: None (the caller's fallback)


def egress_columns(ctx, cache: LinkCache, params: list[np.ndarray], tps: list[tuple[str, int]],
                   rows: Iterable[tuple[np.ndarray, list[tuple[str, str, int]]]], dist_bytes: int | None,
                   tied: bool, max_syncs: int = MAX_SYNCS, max_rows: int = 4 * MAX_SYNCS) -> np.ndarray | None:
    """[K, C] split-dominance columns per split (``params``: per (type, TP) of ``tps`` its [K, S] per-GPU
    parameters), over the rows ``rows`` (chunks of [R, P] rows with their (zone, type, TP) columns: every row the
    task may score): its stages' cross-zone bytes F per distinct byte row of the classes over two or more zones, its
    flat stages' bytes Phi on each such class where the stages' modes differ and d > z, and with ``tied`` stage 0's
    mode (1.0 hierarchical) and its negation on each class where the modes differ. Sums are exact (whole or half
    bytes far below 2^53). Rows in one zone or with one replica pay no egress and sync nothing across zones, whatever
    the split: they give no column. None where the rows exceed ``max_rows`` or the (class, stage) syncs
    ``max_syncs`` (the caller's fallback)."""
    k_n, s_n = params[0].shape
    vec = np.stack(params, axis=-1).reshape(k_n * s_n, len(tps))          # every stage of every split
    vals, inv = np.unique(vec, axis=0, return_inverse=True)
    inv = inv.reshape(k_n, s_n)
    srt = np.sort(inv, axis=1)
    reps, groups, n_rows = [], None, 0
    for D, cols in rows:
        n_rows += len(D)
        if n_rows > max_rows:
            return None
        if groups is None:
            groups = [Group(z, g, tp) for z, g, tp in cols]
            zone_of = np.array([sorted({c[0] for c in cols}).index(c[0]) for c in cols])
        D = D[(_zones_used(D, zone_of) >= 2) & (int_row_sum(D) > 1)]
        if len(D):
            reps.append(D)
    if not reps:
        return np.zeros((k_n, 0))
    D = np.concatenate(reps, axis=0)
    first, _ = same_sync_rows(groups, D)
    if first is not None:
        D = D[first]
    if len(D) * len(vals) > max_syncs:
        log.debug("split egress: %d classes x %d stages over the limit", len(D), len(vals))
        return None
    # one pseudo-pool per column whose "stages" are the distinct stage vectors: the scorer's byte sizes per class
    at = {gt: i for i, gt in enumerate(tps)}
    pools = [PoolModel(group=g, period_s=0.0, fill_s=0.0, gpus_per_pipeline=g.tp, usd_per_s=0.0,
                       params=vals[:, at[(g.gpu_type, g.tp)]], update_s=0.0, bwd_s=np.zeros(len(vals)),
                       times_s=np.zeros(0), p2p_s=0.0) for g in groups]
    grad, full, _, param = _row_gradients(pools, D, dist_bytes)
    syncs = stacked_sync_rows(ctx, cache, groups, D, [(grad[:, v], full[:, v], None if param is None else param[:, v])
                                                      for v in range(len(vals))])
    hier = np.stack([h for _, _, h in syncs], axis=1)                    # [classes, values]
    # on a class each stage pays c_f x its cross-zone bytes flat and c_h x them hierarchical (ring_edge_bytes over
    # the d replicas or the z zones, times one price), c_f >= c_h >= 0 as d >= z: a split's egress there is
    # c_h F + (c_f - c_h) Phi, F its stages' bytes and Phi those of its flat stages. F depends on the class only
    # through the byte sizes of its used pools (one column per distinct row of ``full``); Phi is F or 0 where
    # every stage value takes one mode, or where d = z (c_f = c_h): a column only for the other classes
    both = hier.any(axis=1) & ~hier.all(axis=1)
    mixed = both & (int_row_sum(D) > _zones_used(D, zone_of))
    _, f_first = np.unique(full, axis=0, return_index=True)
    flat_w = np.where(hier, 0.0, full)[mixed]
    if len(flat_w):
        _, m_first = np.unique(np.concatenate([flat_w, hier[mixed]], axis=1), axis=0, return_index=True)
        flat_w = flat_w[m_first]
    cols_out = [_stage_sums(full[np.sort(f_first)], srt), _stage_sums(flat_w, srt)]
    if tied and s_n > 1 and both.any():     # stage 0's mode, where it can differ between splits
        hier0 = hier[both][:, inv[:, 0]].T.astype(float)
        cols_out += [hier0, -hier0]
    return np.concatenate(cols_out, axis=1)


def _zones_used(D: np.ndarray, zone_of: np.ndarray) -> np.ndarray:
    """Per row of ``D`` the number of zones holding a replica (``zone_of``: each column's zone index)."""
    used = np.zeros((len(D), int(zone_of.max()) + 1), dtype=bool)
    for j, z in enumerate(zone_of):
        used[:, z] |= D[:, j] > 0
    return used.sum(axis=1)


def _stage_sums(w: np.ndarray, stages: np.ndarray) -> np.ndarray:
    """[K, C]: per split (``stages``: [K, S] value indices) and class (``w``: [C, V] per class and value) the sum
    of its stages' values (exact: whole or half bytes far below 2^53, so in any order)."""
    out = np.zeros((len(stages), len(w)))
    for s in range(stages.shape[1]):
        out += w[:, stages[:, s]].T
    return out
