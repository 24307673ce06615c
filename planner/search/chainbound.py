"""A cheaper pre-filter for the chain bound (:func:`planner.search.chains.segment_lower_keys`) under the
throughput objective: the (cut, group sequence) pairs whose bound can still be <= the threshold.

The chain bound's iteration term is ``(max(N P u, sum of compute) + step) (1 - 1e-12)`` with u the largest,
over the chain's pools, of its GPUs there over the pool's GPUs, a sum of one non-negative share per segment in
that pool. Each segment's own share f_i is one of the terms of its pool's sum, so u >= max_i f_i in floating
point too (adding non-negative numbers never lowers a rounded sum), and every later operation (a product by the
non-negative N P, a max, a sum, a product by a positive constant) is monotone under rounding: the same
expression with max_i f_i for u is <= the chain's iteration bound, which is its key under the throughput
objective (inf where infeasible). A pair whose value exceeds the threshold therefore has a key above it and is
dropped by the chain search either way, so the pairs kept are the same (``tests/planner/test_search_chainbound.py``).
"""
from __future__ import annotations

import numpy as np

from planner.search.chaintab import ChainGroups, RangeTab
from planner.search.space import Objective


def pair_prefilter(rt: RangeTab, grp: ChainGroups, bounds: np.ndarray, seqs: np.ndarray, kk: np.ndarray,
                   qq: np.ndarray, n_mb: int, objective: Objective, threshold: float) -> np.ndarray | None:
    """Indices into ``kk`` / ``qq`` (the pairs of cut rows of ``bounds`` [cuts, segments + 1] and sequences of
    ``seqs`` [sequences, segments]) whose chain bound may be <= ``threshold``, ascending; None: every pair (any
    objective but throughput, or an infinite threshold)."""
    if objective.kind != "throughput" or not threshold < np.inf:
        return None
    n_seg = seqs.shape[1]
    s1, n_g = rt.comp_max.shape[1], rt.comp_max.shape[2]
    cmax_f, csum_f, upd_f = rt.comp_max.reshape(-1), rt.comp_sum.reshape(-1), rt.upd.reshape(-1)
    length = (np.arange(s1)[None, :] - np.arange(s1)[:, None]).clip(0)[:, :, None]          # hi - lo
    frac_f = ((grp.tp[None, None, :] * length) / grp.caps[grp.pool][None, None, :]).reshape(-1)
    comp_max = comp_sum = upd = f_max = None
    for i in range(n_seg):      # the flat index of chains.segment_lower_keys, per cut plus per group
        flat = ((bounds[:, i] * s1 + bounds[:, i + 1]) * n_g)[kk] + seqs[:, i][qq]
        if i == 0:
            comp_max, comp_sum, upd, f_max = cmax_f[flat], csum_f[flat], upd_f[flat], frac_f[flat]
        else:
            comp_max = np.maximum(comp_max, cmax_f[flat])
            comp_sum = comp_sum + csum_f[flat]
            upd = np.maximum(upd, upd_f[flat])
            f_max = np.maximum(f_max, frac_f[flat])
    value = (np.maximum(n_mb * comp_max * f_max, comp_sum) + upd) * (1 - 1e-12)
    rows = np.flatnonzero(~(value > threshold))
    return None if len(rows) == len(kk) else rows
