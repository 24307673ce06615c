"""The *row-class floor*: rows of a pool task dropped by class before they are built (docs/PLANNER.md 2.6, round 4,
session 13, helper s13v).

A row's class is its pipeline total per type t_j and the number z of zones it uses. Every row of a class has, per
type, the same GPUs and (catalog prices are per type) the same dollars per second; its makespan is >= the relaxed
bound (``makespan.relaxed_lower_bound``) computed from ``T_p(m) >= (m - 1) M_j + F_j`` with M_j, F_j the smallest
period and fill/drain over the type's pools and the task's splits (they are <= each pool's, so the premise of
that bound holds for every pool of the type; the sum over a type's pools of d_p / M_j is t_j / M_j); its
optimizer step is >= the largest over the types (all used) of the type's smallest step; its sync is >= the
task's sync floor at its total and the zone table (``rowzone``) at z zones, and its egress is >= z x the zone
table's egress per edge. Key and constraints are monotone in time and dollars, so the class floor is <= the key
of every row of the class, and a class whose floor exceeds the threshold holds no row that can enter the top K.

:func:`class_row_grid` yields the same chunks as ``taskrun.row_grid`` (same rows, order and chunk boundaries)
less the rows of such classes, without building them (per head option, the other types' rows are grouped by
their totals and zone union); on the mixed-radix path a chunk left empty is skipped.
"""
from __future__ import annotations

import numpy as np

from planner.search.caps import caps_for
from planner.search.rows import _head_and_rest, int_row_sum, task_options
from planner.search.space import Objective

ROW_CLASS = True            # the row-class prefilter (False: off, tests only)
MAX_CELLS = 24_000_000      # the class table's largest size (larger: no prefilter; 8 bytes a cell)
MAX_REST = 8_000_000        # the mixed-radix path's largest product of the other types (larger: rows built)
MIN_ROWS = 1_000_000        # the prefilter only where the row product has at least this many rows ...
ROWS_PER_CELL = 4           # ... and this many per cell of the table (else building the rows costs less)
SLACK = 1e-9


def class_floor_table(m_t: np.ndarray, f_t: np.ndarray, u_t: np.ndarray, rate_t: np.ndarray, gpus_t: np.ndarray,
                      caps_t: list[int], n_mb: int, objective: Objective, sync_lb: np.ndarray | None,
                      zt: tuple[np.ndarray, float] | None, n_zones: int, dist: bool) -> np.ndarray | None:
    """[cap_0 + 1, ..., cap_{n-1} + 1, n_zones + 1]: the class floor per (t_0, ..., t_{n-1}, z) (inf where some
    t_j = 0, z = 0 or a constraint fails); per type j: ``m_t``, ``f_t``, ``u_t`` the smallest period, fill/drain and
    step over its pools and the task's splits, ``rate_t`` / ``gpus_t`` one pipeline's $/s and GPUs."""
    shape = [c + 1 for c in caps_t] + [n_zones + 1]
    if int(np.prod(shape, dtype=object)) > MAX_CELLS:
        return None
    t = np.meshgrid(*[np.arange(c) for c in shape[:-1]], indexing="ij", sparse=True)
    d = sum(t)
    inv = sum(tj / mj for tj, mj in zip(t, m_t))
    num = n_mb - d + sum(tj / mj * fj for tj, mj, fj in zip(t, m_t, f_t))
    with np.errstate(divide="ignore", invalid="ignore"):
        span = np.maximum(num / np.maximum(inv, 1e-300), float(np.max(f_t)))
    upd = float(np.max(u_t))
    upd = upd / np.maximum(d, 1) if dist else upd + 0 * d
    base = span + upd
    del span, num, inv
    slb0 = 0.0 * d
    if sync_lb is not None:
        slb0 = sync_lb[np.minimum(d, len(sync_lb) - 1)]
    rate = sum(tj * r for tj, r in zip(t, rate_t))
    gpus = sum(tj * g for tj, g in zip(t, gpus_t))
    used = np.ones(shape[:-1], dtype=bool)
    for tj in t:
        used = used & (tj >= 1)
    out = np.full(shape, np.inf)
    for k in range(1, n_zones + 1):         # one zone count at a time (memory: one slice of temporaries)
        slb, egress = slb0, 0.0
        if zt is not None:
            table, per_edge = zt
            ok = d < table.shape[1]
            zs = np.where(ok, table[min(k, table.shape[0] - 1), np.where(ok, d, 0)], 0.0)
            slb = np.maximum(slb0, zs)
            egress = k * per_edge if k >= 2 else 0.0
        it = (base + slb) * (1 - SLACK)
        cost = rate * it + egress * (1 - SLACK)
        it, cost, g = np.broadcast_arrays(it, cost, gpus)
        with np.errstate(invalid="ignore"):
            key = np.where(objective.allows(it, cost, g), objective.key(it, cost), np.inf)
        out[..., k] = np.where(used, np.nan_to_num(key, nan=np.inf), np.inf)
    return out


class _RestClasses:
    """The rows of the other types' product (``parts``: per type, the option index of each rest row) by class
    (per-type totals, union of zones used); :meth:`allowed` lists, in order, the rest rows whose class with a
    head class (type 0's total and zone mask) has its floor within the threshold."""

    def __init__(self, options: list[np.ndarray], zmasks: list[np.ndarray], parts: list[np.ndarray],
                 ok_table: np.ndarray) -> None:
        self.ok = ok_table
        t = [int_row_sum(o)[p] for o, p in zip(options, parts)]
        m = np.zeros(len(parts[0]), dtype=np.int64)
        for zm, p in zip(zmasks, parts):
            m |= zm[p]
        uniq, inv = np.unique(np.stack(t + [m], axis=1), axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        self.u_t, self.u_m = [uniq[:, j] for j in range(len(t))], uniq[:, -1]
        self.order = np.argsort(inv, kind="stable")
        self.bounds = np.searchsorted(inv[self.order], np.arange(len(uniq) + 1))
        self.memo: dict[tuple[int, int], np.ndarray] = {}

    def allowed(self, t0: int, m0: int) -> np.ndarray:
        key = (t0, m0)
        if key not in self.memo:
            z = _popcount(self.u_m | m0)
            ok = np.nonzero(self.ok[(t0,) + tuple(self.u_t) + (z,)])[0]
            lo, n = self.bounds[ok], self.bounds[ok + 1] - self.bounds[ok]
            idx = np.repeat(lo - np.concatenate([[0], np.cumsum(n)[:-1]]), n) + np.arange(int(n.sum()))
            self.memo[key] = np.sort(self.order[idx])
        return self.memo[key]


def _popcount(x: np.ndarray) -> np.ndarray:
    out = np.zeros(np.shape(x), dtype=np.int64)
    x = np.array(x, dtype=np.int64)
    while (x > 0).any():
        out += x & 1
        x = x >> 1
    return out


def _zone_masks(per_type: list[np.ndarray], cols: list) -> list[np.ndarray]:
    """Per type, each option's zones as a bit mask (bit i: the i-th zone of ``cols`` in sorted order)."""
    zones = sorted({c[0] for c in cols})
    out, at = [], 0
    for o in per_type:
        bits = np.array([1 << zones.index(cols[at + j][0]) for j in range(o.shape[1])], dtype=np.int64)
        out.append(((o > 0).astype(np.int64) * bits[None, :]).sum(axis=1))
        at += o.shape[1]
    return out


def class_row_grid(cluster, task, max_total: int, coarse: int, table: np.ndarray | None, thr: float,
                   chunk: int = 400_000):
    """``taskrun.row_grid``'s chunks less the rows whose class floor (``table`` at the row's per-type totals and
    number of zones used) exceeds ``thr``; ``table`` None: ``row_grid``'s chunks unchanged."""
    from planner.search.taskrun import row_grid
    per_type, cols, used = task_options(cluster, task, max_total, coarse)
    order = sorted(range(len(cols)), key=lambda i: cols[i])
    sizes = [len(o) for o in per_type]
    if table is None or used or not ROW_CLASS or len(per_type) < 2 or any(s == 0 for s in sizes):
        yield from row_grid(cluster, task, max_total, coarse)
        return
    zmasks = _zone_masks(per_type, cols)
    ocols = [cols[i] for i in order]
    if int(np.prod(sizes[1:], dtype=object)) > chunk:
        yield from _radix_chunks(per_type, zmasks, ocols, order, max_total, table <= thr, chunk)
        return
    head, rest_rows, step, head_sum, rest_sum = _head_and_rest(per_type, max_total, chunk)
    width_h = head.shape[1]
    # the rest rows are product_rows(options[1:]) filtered by total: recover each one's option per type
    parts = _rest_parts(per_type[1:], rest_rows)
    rc = _RestClasses(per_type[1:], zmasks[1:], parts, table <= thr)
    h_t = int_row_sum(head)
    dtype = np.result_type(head, rest_rows)
    for lo in range(0, len(head), step):
        hs = slice(lo, lo + step)
        fit = head_sum[hs, None] + rest_sum[None, :] <= max_total
        for r, i in enumerate(range(lo, min(lo + step, len(head)))):
            keep = np.zeros(len(rest_rows), dtype=bool)
            keep[rc.allowed(int(h_t[i]), int(zmasks[0][i]))] = True
            fit[r] &= keep
        _, rest_idx = np.nonzero(fit)
        counts = fit.sum(axis=1)
        out = np.empty((len(rest_idx), len(order)), dtype=dtype)
        for j, src in enumerate(order):
            if src < width_h:
                out[:, j] = np.repeat(head[hs, src], counts)
            else:
                out[:, j] = rest_rows[rest_idx, src - width_h]
        yield out, ocols


def _rest_parts(options: list[np.ndarray], rest_rows: np.ndarray) -> list[np.ndarray]:
    """Per type, the index into its options of each rest row's columns (each option row is distinct): rows coded
    as integers (base: the largest count + 1) and looked up in the sorted codes of the options."""
    parts, at = [], 0
    for o in options:
        w = o.shape[1]
        base = int(max(o.max(initial=0), rest_rows[:, at:at + w].max(initial=0))) + 1
        if base ** w >= 1 << 62:
            lookup = {tuple(int(x) for x in row): i for i, row in enumerate(o)}
            parts.append(np.array([lookup[tuple(int(x) for x in row)] for row in rest_rows[:, at:at + w]],
                                  dtype=np.int64).reshape(-1))
        else:
            pw = base ** np.arange(w, dtype=np.int64)
            codes = o.astype(np.int64) @ pw
            srt = np.argsort(codes, kind="stable")
            parts.append(srt[np.searchsorted(codes[srt], rest_rows[:, at:at + w].astype(np.int64) @ pw)])
        at += w
    return parts


def _radix_chunks(options: list[np.ndarray], zmasks: list[np.ndarray], ocols: list, order: list[int],
                  max_total: int, ok_table: np.ndarray, chunk: int):
    """``rows.product_chunks``' mixed-radix path (chunks of ``chunk`` consecutive indices of the product, rows
    over ``max_total`` dropped), columns in ``order``, less the rows whose class is not in ``ok_table``, without
    building them: per head class (type 0's total and zones) the allowed indices of the other types' product
    come from their classes; chunks left empty are skipped (they hold no row to score)."""
    sizes = [len(o) for o in options]
    rest_sizes = sizes[1:]
    n_rest = int(np.prod(rest_sizes, dtype=object))
    if n_rest > MAX_REST:
        from planner.search.rows import product_chunks
        for c in product_chunks(options, max_total, chunk):
            yield c[:, order], ocols
        return
    strides = [int(np.prod(rest_sizes[i + 1:], dtype=np.int64)) for i in range(len(rest_sizes))]
    r = np.arange(n_rest, dtype=np.int64)
    rest_idx = [(r // st) % n for st, n in zip(strides, rest_sizes)]
    del r
    rc = _RestClasses(options[1:], zmasks[1:], rest_idx, ok_table)
    rest_sum = sum(int_row_sum(options[j + 1])[rest_idx[j]] for j in range(len(rest_sizes)))
    head = options[0]
    head_sum = int_row_sum(head)
    widths = [o.shape[1] for o in options]
    starts = np.cumsum([0] + widths)
    src_of = []
    for src in order:
        j = int(np.searchsorted(starts, src, side="right") - 1)
        src_of.append((j, src - starts[j]))
    total = sizes[0] * n_rest
    dtype = np.result_type(*options)
    for lo in range(0, total, chunk):
        hi = min(total, lo + chunk)
        parts = []
        for i0 in range(lo // n_rest, (hi - 1) // n_rest + 1):
            a = rc.allowed(int(head_sum[i0]), int(zmasks[0][i0]))
            a = a[np.searchsorted(a, lo - i0 * n_rest):np.searchsorted(a, hi - i0 * n_rest)]
            a = a[head_sum[i0] + rest_sum[a] <= max_total]
            if len(a):
                parts.append((i0, a))
        if not parts:
            continue
        out = np.empty((sum(len(a) for _, a in parts), len(order)), dtype=dtype)
        at = 0
        for i0, a in parts:
            for col, (j, w) in enumerate(src_of):
                out[at:at + len(a), col] = head[i0, w] if j == 0 else options[j][rest_idx[j - 1][a], w]
            at += len(a)
        yield out, ocols


def task_class_table(cluster, task, models: dict[int, dict], n_mb: int, objective: Objective,
                     sync_lb: np.ndarray | None, zt: tuple[np.ndarray, float] | None, max_total: int,
                     coarse: int = 0) -> np.ndarray | None:
    """:func:`class_floor_table` of a task from its pool models (``taskrun.pool_models`` per split: the smallest
    period, fill/drain and step of each type over its pools and the splits); None when there is no model, one
    type, one zone, a table too large, or a small row product (under :data:`MIN_ROWS` rows or :data:`ROWS_PER_CELL` per
    cell: building and bounding the rows then costs less than the table)."""
    if not models or not ROW_CLASS or len(task.tps) < 2 or len({g for g, _ in task.tps}) < len(task.tps):
        return None     # (a type at two TP degrees: its blocks are per zone, rows not one per type's total)
    if len({z for g, tp in task.tps for z, _ in caps_for(cluster, g, tp, task.num_stages)}) < 2:
        return None     # one zone: a class is one row (the row floor itself), nothing to gain
    n_rows = int(np.prod([len(o) for o in task_options(cluster, task, max_total, coarse)[0]], dtype=object))
    cells = int(np.prod([min(max_total, sum(c for _, c in caps_for(cluster, g, tp, task.num_stages))) + 1
                         for g, tp in task.tps], dtype=object))
    if n_rows < MIN_ROWS or n_rows < ROWS_PER_CELL * cells:
        return None
    m_t, f_t, u_t, r_t, g_t, caps_t, zones = class_type_terms(cluster, task, models, max_total)
    return class_floor_table(m_t, f_t, u_t, r_t, g_t, caps_t, n_mb, objective, sync_lb, zt, len(zones), task.dist)


def class_type_terms(cluster, task, models: dict[int, dict], max_total: int) -> tuple:
    """Per (type, TP) of ``task.tps``, over its pools and every split's pool models (``by_col[(zone, type, TP)]``):
    the smallest period, fill/drain, optimizer step, $/s of a pipeline and GPUs of a pipeline (arrays), its
    pipeline capacity (at most ``max_total``), and the task's zones: the inputs of :func:`class_floor_table`."""
    m_t, f_t, u_t, r_t, g_t, caps_t, zones = [], [], [], [], [], [], set()
    for g, tp in task.tps:
        caps = caps_for(cluster, g, tp, task.num_stages)
        ps = [by_col[(z, g, tp)] for by_col in models.values() for z, _ in caps]
        m_t.append(min(p.period_s for p in ps))
        f_t.append(min(p.fill_s for p in ps))
        u_t.append(min(p.update_s for p in ps))
        r_t.append(min(p.gpus_per_pipeline * p.usd_per_s for p in ps))
        g_t.append(min(p.gpus_per_pipeline for p in ps))
        caps_t.append(min(max_total, sum(c for _, c in caps)))
        zones |= {z for z, _ in caps}
    return np.array(m_t), np.array(f_t), np.array(u_t), np.array(r_t), np.array(g_t), caps_t, zones

