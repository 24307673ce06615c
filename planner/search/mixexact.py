"""Exact pricing for the bound on Sailor's whole space (:mod:`planner.search.mixbound`) where the pools are few.

The Lagrangian and fill-table pricings of :mod:`planner.search.mixprice` / :mod:`planner.search.mixdp` only
bound ``max_c (m_c - y . u_c)`` from above, and the column generation feeding them only sees the programs'
minimisers, so on heterogeneous clusters their dual point can stay far from the LP's optimum. Here, instead,
one dynamic program over the stages gives, for every in-flight class k, period level v and GPU usage vector u
(GPUs per pool, each at most the pool's count), the smallest fill of any chain of that class and level using
exactly u: ``minfill[k, v, u]``. It does not depend on the pool prices, so at a makespan T' every usage vector
is one column of the LP ``max sum n_u m_u(T')`` (m_u(T'): the most micro-batches a chain with that usage can
run within T', the largest over the levels) and the LP is solved whole (no column generation). A chain using
more of a pool than the pool holds is in no plan (a plan has >= 1 pipeline of each of its chains), so it is
left out. docs/PLANNER.md section 7.2 item 7 proves it.

The node's floor is then checked by weak duality at the LP's dual point y: ``y . caps + D_hi max(mu, 0) +
D_lo min(mu, 0) < N`` with ``mu = max_u (m_u - y . u)`` over EVERY column (exact, not the solver's word), so
the solver's accuracy never enters the proof. numpy; the LP by scipy's HiGHS (the ``lp`` extra).
"""
from __future__ import annotations

import math
from typing import Callable
from dataclasses import dataclass, replace

import numpy as np

from planner.search.mixcouple import Coupled
from planner.search.mixprice import classes, levels
from planner.search.mixtab import MixUnit, REL

MAX_CELLS = 25_000_000      # usage vectors x groups x levels x classes per stage step: beyond it, no exact table
                            # (10 M before session 20; the chunks of levels keep the memory at CHUNK_CELLS)
CHUNK_CELLS = 10_000_000    # the cells of one chunk of levels computed at once (memory; the values do not depend on it)


@dataclass(frozen=True)
class UsageTable:
    """``fill[k, v, u...]``: the smallest fill (sum of compute + 2 sum of crossings) over chains of in-flight
    class k whose largest compute is level v, using exactly u GPUs of each pool (inf: none); ``dims`` the
    usage range per pool (0..dims - 1)."""

    fill: np.ndarray
    dims: tuple[int, ...]


def _dims(unit: MixUnit) -> tuple[int, ...]:
    """The usage range per pool: 0..min(the pool's GPUs, S x its largest TP)."""
    largest = np.zeros(len(unit.grp.caps), dtype=np.int64)
    np.maximum.at(largest, unit.grp.pool, unit.grp.tp)
    return tuple(int(x) + 1 for x in np.minimum(unit.grp.caps, unit.s_num * largest))


def table_cells(unit: MixUnit) -> int:
    """Cells of one stage step of :func:`usage_table` (classes x levels x groups x 2 x usage vectors)."""
    masks, _ = classes(unit)
    return len(masks) * len(levels(unit)) * len(unit.grp.names) * 2 * math.prod(_dims(unit))


def merged(unit: MixUnit) -> MixUnit:
    """``unit`` with every pool merged into one of all their GPUs (s15b): a plan's pipelines, grouped by their
    chains' total GPU count w, satisfy sum n_w w <= the GPUs of all pools (the sum of the per-pool
    constraints), so the exact LP over this unit's usage table is a relaxation of the unit's (the table's
    cells are the smallest fill over the chains of each total; 7.2 item 7 holds with one pool), at a table
    the size of one pool's."""
    grp = unit.grp
    one = replace(grp, pool=np.zeros_like(grp.pool), caps=np.array([int(grp.caps.sum())], dtype=grp.caps.dtype))
    return replace(unit, grp=one)


def usage_table(unit: MixUnit) -> UsageTable | None:
    """The table, or None where it would be too large (MAX_CELLS). The levels are independent programs
    (a chain's level is its own largest compute), so they are computed in chunks of at most CHUNK_CELLS cells
    per stage step (memory), the same values."""
    if table_cells(unit) > MAX_CELLS:
        return None
    masks, _ = classes(unit)
    lv = levels(unit)
    per_level = table_cells(unit) // max(len(lv), 1)
    step = max(1, CHUNK_CELLS // max(per_level, 1))
    parts = [_usage_fill(unit, masks, lv[i:i + step]) for i in range(0, len(lv), step)]
    return UsageTable(np.concatenate(parts, axis=1), _dims(unit))


def _usage_fill(unit: MixUnit, masks: np.ndarray, lv: np.ndarray) -> np.ndarray:
    """[K, len(lv), *dims] the table's cells at the levels ``lv`` (one dynamic program over the stages)."""
    grp = unit.grp
    n_k, n_v, n_g, s_num = len(masks), len(lv), len(grp.names), unit.s_num
    dims = _dims(unit)
    allowed = masks[:, None] & (unit.comp[None, None] <= lv[None, :, None, None] * (1 + REL))     # [K, V, G, S]
    hit = unit.comp[None] >= lv[:, None, None] * (1 - REL)                                       # [V, G, S]
    inf = np.inf
    shape = (n_k, n_v, n_g, 2) + dims
    cost = np.full(shape, inf)

    def shifted(a: np.ndarray, g: int) -> np.ndarray:
        """``a`` [..., *dims] moved up by group g's usage along its pool's axis (what falls off is dropped)."""
        return shift_up(a, a.ndim - len(dims) + int(grp.pool[g]), int(grp.tp[g]))

    zero = np.full(dims, inf)
    zero[(0,) * len(dims)] = 0.0
    for g in range(n_g):
        start = shifted(zero, g) + unit.comp[g, 0]
        ok = allowed[:, :, g, 0]                                    # [K, V]
        h = hit[:, g, 0]                                            # [V]
        on = ok & h[None]
        off = ok & ~h[None]
        cost[:, :, g, 1] = np.where(on.reshape(n_k, n_v, *([1] * len(dims))), start, inf)
        cost[:, :, g, 0] = np.where(off.reshape(n_k, n_v, *([1] * len(dims))), start, inf)
    fin = np.isfinite(unit.p2p)
    for s in range(1, s_num):
        new = np.full(shape, inf)
        for h in range(n_g):
            ok = allowed[:, :, h, s]
            if not ok.any():
                continue
            best = np.full((n_k, n_v, 2) + dims, inf)
            for g in np.nonzero(fin[:, h])[0]:          # in place: no [.., G, ..] temporary
                np.minimum(best, cost[:, :, g] + 2 * unit.p2p[g, h], out=best)
            best = shifted(best, h) + unit.comp[h, s]
            hs = hit[:, h, s].reshape(1, n_v, *([1] * len(dims)))
            okr = ok.reshape(n_k, n_v, *([1] * len(dims)))
            new[:, :, h, 1] = np.where(okr, np.where(hs, np.minimum(best[:, :, 0], best[:, :, 1]), best[:, :, 1]), inf)
            new[:, :, h, 0] = np.where(okr & ~hs, best[:, :, 0], inf)
        cost = new
    return cost[:, :, :, 1].min(axis=2)


def counts(unit: MixUnit, table: UsageTable, t_prime: float) -> np.ndarray:
    """[*dims] m_u(T'): the most micro-batches (<= N) any chain using exactly u can run within ``t_prime``
    (0: none): a level-v chain of fill f runs m when its class at m allows it (fill[k(m), v, u] <= f),
    (m - 1) v + f <= T' and, for m > S, (m - 1) f / S + f <= T' (the period is >= the round trip from stage 0,
    ``round_trip_bounds``). Every comparison is relaxed (REL), so the counts can only be over-estimated."""
    _, cls = classes(unit)
    lv = levels(unit)
    s_num, n_mb = unit.s_num, unit.n_mb
    tp = t_prime * (1 + 1e-11) + 1e-15
    nd = len(table.dims)
    v = lv.reshape(-1, *([1] * nd))                                                 # [V, 1..]
    best = np.zeros(table.fill.shape[1:])                                           # [V, *dims]
    for m in range(1, min(s_num, n_mb + 1)):                # counts below S: their own class, room T' - (m - 1) v
        f = table.fill[cls[m - 1]]
        best = np.where(f * (1 - REL) <= tp - (m - 1) * v, float(m), best)
    if n_mb >= s_num:                                        # m >= S: the last class, a closed form
        f = table.fill[cls[s_num - 1]]
        with np.errstate(invalid="ignore", divide="ignore"):
            m1 = np.floor((tp - f * (1 - REL)) / v * (1 + REL)) + 1                   # (m - 1) v + f <= T'
            m2 = np.floor(tp * s_num / (f * (1 - REL)) * (1 + REL) - s_num + 1)      # m > S: round trip
        m2 = np.where(f > 0, m2, np.inf)
        cand = np.minimum(m1, float(n_mb))
        cand = np.where(cand > s_num, np.maximum(float(s_num), np.minimum(cand, m2)), cand)
        ok = np.isfinite(f) & (m1 >= s_num)
        best = np.where(ok, np.maximum(best, cand), best)
    return best.max(axis=0)


def _columns(unit: MixUnit, table: UsageTable, t_prime: float, keep: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """The LP's columns at ``t_prime``: usage vectors u [C, P] with m_u >= 1 and their counts m_u [C]; with
    ``keep`` [P] only those using no pool outside it (the chains of a plan of only those pools' types)."""
    if keep is not None and not keep.all():         # zero usage of the other pools
        cut = tuple(slice(None) if k else slice(0, 1) for k in keep)
        table = UsageTable(table.fill[(slice(None), slice(None)) + cut],
                           tuple(d if k else 1 for d, k in zip(table.dims, keep)))
    mu = counts(unit, table, t_prime)
    idx = np.argwhere(mu >= 1)            # the sliced axes have length 1: their usage index is 0
    return idx.astype(float), mu[tuple(idx.T)]


def dual_bound(unit: MixUnit, table: UsageTable, t_prime: float, y: np.ndarray, d_lo: int, d_hi: int) -> float:
    """Weak duality at pool prices ``y`` >= 0: every plan of the node within T' has N <= this. ``mu`` is the
    largest m_u - y . u over every column, and >= -N (the LP's slack column, which only raises the bound)."""
    u, m = _columns(unit, table, t_prime)
    return weak_dual(u, m, y, unit.grp.caps, unit.n_mb, d_lo, d_hi)


def weak_dual(u: np.ndarray, m: np.ndarray, y: np.ndarray, caps: np.ndarray, n_mb: int, d_lo: int,
              d_hi: int) -> float:
    """``y . caps + D mu`` with ``mu`` = max(largest m - u . y over the columns, -N) and D = d_hi if mu >= 0
    else d_lo: >= sum n_u m_u for every feasible n of the LP (weak duality at prices y >= 0)."""
    mu = float(np.max(m - u @ y)) if m.size else -math.inf
    mu = max(mu, -float(n_mb))
    return float(y @ caps) + (d_hi * mu if mu >= 0 else d_lo * mu)


def lp_value(unit: MixUnit, table: UsageTable, t_prime: float, d_lo: int, d_hi: int
             ) -> tuple[float, np.ndarray | None, np.ndarray, np.ndarray]:
    """(LP optimum, pool duals y, weights n, columns u [C, P]) of ``max sum n_u m_u`` s.t. ``sum n_u u <=
    caps``, ``d_lo <= sum n_u <= d_hi``, plus one column using no pool and paying N micro-batches (last in n),
    which keeps the LP feasible when the pools cannot hold d_lo pipelines (None: the solver failed)."""
    u, m = _columns(unit, table, t_prime)
    value, y, x = solve_lp(u, m, unit.grp.caps, unit.n_mb, d_lo, d_hi)
    return value, y, x, u


def solve_lp(u: np.ndarray, m: np.ndarray, caps: np.ndarray, n_mb: int, d_lo: int, d_hi: int
             ) -> tuple[float, np.ndarray | None, np.ndarray]:
    """(optimum, pool duals y >= 0, weights) of ``max sum n_u m_u`` s.t. ``sum n_u u <= caps``, ``d_lo <= sum
    n_u <= d_hi``, n >= 0, over the columns (u, m) plus one using no pool and paying N (last in the weights);
    (-inf, None, []) when the solver fails. scipy's HiGHS, imported lazily (the ``lp`` extra)."""
    from scipy.optimize import linprog
    caps = caps.astype(float)
    u_all = np.vstack([u.reshape(-1, len(caps)), np.zeros((1, len(caps)))])
    m_all = np.append(m, -float(n_mb))
    a_ub = np.vstack([u_all.T, np.ones((1, len(m_all))), -np.ones((1, len(m_all)))])
    b_ub = np.concatenate([caps, [d_hi, -d_lo]])
    res = linprog(-m_all, A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs")
    if res.status != 0:
        return -math.inf, None, np.zeros(0)
    return -res.fun, np.maximum(-res.ineqlin.marginals[:len(caps)], 0.0), res.x


def scalar_y(u: np.ndarray, m: np.ndarray, caps: np.ndarray, n_mb: int, d_lo: int, d_hi: int,
             rounds: int = 4, grid: int = 129) -> np.ndarray:
    """One pool (s15b): a price y >= 0 nearly minimising :func:`weak_dual` (convex and piecewise linear in y):
    the best of a grid over [0, max (m + N) / u] (beyond it every m - y u is <= -N, so the bound only grows),
    refined ``rounds`` times around the best point. Any y >= 0 is a valid dual point, so the search's precision
    only affects how tight the floor is, never its soundness."""
    w = u.reshape(-1)
    if not m.size:
        return np.zeros(1)
    lo, hi = 0.0, float(np.max((m + n_mb) / np.maximum(w, 1e-300)))
    cap = float(caps[0])
    best_y, best = 0.0, math.inf
    for _ in range(rounds):
        ys = np.linspace(lo, hi, grid)
        mu = np.maximum((m[None, :] - ys[:, None] * w[None, :]).max(axis=1), -float(n_mb))
        phi = ys * cap + np.where(mu >= 0, d_hi * mu, d_lo * mu)
        i = int(np.argmin(phi))
        if phi[i] < best:
            best_y, best = float(ys[i]), float(phi[i])
        step = (hi - lo) / (grid - 1)
        lo, hi = max(0.0, ys[i] - step), ys[i] + step
    return np.array([best_y])


def node_floor_exact(unit: MixUnit, table: UsageTable, d_lo: int, d_hi: int, t_ref: float,
                     rel: float = 1e-5, coupled: Coupled | None = None) -> float:
    """The largest T >= ``t_ref`` (a floor already proven; returned if none above is) found by bisection at
    which the LP's dual point PROVES (``dual_bound`` < N (1 - 1e-9)) that no plan with D in [d_lo, d_hi]
    iterates within T; inf where it proves that at a T beyond which no count grows (no plan at any T).
    ``coupled``: only the plans using exactly its GPU types (:mod:`planner.search.mixcouple`): its sync and
    step floors, and columns using only its pools."""
    sync, upd = (unit.sync, unit.upd) if coupled is None else (coupled.sync, coupled.upd)
    keep = None if coupled is None else coupled.keep
    base = float(sync[d_lo:d_hi + 1].min()) + upd
    if not math.isfinite(base):
        return math.inf
    vmax = float(unit.comp[unit.usable].max())
    p2p = unit.p2p[np.isfinite(unit.p2p)]
    # at T' = t_sat every chain of fill <= S (vmax + 2 p2p max) runs as many micro-batches as its class and N
    # allow (both conditions of ``counts``), so the counts no longer grow
    t_sat = (base + (unit.n_mb + unit.s_num) * (vmax + 2 * (float(p2p.max()) if p2p.size else 0.0))) * 1.01 + 1e-9
    return duality_floor(lambda tp: _columns(unit, table, tp, keep), unit.grp.caps, unit.n_mb, base, t_sat, d_lo, d_hi,
                         t_ref, rel)


def duality_floor(columns: Callable[[float], tuple[np.ndarray, np.ndarray]], caps: np.ndarray, n_mb: int,
                  base: float, t_sat: float, d_lo: int, d_hi: int, t_ref: float, rel: float) -> float:
    """A node's floor (:func:`largest_proven`) where T is proven when, at T' = T - ``base`` (the node's sync and
    step floors), weak duality at the LP's duals over ``columns(T')`` (usage u [C, P], counts m [C]) gives
    fewer than N micro-batches (:func:`solve_lp`, :func:`weak_dual`; y = 0 where the solver fails, still a dual
    point). The columns are built once per T."""
    def proven(t: float) -> bool:
        tp = t - base
        if tp <= 0:
            return True
        u, m = columns(tp)
        if len(caps) == 1:          # one pool: the dual is one price, found without the solver
            y = scalar_y(u, m, caps, n_mb, d_lo, d_hi)
        else:
            _, y, _ = solve_lp(u, m, caps, n_mb, d_lo, d_hi)
        if y is None:
            y = np.zeros(len(caps))
        return weak_dual(u, m, y, caps, n_mb, d_lo, d_hi) < n_mb * (1 - 1e-9)

    return largest_proven(proven, max(t_ref, base), t_sat, t_ref, rel)


def largest_proven(proven: Callable[[float], bool], lo: float, t_sat: float, t_ref: float, rel: float) -> float:
    """The search for a node's floor, given ``proven(T)`` (weak duality proves no plan of the node iterates
    within T; monotone: proven at T implies proven below): inf when proven at ``t_sat`` (beyond which no count
    grows), ``t_ref`` when not proven at ``lo``, else a T >= ``t_ref`` proven, within relative ``rel`` of the
    largest such (upwards by squaring steps from 1.05, since the floor is usually a little above ``t_ref``, then
    bisection)."""
    if proven(t_sat):
        return math.inf
    hi = t_sat
    if not proven(lo):
        return t_ref
    step = 1.05
    while lo * step < hi:
        if not proven(lo * step):
            hi = lo * step
            break
        lo, step = lo * step, step * step
    while hi - lo > rel * hi:
        mid = math.sqrt(lo * hi) if lo > 0 else 0.5 * hi
        if proven(mid):
            lo = mid
        else:
            hi = mid
    return max(lo, t_ref)


def shift_up(a: np.ndarray, ax: int, t: int) -> np.ndarray:
    """``a`` moved up by ``t`` along axis ``ax`` (a usage axis: ``t`` more GPUs of that pool), inf shifted in and
    what falls off the end dropped."""
    out = np.full_like(a, np.inf)
    if t >= a.shape[ax]:
        return out
    src = [slice(None)] * a.ndim
    dst = [slice(None)] * a.ndim
    src[ax] = slice(0, a.shape[ax] - t)
    dst[ax] = slice(t, None)
    out[tuple(dst)] = a[tuple(src)]
    return out
