"""Enumerate pipeline counts (rows) and keep only non-dominated layer splits."""
from __future__ import annotations

from functools import lru_cache
from itertools import combinations

import numpy as np


@lru_cache(maxsize=512)
def type_options(caps: tuple[int, ...], max_total: int) -> np.ndarray:
    """Per-zone pipeline counts of one GPU type: for every non-empty subset of its zones and every total
    d (>= one per chosen zone), the balanced distribution (water-filling under the caps; ties go to the
    earlier zone). Returns [n_options, len(caps)]."""
    z = len(caps)
    out: list[np.ndarray] = []
    for size in range(1, z + 1):
        for subset in combinations(range(z), size):
            cur = np.zeros(z, dtype=np.int64)
            cur[list(subset)] = 1
            total = size
            limit = min(max_total, sum(caps[i] for i in subset))
            if total > limit:
                continue
            out.append(cur.copy())
            while total < limit:
                room = [i for i in subset if cur[i] < caps[i]]
                i = min(room, key=lambda k: (cur[k], k))
                cur[i] += 1
                total += 1
                out.append(cur.copy())
    return np.array(out, dtype=np.int64).reshape(-1, z)


def product_rows(options: list[np.ndarray], max_total: int, chunk: int = 400_000):
    """Yield chunks of the cartesian product of per-type options (columns concatenated), total <= max_total."""
    if len(options) == 1:
        rows = options[0]
        yield rows[rows.sum(axis=1) <= max_total]
        return
    head, rest = options[0], options[1:]
    rest_rows = np.concatenate(list(product_rows(rest, max_total, chunk)), axis=0)
    step = max(1, chunk // max(1, len(rest_rows)))
    for lo in range(0, len(head), step):
        h = head[lo:lo + step]
        grid = np.concatenate([np.repeat(h, len(rest_rows), axis=0), np.tile(rest_rows, (len(h), 1))], axis=1)
        yield grid[grid.sum(axis=1) <= max_total]


def pareto_min(crit: np.ndarray) -> np.ndarray:
    """Indices of rows of ``crit`` ([K, C]) not dominated (<= everywhere, < somewhere) by another row;
    among identical rows the first is kept."""
    k = crit.shape[0]
    if k <= 1:
        return np.arange(k)
    order = np.lexsort(crit.T[::-1])
    c = crit[order]
    keep: list[int] = []
    for i in range(k):
        row = c[i]
        if keep:
            kept = c[keep]
            if np.any(np.all(kept <= row, axis=1)):
                continue
        keep.append(i)
    return np.sort(order[keep])
