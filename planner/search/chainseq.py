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
    ok = np.logical_and.reduce([a.any(axis=1) for a in seg_alive])
    kks, qqs = [], []
    for c in np.nonzero(ok)[0]:
        seq = np.nonzero(seg_alive[0][c])[0][:, None]
        for i in range(1, n_seg):
            nxt = np.nonzero(seg_alive[i][c])[0]
            a = np.repeat(seq, len(nxt), axis=0)
            bb = np.tile(nxt, len(seq))
            keep = a[:, -1] != bb
            seq = np.column_stack([a[keep], bb[keep]])
        if len(seq) == 0:
            continue
        idx = seq[:, 0].copy()
        for i in range(1, n_seg):
            idx = idx * (n_groups - 1) + seq[:, i] - (seq[:, i] > seq[:, i - 1])
        kks.append(np.full(len(seq), c, dtype=np.int64))
        qqs.append(idx)
    if not kks:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(kks), np.concatenate(qqs)
