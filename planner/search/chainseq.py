"""Chain group sequences and the (cut, sequence) pairs whose every segment's group is alive.

Contract: :func:`chain_sequences` lists every sequence of group indices with adjacent entries different, in
lexicographic order; :func:`alive_pairs` returns exactly ``np.nonzero`` of the dense [cuts, sequences] mask
"segment i of the cut may run on group seq[i] for every i" without building that mask (tested against it in
``tests/planner/test_search_budget.py``).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

DENSE_MAX = 1 << 18     # cuts x G^segments up to which the dense mask is built (same result, less Python)


@lru_cache(maxsize=32)
def chain_sequences(n_groups: int, n_seg: int) -> np.ndarray:
    """Every sequence of ``n_seg`` group indices with adjacent entries different: [Q, n_seg] (read-only)."""
    seqs = np.arange(n_groups)[:, None]
    for _ in range(1, n_seg):
        a = np.repeat(seqs, n_groups, axis=0)
        b = np.tile(np.arange(n_groups), len(seqs))
        keep = a[:, -1] != b
        seqs = np.column_stack([a[keep], b[keep]])
    seqs.flags.writeable = False
    return seqs


def alive_pairs(seg_alive: list[np.ndarray], n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(cut rows, sequence indices into ``chain_sequences(n_groups, len(seg_alive))``) of every sequence whose
    segment i's group is alive for the cut (``seg_alive[i]``: [cuts, G]), cut-major and in sequence order:
    ``np.nonzero`` of the dense [cuts, sequences] mask, built from the alive groups of each cut only. A
    sequence's index: its first group times (G - 1)^(n - 1), then each next group's rank among the G - 1
    groups that differ from the one before it."""
    n_seg = len(seg_alive)
    if len(seg_alive[0]) * n_groups ** n_seg <= DENSE_MAX:      # small: the dense mask is cheaper
        seqs = chain_sequences(n_groups, n_seg)
        dense = np.ones((len(seg_alive[0]), len(seqs)), dtype=bool)
        for i in range(n_seg):
            dense &= seg_alive[i][:, seqs[:, i]]
        kk, qq = np.nonzero(dense)
        return kk.astype(np.int64), qq.astype(np.int64)
    # every cut at once: partial sequences (cut-major, lexicographic within a cut) grow by one segment at a
    # time, each extended by its cut's alive groups of the next segment in ascending order
    ok = np.logical_and.reduce([a.any(axis=1) for a in seg_alive])
    cut, last = np.nonzero(seg_alive[0] & ok[:, None])
    cut, last = cut.astype(np.int64), last.astype(np.int64)
    idx = last.copy()
    for i in range(1, n_seg):
        ci, gi = np.nonzero(seg_alive[i])                        # cut-major, groups ascending within a cut
        cnt = np.bincount(ci, minlength=len(seg_alive[i]))
        start = np.concatenate([[0], np.cumsum(cnt)])[:-1]
        rep = cnt[cut]
        p = np.repeat(np.arange(len(cut)), rep)
        offs = np.arange(len(p)) - np.repeat(np.cumsum(rep) - rep, rep)
        g = gi[start[cut[p]] + offs].astype(np.int64)
        keep = g != last[p]
        p, g = p[keep], g[keep]
        idx = idx[p] * (n_groups - 1) + g - (g > last[p])
        cut, last = cut[p], g
    return cut, idx


def segment_splits(num_layers: int, bounds: tuple[int, ...]):
    """Every *segment split* of a cut (docs/PLANNER.md 1.1): ``bounds`` = (0, b_1, .., S) delimit the segments;
    each segment gets its own layer total (at least its stage count, the totals summing to ``num_layers``),
    split evenly over its stages with the extra layers on its last stages. Yields [1, S] int64 arrays, the
    totals in lexicographic order."""
    sizes = [hi - lo for lo, hi in zip(bounds, bounds[1:])]

    def totals(i: int, left: int):
        if i == len(sizes) - 1:
            yield (left,)
            return
        for t in range(sizes[i], left - sum(sizes[i + 1:]) + 1):
            for rest in totals(i + 1, left - t):
                yield (t,) + rest

    if num_layers < sum(sizes):
        return
    for tot in totals(0, num_layers):
        row = []
        for n, t in zip(sizes, tot):
            q, r = divmod(t, n)
            row += [q] * (n - r) + [q + 1] * r
        yield np.array([row], dtype=np.int64)
