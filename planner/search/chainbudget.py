"""The *pool-budget* value floor of a chain unit's level (docs/PLANNER.md 2.6, round 3, session 12 h12v).

A chain of exactly n segments puts each segment in one pool, so its largest pool share u is >= the mean
segment share (1 / n) sum_s f_s, f_g = tp_g / cap_g; with D pipelines D u <= 1, hence the *budget*
sum_s f_s <= n / D. For every lambda >= 0 the chain's rate R = sum_s r_s (r_g = tp_g usd_g) is then
>= sum_s r_s + lambda (sum_s f_s - n / D) >= M(lambda) - lambda n / D, M(lambda) = sum_s min_g (r_g +
lambda f_g) over the level's allowed groups; likewise its summed compute C >= sum_s min_g (c_g,s + mu f_g) -
mu n / D for every mu >= 0 (Lagrangian relaxation: any multiplier gives a valid bound).

Contract: :func:`budget_floor` and :func:`stage0_floor` are <= D R it^2 (<= the value key, egress and the tied
all-reduce >= 0) of every chain of the level with n segments and D <= min(D_max, N) pipelines, for every such D;
:func:`run_dmax` is >= the D of every chain of the level with n segments (tested against enumerated chains in
``tests/planner/test_value_budget_h12v.py``).
"""
from __future__ import annotations

import numpy as np

LAMBDAS = np.geomspace(1e-3, 1e3, 25)      # multipliers, in units of the scale below (any >= 0 is valid)


def _relaxed(cost: np.ndarray, f_g: np.ndarray, allowed: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """([K', L], [L]): per level and multiplier lambda = scale x LAMBDAS, sum_s min_g (cost[g, s] + lambda
    f_g) over the allowed groups ([K', G, S]; ``cost`` [G, S]), and the multipliers."""
    lam = scale * LAMBDAS
    c = np.where(allowed, cost[None], np.inf)                                           # [K', G, S]
    m = (c[:, None] + lam[None, :, None, None] * f_g[None, None, :, None]).min(axis=2)   # [K', L, S]
    return m.sum(axis=2), lam


def budget_floor(levels: np.ndarray, it_f: np.ndarray, d_hi: np.ndarray, extra: np.ndarray, allowed: np.ndarray,
                 comp: np.ndarray, rate: np.ndarray, f_g: np.ndarray, n_seg: int, n_mb: int,
                 sigma: np.ndarray | None = None) -> np.ndarray:
    """[K']: per level T (``levels``), min over integer D in 1..``d_hi`` (<= min(D_max, N) of the level and
    segment count) of D R_low(D) a(D)^2, with R_low(D) = max(cheapest rate sum, max_lambda M(lambda) -
    lambda n / D), a(D) = max((N / D - 1) T + max(T, C_low(D)) + ``extra`` + sigma(D), it_f), C_low(D) =
    max_mu (sum_s min_g (c_g,s + mu f_g) - mu n / D) (mu = 0: the smallest compute per stage), ``extra`` the
    level's crossings + step floor and ``sigma`` ([K', Dcap + 1], or None: 0) a non-decreasing lower bound on
    the stage syncs at D. Every chain of the level with n segments and D pipelines has iteration >= a(D)
    (2.1 *chain iteration floor*, with its compute sum bounded under the budget) and rate >= R_low(D)."""
    k_num = len(levels)
    out = np.full(k_num, np.inf)
    hi = int(np.nanmax(np.where(np.isfinite(d_hi), d_hi, 0), initial=0))
    if k_num == 0 or hi < 1:
        return out
    d = np.arange(1, hi + 1, dtype=float)                                                  # [Dn]
    r_scale = float(np.median(rate) / max(np.median(f_g), 1e-300))
    c_fin = np.where(allowed, comp[None], np.inf)
    c_scale = float(np.nanmedian(np.where(np.isfinite(c_fin), c_fin, np.nan)) / max(np.median(f_g), 1e-300))
    m_r, lam = _relaxed(np.broadcast_to(rate[:, None], comp.shape), f_g, allowed, r_scale)
    m_c, mu = _relaxed(comp, f_g, allowed, c_scale)
    budget = n_seg / d                                                                     # [Dn]
    cheap_r = np.where(allowed, rate[None, :, None], np.inf).min(axis=1).sum(axis=1)          # [K']
    c_min = c_fin.min(axis=1).sum(axis=1)                                                  # [K']
    r_low = np.maximum(cheap_r[:, None], (m_r[:, :, None] - lam[None, :, None] * budget[None, None]).max(axis=1))
    c_low = np.maximum(c_min[:, None], (m_c[:, :, None] - mu[None, :, None] * budget[None, None]).max(axis=1))
    a = (n_mb / d[None] - 1) * levels[:, None] + np.maximum(levels[:, None], c_low) + extra[:, None]
    if sigma is not None:       # (D past the table: 0, a lower bound)
        a = a + np.pad(sigma[:, 1:hi + 1], ((0, 0), (0, max(0, hi + 1 - sigma.shape[1]))))
    a = np.maximum(a, it_f[:, None])
    with np.errstate(invalid="ignore"):
        g = np.where(d[None] <= d_hi[:, None], d[None] * r_low * a * a, np.inf)
    g = np.where(np.isnan(g), np.inf, g)
    return g.min(axis=1, initial=np.inf)


def stage0_floor(levels: np.ndarray, it_f: np.ndarray, d_hi: np.ndarray, extra: np.ndarray, allowed: np.ndarray,
                 comp: np.ndarray, rate: np.ndarray, f_g: np.ndarray, n_seg: int, n_mb: int, sync0: np.ndarray,
                 n_lambda: int = 13) -> np.ndarray:
    """[K']: :func:`budget_floor` with stage 0's group g0 fixed and then minimised over g0 (its rate, share,
    compute and ring sync at D exact): per level, min over integer D in 1..``d_hi`` and allowed g0 of
    D R a^2 with R = r_g0 + max(the rest's cheapest rates, max_lambda M'(lambda) - lambda (n / D - f_g0)),
    C = c_g0,0 + max_mu (M'_c(mu) - mu (n / D - f_g0)) (M' over stages 1..S-1) and a = max((N / D - 1) T +
    max(T, C) + ``extra`` + sync0[g0, D], it_f): stage 0 has no earlier backward to overlap its sync with,
    so its ring at D (``sync0`` [G, Dcap + 1], the chain search's table) is in the iteration (2.6 (iv))."""
    k_num, s_num = len(levels), comp.shape[1]
    out = np.full(k_num, np.inf)
    hi = int(min(np.nanmax(np.where(np.isfinite(d_hi), d_hi, 0), initial=0), sync0.shape[1] - 1))
    if k_num == 0 or hi < 1 or s_num < 2:
        return out
    d = np.arange(1, hi + 1, dtype=float)
    lam_u = np.geomspace(1e-2, 1e2, n_lambda)
    rest = allowed[:, :, 1:]                                                                # [K', G, S - 1]
    c_fin = np.where(rest, comp[None, :, 1:], np.inf)
    r_scale = float(np.median(rate) / max(np.median(f_g), 1e-300))
    c_scale = float(np.nanmedian(np.where(np.isfinite(c_fin), c_fin, np.nan)) / max(np.median(f_g), 1e-300))
    with np.errstate(invalid="ignore"):
        m_r = (np.where(rest, rate[None, :, None], np.inf)[:, None] + (r_scale * lam_u)[None, :, None, None]
               * f_g[None, None, :, None]).min(axis=2).sum(axis=2)                            # [K', L]
        m_c = (c_fin[:, None] + (c_scale * lam_u)[None, :, None, None] * f_g[None, None, :, None]
               ).min(axis=2).sum(axis=2)
    b = n_seg / d[None, :] - f_g[:, None]                                                    # [G, D] budget left
    r0 = np.where(rest, rate[None, :, None], np.inf).min(axis=1).sum(axis=1)                 # [K']
    c0 = c_fin.min(axis=1).sum(axis=1)
    # [K', G, D]: max over the multipliers (any one gives a valid bound)
    r_rest = np.maximum(r0[:, None, None], (m_r[:, :, None, None] - (r_scale * lam_u)[None, :, None, None]
                                            * b[None, None]).max(axis=1))
    c_rest = np.maximum(c0[:, None, None], (m_c[:, :, None, None] - (c_scale * lam_u)[None, :, None, None]
                                            * b[None, None]).max(axis=1))
    r_all = rate[None, :, None] + r_rest
    c_all = comp[None, :, 0, None] + c_rest
    lv = levels[:, None, None]
    a = (n_mb / d[None, None] - 1) * lv + np.maximum(lv, c_all) + extra[:, None, None] + sync0[None, :, 1:hi + 1]
    a = np.maximum(a, it_f[:, None, None])
    ok = allowed[:, :, 0][:, :, None] & (d[None, None] <= d_hi[:, None, None])
    with np.errstate(invalid="ignore", over="ignore"):
        g = np.where(ok, d[None, None] * r_all * a * a, np.inf)
    g = np.where(np.isnan(g), np.inf, g)
    return g.reshape(k_num, -1).min(axis=1, initial=np.inf)


def run_dmax(allowed: np.ndarray, tp: np.ndarray, cap_g: np.ndarray, n_seg: int, d_hi: np.ndarray) -> np.ndarray:
    """[K]: per level (``allowed`` [K, G, S]: the groups each stage may take), the largest D <= ``d_hi`` at
    which the S stages can be cut into at most ``n_seg`` runs, each on one group g allowed on all its stages and
    at most floor(cap_g / (D tp_g)) stages long (0: none). A chain of n segments with D pipelines has such a cut
    (its segments: D tp_g len / cap_g <= D u <= 1), so its D is <= the value (docs/PLANNER.md 2.6, round 3).
    Feasibility at D is the greedy farthest-reach cover (optimal: from any stage inside a run the same group
    reaches at least as far), non-increasing in D (shorter runs), so the largest D is found by bisection."""
    k_num, _, s_num = allowed.shape
    nb = np.full((k_num, allowed.shape[1], s_num + 1), s_num, dtype=np.int64)     # first stage >= s not allowed
    for s in range(s_num - 1, -1, -1):
        nb[:, :, s] = np.where(allowed[:, :, s], nb[:, :, s + 1], s)
    ks = np.arange(k_num)

    def feasible(d: np.ndarray) -> np.ndarray:
        run = cap_g[None, :] // (np.maximum(d, 1)[:, None] * tp[None, :])            # [K, G]
        pos = np.zeros(k_num, dtype=np.int64)
        for _ in range(n_seg):
            at = nb[ks, :, np.minimum(pos, s_num)]                                      # [K, G]
            pos = np.maximum(pos, np.minimum(pos[:, None] + run, at).max(axis=1))
        return pos >= s_num

    lo = np.zeros(k_num, dtype=np.int64)                               # feasible (0: trivially) ...
    hi = np.maximum(np.where(np.isfinite(d_hi), d_hi, 0), 0).astype(np.int64)   # ... the answer is in [lo, hi]
    while (lo < hi).any():
        mid = (lo + hi + 1) // 2
        ok = feasible(mid) & (lo < hi)
        lo = np.where(ok, mid, lo)
        hi = np.where(~ok & (lo < hi), mid - 1, hi)
    return lo
