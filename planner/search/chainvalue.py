"""Joint lower bounds on the value key (iteration s x $/iteration) of chain plans (docs/PLANNER.md 2.6).

A chain plan with D pipelines, one pipeline's GPU rate R ($/s) and per-micro-batch egress e has
``cost = D R it + N e + (sync-free extras >= 0) >= D R it + N e``, so its value key satisfies
``it x cost >= R D it^2 + N e it``: the time and the dollars of the *same* plan, at the *same* D. With a
lower bound ``it >= a(D) > 0`` that is non-increasing in D, the key is >= ``R min_D D a(D)^2 + N e a(D_max)``
over the D the plan may have, much larger than (min over D of it) x (min over D of cost) when the fastest D
and the cheapest D differ.

Contract: every function returns a value <= ``D a(D)^2`` (:func:`min_d_a2`, :func:`min_d_seg2`) for every
real D of the stated range; :func:`segment_value_keys` and :func:`chain_value_keys` are <= the value key of
every chain plan their callers bound (tested against enumerated plans in
``tests/planner/test_value_objective_h11v.py``).
"""
from __future__ import annotations

import numpy as np

SAFETY = 1 - 1e-9       # absorbs the rounding of the closed forms below


def min_d_a2(a_num, b, d_hi):
    """min over real D in [1, d_hi] of ``D (A / D + B)^2 = A^2 / D + 2 A B + B^2 D`` (A >= 0; any B), a convex
    function of D > 0 whose unconstrained minimiser is A / |B| (d_hi where B = 0); arrays broadcast. Callers
    guarantee A / D + B >= 0 on the range (so the value is a lower bound on D a(D)^2 for every a >= A/D + B)."""
    a_num, b = np.asarray(a_num, dtype=float), np.asarray(b, dtype=float)
    hi = np.maximum(np.asarray(d_hi, dtype=float), 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        star = np.where(b != 0, a_num / np.abs(b), hi)
    d = np.clip(np.nan_to_num(star, nan=1.0, posinf=np.inf), 1.0, hi)
    with np.errstate(invalid="ignore", over="ignore"):
        g = a_num * a_num / d + 2 * a_num * b + b * b * d
    return np.maximum(np.nan_to_num(g, nan=0.0), 0.0)


def min_d_seg2(np_, c, v, d_hi):
    """min over real D in [1, d_hi] of ``D (max(NP / D, c) + v)^2`` (NP, c, v >= 0). On D <= NP / c the
    bracket is NP / D + v (:func:`min_d_a2`); beyond it D (c + v)^2 grows, and at D = NP / c both agree, so
    the minimum is the first piece's on [1, min(NP / c, d_hi)] when NP / c >= 1, else (c + v)^2 at D = 1."""
    np_, c, v = (np.asarray(x, dtype=float) for x in (np_, c, v))
    with np.errstate(divide="ignore", invalid="ignore"):
        d_b = np.where(c > 0, np_ / np.where(c > 0, c, 1.0), np.inf)
    first = min_d_a2(np_, v, np.minimum(np.maximum(d_b, 1.0), d_hi))
    return np.where(d_b >= 1.0, first, (c + v) ** 2)


def segment_value_keys(np_, c, v, use, rate, egress_usd, it_low):
    """A lower bound on the value key of every chain (plan) whose iteration at D pipelines is >=
    ``max(NP / D, c) + v`` for every D <= 1 / ``use`` and whose GPU dollars are >= D ``rate`` it and egress
    ``egress_usd`` (N x the per-micro-batch egress): ``rate min_d_seg2 + egress_usd it_low`` with ``it_low``
    <= the iteration at every allowed D."""
    with np.errstate(divide="ignore"):
        d_hi = np.where(use > 0, 1.0 / np.where(use > 0, use, 1.0), np.inf)
    with np.errstate(invalid="ignore"):
        eg = np.where(np.asarray(egress_usd) > 0, egress_usd * it_low, 0.0)
    return (rate * min_d_seg2(np_, c, v, d_hi) + eg) * SAFETY


def chain_value_keys(n_mb: int, period, fill, upd, dist: bool, d_max, rate, egress_usd, it_low):
    """A lower bound on the value key of every plan of a chain with D in 1..``d_max`` pipelines (``d_max`` <=
    N): its iteration is >= a(D) = (N / D - 1) P + fill + step (ceil(N / D) >= N / D, the period at least
    ``period`` at every D <= d_max; the step ``upd`` / D with the distributed optimizer), i.e.
    A / D + B with A = N P (+ upd when ``dist``), B = fill - P (+ upd otherwise); a(D) >= fill > 0 for
    D <= N."""
    a_num = n_mb * period + (upd if dist else 0.0)
    b = fill - period + (0.0 if dist else upd)
    with np.errstate(invalid="ignore"):
        eg = np.where(np.asarray(egress_usd) > 0, egress_usd * it_low, 0.0)
    return (rate * min_d_a2(a_num, b, d_max) + eg) * SAFETY
