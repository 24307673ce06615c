"""Pricing for the bound on Sailor's whole space (:mod:`planner.search.mixbound`): for pool prices y, an upper
bound on ``max over chains c and counts m of (m - y . u_c)`` over the chains that can run m micro-batches
within a makespan, and real chains for column generation. docs/PLANNER.md section 7 proves each step.

A chain c = one group per stage; u_c[p] its GPUs in pool p; it can run m micro-batches within T' only if every
stage fits with min(S - s, m) in flight and (m - 1) pi_c + fill_c <= T' with pi_c = max_s comp (the 1F1B
period is >= its busiest stage >= its largest compute) and fill_c = sum_s comp + 2 sum p2p. Per period level
v (a distinct compute value; a chain is counted at the level of its largest compute), per in-flight class and
multiplier lambda >= 0, one dynamic program over the stages gives Q = min_c (y . u_c + lambda fill_c) over the
chains whose largest compute is v (two states per group: whether a stage of compute v was passed); then
min {y . u_c : fill_c <= F} >= Q - lambda F (Lagrangian relaxation). :mod:`planner.search.mixdp` tightens it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.search.mixtab import MixUnit, REL

# lambda = theta / v: theta = 1 prices v seconds of fill like one micro-batch; the large ones matter where the
# pool prices are large (a chain cheap in y but too slow to fit the fill budget must be priced out)
THETAS = (0.0,) + tuple(2.0 ** k for k in range(-2, 15))


@dataclass(frozen=True)
class Priced:
    """One y priced on one unit: ``q[k, v, i]`` (Q at class k, level v, lambda_i = THETAS[i] / v),
    ``fmin[k, v]`` (the smallest fill at the level), ``chains`` [B, S] the programs' minimisers (-1: none)."""

    y: np.ndarray
    q: np.ndarray
    fmin: np.ndarray
    chains: np.ndarray


_CLASSES: dict[int, tuple] = {}


def classes(unit: MixUnit) -> tuple[np.ndarray, np.ndarray]:
    hit = _CLASSES.get(id(unit))
    if hit is not None and hit[0] is unit:
        return hit[1]
    out = _classes(unit)
    if len(_CLASSES) > 4096:
        _CLASSES.clear()
    _CLASSES[id(unit)] = (unit, out)
    return out


def _classes(unit: MixUnit) -> tuple[np.ndarray, np.ndarray]:
    """(masks [K, G, S], class of m for m = 1..S, index S-1 standing for every m >= S): a replica is allowed
    in a chain running m micro-batches where it fits with min(S - s, m) in flight; equal masks share a class."""
    s_num = unit.s_num
    left = s_num - np.arange(s_num)
    masks, cls = [], []
    for m in range(1, s_num + 1):
        mk = unit.kmax >= np.minimum(left, m)[None, :]
        for i, old in enumerate(masks):
            if np.array_equal(old, mk):
                cls.append(i)
                break
        else:
            masks.append(mk)
            cls.append(len(masks) - 1)
    return np.array(masks), np.array(cls)


def levels(unit: MixUnit) -> np.ndarray:
    return np.unique(unit.comp[unit.usable])


def _program(node: np.ndarray, edge: np.ndarray, hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """min over chains with at least one stage where ``hit`` [B, G, S] of sum_s node[b, g_s, s] + sum_s
    edge[b, g_s, g_s+1] ([B]) and a minimiser [B, S] (rows of -1 where none is finite). Two states per group:
    whether a hit stage has been passed."""
    n_b, n_g, s_num = node.shape
    inf = np.inf
    c0 = np.where(hit[:, :, 0], inf, node[:, :, 0])
    c1 = np.where(hit[:, :, 0], node[:, :, 0], inf)
    b0 = np.zeros((s_num, n_b, n_g), dtype=np.int64)
    b1 = np.zeros((s_num, n_b, n_g), dtype=np.int64)
    from0 = np.zeros((s_num, n_b, n_g), dtype=bool)     # state 1 at (s, h) entered from state 0
    for s in range(1, s_num):
        t0 = c0[:, :, None] + edge
        t1 = c1[:, :, None] + edge
        b0[s], b1[s] = np.argmin(t0, axis=1), np.argmin(t1, axis=1)
        m0 = np.take_along_axis(t0, b0[s][:, None, :], axis=1)[:, 0, :]
        m1 = np.take_along_axis(t1, b1[s][:, None, :], axis=1)[:, 0, :]
        h = hit[:, :, s]
        from0[s] = h & (m0 < m1)
        c1 = np.where(h, np.minimum(m0, m1), m1) + node[:, :, s]
        c0 = np.where(h, inf, m0 + node[:, :, s])
    best = c1.min(axis=1)
    g = np.argmin(c1, axis=1)
    state = np.ones(n_b, dtype=bool)
    rows = np.arange(n_b)
    chains = np.zeros((n_b, s_num), dtype=np.int64)
    chains[:, -1] = g
    for s in range(s_num - 1, 0, -1):
        was0 = np.where(state, from0[s][rows, g], True)
        prev = np.where(was0, b0[s][rows, g], b1[s][rows, g])
        state = ~was0
        g = prev
        chains[:, s - 1] = g
    chains[~np.isfinite(best)] = -1
    return best, chains


def price(unit: MixUnit, y: np.ndarray) -> Priced:
    """:class:`Priced` for pool prices ``y`` >= 0 (one program per class, level and lambda, plus the fill)."""
    masks, _ = classes(unit)
    lv = levels(unit)
    w = y[unit.grp.pool] * unit.grp.tp                                  # [G] y . u of one replica
    n_k, n_v, n_t = len(masks), len(lv), len(THETAS)
    allowed = masks[:, None] & (unit.comp[None, None] <= lv[None, :, None, None] * (1 + REL))     # [K, V, G, S]
    lam = np.array(THETAS)[None, :] / lv[:, None]                        # [V, T]
    # batch: (k, v, theta) with weight 1, then (k, v) fill-only (weight 0, lambda 1)
    lam_all = np.concatenate([lam, np.ones((n_v, 1))], axis=1)           # [V, T+1]
    wgt = np.array([1.0] * n_t + [0.0])
    node = wgt[None, None, :, None, None] * w[None, None, None, :, None] + \
        lam_all[None, :, :, None, None] * unit.comp[None, None, None]      # [K, V, T+1, G, S]
    node = np.where(allowed[:, :, None], node, np.inf)
    fin = np.isfinite(unit.p2p)
    edge = np.where(fin[None], 2 * lam_all.reshape(-1)[:, None, None] * np.where(fin, unit.p2p, 0.0)[None], np.inf)
    edge = np.broadcast_to(edge.reshape(1, n_v, n_t + 1, *unit.p2p.shape), (n_k, n_v, n_t + 1) + unit.p2p.shape)
    g_n, s_num = unit.comp.shape
    hit = (unit.comp[None] >= lv[:, None, None] * (1 - REL))                       # [V, G, S]
    hit = np.broadcast_to(hit[None, :, None], node.shape)
    best, chains = _program(node.reshape(-1, g_n, s_num), edge.reshape(-1, g_n, g_n), hit.reshape(-1, g_n, s_num))
    best = best.reshape(n_k, n_v, n_t + 1)
    return Priced(np.asarray(y, dtype=float), best[..., :n_t], best[..., n_t], chains)


def value(unit: MixUnit, pr: Priced, t_prime: np.ndarray) -> np.ndarray:
    """Upper bound ([len(t_prime)]) on max over chains c and m >= 1 of (m - y . u_c) among the chains that can
    run m micro-batches within makespan ``t_prime`` (-inf: none can)."""
    _, cls = classes(unit)
    lv = levels(unit)
    s_num, n_mb = unit.s_num, unit.n_mb
    tp = np.asarray(t_prime, dtype=float)[:, None] * (1 + 1e-11) + 1e-15      # [N, 1] slack (module REL)
    lam = np.array(THETAS)[None, :] / lv[:, None]                           # [V, T]
    out = np.full(tp.shape[0], -np.inf)

    def at(k: int, m: np.ndarray) -> np.ndarray:            # m [N, V, C] -> values [N, V, C]
        room = tp[:, :, None] - (m - 1) * lv[None, :, None]                    # fill budget
        ok = (room >= pr.fmin[k][None, :, None] * (1 - REL)) & (m >= 1) & (m <= n_mb)
        c = np.max(pr.q[k][None, :, None, :] - lam[None, :, None, :] * room[..., None], axis=-1)
        return np.where(ok, m - c, -np.inf)

    ms = np.arange(1, min(s_num, n_mb + 1))        # counts below S: their own in-flight class
    if ms.size:
        ks = cls[ms - 1]
        room = tp[:, :, None] - (ms - 1)[None, None, :] * lv[None, :, None]             # [N, V, M]
        q = pr.q[ks].transpose(1, 0, 2)                                                # [V, M, T]
        c = np.max(q[None] - lam[None, :, None, :] * room[..., None], axis=-1)
        ok = room >= pr.fmin[ks].T[None] * (1 - REL)
        out = np.maximum(out, np.where(ok, ms[None, None, :] - c, -np.inf).max(axis=(1, 2)))
    if n_mb >= s_num:                                # m >= S: a concave function of m, checked at its kinks
        k = int(cls[s_num - 1])
        hi = np.floor((tp - pr.fmin[k][None, :] * (1 - REL)) / lv[None, :] * (1 + REL)) + 1     # [N, V]
        hi = np.minimum(hi, n_mb)
        lo = np.full_like(hi, float(s_num))
        th = np.array(THETAS)
        cst = -pr.q[k][None] + lam[None] * (tp[:, :, None] + lv[None, :, None])     # [N, V, T] m-free part
        iu, ju = np.triu_indices(len(th), 1)
        with np.errstate(invalid="ignore"):
            x = (cst[..., ju] - cst[..., iu]) / (th[ju] - th[iu])                       # [N, V, pairs]
        x = np.where(np.isfinite(x), x, lo[..., None])
        cand = np.concatenate([lo[..., None], hi[..., None], np.floor(x), np.floor(x) + 1], axis=-1)
        m = np.minimum(np.maximum(cand, lo[..., None]), np.maximum(hi, lo)[..., None])     # [N, V, C]
        v = at(k, m)
        v = np.where(m <= hi[..., None], v, -np.inf)
        out = np.maximum(out, v.max(axis=(1, 2)))
    return out


def chain_count(unit: MixUnit, chain: np.ndarray, t_prime: float) -> int:
    """The most micro-batches chain ``chain`` can run within ``t_prime`` under the relaxed makespan
    (m - 1) max comp + fill (0: none)."""
    s = np.arange(unit.s_num)
    comp = unit.comp[chain, s]
    fill = comp.sum() + 2 * unit.p2p[chain[:-1], chain[1:]].sum()
    if not np.isfinite(fill) or fill > t_prime:
        return 0
    m = int(np.floor((t_prime - fill) / comp.max())) + 1
    k = unit.kmax[chain, s]
    left = unit.s_num - s
    short = k < left
    if short.any():
        m = min(m, int(k[short].min()))
    return max(0, min(m, unit.n_mb))


def usage(unit: MixUnit, chain: np.ndarray) -> np.ndarray:
    u = np.zeros(len(unit.grp.caps))
    np.add.at(u, unit.grp.pool[chain], unit.grp.tp[chain])
    return u
