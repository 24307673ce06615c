"""Exact-up-to-rounding pricing for :mod:`planner.search.mixbound`: per level v and in-flight class, the
smallest y . u_c over the chains c whose largest compute is v and whose fill is within a budget, for every
budget at once, by a dynamic program over (stage, group, fill rounded down to a grid). Rounding every stage's
fill term down makes each chain's rounded fill <= its fill, so the table is a lower bound on the exact
constrained minimum (docs/PLANNER.md section 7); it closes the duality gap of the Lagrangian pricing of
:mod:`planner.search.mixprice` where a fill budget cuts off a chain that is cheap in y.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.search.mixprice import Priced, classes, levels
from planner.search.mixtab import MixUnit, REL

EPS = 0.01           # total rounding of a chain's fill: at most EPS x the budget range's low end


@dataclass(frozen=True)
class FillTable:
    """``c[k, v, i]``: a lower bound on min y . u_c over chains of class k, level v with fill <= i x ``step``
    (prefix minimum; inf: none); budgets above ``(B - 1) x step`` are not covered (callers cap)."""

    step: float
    c: np.ndarray


def fill_table(unit: MixUnit, pr: Priced, f_lo: float, f_hi: float) -> FillTable:
    """The table for fill budgets up to ``f_hi``, rounding each stage term down to ``EPS f_lo / S``."""
    masks, _ = classes(unit)
    lv = levels(unit)
    s_num = unit.s_num
    step = EPS * max(f_lo, 1e-12) / s_num
    n_b = int(np.floor(f_hi / step)) + 2
    w = pr.y[unit.grp.pool] * unit.grp.tp
    cu = np.floor(unit.comp / step * (1 - REL)).astype(np.int64)              # [G, S]
    fin = np.isfinite(unit.p2p)
    pu = np.where(fin, np.floor(2 * np.where(fin, unit.p2p, 0.0) / step * (1 - REL)), -1).astype(np.int64)
    n_k, n_v, n_g = len(masks), len(lv), len(w)
    allowed = masks[:, None] & (unit.comp[None, None] <= lv[None, :, None, None] * (1 + REL))     # [K, V, G, S]
    hit = unit.comp[None] >= lv[:, None, None] * (1 - REL)                                    # [V, G, S]
    inf = np.inf
    # cost[k, v, flag, g, b]
    cost = np.full((n_k, n_v, 2, n_g, n_b), inf)
    for g in range(n_g):
        b = cu[g, 0]
        if b < n_b:
            ok = allowed[:, :, g, 0]
            h = hit[:, g, 0]
            cost[:, :, 1, g, b] = np.where(ok & h[None], w[g], inf)
            cost[:, :, 0, g, b] = np.where(ok & ~h[None], w[g], inf)
    for s in range(1, s_num):
        new = np.full_like(cost, inf)
        for h in range(n_g):
            ok = allowed[:, :, h, s][..., None]                     # [K, V, 1]
            if not ok.any():
                continue
            best = np.full((n_k, n_v, 2, n_b), inf)
            for g in range(n_g):
                if pu[g, h] < 0:
                    continue
                sh = pu[g, h] + cu[h, s]
                if sh >= n_b:
                    continue
                src = cost[:, :, :, g, :n_b - sh] if sh else cost[:, :, :, g, :]
                best[..., sh:] = np.minimum(best[..., sh:], src)
            hs = hit[:, h, s][None, :, None]                        # [1, V, 1]
            to1 = np.where(hs, np.minimum(best[:, :, 0], best[:, :, 1]), best[:, :, 1])
            to0 = np.where(hs, inf, best[:, :, 0])
            new[:, :, 1, h] = np.where(ok, to1 + w[h], inf)
            new[:, :, 0, h] = np.where(ok, to0 + w[h], inf)
        cost = new
    c = cost[:, :, 1].min(axis=2)                                   # [K, V, B]
    return FillTable(step, np.minimum.accumulate(c, axis=-1))


def value_dp(unit: MixUnit, pr: Priced, tab: FillTable, t_prime: float) -> float:
    """:func:`planner.search.mixprice.value` at one ``t_prime``, the constrained minimum taken as the larger of
    the Lagrangian bound and ``tab`` (every m in 1..N checked; ``t_prime`` must be <= the table's range)."""
    from planner.search.mixprice import THETAS
    _, cls = classes(unit)
    lv = levels(unit)
    s_num, n_mb = unit.s_num, unit.n_mb
    tp = t_prime * (1 + 1e-11) + 1e-15
    m = np.arange(1, n_mb + 1, dtype=float)                          # [M]
    room = tp - (m[None, :] - 1) * lv[:, None]                        # [V, M]
    # m > S: the period is also >= the round trip from stage 0, fill / S (``round_trip_bounds``, k = 0), so
    # (m - 1) fill / S + fill <= T' bounds the fill too
    room = np.minimum(room, np.where(m > s_num, tp * s_num / (m + s_num - 1), np.inf)[None, :])
    k_of_m = cls[np.minimum(m, s_num).astype(int) - 1]                # [M]
    lam = np.array(THETAS)[None, None, :] / lv[:, None, None]
    q = pr.q[k_of_m]                                                  # [M, V, T]
    lag = np.max(q.transpose(1, 0, 2) - lam * room[..., None], axis=-1)     # [V, M]
    idx = np.floor(np.maximum(room, 0) / tab.step * (1 + REL)).astype(np.int64)
    n_b = tab.c.shape[-1]
    if (idx[room >= 0] >= n_b).any():
        raise ValueError("fill budget beyond the table")
    dp = tab.c[k_of_m[None, :], np.arange(len(lv))[:, None], np.minimum(idx, n_b - 1)]     # [V, M]
    c = np.maximum(lag, dp)
    ok = (room >= pr.fmin[k_of_m].T * (1 - REL)) & np.isfinite(c)
    val = np.where(ok, m[None, :] - c, -np.inf)
    return float(val.max()) if val.size else -np.inf
