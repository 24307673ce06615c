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

from functools import lru_cache
import math

import numpy as np

from planner.cluster import ClusterSpec
from planner.network import Endpoint
from planner.search.netvec import checked_time
from planner.search.splits import front_loaded
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext

TOL = 1e-9


def level_slack_layers(ctx: SimContext, tables, options: dict[str, list[tuple[int, int]]],
                       cluster: ClusterSpec | None) -> float:
    """``Q = max 2 P / alpha`` over every (type, micro-batch size, TP) of ``options`` and every zone of the
    type in ``cluster``: ``P`` the search's transfer time of one boundary inside a pool pipeline there (the
    link and concurrency of ``pools.pool_p2p_s``), ``alpha`` the type's smallest per-layer forward plus
    backward seconds without recomputation (recomputation only adds backward seconds: a smaller ratio).
    0 with blocking p2p; ``math.inf`` without a cluster (zones unknown: every level)."""
    if ctx.settings.p2p_blocking:
        return 0.0
    if cluster is None:
        return math.inf
    elem = F.bytes_per_element(tables.space.precision)
    q = 0.0
    for g, opts in options.items():
        zones = sorted({p.zone for p in cluster.pools if p.gpu_type == g and p.count > 0})
        for mbs, tp in opts:
            tt = tables.table(g, tp, mbs)
            alpha = float((np.diff(tt.cum_fwd_s) + np.diff(tt.cum_bwd_s)).min()) * ctx.settings.compute_scale
            if not alpha > 0:
                return math.inf
            nbytes = ctx.model.boundary_activation_bytes(mbs, elem)
            conc = tp if ctx.settings.p2p_all_tp_ranks else 1
            for z in zones:
                p = checked_time(ctx.network.link(Endpoint(g, z), Endpoint(g, z), concurrent=conc), nbytes)
                q = max(q, 2.0 * p / alpha)
    return q


@lru_cache(maxsize=1 << 16)
def higher_middles(total: int, caps: tuple[int, ...], slack: float) -> tuple[tuple[int, ...], ...]:
    """The :func:`front_loaded` middles of ``total`` layers under ``caps`` (one per middle stage, already at
    most ``total - n + 1``) at every level M above the lowest level ``M_low`` where one exists and below
    ``max(lowest middle) + slack``, without repeats (a level above every cap repeats the largest cap's)."""
    n = len(caps)
    if n == 0 or min(caps) < 1 or sum(caps) < total or total < n:
        return ()
    level = -(-total // n)
    while sum(min(u, level) for u in caps) < total:
        level += 1
    low = front_loaded(total, caps, level)
    bound = max(low) + slack
    out: list[tuple[int, ...]] = []
    prev = low
    for m in range(level + 1, min(total - n + 1, max(caps)) + 1):
        if not m < bound + TOL * max(1.0, bound):
            break
        c = front_loaded(total, caps, m)
        if c is not None and c != prev:
            out.append(c)
            prev = c
    return tuple(out)


def level_splits(num_layers: int, s_num: int, caps: set[tuple[int, ...]], slack: float,
                 have: np.ndarray) -> np.ndarray:
    """[K, S] the splits of :func:`higher_middles` for every cap vector of ``caps`` (length S: first, middles,
    last) and the cap-free vector, with every first and last stage size within the vector's first and last
    caps, less the rows of ``have``; sorted. ``slack``: :func:`level_slack_layers` (0: none)."""
    L, n = num_layers, s_num - 2
    if n < 2 or not slack > 0:
        return np.zeros((0, s_num), dtype=np.int64)
    top = L - s_num + 1
    seen = {tuple(r) for r in np.asarray(have).tolist()}
    rows: set[tuple[int, ...]] = set()
    vectors = set(caps) | {(top,) * s_num}
    for total in range(n, L - 1):
        ends = L - total
        keys = {(tuple(min(x, total - n + 1) for x in cap[1:-1]), cap[0], cap[-1]) for cap in vectors}
        for mid_caps, a_cap, c_cap in keys:
            for m in higher_middles(total, mid_caps, slack):
                for a in range(max(1, ends - c_cap), min(ends - 1, a_cap) + 1):
                    row = (a,) + m + (ends - a,)
                    if row not in seen:
                        rows.add(row)
    return np.array(sorted(rows), dtype=np.int64).reshape(-1, s_num)
