"""Enumerate pipeline counts (rows) and keep only non-dominated layer splits."""
from __future__ import annotations

from functools import lru_cache
from itertools import combinations, product

import numpy as np

from planner.search.caps import caps_for


def int_row_sum(D: np.ndarray) -> np.ndarray:
    """``D.sum(axis=1)`` of an integer array, column by column (integers add exactly in any order; numpy's
    reduction along a short last axis costs several times the column adds)."""
    if D.ndim != 2 or D.shape[1] == 0 or D.shape[1] > 32:
        return D.sum(axis=1)
    out = D[:, 0].copy()
    for j in range(1, D.shape[1]):
        out += D[:, j]
    return out


ONE_ZONE = 3        # the coarse level of one-zone rows (the value objective's incumbent, docs/PLANNER.md 2.4)


@lru_cache(maxsize=512)
def zone_splits(caps: tuple[int, ...], max_total: int) -> np.ndarray:
    """Per-zone pipeline counts of one GPU type: for every non-empty subset of its zones and every total
    d (>= one per chosen zone), the balanced distribution (water-filling under the caps: repeatedly one more
    pipeline to the chosen zone with the fewest, the earlier zone on ties). Returns [n_options, len(caps)]."""
    z = len(caps)
    out: list[np.ndarray] = []
    for size in range(1, z + 1):
        for subset in combinations(range(z), size):
            c = np.array([caps[i] for i in subset], dtype=np.int64)
            d = np.arange(size, min(max_total, int(c.sum())) + 1, dtype=np.int64)
            if len(d) == 0:
                continue
            # level lam: the largest with sum(min(c, lam)) <= d; the remainder goes one each to the first
            # zones (in order) whose cap exceeds lam
            lams = np.arange(0, int(c.max()) + 1)
            filled = np.minimum(c[None, :], lams[:, None]).sum(axis=1)
            lam = np.searchsorted(filled, d, side="right") - 1
            base = np.minimum(c[None, :], lam[:, None])
            rem = d - base.sum(axis=1)
            room = c[None, :] > lam[:, None]
            rank = np.cumsum(room, axis=1) - 1
            counts = base + (room & (rank < rem[:, None]))
            full = np.zeros((len(d), z), dtype=np.int64)
            full[:, list(subset)] = counts
            out.append(full)
    return np.concatenate(out, axis=0) if out else np.zeros((0, z), dtype=np.int64)


def _head_and_rest(options: list[np.ndarray], max_total: int, chunk: int):
    """(head options, every fitting row of the other types' product, head rows per chunk, their row totals)."""
    head = options[0]
    rest_rows = np.concatenate(list(product_rows(options[1:], max_total, chunk)), axis=0)
    step = max(1, chunk // max(1, len(rest_rows)))
    return head, rest_rows, step, int_row_sum(head), int_row_sum(rest_rows)


def product_rows(options: list[np.ndarray], max_total: int, chunk: int = 400_000):
    """Yield chunks of the cartesian product of per-type options (columns concatenated), total <= max_total."""
    if len(options) == 1:
        rows = options[0]
        yield rows[int_row_sum(rows) <= max_total]
        return
    head, rest_rows, step, head_sum, rest_sum = _head_and_rest(options, max_total, chunk)
    for lo in range(0, len(head), step):
        # the rows of repeat(head) | tile(rest) whose total fits, in that order, without building the others
        hi_idx, rest_idx = np.nonzero(head_sum[lo:lo + step, None] + rest_sum[None, :] <= max_total)
        yield np.concatenate([head[lo:lo + step][hi_idx], rest_rows[rest_idx]], axis=1)


def pareto_min(crit: np.ndarray) -> np.ndarray:
    """Indices of rows of ``crit`` ([K, C]) not dominated (<= everywhere, < somewhere) by another row;
    among identical rows the first is kept.

    In lexicographic order a row can only be weakly dominated by an earlier row (a later one that is <=
    everywhere equals it), and weak dominance is transitive, so a row is kept exactly when no earlier *kept*
    row is <= it everywhere. A sweep: the first row not yet removed is kept (every earlier row is kept or
    removed, and a removed one is weakly dominated by a kept one, which would have removed this row too),
    then every later row it weakly dominates is removed. One pass over the remaining rows per kept row (the
    splits' criteria keep few rows)."""
    k = crit.shape[0]
    if k <= 1:
        return np.arange(k)
    order = np.lexsort(crit.T[::-1])
    c = crit[order]
    kept: list[int] = []
    rest = np.arange(k)
    while len(rest):
        r = int(rest[0])
        kept.append(r)
        rest = rest[1:]
        if len(rest):
            rest = rest[~np.all(c[r] <= c[rest], axis=1)]
    return np.sort(order[np.array(kept, dtype=np.int64)])


def unique_first(key: np.ndarray, max_size: int = 1 << 22) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(key, return_index=True, return_inverse=True)[1:]`` for non-negative integer keys; by a
    first-occurrence table when the largest key is below ``max_size`` and below 8 entries per key plus 4096
    (no sort), else by ``np.unique`` (a few keys spread over a large range: a table of the whole range would
    cost more than sorting them)."""
    key = np.asarray(key).reshape(-1)
    size = int(key.max()) + 1 if len(key) else 0
    if not 0 < size <= min(max_size, 8 * len(key) + 4096) or int(key.min()) < 0:
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        return first, inv.reshape(-1)
    # one table, first the first occurrence of each key, then (present keys only, the only ones read) its rank:
    # int32 where the row count allows (a quarter of two int64 tables: fresh memory costs more than the work)
    n = len(key)
    dt = np.int32 if n < np.iinfo(np.int32).max else np.int64
    table = np.full(size, n, dtype=dt)
    np.minimum.at(table, key, np.arange(n, dtype=dt))
    present = np.nonzero(table < n)[0]
    first = table[present].astype(np.int64)
    table[present] = np.arange(len(present), dtype=dt)
    return first, table[key].astype(np.int64)


def product_chunks(options: list[np.ndarray], max_total: int, chunk: int = 400_000):
    """:func:`product_rows`'s rows in the same order; when the product of all but the first type's options
    exceeds ``chunk`` (``product_rows`` would hold that whole product and one chunk per first-type option),
    chunks of at most ``chunk`` rows of the mixed-radix index instead (memory bounded by ``chunk``)."""
    sizes = [len(o) for o in options]
    if len(options) == 1 or int(np.prod(sizes[1:], dtype=object)) <= chunk:
        yield from product_rows(options, max_total, chunk)
        return
    total = int(np.prod(sizes, dtype=object))
    strides = [int(np.prod(sizes[i + 1:], dtype=object)) for i in range(len(sizes))]
    for lo in range(0, total, chunk):
        idx = np.arange(lo, min(total, lo + chunk), dtype=np.int64)
        grid = np.concatenate([o[(idx // s) % n] for o, s, n in zip(options, strides, sizes)], axis=1)
        yield grid[int_row_sum(grid) <= max_total]


def ordered_product_chunks(options: list[np.ndarray], max_total: int, order: list[int], chunk: int = 400_000):
    """``c[:, order]`` for every chunk ``c`` of :func:`product_chunks` (the same rows, in the same chunks), with
    the columns written straight into that order: each head row repeated by its count of fitting rest rows
    (``np.nonzero`` lists the pairs row by row) instead of a gather, a concatenation and a column permutation."""
    sizes = [len(o) for o in options]
    if len(options) == 1 or int(np.prod(sizes[1:], dtype=object)) > chunk:
        for c in product_chunks(options, max_total, chunk):
            yield c[:, order]
        return
    head, rest_rows, step, head_sum, rest_sum = _head_and_rest(options, max_total, chunk)
    width_h = head.shape[1]
    dtype = np.result_type(head, rest_rows)
    for lo in range(0, len(head), step):
        fit = head_sum[lo:lo + step, None] + rest_sum[None, :] <= max_total
        _, rest_idx = np.nonzero(fit)
        counts = fit.sum(axis=1)
        out = np.empty((len(rest_idx), len(order)), dtype=dtype)
        for j, src in enumerate(order):
            if src < width_h:
                out[:, j] = np.repeat(head[lo:lo + step, src], counts)
            else:
                out[:, j] = rest_rows[rest_idx, src - width_h]
        yield out


def coarse_options(opts: np.ndarray, level: int = 1) -> np.ndarray:
    """The per-zone counts of one GPU type kept by the incumbent search (a subset of ``zone_splits``): every
    zone with room used; at level 1 also the same count in every zone or every zone full. Level 3
    (:data:`ONE_ZONE`): exactly one zone used, any count (the run keeps only the rows whose types all use the
    same zone: :func:`one_zone_rows`)."""
    if len(opts) == 0:
        return opts
    if level == ONE_ZONE:
        return opts[(opts > 0).sum(axis=1) == 1]
    keep = opts.min(axis=1) > 0
    if level <= 1:
        full = opts.sum(axis=1) == opts.sum(axis=1).max()
        keep &= (opts.max(axis=1) == opts.min(axis=1)) | full
    return opts[keep]


def one_zone_rows(D: np.ndarray, cols: list[tuple]) -> np.ndarray:
    """[len(D)] whether the row's used columns (``cols``: (zone, type, ...) per column) all lie in one zone."""
    zones = sorted({c[0] for c in cols})
    zid = np.array([zones.index(c[0]) for c in cols])
    used = np.zeros((len(D), len(zones)), dtype=bool)
    for j in range(len(zones)):
        used[:, j] = (D[:, zid == j] > 0).any(axis=1)
    return used.sum(axis=1) == 1


def joint_zone_options(cap: int, tps: tuple[int, ...], minority: int | None = None) -> np.ndarray:
    """[K, len(tps)] every pipeline count vector (x_t) of one pool over TP degrees ``tps`` with the joint cap
    ``sum_t t x_t <= cap`` (``cap``: the pool's GPUs // S, its TP units; the zero vector included), in
    lexicographic order; ``minority`` r (two TP degrees): only vectors with ``min_t x_t <= r``."""
    ranges = [range(cap // t + 1) for t in tps]
    out = [x for x in product(*ranges) if sum(t * n for t, n in zip(tps, x)) <= cap
           and (minority is None or len(tps) < 2 or min(x) <= minority)]
    return np.array(out, dtype=np.int64).reshape(len(out), len(tps))


def task_options(cluster, task, max_total: int, coarse: int = 0
                 ) -> tuple[list[np.ndarray], list[tuple[str, str, int]], list[list[int]]]:
    """The row blocks of a pool task (``tasks.Task``): (per block its options [n, width], the columns (zone,
    type, TP) of the blocks one after the other, the column groups of which each must hold a pipeline). A row is
    one option per block, at most ``max_total`` pipelines in all, every group used.

    - A type at one TP degree is one block: :func:`zone_splits` of its pools' caps (water-filled, every row uses
      it; ``coarse``: :func:`coarse_options`); no group.
    - A type at two TP degrees (``SearchSpace.two_tp``) is one block per zone with room: every vector of
      :func:`joint_zone_options` under the pool's joint cap (free per-zone counts, zero included; ``coarse``
      levels 1 and 2: a pipeline in every such zone), a column per TP with room there; one group per TP (every
      TP degree of the task used, so the tasks partition the plans)."""
    per, cols, used = [], [], []
    by_type: dict[str, list[int]] = {}
    for g, t in task.tps:
        by_type.setdefault(g, []).append(t)
    for g, ts in by_type.items():
        if len(ts) == 1:
            caps = caps_for(cluster, g, ts[0], task.num_stages)
            opts = zone_splits(tuple(c for _, c in caps), max_total)
            per.append(coarse_options(opts, coarse) if coarse else opts)
            cols += [(z, g, ts[0]) for z, _ in caps]
            continue
        groups: dict[int, list[int]] = {t: [] for t in ts}
        for z, cap in caps_for(cluster, g, 1, task.num_stages):       # TP units per pool: GPUs // S
            room = tuple(t for t in ts if cap // t > 0)
            if not room:
                continue
            opts = joint_zone_options(cap, room)
            keep = int_row_sum(opts) <= max_total
            if coarse and coarse != ONE_ZONE:
                keep &= int_row_sum(opts) > 0
            per.append(opts[keep])
            for t in room:
                groups[t].append(len(cols))
                cols.append((z, g, t))
        used += list(groups.values())
    return per, cols, used


def used_rows(D: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    """[len(D)] whether every column group (column indices of ``D``) holds a pipeline."""
    keep = np.ones(len(D), dtype=bool)
    for grp in groups:
        keep &= int_row_sum(D[:, grp]) > 0
    return keep


def sorted_unique(x: np.ndarray) -> np.ndarray:
    """``np.unique(x)`` (the sorted distinct values of the flattened array, one nan) by numpy's own sort path,
    step for step (the same values and bits, -0.0 included), without ``np.unique``'s ``np.ma.is_masked`` check,
    which imports numpy.ma (~13 ms) on a process's first call."""
    aux = np.sort(np.asarray(x).reshape(-1))
    mask = np.empty(aux.shape, dtype=bool)
    mask[:1] = True
    if aux.shape[0] > 0 and aux.dtype.kind in "cfmM" and np.isnan(aux[-1]):
        if aux.dtype.kind == "c":
            first_nan = int(np.searchsorted(np.isnan(aux), True, side="left"))
        else:
            first_nan = int(np.searchsorted(aux, aux[-1], side="left"))
        if first_nan > 0:
            mask[1:first_nan] = aux[1:first_nan] != aux[:first_nan - 1]
        mask[first_nan] = True
        mask[first_nan + 1:] = False
    else:
        mask[1:] = aux[1:] != aux[:-1]
    return aux[mask]


def unique_inverse(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)`` with the inverse flattened: :func:`sorted_unique` (``np.unique(x)``,
    equal in value; of a zero present as 0.0 and -0.0 it may keep the other sign) and each value's position among
    them by binary search (the same inverse: equal values, -0.0 and 0.0, and every nan find their one entry),
    without importing numpy.ma."""
    flat = np.asarray(x).reshape(-1)
    values = sorted_unique(flat)
    return values, np.searchsorted(values, flat)
