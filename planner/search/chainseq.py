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


def decode_sequences(idx: np.ndarray, n_groups: int, n_seg: int) -> np.ndarray:
    """[len(idx), n_seg]: the rows ``idx`` of :func:`chain_sequences` (n_groups, n_seg), computed from the index
    (its first group times (G - 1)^(n - 1), then each next group's rank among the G - 1 groups that differ from
    the one before it) without building the whole table."""
    idx = np.asarray(idx, dtype=np.int64)
    out = np.empty((len(idx), n_seg), dtype=np.int64)
    base = n_groups - 1
    ranks, rem = [], idx.copy()
    for _ in range(n_seg - 1):
        ranks.append(rem % base)
        rem = rem // base
    out[:, 0] = rem
    for i, r in enumerate(reversed(ranks), start=1):
        out[:, i] = r + (r >= out[:, i - 1])
    return out


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
    totals in lexicographic order (the rows of :func:`segment_split_rows`)."""
    rows, _ = segment_split_rows(num_layers, np.array([bounds], dtype=np.int64))
    for k in range(len(rows)):
        yield rows[k:k + 1]


def segment_split_rows(num_layers: int, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([R, S] int64 splits, [R] the cut of each): every segment split (:func:`segment_splits`) of every cut
    ``bounds`` ([C, segments + 1], rows (0, b_1, .., S)), cut by cut in the rows' order, each cut's splits in
    :func:`segment_splits`' order; built with array operations (the totals grow one segment at a time, each
    partial row repeated once per total of the next segment, ascending)."""
    sizes = np.diff(bounds, axis=1)                                     # [C, n]
    n_seg, s_num = sizes.shape[1], int(bounds[0, -1]) if len(bounds) else 0
    cut = np.arange(len(bounds))[sizes.sum(axis=1) <= num_layers]
    tot = np.zeros((len(cut), 0), dtype=np.int64)
    for i in range(n_seg - 1):
        hi = num_layers - tot.sum(axis=1) - sizes[cut, i + 1:].sum(axis=1)   # segment i's largest total
        n = hi - sizes[cut, i] + 1
        t = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + np.repeat(sizes[cut, i], n)
        tot, cut = np.column_stack([np.repeat(tot, n, axis=0), t]), np.repeat(cut, n)
    tot = np.column_stack([tot, num_layers - tot.sum(axis=1)])
    stages = np.arange(s_num)
    seg = (bounds[cut, 1:-1, None] <= stages[None, None, :]).sum(axis=1)            # [R, S] segment of each stage
    size, lo = np.take_along_axis(sizes[cut], seg, 1), np.take_along_axis(bounds[cut], seg, 1)
    q, r = np.divmod(np.take_along_axis(tot, seg, 1), size)
    return (q + (stages[None, :] - lo >= size - r)).astype(np.int64), cut
