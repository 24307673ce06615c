"""Middle stages above the lowest fitting level: the front-loaded middles a pool plan may need beyond the lowest
level (docs/PLANNER.md 1 item 4 and 2.1, "Uneven middle stages", (b)).

Contract: :func:`level_slack_layers` gives ``Q``, the most layers by which a higher level's largest middle stage
can exceed the lowest level's and still win, over every task the search's GPU options and cluster can form:
``2 P / alpha`` (``P`` one boundary transfer inside a pool's pipeline, ``alpha`` one layer's forward plus
backward seconds), 0 with blocking p2p (round trips never bind there), infinite without a cluster (every
level). :func:`level_splits` lists, for every cap vector (:func:`planner.search.midcaps.cap_vectors`, plus
the cap-free one) and every middle total R, :func:`planner.search.splits.front_loaded` at every level M with
``M_low < M < max(lowest middle) + Q`` with every first and last stage size the vector allows, less the
splits already listed. Why no level at or above that bound can win: a higher level beats the lowest one on a
pipeline only through a round trip from a stage k >= 2 above every stage's busy time, and that round trip is
below ``alpha max(lowest middle) + overhead + 2 P`` while the higher level's busiest stage is at least
``alpha M + overhead`` (docs/PLANNER.md 2.1). Pure given the context; no cost model of its own beyond the
search's type tables and links.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
import math

import numpy as np

from planner.cluster import ClusterSpec
from planner.network import Endpoint
from planner.search.levelbatch import fresh_rows, level_rows
from planner.search.netvec import checked_time
from planner.search.splits import front_loaded
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext

TOL = 1e-9


@dataclass(frozen=True)
class Slack:
    """In layers, over every pipeline the search can form: ``middle`` = max ``2 P / alpha``, ``first`` = max
    ``(2 P - e) / alpha``, ``last`` = max ``(2 P - h) / alpha`` (``e``, ``h``: the embedding's and the head's
    forward plus backward seconds). A level M above the lowest can win only if ``M < max(low) + middle``, the
    first stage size ``a < max(low) + first`` and the last ``c < max(low) + last`` (docs/PLANNER.md 2.1)."""

    middle: float
    first: float
    last: float


NONE = Slack(0.0, -math.inf, -math.inf)
EVERY = Slack(math.inf, math.inf, math.inf)


def level_slack_layers(ctx: SimContext, tables, options: dict[str, list[tuple[int, int]]],
                       cluster: ClusterSpec | None) -> Slack:
    """:class:`Slack` over every (type, micro-batch size, TP) of ``options`` (:func:`slack_of`)."""
    return slack_of(ctx, tables, [(g, mbs, tp) for g, opts in options.items() for mbs, tp in opts], cluster)


def slack_of(ctx: SimContext, tables, triples, cluster: ClusterSpec | None) -> Slack:
    """:class:`Slack` over the pipelines of every (type, micro-batch size, TP) of ``triples`` in every zone of
    the type in ``cluster``: ``P`` the search's transfer time of one boundary inside a pool pipeline there (the
    link and concurrency of ``pools.pool_p2p_s``), ``alpha`` the type's per-layer forward plus backward seconds
    without recomputation (the smallest) and with it (its backward replays the forward: the largest), each ratio
    taken at the alpha that makes it largest (``2 P - h`` may be negative), ``e`` and ``h`` from the type
    table, all times the compute scale. :data:`NONE` with blocking p2p; :data:`EVERY` without a
    cluster (zones unknown: every level)."""
    if ctx.settings.p2p_blocking:
        return NONE
    if cluster is None:
        return EVERY
    mid, first, last = 0.0, -math.inf, -math.inf
    shared = ctx is tables.ctx and cluster is tables.cluster     # the search's own: memoised per triple
    for triple in triples:
        key = ("slack-of", triple)
        one = tables.memo.get(key) if shared else None
        if one is None:
            one = _triple_slack(ctx, tables, triple, cluster)
            if shared:
                tables.memo[key] = one
        if one is EVERY:
            return EVERY
        mid, first, last = max(mid, one.middle), max(first, one.first), max(last, one.last)
    return Slack(mid, first, last)


def _triple_slack(ctx: SimContext, tables, triple: tuple[str, int, int], cluster: ClusterSpec) -> Slack:
    """:func:`slack_of` of one (type, micro-batch size, TP) (:data:`EVERY` where an alpha is not positive)."""
    g, mbs, tp = triple
    elem = F.bytes_per_element(tables.space.precision)
    scale = ctx.settings.compute_scale
    mid, first, last = 0.0, -math.inf, -math.inf
    zones = sorted({p.zone for p in cluster.pools if p.gpu_type == g and p.count > 0})
    tt = tables.table(g, tp, mbs)
    fwd, bwd = np.diff(tt.cum_fwd_s), np.diff(tt.cum_bwd_s)
    # per-layer seconds without and with recomputation (its backward replays the forward): 2P / alpha is
    # largest at the smallest, (2P - e) / alpha may be negative and is then largest at the largest
    alphas = (float((fwd + bwd).min()) * scale, float((2 * fwd + bwd).max()) * scale)
    if not min(alphas) > 0:
        return EVERY
    emb, head = (tt.emb_fwd_s + tt.emb_bwd_s) * scale, (tt.head_fwd_s + tt.head_bwd_s) * scale
    nbytes = ctx.model.boundary_activation_bytes(mbs, elem)
    conc = tp if ctx.settings.p2p_all_tp_ranks else 1
    for z in zones:
        p2 = 2.0 * checked_time(ctx.network.link(Endpoint(g, z), Endpoint(g, z), concurrent=conc), nbytes)
        mid = max(mid, p2 / alphas[0])
        first = max([first] + [(p2 - emb) / a for a in alphas])
        last = max([last] + [(p2 - head) / a for a in alphas])
    return Slack(mid, first, last)


def keep(need: np.ndarray, slack: Slack) -> np.ndarray:
    """[K] the rows of ``need`` ([K, 3]: what :func:`level_splits` gives) that a task with ``slack`` searches."""
    b = np.array([slack.middle, slack.first, slack.last])
    tol = TOL * np.maximum(1.0, np.abs(np.where(np.isfinite(b), b, 0.0)))
    return (need < (b + tol)[None, :]).all(axis=1)


def _below(x: float, bound: float) -> bool:
    return x < bound + TOL * max(1.0, abs(bound))


@lru_cache(maxsize=1 << 16)
def higher_middles(total: int, caps: tuple[int, ...], slack: float) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """(largest stage of the lowest level's middle, the :func:`front_loaded` middles of ``total`` layers under
    ``caps`` (one per middle stage, already at most ``total - n + 1``) at every level M above the lowest level
    where one exists and below that largest stage + ``slack``, without repeats; a level above every cap repeats
    the largest cap's). (0, ()) where no middle fits."""
    n = len(caps)
    if n == 0 or min(caps) < 1 or sum(caps) < total or total < n:
        return 0, ()
    level = -(-total // n)
    while sum(min(u, level) for u in caps) < total:
        level += 1
    low = front_loaded(total, caps, level)
    out: list[tuple[int, ...]] = []
    prev = low
    for m in range(level + 1, min(total - n + 1, max(caps)) + 1):
        if not _below(m, max(low) + slack):
            break
        c = front_loaded(total, caps, m)
        if c is not None and c != prev:
            out.append(c)
            prev = c
    return max(low), tuple(out)


def _front_loaded_rows(total: int, caps: np.ndarray, level: np.ndarray) -> np.ndarray:
    """:func:`front_loaded` of every row of ``caps`` ([V, n]) at its ``level`` ([V]) at once (rows where none
    exists: undefined, the caller masks them)."""
    n = caps.shape[1]
    room = np.minimum(caps, level[:, None])
    # prefix sums: used_s = min(room_0 + .. + room_s, total - (n - 1 - s)) (every room >= 1)
    used = np.minimum(np.cumsum(room, axis=1), total - (n - 1 - np.arange(n))[None, :])
    return np.diff(used, axis=1, prepend=0)


def higher_middles_rows(total: int, caps: list[tuple[int, ...]],
                        slack: float) -> list[tuple[int, tuple[tuple[int, ...], ...]]]:
    """:func:`higher_middles` of every cap tuple of ``caps`` (one length n) at once, in order."""
    if not caps:
        return []
    low_max, at, mids = higher_middles_arrays(total, np.array(caps, dtype=np.int64), slack)
    out: list[list[tuple[int, ...]]] = [[] for _ in caps]
    for i, m in zip(at.tolist(), mids.tolist()):
        out[i].append(tuple(m))
    return [(int(m), tuple(o)) for m, o in zip(low_max.tolist(), out)]


def higher_middles_arrays(total: int, arr: np.ndarray, slack: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`higher_middles` of every row of ``arr`` ([V, n] caps) as arrays: ([V] the lowest level's largest
    middle stage (0 where no middle fits), [E] the row of each higher middle, [E, n] the higher middles), each
    row's middles in level order."""
    n = arr.shape[1]
    ok = (arr.min(axis=1) >= 1) & (arr.sum(axis=1) >= total) & (total >= n)
    levels = np.arange(-(-total // n), total - n + 2)
    room = np.minimum(arr[:, None, :], levels[None, :, None]).sum(axis=2)
    ok &= (room >= total).any(axis=1)
    low_level = levels[np.argmax(room >= total, axis=1)]
    prev = _front_loaded_rows(total, arr, low_level)
    low_max = np.where(ok, prev.max(axis=1), 0)
    bound = low_max + slack
    bound_tol = bound + TOL * np.maximum(1.0, np.abs(np.where(np.isfinite(bound), bound, 0.0)))
    top = np.minimum(total - n + 1, arr.max(axis=1))
    # every level above the lowest at once: a row is active at low + 1 .. its last level below both bounds
    lv = low_level[:, None] + np.arange(1, total + 1)[None, :]                   # [V, total]
    active = ok[:, None] & (lv <= top[:, None]) & (lv < bound_tol[:, None])
    depth = int(active.sum(axis=1).max()) if len(arr) else 0
    if depth == 0:
        return low_max, np.zeros(0, dtype=np.int64), np.zeros((0, n), dtype=np.int64)
    lv, active = lv[:, :depth], active[:, :depth]
    cur = _front_loaded_rows(total, np.repeat(arr, depth, axis=0), lv.reshape(-1)).reshape(len(arr), depth, n)
    # an active level follows the lowest (d = 1) or an active one: its middle is new if it differs from that
    before = np.concatenate([prev[:, None, :], cur[:, :-1, :]], axis=1)
    new = active & (cur != before).any(axis=2)
    at, d = np.nonzero(new)                     # row-major: per row, levels ascending
    return low_max, at, cur[at, d]


def level_splits(num_layers: int, s_num: int, caps: set[tuple[int, ...]], slack: Slack,
                 have: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """([K, S] the splits of :func:`higher_middles` for every cap vector of ``caps`` (length S: first, middles,
    last) and the cap-free vector, with every first and last stage size within the vector's first and last
    caps and below the lowest middle's largest stage + ``slack.first`` / ``slack.last``, less the rows of
    ``have``, sorted; [K, 3] per split what it needs of a task's slack: the least (M - max(low), a - max(low),
    c - max(low)) over the vectors that give it, each part on its own: :func:`keep` holds a task's
    rows and a superset of them). ``slack``: :func:`level_slack_layers`, over every task."""
    L, n = num_layers, s_num - 2
    if n < 2 or not slack.middle > 0:
        return np.zeros((0, s_num), dtype=np.int64), np.zeros((0, 3))
    top = L - s_num + 1
    vec = np.array(sorted(set(caps) | {(top,) * s_num}), dtype=np.int64)
    rows, need = level_rows(L, n, vec, slack, _last_below)      # every total at once (planner.search.levelbatch)
    if not len(rows):
        return np.zeros((0, s_num), dtype=np.int64), np.zeros((0, 3))
    have = np.asarray(have, dtype=np.int64).reshape(-1, s_num)
    if len(have):
        fresh = fresh_rows(rows, have)
        rows, need = rows[fresh], need[fresh]
    order = np.lexsort(rows.T[::-1])
    return rows[order].reshape(-1, s_num), need[order].astype(float).reshape(-1, 3)


@lru_cache(maxsize=1 << 12)
def _last_below(bound: float) -> int:
    """The largest integer x with ``_below(x, bound)`` (a very large number for an infinite bound)."""
    if bound == math.inf:
        return 1 << 30
    if bound == -math.inf:
        return -(1 << 30)
    x = math.ceil(bound) - 1
    while _below(x + 1, bound):
        x += 1
    while not _below(x, bound):
        x -= 1
    return x


def add_levels(tables, s_num: int, caps: set[tuple[int, ...]], base: np.ndarray) -> np.ndarray:
    """``base`` (the family and the cap-bound middles of depth ``s_num``) followed by :func:`level_splits` over
    the slack of every task of ``tables``' options and cluster; what each new split needs goes to
    ``tables.memo`` for :func:`task_keep`."""
    slack = level_slack_layers(tables.ctx, tables, tables.options, tables.cluster)
    higher, need = level_splits(tables.ctx.model.num_layers, s_num, caps, slack, base)
    if not len(higher):
        return base
    tables.memo[("level-need", s_num)] = (len(base), need)
    return np.concatenate([base, higher])


def task_keep(tables, combo, mbs: int, s_num: int) -> np.ndarray | bool:
    """[K] the splits of depth ``s_num`` a task of ``combo`` ((type, TP) pairs) at ``mbs`` searches: every split
    of the family and the cap-bound middles, and the higher levels its own pipelines' :func:`slack_of` allows
    (:func:`keep`); True where :func:`add_levels` added none."""
    got = tables.memo.get(("level-need", s_num))
    if got is None:
        return True
    key = ("level-keep", combo, mbs, s_num)
    if key not in tables.memo:
        n_base, need = got
        slack = slack_of(tables.ctx, tables, [(g, mbs, t) for g, t in combo], tables.cluster)
        tables.memo[key] = np.concatenate([np.ones(n_base, dtype=bool), keep(need, slack)])
    return tables.memo[key]
