"""The exact-priced bound of :mod:`planner.search.mixexact` extended to any layer split, recomputation and the
distributed optimizer.

Contract: :func:`split_space_bound(ctx, cluster, gbs, space)` returns a :class:`planner.search.mixbound.SpaceBound`
whose ``iteration_s`` is < ``simulate(plan, ctx).iteration_time_s`` for EVERY plan that ``simulate`` says fits
and that has: S stages, any contiguous layer split (every stage >= 1 layer, the embedding on stage 0, the head on
stage S - 1), the same D on every stage, one micro-batch size b, each replica a (type, zone, TP) group whose
(b, TP) is an option of ``space`` (default :class:`SearchSpace`, ours), any mix of groups in a stage, any
micro-batch counts, recomputation on or off (plan-wide), the distributed optimizer off, or on where
``space.distributed_optimizer`` holds True (session 15), untied embeddings. docs/PLANNER.md section 7.6 is the
proof.

Method (7.6): a *lifted* chain is a chain whose stage s also picks its layer count n_s; per (S, b, smallest TP
tau) one dynamic program over the stages, with states (group at the stage, layers so far, GPU usage u), gives
per memory class and period level v the smallest fill of any lifted chain with sum n_s = L, every compute <=
grid[v] and usage u. Each chain picks its own split (a relaxation: a plan's chains share one). Compute is the
recomputation-off one (recomputation only adds backward time); a replica may be used in class 1 (counts >= S)
where it fits with S - s in flight, in class m < S where it fits with min(S - s, m) in flight, each with
recomputation off OR on and, where covered, the distributed optimizer over the most replicas the unit allows
(session 15; before it class 0 had no memory mask). The columns and the LP are then those of
:mod:`planner.search.mixexact` (weak duality at the solver's duals, checked over every column). Level v is
credited the smallest compute value above grid[v - 1] (g0 for v = 0: a lower bound on any chain's largest
compute), so a coarser grid only loosens the bound; class 1's grid is as fine as ``MAX_CELLS`` allows, the
classes m < S one level each. The sync + step floor per D is :mod:`planner.search.mixsplit_sync`'s (session 15:
the stage holding the TP-tau replica at its own gradient, the split any composition).
"""
from __future__ import annotations

import heapq
import logging
import math
import time
from dataclasses import dataclass, replace
from itertools import product

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.chaintab import ChainGroups, chain_groups
from planner.search.mixbound import SpaceBound
from planner.search.mixexact import duality_floor, shift_up
from planner.search.mixsplit_sync import split_base
from planner.search.mixtab import REL, MixMemo, pair_p2p
from planner.search.space import SearchSpace
from planner.search.tables import _memory
from planner.search.tasks import Tables, cluster_options
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext

log = logging.getLogger(__name__)
MAX_CELLS = 12_000_000      # levels x groups x (L + 1) x usage vectors per state array (class 1)
COARSE_CELLS = 400_000      # a unit's first table: its floor orders the heap before the fine one is built
MAX_LEVELS = 2000
SPLIT = 4
DIST = True                 # cover the distributed optimizer where the space has it (session 15)
VEC_STAGES = 3              # up to this many stages, units per smallest TP of every stage (session 15)


@dataclass(frozen=True)
class SplitUnit:
    """One (S, b, smallest TP ``tp_min``): ``comp[g, s, n]`` seconds per micro-batch of group g on stage s holding
    n layers (recomputation off; inf where n is not a stage size or g has TP < ``tp_min``), ``fits[g, s, n]`` it
    fits with S - s in flight (class 1: counts >= S), ``fits0[m - 1, g, s, n]`` with min(S - s, m) in flight
    (counts m < S; None: no mask), each with recomputation off or on and, where covered, the distributed
    optimizer over ``d_max`` replicas; ``p2p`` [G, G]; ``base`` [D + 1] the sync + step floor
    (:mod:`planner.search.mixsplit_sync`); ``g0`` a lower bound on every lifted chain's largest compute."""

    s_num: int
    mbs: int
    n_mb: int
    n_layers: int
    grp: ChainGroups
    comp: np.ndarray
    fits: np.ndarray
    p2p: np.ndarray
    base: np.ndarray
    d_max: int
    g0: float
    fits0: np.ndarray | None = None
    tp_min: int = 1
    taus: tuple[int, ...] = (1,)
    work_s: float = 0.0


@dataclass(frozen=True)
class SplitCore:
    """What the units of one (S, b) share, before the smallest TP is fixed: ``comp``, ``params`` and ``upd``
    [G, S, L + 1] (the smallest over windows and recomputation settings) and ``fit_m`` [S, G, S, L + 1]: the
    replica fits with min(S - s, m) in flight (index m - 1, m = 1..S)."""

    grp: ChainGroups
    comp: np.ndarray
    params: np.ndarray
    upd: np.ndarray
    fit_m: np.ndarray


def _rows(n_layers: int, s_num: int, s: int, n: int) -> list[list[int]]:
    """Splits with n layers on stage s, every other stage >= 1, one per first layer ``lo`` stage s can have
    (lo >= s, lo + n <= L - (S - 1 - s)): per-layer times differ between layers, so a stage's compute is taken
    as the smallest over every window of n layers it can hold; its memory and parameters do not depend on which
    layers (``layer_sizes`` and the activation terms are per layer, the same for every layer)."""
    if s_num == 1:
        return [[n_layers]]
    out = []
    lo_min = 0 if s == 0 else (n_layers - n if s == s_num - 1 else s)
    lo_max = 0 if s == 0 else n_layers - (s_num - 1 - s) - n
    for lo in range(lo_min, lo_max + 1):
        row = [1] * s_num
        row[s] = n
        if s > 0:
            row[s - 1] = lo - (s - 1)
        if s < s_num - 1:
            row[-1] = n_layers - lo - n - (s_num - 2 - s)
        out.append(row)
    return out


def split_core(ctx: SimContext, tables: Tables, grp: ChainGroups, s_num: int, mbs: int, space: SearchSpace,
               dist_dp: int | None) -> SplitCore:
    """The (S, b) tables: per group, every row of :func:`_rows` with recomputation off and on; the memory at
    one micro-batch in flight and at S - s (``tables._memory``, affine in between: ``memory_terms``) and, with
    ``dist_dp``, under the distributed optimizer over that many replicas (optimizer states / D, the fine-shard
    ratio >= 1 taken as 1: only less memory)."""
    n_l = ctx.model.num_layers
    n_g = len(grp.names)
    sizes = range(1, n_l - s_num + 2) if s_num > 1 else [n_l]
    rows, where = [], []
    for s in range(s_num):
        for n in sizes:
            for row in _rows(n_l, s_num, s, n):
                where.append((s, n))
                rows.append(row)
    cnt = np.array(rows, dtype=np.int64)
    ws = np.array([w[0] for w in where])
    wn = np.array([w[1] for w in where])
    first = np.arange(s_num) == 0
    last = np.arange(s_num) == s_num - 1
    left = (s_num - np.arange(s_num)).astype(float)
    shape = (n_g, s_num, n_l + 1)
    comp, params, upd = np.full(shape, np.inf), np.full(shape, np.inf), np.full(shape, np.inf)
    fit_m = np.zeros((s_num,) + shape, dtype=bool)
    r_idx = np.arange(len(rows))
    for gi, (g, _, tp) in enumerate(grp.names):
        tt = tables.table(g, tp, mbs)
        cap = tt.usable_bytes * (1 + REL)
        for rec in (False, True):
            a = tables.raw_arrays(g, tp, mbs, cnt, rec)
            np.minimum.at(comp[gi], (ws, wn), a.compute_s[r_idx, ws])
            np.minimum.at(params[gi], (ws, wn), a.params[r_idx, ws])
            np.minimum.at(upd[gi], (ws, wn), a.update_s[r_idx, ws])
            dp = None if dist_dp is None else float(dist_dp)
            ratio = None if dist_dp is None else np.ones(cnt.shape)
            full = _memory(ctx, tt, cnt, a.params, first, last, space.precision, space.optimizer, rec, None, dp,
                           ratio)[r_idx, ws]
            one = _memory(ctx, tt, cnt, a.params, first, last, space.precision, space.optimizer, rec,
                          np.ones(s_num), dp, ratio)[r_idx, ws]
            slope = (full - one) / np.maximum(left[ws] - 1, 1.0)
            for m in range(1, s_num + 1):
                mem = one + (np.minimum(left[ws], m) - 1) * slope
                np.logical_or.at(fit_m[m - 1, gi], (ws, wn), mem <= cap)
    return SplitCore(grp, comp, params, upd, fit_m)


def split_unit(ctx: SimContext, cluster: ClusterSpec, core: SplitCore, gbs: int, s_num: int, mbs: int,
               taus: tuple[int, ...], dist: bool, memo: MixMemo, sync_memo: dict, precision: str) -> SplitUnit | None:
    """The unit of (S, b) and smallest TP ``taus``: (tau,) for the whole plan, or one per stage (None: no group
    of some such TP, or no replica count). Groups of TP below the stage's tau are left out; D <= GPUs / (the
    GPUs one pipeline holds at least: S tau, or the sum of the stages' taus)."""
    grp = core.grp
    n_mb, n_l = gbs // mbs, ctx.model.num_layers
    per_stage = np.array(taus if len(taus) == s_num else taus * s_num)
    d_max = min(n_mb, cluster.total_gpus // int(per_stage.sum()))
    if d_max < 1 or s_num > n_l or not all((grp.tp == t).any() for t in taus):
        return None
    keep = (grp.tp[:, None] >= per_stage[None, :])[:, :, None]          # [G, S, 1]
    comp = np.where(keep, core.comp, np.inf)
    fit_m = core.fit_m & keep[None] & np.isfinite(comp)[None]
    if not fit_m.any():
        return None
    big = -(-n_l // s_num)          # some stage holds >= ceil(L / S) layers
    g0 = float(comp[:, :, big:].min())
    upd = float(np.where(keep, core.upd, np.inf)[:, :, big:].min())
    params = np.where(keep, core.params, np.inf)
    base = split_base(ctx, cluster, grp, params, upd, taus, d_max, memo.rings, dist,
                      F.bytes_per_element(precision), sync_memo)
    if mbs not in memo.p2p:
        memo.p2p[mbs] = pair_p2p(ctx, cluster, grp, mbs, precision)
    return SplitUnit(s_num, mbs, n_mb, n_l, grp, comp, fit_m[-1], memo.p2p[mbs], base, d_max, g0, fit_m[:-1],
                     int(min(taus)), tuple(taus))


def unit_taus(tps: list[int], s_num: int) -> list[tuple[int, ...]]:
    """The smallest-TP keys of the units of S stages: one per stage up to ``VEC_STAGES`` stages (every
    combination), else one for the plan. Every plan has exactly one key."""
    if s_num <= VEC_STAGES:
        return list(product(tps, repeat=s_num))
    return [(t,) for t in tps]


@dataclass(frozen=True)
class SplitTable:
    """``fill1[v, *u]``: the smallest fill of a lifted chain that fits with S - s in flight (class 1, counts >= S)
    with every compute <= ``grid1[v]`` and usage u (inf: none), ``credit1[v]`` the period credited to level v;
    ``fill0[m - 1, *u]`` the same for counts m < S on one level (``grid0`` / ``credit0``, length 1) with the
    mask of m in flight (``SplitUnit.fits0``; none where it is None)."""

    fill0: np.ndarray
    grid0: np.ndarray
    credit0: np.ndarray
    fill1: np.ndarray
    grid1: np.ndarray
    credit1: np.ndarray
    dims: tuple[int, ...]


def _dims(unit: SplitUnit) -> tuple[int, ...]:
    grp = unit.grp
    used = np.zeros(len(grp.caps), dtype=np.int64)
    for g in range(len(grp.names)):
        used[grp.pool[g]] = max(used[grp.pool[g]], int(grp.tp[g]))
    return tuple(int(min(grp.caps[p], unit.s_num * used[p])) + 1 for p in range(len(grp.caps)))


def level_grid(unit: SplitUnit, n_levels: int) -> tuple[np.ndarray, np.ndarray]:
    """(grid, credit): ``grid`` increasing computes ending at the largest; ``credit[v]`` a lower bound on the
    largest compute of every lifted chain with all computes <= grid[v] but not all <= grid[v - 1]: the smallest
    compute value above grid[v - 1] (such a chain has one), and >= g0 (every chain has a stage of >= ceil(L/S)
    layers). The grid is every distinct compute where they are at most ``n_levels``, else quantiles of them."""
    vals = np.unique(unit.comp[np.isfinite(unit.comp)])
    if len(vals) > n_levels:
        vals = vals[np.unique(np.round(np.linspace(0, len(vals) - 1, max(n_levels, 1))).astype(int))]
        vals[-1] = float(unit.comp[np.isfinite(unit.comp)].max())
    allv = np.unique(unit.comp[np.isfinite(unit.comp)])
    credit = np.empty(len(vals))
    credit[0] = unit.g0
    for i in range(1, len(vals)):
        above = allv[allv > vals[i - 1] * (1 + REL)]
        credit[i] = max(unit.g0, float(above[0]) if above.size else vals[i])
    return vals, credit


def _table(unit: SplitUnit, mask: np.ndarray, grid: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """[V, *u] the smallest fill of a lifted chain (L layers in all) of replicas ``mask`` [G, S, L+1] with every
    compute <= grid[v] (relaxed by REL) and usage u: one program over (stage, group, layers so far, usage)."""
    n_g, s_num, n_l = len(unit.grp.names), unit.s_num, unit.n_layers
    n_v = len(grid)
    allowed = mask[None] & (unit.comp[None] <= grid[:, None, None, None] * (1 + REL))          # [V, G, S, L+1]
    nd = len(dims)
    inf = np.inf
    pool, tps = unit.grp.pool, unit.grp.tp

    ubox = (1,) * nd
    cost = np.full((n_v, n_g, n_l + 1) + dims, inf)          # cost[v, g, l, *u]
    for h in range(n_g):
        for n in range(1, n_l + 1):
            ok = allowed[:, h, 0, n]
            if not ok.any():
                continue
            c = np.full((n_v, n_l + 1) + dims, inf)
            c[(slice(None), n) + (0,) * nd] = unit.comp[h, 0, n]
            c = shift_up(c, 2 + int(pool[h]), int(tps[h]))
            c = np.where(ok.reshape(n_v, 1, *ubox), c, inf)
            np.minimum(cost[:, h], c, out=cost[:, h])
    fin = np.isfinite(unit.p2p)
    for s in range(1, s_num):
        last = s == s_num - 1
        new = np.full_like(cost, inf)
        for h in range(n_g):
            ok_h = allowed[:, h, s]                                     # [V, L+1]
            if not ok_h.any():
                continue
            best = np.full((n_v, n_l + 1) + dims, inf)
            for g in np.nonzero(fin[:, h])[0]:
                np.minimum(best, cost[:, g] + 2 * unit.p2p[g, h], out=best)
            best = shift_up(best, 2 + int(pool[h]), int(tps[h]))
            acc = new[:, h]
            for n in range(1, n_l + 1):
                if not ok_h[:, n].any():
                    continue
                okr = ok_h[:, n].reshape(n_v, 1, *ubox)
                if last:        # only l + n = L is kept
                    cand = np.where(okr[:, 0], best[:, n_l - n] + unit.comp[h, s, n], inf)
                    np.minimum(acc[:, n_l], cand, out=acc[:, n_l])
                else:
                    cand = np.where(okr, best[:, :n_l + 1 - n] + unit.comp[h, s, n], inf)
                    np.minimum(acc[:, n:], cand, out=acc[:, n:])
        cost = new
    return cost[:, :, n_l].min(axis=1)


def split_table(unit: SplitUnit, max_cells: int = MAX_CELLS) -> SplitTable:
    """Class 1 on the finest grid ``max_cells`` allows; each count m < S on one level with its own memory mask
    (one table per distinct mask)."""
    dims = _dims(unit)
    n_g, n_l = len(unit.grp.names), unit.n_layers
    per_level = n_g * (n_l + 1) * math.prod(dims)
    n_v = int(max(1, min(MAX_LEVELS, max_cells // per_level)))
    fin = np.isfinite(unit.comp)
    g1, c1 = level_grid(unit, n_v)
    g0, c0 = level_grid(unit, 1)
    fill0 = np.full((max(unit.s_num - 1, 0),) + dims, np.inf)
    done: dict[bytes, np.ndarray] = {}
    for m in range(1, unit.s_num):
        mask = fin if unit.fits0 is None else unit.fits0[m - 1] & fin
        key = mask.tobytes()
        if key not in done:
            done[key] = _table(unit, mask, g0, dims)[0]
        fill0[m - 1] = done[key]
    return SplitTable(fill0, g0, c0, _table(unit, unit.fits & fin, g1, dims), g1, c1, dims)


def counts(unit: SplitUnit, table: SplitTable, t_prime: float) -> np.ndarray:
    """[*dims] the most micro-batches (<= N) any lifted chain of usage u can run within ``t_prime`` (0: none):
    at level v, (m - 1) credit_v + fill <= T' with class 0 for m < S, class 1 for m >= S, and for m > S also
    (m + S - 1) fill / S <= T' (relaxed by REL: counts only over-estimated)."""
    s_num, n_mb = unit.s_num, unit.n_mb
    tp = t_prime * (1 + 1e-11) + 1e-15
    nd = len(table.dims)
    best = np.zeros(table.dims)
    v = float(table.credit0[0])
    for m in range(1, min(s_num, n_mb + 1)):        # class m's own mask, one level
        best = np.maximum(best, np.where(table.fill0[m - 1] * (1 - REL) <= tp - (m - 1) * v, float(m), 0.0))
    if n_mb >= s_num:
        v = table.credit1.reshape(-1, *([1] * nd))
        f = table.fill1
        with np.errstate(invalid="ignore", divide="ignore"):
            m1 = np.floor((tp - f * (1 - REL)) / v * (1 + REL)) + 1
            m2 = np.floor(tp * s_num / (f * (1 - REL)) * (1 + REL) - s_num + 1)
        m2 = np.where(f > 0, m2, np.inf)
        cand = np.minimum(m1, float(n_mb))
        cand = np.where(cand > s_num, np.maximum(float(s_num), np.minimum(cand, m2)), cand)
        ok = np.isfinite(f) & (m1 >= s_num)
        best = np.maximum(best, np.where(ok, cand, 0.0).max(axis=0))
    return best


def _columns(unit: SplitUnit, table: SplitTable, t_prime: float):
    mu = counts(unit, table, t_prime)
    idx = np.argwhere(mu >= 1)
    return idx.astype(float), mu[tuple(idx.T)]


def node_floor(unit: SplitUnit, table: SplitTable, d_lo: int, d_hi: int, t_ref: float, rel: float = 1e-5) -> float:
    """The largest T >= ``t_ref`` found at which weak duality proves no plan with D in [d_lo, d_hi] iterates
    within T (inf: none at any T; proven at t_sat, beyond which no count grows): :func:`mixexact.duality_floor`
    over the lifted columns."""
    base = float(unit.base[d_lo:d_hi + 1].min())
    if not math.isfinite(base):
        return math.inf
    fin = np.concatenate([table.fill0[np.isfinite(table.fill0)], table.fill1[np.isfinite(table.fill1)]])
    if not fin.size:
        return math.inf
    t_sat = (base + (unit.n_mb + unit.s_num) * float(fin.max())) * 1.01 + 1e-9
    return duality_floor(lambda tp: _columns(unit, table, tp), unit.grp.caps, unit.n_mb, base, t_sat, d_lo, d_hi,
                         t_ref, rel)


def work_floor(unit: SplitUnit) -> float:
    """The smallest GPU-seconds one micro-batch costs across the stages of any lifted chain (sum over stages of
    compute x TP, the smallest over groups and over every composition of the L layers), x N / the cluster's
    GPUs: each GPU of a replica of stage s in pipeline j is busy m_j comp_s <= P_j (item 1 of 7.2:
    (m_j - 1) period + fill >= m_j comp_s), so N x that <= (GPUs used) x max_j P_j."""
    w = (unit.comp * unit.grp.tp[:, None, None]).min(axis=0)          # [S, L + 1]
    best = w[0].copy()                                                 # layers so far after stage 0
    for s in range(1, unit.s_num):
        nxt = np.full_like(best, np.inf)
        for n in range(1, unit.n_layers + 1):
            if np.isfinite(w[s, n]):
                nxt[n:] = np.minimum(nxt[n:], best[:unit.n_layers + 1 - n] + w[s, n])
        best = nxt
    return float(best[unit.n_layers]) * unit.n_mb / float(unit.grp.caps.sum())


def cheap_floor(unit: SplitUnit, d_lo: int, d_hi: int) -> float:
    """Some pipeline runs >= ceil(N / D_hi) micro-batches; its period and fill are each >= g0; and the
    work floor (:func:`work_floor`)."""
    return float(unit.base[d_lo:d_hi + 1].min()) + max(math.ceil(unit.n_mb / d_hi) * unit.g0, unit.work_s)


def split_space_bound(ctx: SimContext, cluster: ClusterSpec, gbs: int, space: SearchSpace | None = None,
                      time_limit_s: float | None = 300.0, max_cells: int = MAX_CELLS) -> SpaceBound | None:
    """The bound of the module docstring (None: no unit)."""
    t0 = time.perf_counter()
    space = space or SearchSpace()
    cluster = cluster.nonempty()
    tables = Tables(ctx, replace(space, recompute=(False, True), distributed_optimizer=(False,)))
    options = cluster_options(ctx, cluster, space)
    mbs_all = sorted({m for o in options.values() for m, _ in o if gbs % m == 0})
    max_s = min(ctx.model.num_layers, space.max_stages or ctx.model.num_layers)
    dist = DIST and True in space.distributed_optimizer
    memo, sync_memo = MixMemo(), {}
    units: list[SplitUnit] = []
    tabs: dict[tuple[int, int], SplitTable] = {}
    heap: list = []
    for s_num in range(1, max_s + 1):
        for mbs in mbs_all:
            grp = chain_groups(cluster, options, mbs, ctx)
            d_top = min(gbs // mbs, cluster.total_gpus // s_num)
            if not grp.names or d_top < 1 or s_num > ctx.model.num_layers:
                continue
            core = split_core(ctx, tables, grp, s_num, mbs, space, d_top if dist else None)
            for taus in unit_taus(sorted({int(t) for t in grp.tp}), s_num):
                unit = split_unit(ctx, cluster, core, gbs, s_num, mbs, taus, dist, memo, sync_memo, space.precision)
                if unit is None:
                    continue
                unit = replace(unit, work_s=work_floor(unit))
                units.append(unit)
                heapq.heappush(heap, (cheap_floor(unit, 1, unit.d_max), len(units) - 1, 1, unit.d_max, 0))
    if not heap:
        return None
    cells = (min(COARSE_CELLS, max_cells), max_cells)
    done, complete = 0, True
    while True:
        floor, ui, lo, hi, stage = heapq.heappop(heap)
        unit = units[ui]
        if not math.isfinite(floor):
            break
        if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s:
            complete = False
            break
        done += 1
        if stage < len(cells):      # every table's floor is proven; the fine one is built only where needed
            if (ui, stage) not in tabs:
                tabs[(ui, stage)] = split_table(unit, cells[stage])
            rel = 1e-5 if lo == hi and stage == len(cells) - 1 else (1e-3 if stage else 1e-2)   # coarse: heap order
            f = max(floor, node_floor(unit, tabs[(ui, stage)], lo, hi, floor, rel))
            heapq.heappush(heap, (f, ui, lo, hi, stage + 1))
            continue
        if lo == hi:
            break
        edges = np.unique(np.linspace(lo, hi + 1, SPLIT + 1).astype(int))
        for a, b in zip(edges[:-1], edges[1:] - 1):
            heapq.heappush(heap, (max(floor, cheap_floor(unit, int(a), int(b))), ui, int(a), int(b), len(cells) - 1))
    log.info("split-space bound %.6g s at S=%d b=%d taus=%s D=%d..%d (%d refinements, complete=%s)", floor,
             unit.s_num, unit.mbs, unit.taus, lo, hi, done, complete)
    return SpaceBound(floor, unit.s_num, unit.mbs, lo, hi, complete, done, time.perf_counter() - t0)
