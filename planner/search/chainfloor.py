"""A lower bound on every chain of one (depth, micro-batch size, recomputation, distributed optimizer) unit and
segment count, without enumerating its cuts (docs/PLANNER.md 2.1, *chain unit floor*).

Contract: :func:`unit_floors` returns, per segment count n, a value <= the key (``iterate_d``'s, at every D)
of every chain plan of n segments of the unit; ``search_chains`` skips n when it exceeds the threshold.
The iteration term is :func:`iteration_floor` (2.1, *chain iteration floor*): per largest-compute level, the
replica count the pools allow (dual weights on the pool shares) and the compute priced with the GPUs.
Cost: O(Y K G S) array work for the iteration term (Y dual weights, K levels); when the key ignores dollars
and that term is above the threshold nothing else; otherwise a dynamic programme over (stage, group,
segments), O(S G^2 n), once, plus once per largest-compute level whose cheap bound reaches the threshold (at
most ``MAX_LEVELS``; none when the key ignores dollars).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from planner.search.chaintab import ChainGroups, StageTab
from planner.search.chainbudget import budget_floor, run_dmax, stage0_floor
from planner.search.chainvalue import min_d_a2
from planner.search.rows import sorted_unique
from planner.search.space import Objective

SAFETY = 1 - 1e-9       # absorbs the rounding of sums taken in another order than the scores'
MAX_LEVELS = 16         # largest-compute levels given the dynamic programme (the others: their cheap bound)
SEG_FLOOR = True        # per segment count n, u >= (1 / n) sum_s min_g tp / cap (2.6, round 3); False: off (tests)
SEG_SLACK = 1.0         # x n in that bound (> 1 weakens it; < 1 inflates it: tests only)
BUDGET = 1.0            # x the pool-budget floor (chainbudget, 2.6 round 3); 0: off (tests only)
STAGE0 = 1.0            # x the stage-0-coupled budget floor (chainbudget.stage0_floor); 0: off (tests only)
RUN_COVER = True        # per segment count, the run-cover bound on D (chainbudget.run_dmax, 2.6 round 3)
RUNS = 1.0              # x that bound (< 1 inflates the floors: tests only)
IT_FLOOR = 1.0          # x it_T as a floor on a_T(D) at every D (2.6, session 11 round 2); 0: off (tests only)


def _min_paths(w: np.ndarray, e: np.ndarray, max_seg: int) -> np.ndarray:
    """[K, max_seg + 1]: per weight table w [K, G, S] the smallest sum of w along a group sequence plus e[h, g]
    per change h -> g (h != g), per exact number of segments (runs)."""
    k_num, n_g, s_num = w.shape
    f = np.full((k_num, max_seg + 1, n_g), np.inf)                   # f[., k, g]: stages 0..s, k runs, s on g
    f[:, 1] = w[:, :, 0]
    for s in range(1, s_num):
        new = np.full_like(f, np.inf)
        for k in range(1, min(max_seg, s + 1) + 1):
            move = (f[:, k - 1, :, None] + e[None]).min(axis=1) if k >= 2 else np.inf
            new[:, k] = w[:, :, s] + np.minimum(f[:, k], move)
        f = new
    return f.min(axis=2)

@lru_cache(maxsize=64)
def _dual_weights(caps: tuple[int, ...]) -> np.ndarray:
    """[Y, P]: points of the simplex over the pools (each a valid dual weight for the pool-share bound)."""
    p_num = len(caps)
    cap = np.array(caps, dtype=float)
    pts = [np.eye(p_num), np.full((1, p_num), 1.0 / p_num), (cap / cap.sum())[None]]
    if p_num == 2:
        t = np.linspace(0.0, 1.0, 17)[1:-1]
        pts.append(np.column_stack([t, 1 - t]))
    elif p_num <= 6:
        a, b = np.triu_indices(p_num, 1)
        for t in (0.25, 0.5, 0.75):
            y = np.zeros((len(a), p_num))
            y[np.arange(len(a)), a], y[np.arange(len(a)), b] = t, 1 - t
            pts.append(y)
    out = np.concatenate(pts)
    out.flags.writeable = False
    return out


def _group_terms(grp: ChainGroups) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None, np.ndarray,
                                              np.ndarray]:
    """(per group its share of its pool tp / cap [G], per used pool (ascending) its groups' mask, where the pools
    are non-decreasing over the groups (:func:`chain_groups` lists them pool by pool) each used pool's first group
    (else None), the dual weights of the used pools [Y, P'] and of each group's pool [Y, G]) of
    :func:`iteration_levels`: fixed per group list, so computed once and kept on it (``grp.memo``)."""
    got = grp.memo.get("iteration-terms")
    if got is None:
        dual = _dual_weights(tuple(int(c) for c in grp.caps))
        pools = sorted_unique(grp.pool)
        runs = len(grp.pool) and bool((np.diff(grp.pool) >= 0).all())
        starts = np.searchsorted(grp.pool, pools, side="left") if runs else None
        got = grp.memo["iteration-terms"] = (grp.tp / grp.caps[grp.pool], [grp.pool == p for p in pools], starts,
                                             dual[:, pools], dual[:, grp.pool])
    return got


def iteration_floor(tab: StageTab, grp: ChainGroups, n_mb: int, coupled: bool = True,
                    threshold: float = np.inf) -> float:
    """The smallest over levels of :func:`iteration_levels` (inf: no chain fits)."""
    lv = iteration_levels(tab, grp, n_mb, coupled, threshold)
    return np.inf if lv is None else float(lv[1].min())


def iteration_levels(tab: StageTab, grp: ChainGroups, n_mb: int, coupled: bool = True, threshold: float = np.inf,
                     n_seg: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """A lower bound on the iteration (every D) of every chain plan of the unit (any segment count): per level
    T of the largest stage compute, ``(ceil(N / D_max) - 1) P + fill + step`` with D_max the replica count the
    smallest pool share allows, P >= T and fill >= max(T, summed compute) + the smallest crossings
    (docs/PLANNER.md 2.1, *chain iteration floor*); ``coupled``: per level also the larger Lagrangian bound
    ``-T + sum_s min_g (N T y f_g + comp)`` + crossings + step (False: left out, for the tests), computed
    only on the levels whose first bound is <= ``threshold`` (the others keep it: tightness, not validity).
    Returns per level T (ascending, [K]): T, the level's iteration bound, its replica bound D_max and
    ``fill + step`` (so every chain of the level has iteration >= (N / D - 1) T + fill + step at every D <=
    D_max: 2.6); None when some stage fits on no group. ``n_seg``: the bounds hold for the chains of exactly
    ``n_seg`` segments only, which also have u >= (1 / n_seg) sum_s min_g tp_g / cap_g (each segment lies in one
    pool, so the largest pool share is >= the largest segment's share >= their mean: 2.6, round 3), a smaller
    D_max and a Lagrangian weight 1 / n_seg on every pool."""
    comp = np.where(tab.fits, tab.comp, np.inf)                                # [G, S]
    if not np.isfinite(comp).any(axis=0).all():
        return None
    levels = sorted_unique(comp[np.isfinite(comp) & (comp >= comp.min(axis=0).max())])        # [K]
    hidden = comp[None] > levels[:, None, None]                               # [K, G, S]: not allowed
    f_g, masks, starts, y, y_g = _group_terms(grp)
    frac = np.where(hidden, np.inf, f_g[None, :, None])                       # (selections: the same values)
    if starts is None:
        by_pool = np.stack([frac[:, m].min(axis=1) for m in masks])           # [P', K, S] (used pools)
    else:       # each pool's groups in one run: the same minima in one call, laid out as the stack above
        by_pool = np.ascontiguousarray(np.minimum.reduceat(frac, starts, axis=1).transpose(1, 0, 2))
    with np.errstate(invalid="ignore"):         # 0 x inf: a pool without an allowed group is left out
        terms = y[:, :, None, None] * by_pool[None]
    terms[np.isnan(terms)] = np.inf
    share = terms.min(axis=1).sum(axis=2).max(axis=0)                         # [K]
    u_low = np.maximum(share, frac.min(axis=1).max(axis=1))                   # [K]
    if n_seg is not None:       # n_seg segments, one pool each: u >= the mean segment share (2.6, round 3)
        u_low = np.maximum(u_low, frac.min(axis=1).sum(axis=1) / (n_seg * SEG_SLACK))
    with np.errstate(divide="ignore"):
        d_max = np.floor((1.0 + 1e-9) / u_low)                              # 0: no replica fits
        if n_seg is not None and RUN_COVER:     # n_seg runs, each within its pool's capacity (2.6, round 3)
            d_max = np.minimum(d_max, np.floor(RUNS * run_dmax(~hidden, grp.tp, grp.caps[grp.pool], n_seg, d_max)))
        m_low = np.where(d_max >= 1, np.ceil(n_mb / np.maximum(d_max, 1.0)), np.inf)
    comp_k = np.where(hidden, np.inf, comp[None])                             # [K, G, S] allowed compute
    c_sum = comp_k.min(axis=1).sum(axis=1)
    upd_k = np.where(hidden, np.inf, tab.upd_floor[None])
    step = upd_k.min(axis=1).max(axis=1)
    s_num = comp.shape[1]
    p2p = float(tab.p2p.min()) if tab.p2p is not None and s_num > 1 else 0.0    # one crossing, every pair
    fill = np.maximum(levels, c_sum) + 2 * (s_num - 1) * p2p
    period = np.where(m_low >= s_num + 1, np.maximum(levels, fill / s_num), levels)
    it = (m_low - 1) * period + fill + step
    if not coupled:
        return levels, it, d_max, fill + step
    # coupled: (m - 1) T + C_g >= (N u - 1) T + C_g >= -T + sum_s min_g (N T y_p(g) f_g + comp_g,s) for every y
    near = np.flatnonzero(~(it * SAFETY > threshold))
    if len(near) == 0:
        return levels, it, d_max, fill + step
    if n_seg is not None:       # u >= (1 / n_seg) sum_s f_s for chains of n_seg segments (2.6, round 3)
        y_g = np.concatenate([y_g, np.full((1, len(f_g)), 1.0 / (n_seg * SEG_SLACK))])
    price = (n_mb * levels[near])[None, :, None, None] * (y_g * f_g[None])[:, None, :, None]   # [Y, K', G, 1]
    lagrange = (price + comp_k[near][None]).min(axis=2).sum(axis=2).max(axis=0)              # [K']
    it[near] = np.maximum(it[near], lagrange - levels[near] + 2 * (s_num - 1) * p2p + step[near])
    return levels, it, d_max, fill + step


def unit_floors(tab: StageTab, grp: ChainGroups, n_mb: int, objective: Objective, max_seg: int,
                threshold: float = np.inf, extra: bool = False) -> np.ndarray:
    """[max_seg + 1]: entry n (n >= 2) bounds the key of every chain plan of exactly n segments (every D)
    from below (inf: no chain fits). ``threshold`` only chooses which levels get the dynamic programme.

    Let C be the summed smallest fitting compute, U the largest over stages of the smallest fitting step,
    R = sum_s tp_s usd_s a chain's rate and T its largest stage compute. Its period P >= T and fill >=
    max(T, C), so its GPU dollars D R ((ceil(N / D) - 1) P + fill + step) >= R ((N - 1) T + max(T, C) + U)
    (fill >= P makes the bracket non-decreasing in D); its egress is N x the sum over its group changes.
    (a) T >= M, the largest over stages of the smallest fitting compute, and T >= comp_s: the dollars are
    >= sum_s tp_s usd_s ((N - 1) max(comp_s, M) + C + U). (b) Per level T among the fitting compute values:
    every stage runs on a group with comp <= T, weight tp usd ((N - 1) T + max(T, C) + U); a chain belongs
    to the level of its T, so the smallest over levels bounds it; a level's cheap bound drops the egress and
    takes each stage's cheapest allowed group. Each minimised over the chains of n segments by a dynamic
    programme; the floor is the larger of (a) and (b). Its iteration: :func:`iteration_floor` (>= the earlier
    max(N M g / n_all, C) + the largest over stages of the smallest step floor, g: the summed smallest
    fitting TP, n_all: every GPU)."""
    fits = tab.fits                                                  # [G, S]
    n_g, s_num = fits.shape
    out = np.full(max_seg + 1, np.inf)
    if n_g < 2 or not fits.any(axis=0).all():
        return out
    it = iteration_floor(tab, grp, n_mb, threshold=threshold)     # >= max(N M g / n_all, C) + step floor (2.1)
    ignores_usd = objective.key(1.0, 1.0) == objective.key(1.0, 2.0)
    if ignores_usd and objective.key(it, 0.0) * SAFETY > threshold:     # every n skipped: no programme needed
        out[2:] = objective.key(it, 0.0) * SAFETY
        return out
    comp = np.where(fits, tab.comp, np.inf)
    comp_min = comp.min(axis=0)                                      # [S]
    m_low, c_low = comp_min.max(), comp_min.sum()
    u_low = np.where(fits, tab.upd, np.inf).min(axis=0).max()
    rate = (grp.tp * grp.usd_per_s)[:, None]                         # [G, 1]
    e = np.where(np.eye(n_g, dtype=bool), np.inf, tab.egress)       # [G (from), G (to)]: a change of group
    per_s = (n_mb - 1) * np.maximum(tab.comp, m_low) + c_low + u_low
    base = n_mb * _min_paths(np.where(fits, rate * per_s / n_mb, np.inf)[None], e, max_seg)[0]
    if ignores_usd:      # the key ignores dollars: (a) only for finiteness
        with np.errstate(invalid="ignore"):
            out[2:] = np.where(np.isfinite(base[2:]), objective.key(it, base[2:]) * SAFETY, np.inf)
        return out
    levels = sorted_unique(comp[np.isfinite(comp) & (comp >= m_low)])                   # [K]
    per_t = (n_mb - 1) * levels + np.maximum(levels, c_low) + u_low                   # [K]
    allowed = comp[None] <= levels[:, None, None]                                      # [K, G, S]
    cheap = np.where(allowed, rate[None], np.inf).min(axis=1).sum(axis=1) * per_t     # [K]
    with np.errstate(invalid="ignore"):
        near = np.nonzero(np.isfinite(cheap) & (objective.key(it, cheap) * SAFETY <= threshold))[0]
    near = near[np.argsort(cheap[near], kind="stable")[:MAX_LEVELS]]
    by_level = np.repeat(cheap[:, None], max_seg + 1, axis=1)                          # [K, max_seg + 1]
    if len(near):
        w = np.where(allowed[near], rate[None] * (per_t[near] / n_mb)[:, None, None], np.inf)
        by_level[near] = n_mb * _min_paths(w, e, max_seg)
    cost = np.maximum(base, by_level.min(axis=0, initial=np.inf))
    with np.errstate(invalid="ignore"):
        key = np.where(np.isfinite(cost), objective.key(it, cost) * SAFETY, np.inf)
    if objective.kind == "value":       # per level, time and dollars of the same chains and D (2.6)
        sync0 = None if tab.sync is None else tab.sync[:, 0, :]     # a tab with the sync table: 2.6
        for n in (range(2, max_seg + 1) if SEG_FLOOR else (None,)):   # per segment count (2.6, round 3)
            lv = iteration_levels(tab, grp, n_mb, threshold=threshold, n_seg=n)
            if lv is not None and len(lv[0]) == len(levels):
                vf = np.broadcast_to(_value_floors(lv, allowed, rate, e, base, per_t, n_mb, max_seg, threshold,
                                                   sync0, comp, extra, n_seg=n, f_g=grp.tp / grp.caps[grp.pool]),
                                     key.shape)
                if n is None:
                    key = np.maximum(key, vf)
                else:
                    key[n] = max(key[n], vf[n])
    out[2:] = key[2:]
    return out


def _value_floors(lv, allowed: np.ndarray, rate: np.ndarray, e: np.ndarray, base: np.ndarray, per_t: np.ndarray,
                  n_mb: int, max_seg: int, threshold: float, sync0: np.ndarray | None = None,
                  comp: np.ndarray | None = None, extra: bool = False, n_seg: int | None = None,
                  f_g: np.ndarray | None = None) -> np.ndarray:
    """[max_seg + 1]: a lower bound on the value key of every chain plan of n segments of the unit
    (docs/PLANNER.md 2.6, *value unit floor*): the smallest over levels T of the larger of it_T x (the
    level's dollar floor) and ``sum_s tp usd G_T + N it_T sum of changes' egress`` with
    G_T = min over D <= min(D_max, N) of D a_T(D)^2, a_T(D) = (N / D - 1) T + fill + step; each minimised
    over the level's chains by the dynamic programme (the cheapest allowed group per stage, no egress, for the
    levels past ``MAX_LEVELS``). ``sync0`` ([G, Dcap + 1], ``with_sync``'s stage-0 ring per replica count):
    for the levels given the programme, a_T(D) also adds the smallest over D' >= D of stage 0's sync on
    the level's allowed groups (stage 0 has no backward to overlap with, so its sync is in the iteration).
    ``n_seg``, ``f_g`` (with ``comp``): ``lv`` holds for the chains of ``n_seg`` segments, and those levels also
    get :func:`planner.search.chainbudget.budget_floor` (2.6, round 3)."""
    levels, it_k, d_max, fill_step = lv
    it_f = IT_FLOOR * np.where(np.isfinite(it_k), it_k, 0.0)                           # [K] it >= it_f, every D
    g_k = _min_d_a2_floor(n_mb * levels, fill_step - levels, np.minimum(d_max, n_mb), it_f)   # [K]
    cheap_r = np.where(allowed, rate[None], np.inf).min(axis=1).sum(axis=1)             # [K]
    with np.errstate(invalid="ignore"):
        cost_k = np.repeat((cheap_r * per_t)[:, None], max_seg + 1, axis=1)           # [K, n]
        joint_k = np.repeat((cheap_r * g_k)[:, None], max_seg + 1, axis=1)
        first = np.maximum(it_k * cheap_r * per_t, cheap_r * g_k)
        near = np.nonzero(np.isfinite(first) & np.isfinite(it_k) & (first * SAFETY <= threshold))[0]
    near = near[np.argsort(first[near], kind="stable")[:MAX_LEVELS]]
    sigma = None
    if len(near) and sync0 is not None:
        g_k = g_k.copy()
        sigma = _suffix_sync(allowed[near][:, :, 0], sync0)
        g_k[near] = np.maximum(g_k[near], _min_d_sync(levels[near], fill_step[near], d_max[near],
                                                      allowed[near][:, :, 0], sync0, n_mb, it_f[near]))
    if len(near):
        w = np.where(allowed[near], rate[None] * (per_t[near] / n_mb)[:, None, None], np.inf)
        cost_k[near] = n_mb * _min_paths(w, e, max_seg)
        scale = (n_mb * it_k[near])[:, None, None]
        w = np.where(allowed[near], rate[None] * g_k[near][:, None, None] / scale, np.inf)
        joint_k[near] = scale[:, :, 0] * _min_paths(w, e, max_seg)
        if comp is not None and n_seg is not None and f_g is not None and BUDGET:
            c_min = np.where(allowed[near], comp[None], np.inf).min(axis=1).sum(axis=1)
            rest = np.maximum(fill_step[near] - np.maximum(levels[near], c_min), 0.0)    # crossings + step
            bf = budget_floor(levels[near], it_f[near], np.minimum(d_max[near], n_mb), rest, allowed[near], comp,
                              rate[:, 0], f_g, n_seg, n_mb, sigma)
            if sync0 is not None and STAGE0:
                bf = np.maximum(bf, STAGE0 * stage0_floor(levels[near], it_f[near], np.minimum(d_max[near], n_mb),
                                                          rest, allowed[near], comp, rate[:, 0], f_g, n_seg, n_mb,
                                                          sync0))
            joint_k[near] = np.maximum(joint_k[near], BUDGET * bf[:, None])
        if comp is not None:
            cs = _cauchy_schwarz(levels[near], fill_step[near], d_max[near], allowed[near], comp, rate[:, 0], n_mb,
                                 it_f=it_f[near], cheap_r=cheap_r[near])
            joint_k[near] = np.maximum(joint_k[near], cs[:, None])
            if extra:
                hb = _holder(levels[near], d_max[near], allowed[near], comp, rate[:, 0], n_mb)
                joint_k[near] = np.maximum(joint_k[near], hb[:, None])
    with np.errstate(invalid="ignore"):
        per_level = np.maximum(it_k[:, None] * np.maximum(cost_k, base[None]), joint_k)
    per_level = np.where(np.isnan(per_level), np.inf, per_level)
    return per_level.min(axis=0, initial=np.inf) * SAFETY


def _min_d_a2_floor(a_num: np.ndarray, b: np.ndarray, d_hi: np.ndarray, it_f: np.ndarray) -> np.ndarray:
    """[K]: a lower bound on min over D in [1, d_hi] of D max(a_num / D + b, it_f)^2 (a_num, b, it_f >= 0):
    D_c (where a_num / D_c + b = it_f; inf when it_f <= b) split the range: on [1, D_c] the value is >= D a(D)^2,
    on [D_c, d_hi] >= D it_f^2 >= D_c it_f^2 = D_c a(D_c)^2, so the minimum is >= :func:`min_d_a2` on [1,
    min(D_c, d_hi)]; and >= it_f^2 (D >= 1) always (docs/PLANNER.md 2.6, round 2)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        d_c = np.where(it_f > b, a_num / np.maximum(it_f - b, 1e-300), np.inf)
    hi = np.clip(d_c, 1.0, np.maximum(d_hi, 1.0))
    return np.maximum(min_d_a2(a_num, b, hi), it_f ** 2)


def _min_d_sync(levels: np.ndarray, fill_step: np.ndarray, d_max: np.ndarray, allowed0: np.ndarray,
                sync0: np.ndarray, n_mb: int, it_f: np.ndarray | None = None) -> np.ndarray:
    """[K']: per level, min over integer D in 1..min(D_max, N, Dcap) of D max((N / D - 1) T + fill + step +
    sigma(D), it_f)^2, sigma(D) the smallest over D' >= D (a non-decreasing lower bound on the ring time at D)
    of stage 0's sync over the groups allowed at stage 0 (``allowed0`` [K', G]); ``it_f``: the level's
    iteration bound at every D (2.6, round 2; None: 0)."""
    d_cap = sync0.shape[1] - 1
    sigma = _suffix_sync(allowed0, sync0)
    d = np.arange(1, d_cap + 1, dtype=float)
    a = (n_mb / d - 1)[None] * levels[:, None] + fill_step[:, None] + sigma[:, 1:]
    if it_f is not None:
        a = np.maximum(a, it_f[:, None])
    ok = d[None] <= np.minimum(d_max, n_mb)[:, None]
    with np.errstate(invalid="ignore"):
        g = np.where(ok, d[None] * a * a, np.inf)
    return np.where(np.isnan(g), np.inf, g).min(axis=1, initial=np.inf)


def _suffix_sync(allowed0: np.ndarray, sync0: np.ndarray) -> np.ndarray:
    """[K', Dcap + 1]: per level, the smallest over D' >= D of stage 0's sync over its allowed groups."""
    s0 = np.where(allowed0[:, :, None], sync0[None], np.inf).min(axis=1)                # [K', Dcap + 1]
    return np.minimum.accumulate(s0[:, ::-1], axis=1)[:, ::-1]                          # suffix minima


def _d_grid(levels: np.ndarray, d_max: np.ndarray, n_mb: int, ratio: float, s_num: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """([K', J], [K', J]): per level a geometric grid of D (ratio ``ratio`` from 1, last point min(D_max, N))
    and K(D) / S = (N / D - 1) T / S at its points."""
    hi = np.maximum(np.minimum(d_max, n_mb), 1.0)
    steps = int(np.ceil(np.log(max(float(hi.max()), 1.0)) / np.log(ratio))) + 1
    grid = np.minimum(ratio ** np.arange(steps + 1)[None, :], hi[:, None])
    return grid, (n_mb / grid - 1) * levels[:, None] / s_num


def _cauchy_schwarz(levels: np.ndarray, fill_step: np.ndarray, d_max: np.ndarray, allowed: np.ndarray,
                    comp: np.ndarray, rate: np.ndarray, n_mb: int, ratio: float = 1.2,
                    it_f: np.ndarray | None = None, cheap_r: np.ndarray | None = None) -> np.ndarray:
    """[K']: per level T, a lower bound on D R it^2 over the level's chains and D <= min(D_max, N) that keeps
    each stage's price and compute together: it >= sum_s c_s + K(D), K(D) = (N / D - 1) T >= 0, so
    R it >= (sum_s r_s)(sum_s (c_s + K / S)) >= Q(D) = (sum_s min_g sqrt(r_g (c_g,s + K / S)))^2
    (Cauchy-Schwarz), and D it >= D a(D) = N T + D (fill + step - T), non-decreasing in D; Q is
    non-increasing, so on [D_i, D_i+1] of a geometric grid the key is >= D_i a(D_i) Q(D_i+1). With ``it_f``
    (the level's iteration bound at every D) and ``cheap_r`` (its cheapest rate sum): R it >= max(Q(D),
    cheap_r it_f) and D it >= max(D a(D), D it_f), both factors as monotone as before (2.6, round 2)."""
    grid, k_term = _d_grid(levels, d_max, n_mb, ratio, comp.shape[1])
    c = np.where(allowed, comp[None], np.inf)                                             # [K', G, S]
    with np.errstate(invalid="ignore"):
        root = np.sqrt(rate[None, None, :, None] * (c[:, None] + k_term[:, :, None, None]))  # [K', J, G, S]
    q = np.nan_to_num(root, nan=np.inf).min(axis=2).sum(axis=2) ** 2                       # [K', J]
    da = n_mb * levels[:, None] + grid * (fill_step - levels)[:, None]
    if it_f is not None and cheap_r is not None:
        da = np.maximum(da, grid * it_f[:, None])
        with np.errstate(invalid="ignore"):
            q = np.maximum(q, np.where(np.isfinite(cheap_r), cheap_r * it_f, 0.0)[:, None])
    out = (da[:, :-1] * q[:, 1:]).min(axis=1)
    return np.where(np.isfinite(d_max) & (d_max >= 1), np.minimum(out, da[:, -1] * q[:, -1]), np.inf)


def _holder(levels: np.ndarray, d_max: np.ndarray, allowed: np.ndarray, comp: np.ndarray, rate: np.ndarray,
            n_mb: int, ratio: float = 1.2) -> np.ndarray:
    """[K']: per level T, a lower bound on D R it^2 over the level's chains and D <= min(D_max, N) that keeps
    each stage's price, compute and D together (docs/PLANNER.md 2.6, round 2): it >= sum_s x_s with x_s =
    c_s + K(D) / S, K(D) = (N / D - 1) T >= 0, and Hoelder (exponents 3 and 3/2) gives sum_s r_s^(1/3)
    x_s^(2/3) <= (sum_s r_s)^(1/3) (sum_s x_s)^(2/3), so R it^2 >= H(D)^3, H(D) = sum_s min_g r_g^(1/3)
    (c_g,s + K(D) / S)^(2/3) over the level's allowed groups; H is non-increasing in D, so on [D_i, D_i+1]
    of a geometric grid (last point min(D_max, N)) D R it^2 >= D_i H(D_i+1)^3."""
    grid, k_term = _d_grid(levels, d_max, n_mb, ratio, comp.shape[1])
    c = np.where(allowed, comp[None], np.inf)                                             # [K', G, S]
    with np.errstate(invalid="ignore"):
        x = (c[:, None] + k_term[:, :, None, None]) ** (2.0 / 3.0)                          # [K', J, G, S]
        h = np.nan_to_num(np.cbrt(rate)[None, None, :, None] * x, nan=np.inf).min(axis=2).sum(axis=2)   # [K', J]
        out = np.minimum((grid[:, :-1] * h[:, 1:] ** 3).min(axis=1), grid[:, -1] * h[:, -1] ** 3)
    return np.where(np.isfinite(d_max) & (d_max >= 1), out, np.inf)
