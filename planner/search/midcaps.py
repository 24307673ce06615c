"""Cap-bound middle stages: the layer splits a pool plan needs beyond the split family when memory caps the
early middle stages (docs/PLANNER.md 1 item 4 and 2.1, "Uneven middle stages").

Contract: for one pipeline depth S and the search's (GPU type -> (micro-batch size, TP) options),
:func:`cap_vectors` lists every per-middle-stage layer cap vector a pool-plan task can have: per task (types,
TPs, micro-batch size, recomputation, distributed optimizer) the largest layer count middle stage s holds on
every type of the task with S - s micro-batches in flight; with the distributed optimizer one vector per range of
the replica count D over which it is constant (every D >= 1). :func:`cap_bound_splits` turns them into
splits: per middle layer total R whose family staircase does not fit under a vector, the
:func:`planner.search.splits.front_loaded` middle at the lowest level that fits (the first of
:func:`planner.search.splits.middle_candidates`; the higher levels that can still win by smaller round trips
are :mod:`planner.search.midlevels`'), with every first and last stage size, less those already in the family. The search
adds them to the family's splits of that depth (:meth:`planner.search.tasks.Tables.splits`); they go through
the same evaluator and memory checks as every other split, so a vector that is a superset of a task's needs
costs time, never exactness. Pure given the context: memory from :mod:`planner.search.tables`' formulas.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import combinations, product
import math

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.caps import caps_for
from planner.search.levelbatch import fresh_rows, lowest_rows, unique_rows
from planner.search.splits import front_loaded
from planner.search.rows import sorted_unique
from planner.search.tables import NEVER, _memory_terms, dist_min_dp, head_params, stage_params
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext


def _probe(num_layers: int) -> np.ndarray:
    """[L - 2, L] splits of L stages whose middle stages all hold c = 1 .. L - 2 layers (first and last: one
    layer). A middle stage's memory reads only its own layer count and the micro-batches it keeps in flight,
    so middle stage s of this probe (L - s in flight) stands for middle stage s - (L - S) of every depth S."""
    out = np.ones((max(num_layers - 2, 1), num_layers), dtype=np.int64)
    out[:, 1:-1] = np.arange(1, out.shape[0] + 1)[:, None]
    return out


def _probe_terms(ctx: SimContext, tables, tt, counts: np.ndarray, first: np.ndarray, last: np.ndarray,
                 inflight: np.ndarray, recompute: bool) -> tuple[np.ndarray, tuple]:
    """(parameters, :func:`planner.search.tables._memory_terms`) of the probe stages ``counts``: what
    :func:`_dmin` reads, the same for every distributed-optimizer setting and fine-shard count."""
    sp = tables.space
    params = stage_params(tt, counts, first, last, head_params(tt, 2, sp.tie_embeddings))
    return params, _memory_terms(ctx, tt, counts, params, first, last, sp.precision, sp.optimizer, recompute,
                                 inflight)


def _dmin(ctx: SimContext, tables, tt, counts: np.ndarray, first: np.ndarray, last: np.ndarray,
          inflight: np.ndarray, recompute: bool, dist: bool, shards: int,
          given: tuple[np.ndarray, tuple] | None = None) -> np.ndarray:
    """[C, columns] the smallest D at which each probe stage fits (plain: 1 or :data:`NEVER`), made
    non-decreasing in the layer count (rows). ``given``: :func:`_probe_terms` of the same arguments, when held."""
    sp = tables.space
    params, terms = given if given is not None else _probe_terms(ctx, tables, tt, counts, first, last, inflight,
                                                                 recompute)
    if dist:
        d = dist_min_dp(ctx, tt, counts, sp.precision, sp.optimizer, recompute, shards, sp.tie_embeddings, terms,
                        (first, last, params))
    else:
        d = np.where(F.memory_total(terms) <= tt.usable_bytes, 1, NEVER)
    return np.maximum.accumulate(np.asarray(d, dtype=np.int64), axis=0)


def type_dmin(ctx: SimContext, tables, g: str, tp: int, mbs: int, s_num: int, recompute: bool,
              dist: bool, shards: int = 1) -> np.ndarray:
    """[C, S] per layer count c (row c - 1, C = L - S + 1) and stage: the smallest replica count D at which
    that stage fits on (g, tp, mbs) with S - s micro-batches in flight (plain: 1 where it fits, :data:`NEVER`
    where not), made non-decreasing in c (a cap is a prefix of fitting counts). Stage 0 holds the embedding
    and S micro-batches in flight, stage S - 1 the head and one (S >= 2)."""
    mid, end = _full_dmin(ctx, tables, g, tp, mbs, recompute, dist, shards)
    L = ctx.model.num_layers
    c = L - s_num + 1
    return np.column_stack([end[:c, L - s_num], mid[:c, c:L - 1], end[:c, L]])


def _full_dmin(ctx: SimContext, tables, g: str, tp: int, mbs: int, recompute: bool, dist: bool,
               shards: int) -> tuple[np.ndarray, np.ndarray]:
    """(mid [L - 2, L], end [L - 2, L + 1]): :func:`type_dmin`'s probe tables of every depth at once (memoised in
    ``tables.memo``): the middle probe's columns and the first (columns 0 .. L - 1) and last (column L) stages."""
    key = ("midcap", g, tp, mbs, recompute, dist, shards)
    L = ctx.model.num_layers
    if key not in tables.memo:
        tt = tables.table(g, tp, mbs)
        counts = _probe(L)
        inflight = np.arange(L, 0, -1)
        none = np.zeros((1, L), dtype=bool)
        ends = np.repeat(np.arange(1, counts.shape[0] + 1)[:, None], L + 1, axis=1)
        first = (np.arange(L + 1) < L)[None, :]             # columns 0 .. L - 1: a first stage, L - j in flight
        last = ~first                                       # column L: a last stage, one in flight
        # the middle probe's L columns and the ends' L + 1 side by side in one call: every entry's answer and
        # the running maximum down each column are the entry's and the column's own
        args = (np.hstack([counts, ends]), np.hstack([none, first]), np.hstack([none, last]),
                np.concatenate([inflight, inflight, [1]]))
        tkey = ("midcap-terms", g, tp, mbs, recompute)      # shared by every optimizer setting and shard count
        if tkey not in tables.memo:
            tables.memo[tkey] = _probe_terms(ctx, tables, tt, *args, recompute)
        both = _dmin(ctx, tables, tt, *args, recompute, dist, shards, tables.memo[tkey])
        tables.memo[key] = (both[:, :L], both[:, L:])
    return tables.memo[key]


def cap_vectors(ctx: SimContext, tables, options: dict[str, list[tuple[int, int]]], s_num: int,
                cluster: ClusterSpec | None = None) -> set[tuple[int, ...]]:
    """Every cap vector (length S: first stage, middle stages, last stage) of a pool-plan task of depth S over
    ``options`` whose middle caps bind somewhere (some below L - S + 1, the largest middle stage; a cap of 0:
    no split fits, left out). Tasks as
    :func:`planner.search.tasks.unit_tasks` forms them (type subsets up to ``max_gpu_types``, one TP per type,
    every TP of the options: a superset of what the TP rule and the pool capacities keep); with the
    distributed optimizer the caps at every replica count D >= 1 (they change only where some type's do).
    ``cluster``: only TPs with room for a pipeline of S stages in some pool of the type, and D up to the
    combination's pipeline capacity (:func:`planner.search.caps.caps_for`, as the tasks' rows).

    Every depth's vectors come from one pass over the tasks (memoised in ``tables.memo`` for these options and
    cluster): a task's caps at D on a stage are the layer counts at which every type of the task fits there at
    D, a prefix of the probe's rows (:func:`type_dmin`), so they are counts of the rows of the elementwise
    largest smallest-D over the task's types (``M``); the caps change with D only at values of ``M``, each one
    some type's, so the caps at ``M``'s values up to the task's capacity are the caps at every D the types'
    own steps give (a D below every value of ``M`` gives zero caps, left out)."""
    key = ("cap-vectors", id(options), id(cluster))
    hit = tables.memo.get(key)
    if hit is None or hit[0] is not options or hit[1] is not cluster:
        hit = (options, cluster, _all_cap_vectors(ctx, tables, options, cluster))
        tables.memo[key] = hit
    return set(hit[2].get(s_num, ()))


def _all_cap_vectors(ctx: SimContext, tables, options: dict[str, list[tuple[int, int]]],
                     cluster: ClusterSpec | None) -> dict[int, set[tuple[int, ...]]]:
    """{S: :func:`cap_vectors` at depth S} for every S from 4 to L - 1."""
    sp = tables.space
    L = ctx.model.num_layers
    depths = list(range(4, L))
    out: dict[int, set[tuple[int, ...]]] = {s: set() for s in depths}
    if not depths:
        return out
    types = sorted(options)
    max_types = min(len(types), sp.max_gpu_types or len(types))
    s_arr = np.array(depths)
    # per task and replica-count value D one row: the probe's counts at D and which depths the task has room at
    # at D (every row is read on its own, so all tasks' rows go through one pass, :func:`_vector_rows`)
    cnt_mid: list[np.ndarray] = []
    cnt_end: list[np.ndarray] = []
    live: list[np.ndarray] = []
    for mbs in sorted({m for g in types for m, _ in options[g]}):
        choices = {g: sorted({t for m, t in options[g] if m == mbs}) for g in types}
        room = {(g, t): np.array([NEVER if cluster is None else sum(c for _, c in caps_for(cluster, g, t, s))
                                  for s in depths], dtype=np.int64) for g in types for t in choices[g]}
        for rc, dist in product(sp.recompute, sp.distributed_optimizer):
            for k in range(1, max_types + 1):
                for subset in combinations(types, k):
                    for tps in product(*(choices[g] for g in subset)):
                        rooms = [room[g, t] for g, t in zip(subset, tps)]
                        ok = np.logical_and.reduce([r > 0 for r in rooms])
                        if not ok.any():
                            continue
                        dcap = np.sum(rooms, axis=0)
                        lcm = math.lcm(*tps)
                        tabs = [_full_dmin(ctx, tables, g, t, mbs, rc, dist, lcm // t if dist else 1)
                                for g, t in zip(subset, tps)]
                        got = _task_counts(tabs, dist)
                        if got is not None:
                            vals, cm, ce = got
                            cnt_mid.append(cm)
                            cnt_end.append(ce)
                            live.append(ok[None, :] & (vals[:, None] <= dcap[None, :]))
    if cnt_mid:
        rows = _vector_rows(L, s_arr, np.concatenate(cnt_mid), np.concatenate(cnt_end), np.concatenate(live))
        for row in unique_rows(rows)[0].tolist():
            out[row[0]].add(tuple(row[1 + L - row[0]:]))
    return out


def _task_counts(tabs: list[tuple[np.ndarray, np.ndarray]],
                 dist: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """([V] the replica counts D at which one task's caps can change, [V, L] and [V, L + 1] the counts at each D
    of the middle and end probe columns) of a task whose types' :func:`_full_dmin` are ``tabs`` (None: no D
    fits anywhere): a task's caps at D on a stage are the layer counts at which every type fits there at D."""
    mid = tabs[0][0] if len(tabs) == 1 else np.maximum.reduce([m for m, _ in tabs])
    end = tabs[0][1] if len(tabs) == 1 else np.maximum.reduce([e for _, e in tabs])
    if dist:
        vals = sorted_unique(np.concatenate([mid.ravel(), end.ravel()]))     # np.unique, without numpy.ma
        vals = vals[vals < NEVER]
        if not len(vals):
            return None
    else:
        vals = np.array([1])
    return (vals, (mid[None, :, :] <= vals[:, None, None]).sum(axis=1),
            (end[None, :, :] <= vals[:, None, None]).sum(axis=1))


def _vector_rows(L: int, s_arr: np.ndarray, cnt_mid: np.ndarray, cnt_end: np.ndarray,
                 live: np.ndarray) -> np.ndarray:
    """[P, 1 + L] the cap vectors of rows of :func:`_task_counts` (``cnt_mid`` [V, L], ``cnt_end`` [V, L + 1],
    one row per task and D) at every depth of ``s_arr`` where ``live`` ([V, S]: the task has room for D
    pipelines there), as rows: the depth S, then the vector in the last S of L columns, the columns before it
    zero. Depth S's vector at D: the counts at D of the ends' column L - S (first), the middle probe's columns
    L - S + 1 .. L - 2 and the ends' column L (last), each at most L - S + 1; its caps are all >= 1 and some
    middle one binds iff the first and last counts are >= 1 and the least middle count (a suffix minimum over
    the columns) is >= 1 and < L - S + 1. Row by row: each input row gives its own rows."""
    # least middle count from column j to L - 2, per row: [V, L - 1] (column L - 1 unused)
    suf = np.minimum.accumulate(cnt_mid[:, L - 2::-1], axis=1)[:, ::-1]
    top = L - s_arr + 1                                                              # [S]
    least = suf[:, L - s_arr + 1]                                                   # [V, S]
    keep = ((cnt_end[:, L - s_arr] >= 1) & (cnt_end[:, L:] >= 1) & (least >= 1) & (least < top[None, :])
            & live)
    vi, si = np.nonzero(keep)
    lay = cnt_mid[vi].copy()                                                        # [P, L]
    first = L - s_arr[si]
    lay[np.arange(len(vi)), first] = cnt_end[vi, first]
    lay[:, L - 1] = cnt_end[vi, L]
    lay = np.minimum(lay, top[si][:, None])
    # a row's vector is its columns from ``first`` on: with the columns before zeroed and the depth in front, equal
    # vectors of a depth are equal rows, made distinct once over every task (the same sets; most rows repeat
    # another task's or D's)
    lay[np.arange(L)[None, :] < first[:, None]] = 0
    return np.column_stack([s_arr[si], lay])


# Only the lowest level that fits where the family's staircase does not (docs/PLANNER.md 2.1): the higher levels
# that can win (few micro-batches per pipeline, slow links) come from planner.search.midlevels.
LOWEST_ONLY = True


@lru_cache(maxsize=1 << 16)
def cap_bound_middles(total: int, caps: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The front-loaded middles (:func:`front_loaded`) under ``caps`` the family lacks, ``total`` layers on
    ``len(caps)`` middle stages: none where the family's staircase (level ``ceil(total / n)``) fits under the
    caps; else the one at the lowest level that fits (with :data:`LOWEST_ONLY` False: at every level where a
    cap binds). Levels up to ``min(caps)`` have no binding cap, and above ``max(caps)`` every level gives the
    middle of level ``max(caps)``."""
    n = len(caps)
    free = [total] * n
    m0 = -(-total // n)
    if LOWEST_ONLY:
        stair = front_loaded(total, free, m0)
        if all(c <= u for c, u in zip(stair, caps)):
            return ()
        if min(caps) < 1 or sum(caps) < total:
            return ()
        level = m0
        while sum(min(u, level) for u in caps) < total:
            level += 1
        return (front_loaded(total, caps, level),)
    out = []
    for level in range(max(m0, min(caps) + 1), min(total - n + 1, max(caps)) + 1):
        c = front_loaded(total, caps, level)
        if c is not None and c != front_loaded(total, free, level):
            out.append(c)
    return tuple(out)


def lowest_middles(total: int, caps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([V', n] :func:`cap_bound_middles` (with :data:`LOWEST_ONLY`) of every row of ``caps`` ([V, n]) at once,
    [V'] the rows they belong to): rows whose family staircase fits, or where no middle fits, give none."""
    n = caps.shape[1]
    caps = np.minimum(caps, total - n + 1)
    m0 = -(-total // n)
    stair = np.array(front_loaded(total, [total] * n, m0))
    need = ~(caps >= stair).all(axis=1) & (caps.min(axis=1) >= 1) & (caps.sum(axis=1) >= total)
    caps = caps[need]
    if not len(caps):
        return np.zeros((0, n), dtype=np.int64), np.zeros(0, dtype=np.int64)
    levels = np.arange(m0, total - n + 2)
    room = np.minimum(caps[:, None, :], levels[None, :, None]).sum(axis=2)      # [V, levels]
    level = levels[np.argmax(room >= total, axis=1)]
    room = np.minimum(caps, level[:, None])
    out = np.zeros_like(caps)
    used = np.zeros(len(caps), dtype=np.int64)
    for s in range(n):                              # front_loaded, row by row at once
        out[:, s] = np.minimum(room[:, s], total - used - (n - 1 - s))
        used += out[:, s]
    return out, np.nonzero(need)[0]


def cap_bound_splits(num_layers: int, s_num: int, caps: set[tuple[int, ...]], family: np.ndarray) -> np.ndarray:
    """[K, S] the splits of :func:`cap_bound_middles` for every cap vector (length S: first, middles, last) with
    every first and last stage size within the vector's first and last caps, less those in ``family``;
    sorted."""
    L, n = num_layers, s_num - 2
    if not caps:
        return np.zeros((0, s_num), dtype=np.int64)
    arr = np.array(sorted(caps), dtype=np.int64)
    if LOWEST_ONLY:                                 # every total at once (planner.search.levelbatch)
        rows = lowest_rows(L, n, arr)
        if not len(rows) or not len(family):
            return rows
        return rows[fresh_rows(rows, np.asarray(family, dtype=np.int64).reshape(-1, s_num))].reshape(-1, s_num)
    have = {tuple(r) for r in family.tolist()}
    out: set[tuple[int, ...]] = set()
    for total in range(n, L - 1):
        ends = L - total                            # first + last
        keys = {(m, cap[0], cap[-1]) for cap in caps
                for m in cap_bound_middles(total, tuple(min(x, total - n + 1) for x in cap[1:-1]))}
        for m, a_cap, c_cap in keys:
            for a in range(max(1, ends - c_cap), min(ends - 1, a_cap) + 1):
                row = (a,) + m + (ends - a,)
                if row not in have:
                    out.add(row)
    return np.array(sorted(out), dtype=np.int64).reshape(-1, s_num)
