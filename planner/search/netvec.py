"""Vectorised link times and gradient-sync times (numpy mirrors of :mod:`planner.network` and
:func:`planner.simulator.time.stage_sync`).

A stage's replicas are ordered by (zone, GPU type) in every plan the search builds, so a stage's ring is a
sequence of *groups* (zone, type, tp, count). Which ring pairs exist depends only on the groups present and on
whether a group holds one replica or more; the sync time then depends on the group sizes.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from planner.network import Endpoint, Link, _envelope, _turns, _valid_from
from planner.search.rows import int_row_sum, sorted_unique, unique_first, unique_inverse
from planner.simulator import formulas as F
from planner.search.tied import TiedSync
from planner.simulator.settings import SimContext


def fit_refused(link: Link, nbytes: np.ndarray) -> np.ndarray:
    """Where :meth:`Link.checked_time_s` refuses a size (the simulator raises there): the raw fit is not a
    positive finite bandwidth, or the size is below the fit's valid range (:meth:`Link.check_size`)."""
    nbytes = np.asarray(nbytes, dtype=float)
    if link.fit_gb_per_s is None:
        v = np.full(nbytes.shape, link.max_bw_bytes_per_s / 1e9)
        return (nbytes > 0) & ~(np.isfinite(v) & (v > 0))
    a, b, c = link.fit_gb_per_s
    u = np.log2(np.maximum(nbytes, 1.0) / 1e6)
    if a < 0:
        u = np.minimum(u, -b / (2 * a))
    with np.errstate(invalid="ignore", over="ignore"):
        v = a * u * u + b * u + c
        bad = ~(np.isfinite(v) & (v > 0))
    start = _valid_start(link.fit_gb_per_s, link.max_bw_bytes_per_s, link.min_bw_bytes_per_s)
    return (nbytes > 0) & (bad | (nbytes < 2.0 ** (start / 4)))


@lru_cache(maxsize=1024)
def _valid_start(fit: tuple[float, float, float], hi: float, lo: float | None) -> int:
    return _valid_from(fit, hi, lo)


@lru_cache(maxsize=256)
def _envelope_array(fit: tuple[float, float, float], hi: float, lo: float | None) -> np.ndarray:
    """:func:`planner.network._envelope` as a read-only array (built once per link, not once per call)."""
    grid = np.asarray(_envelope(fit, hi, lo))
    grid.setflags(write=False)
    return grid


@lru_cache(maxsize=256)
def _turns_arrays(fit: tuple[float, float, float], hi: float, lo: float | None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`planner.network._turns` as read-only arrays."""
    sizes, peaks = (np.asarray(x, dtype=float) for x in _turns(fit, hi, lo))
    sizes.setflags(write=False)
    peaks.setflags(write=False)
    return sizes, peaks


@lru_cache(maxsize=256)
def _fit_tables(fit: tuple[float, float, float], hi: float, lo: float | None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(envelope grid, turn sizes, [-inf, turn peaks...], the valid start in bytes) of a fit: one cache look-up
    per :func:`link_time` call instead of three. The -inf in front stands for "below the first turn": the max
    with it leaves the time as it is (``np.maximum(t, -inf)`` is ``t``, nan included)."""
    sizes, peaks = _turns_arrays(fit, hi, lo)
    ext = np.concatenate([[-np.inf], peaks])
    ext.setflags(write=False)
    return _envelope_array(fit, hi, lo), sizes, ext, 2.0 ** (_valid_start(fit, hi, lo) / 4)


def link_time(link: Link, nbytes: np.ndarray) -> np.ndarray:
    """:meth:`Link.checked_time_s` for an array of sizes, with inf where it would refuse the size (no plan
    that sends such a message is ever chosen; ``simulate`` would reject it).

    The same numbers as ``nbytes / bandwidth`` floored by the envelope (grid and turns), with inf where
    :func:`fit_refused`: the fit's value is computed once for both (the same operations in the same order).
    Table look-ups by ``take`` (several times faster than fancy indexing on these sizes; the same values)."""
    nbytes = np.asarray(nbytes, dtype=float)
    hi = link.max_bw_bytes_per_s
    fit = link.fit_gb_per_s
    if fit is None:
        out = np.where(nbytes <= 0, 0.0, link.latency_s + nbytes / np.full(nbytes.shape, hi, dtype=float))
        v = hi / 1e9
        if np.isfinite(v) and v > 0:
            return out
        return np.where(nbytes > 0, np.inf, out)
    lo_given = link.min_bw_bytes_per_s
    lo = lo_given if lo_given is not None else hi * 0.01
    grid, sizes, ext, start_bytes = _fit_tables(fit, hi, lo_given)
    a, b, c = fit
    m = np.maximum(nbytes, 1.0)
    u = np.log2(m / 1e6)
    if a < 0:
        u = np.minimum(u, -b / (2 * a))
    v = a * u * u + b * u + c
    raw = nbytes / np.minimum(hi, np.maximum(lo, v * 1e9))
    i = np.floor(np.log2(m) * 4).astype(np.int64)
    np.maximum(i, 0, out=i)
    np.minimum(i, len(grid) - 1, out=i)
    raw = np.maximum(raw, grid.take(i))
    if len(sizes):      # the running max of the raw time at the last turn at or below each size
        raw = np.maximum(raw, ext.take(np.searchsorted(sizes, nbytes, side="right")))
    out = np.where(nbytes <= 0, 0.0, link.latency_s + raw)
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(v) & (v > 0))
    return np.where((nbytes > 0) & (bad | (nbytes < start_bytes)), np.inf, out)


def floor_times(links: list[Link], nbytes: np.ndarray, prep: tuple | None = None) -> np.ndarray:
    """[len(links), len(nbytes)]: row j is :func:`link_time` of ``links[j]`` at ``nbytes`` raised to the start of
    its fit's valid range (``planner.search.syncbound.floor_time``), bit for bit: the links with a fit in one
    pass of the same element-wise operations on [links, sizes] arrays, each link's constants a column (``u``
    capped at +inf where ``a >= 0``: ``minimum(u, inf)`` is ``u``; the grid and turn tables padded, each row
    indexed within its own length: the count of turn sizes <= a size is ``searchsorted(..., 'right')``, the
    padding +inf counted by no finite size); links without a fit, and non-finite sizes, one by one. ``prep``:
    :func:`floor_prep` of ``links`` (those columns and tables depend on the links only: a caller timing the same
    links at many sizes builds them once)."""
    x = np.asarray(nbytes, dtype=float)
    out = np.empty((len(links), len(x)))
    fit_rows = [j for j, lk in enumerate(links) if lk.fit_gb_per_s is not None] if np.isfinite(x).all() else []
    batched = set(fit_rows)
    for j, lk in enumerate(links):
        if j not in batched:
            xj = x if lk.fit_gb_per_s is None else np.maximum(x, lk.valid_from_bytes())
            out[j] = link_time(lk, xj)
    if not fit_rows:
        return out
    a, b, c, hi, lo, lat, start, n_grid, grid, ext, sizes, rows, cap = floor_prep(links) if prep is None else prep
    X = np.maximum(x[None, :], start)                  # floor_time: sizes below the valid range read at its start
    m = np.maximum(X, 1.0)
    u = np.log2(m / 1e6)
    u = np.minimum(u, cap)
    v = a * u * u + b * u + c
    raw = X / np.minimum(hi, np.maximum(lo, v * 1e9))
    i = np.floor(np.log2(m) * 4).astype(np.int64)
    np.maximum(i, 0, out=i)
    np.minimum(i, n_grid - 1, out=i)
    raw = np.maximum(raw, grid.take(rows * grid.shape[1] + i))
    turns = (sizes[:, None, :] <= X[:, :, None]).sum(axis=2)
    raw = np.maximum(raw, ext.take(rows * ext.shape[1] + turns))
    res = np.where(X <= 0, 0.0, lat + raw)
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(v) & (v > 0))
    out[fit_rows] = np.where((X > 0) & (bad | (X < start)), np.inf, res)
    return out


def floor_prep(links: list[Link]) -> tuple | None:
    """The per-link columns and padded tables :func:`floor_times` reads for the links with a fit (None: none has
    one): (a, b, c, hi, lo, latency, valid start, grid length, grid, turn peaks, turn sizes, row index, u's cap)."""
    fit_rows = [j for j, lk in enumerate(links) if lk.fit_gb_per_s is not None]
    if not fit_rows:
        return None
    tabs = [_fit_tables(links[j].fit_gb_per_s, links[j].max_bw_bytes_per_s, links[j].min_bw_bytes_per_s)
            for j in fit_rows]
    col = lambda vals: np.array(vals, dtype=float)[:, None]      # noqa: E731
    fits = [links[j].fit_gb_per_s for j in fit_rows]
    a, b, c = (col([f[i] for f in fits]) for i in range(3))
    hi = col([links[j].max_bw_bytes_per_s for j in fit_rows])
    lo = col([links[j].min_bw_bytes_per_s if links[j].min_bw_bytes_per_s is not None
              else links[j].max_bw_bytes_per_s * 0.01 for j in fit_rows])
    lat = col([links[j].latency_s for j in fit_rows])
    start = col([t[3] for t in tabs])
    n_grid = np.array([len(t[0]) for t in tabs], dtype=np.int64)[:, None]
    grid = np.zeros((len(tabs), int(n_grid.max())))
    ext = np.full((len(tabs), max(len(t[2]) for t in tabs)), -np.inf)
    sizes = np.full((len(tabs), max(1, max(len(t[1]) for t in tabs))), np.inf)
    for r, (g, sz, e, _) in enumerate(tabs):
        grid[r, :len(g)], ext[r, :len(e)], sizes[r, :len(sz)] = g, e, sz
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = np.where(a < 0, -b / (2 * a), np.inf)
    out = (a, b, c, hi, lo, lat, start, n_grid, grid, ext, sizes, np.arange(len(tabs))[:, None], cap)
    for x in out:           # kept by callers across calls: read-only
        x.flags.writeable = False
    return out


def link_params(link: Link) -> tuple:
    """What :func:`link_time` reads of a link (links equal in these have equal times)."""
    return (link.max_bw_bytes_per_s, link.latency_s, link.fit_gb_per_s, link.min_bw_bytes_per_s)


def checked_time(link: Link, nbytes: float) -> float:
    """:func:`link_time` of one size (inf where ``simulate`` would refuse it)."""
    return float(link_time(link, np.array([nbytes], dtype=float))[0])


@dataclass(frozen=True)
class Group:
    zone: str
    gpu_type: str
    tp: int


class LinkCache:
    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        self._links: dict[tuple, Link] = {}
        self._times: dict[tuple, float] = {}
        self.patterns: dict[tuple, object] = {}
        self.tied = TiedSync(ctx)          # tied-embedding all-reduce per first/last-stage layout

    def get(self, a: Group, b: Group, conc: int) -> Link:
        key = (a.zone, a.gpu_type, b.zone, b.gpu_type, conc)
        if key not in self._links:
            self._links[key] = self.ctx.network.link(Endpoint(a.gpu_type, a.zone), Endpoint(b.gpu_type, b.zone),
                                                     concurrent=conc)
        return self._links[key]

    def checked(self, a: Group, b: Group, conc: int, nbytes: float) -> float:
        """:func:`checked_time` of ``get(a, b, conc)`` at ``nbytes``, memoised."""
        key = (a.zone, a.gpu_type, b.zone, b.gpu_type, conc, nbytes)
        t = self._times.get(key)
        if t is None:
            t = self._times[key] = checked_time(self.get(a, b, conc), nbytes)
        return t


@dataclass(frozen=True)
class _Pattern:
    """Ring structure of one presence pattern (which columns hold 0, 1 or >= 2 replicas)."""

    flat: dict[tuple[int, int], int]            # the ring's pairs (-> order of first appearance)
    zones: list[tuple[list[int], dict[tuple[int, int], int]]]   # per zone: columns, member pairs
    leaders: dict[tuple[int, int], int]
    n_zones: int
    egress_usd_per_byte: float                  # summed over the cross-zone edges of a zone-ordered ring
    n_edges: int


def _ring(cols: list[int], many: list[bool]) -> dict[tuple[int, int], int]:
    seq: dict[tuple[int, int], int] = {}
    for i, c in enumerate(cols):
        if many[i]:
            seq.setdefault((c, c), len(seq))
        if len(cols) > 1:
            seq.setdefault((c, cols[(i + 1) % len(cols)]), len(seq))
    return seq


def _pattern(ctx: SimContext, groups: list[Group], key: np.ndarray) -> _Pattern:
    cols = [i for i in range(len(groups)) if key[i] > 0]
    many = [bool(key[i] >= 2) for i in cols]
    zones = sorted({groups[i].zone for i in cols})
    per_zone = []
    for z in zones:
        zc = [c for c in cols if groups[c].zone == z]
        zm = [bool(key[c] >= 2) for c in zc]
        per_zone.append((zc, _ring(zc, zm) if (len(zc) > 1 or zm[0]) else {}))
    leaders = [zc[0] for zc, _ in per_zone]
    edges = {(zones[i], zones[(i + 1) % len(zones)]) for i in range(len(zones))} if len(zones) > 1 else set()
    price = sum(ctx.network.egress_usd_per_byte(a, b) for a, b in edges)
    return _Pattern(_ring(cols, many), per_zone, _ring(leaders, [False] * len(leaders)), len(zones), price,
                    len(edges))


class _Rings:
    """Ring times per row over the links of a pattern's ring pairs (one per concurrency)."""

    def __init__(self, cache: LinkCache, groups: list[Group], conc: int) -> None:
        self.cache, self.groups, self.conc = cache, groups, conc

    def link(self, q: tuple[int, int]) -> Link:
        return self.cache.get(self.groups[q[0]], self.groups[q[1]], self.conc)

    def ring(self, ranks: list[dict], inv: np.ndarray, n: np.ndarray, nbytes: np.ndarray,
             param: np.ndarray | None = None, halves: tuple[int, int] = (1, 1)) -> np.ndarray:
        """Ring time per row (``zone_aware_sync``'s rule): the largest over the pairs present in the row's
        pattern (``ranks[inv[row]]``) of the ring time on that pair's link, an all-reduce of ``nbytes`` over
        ``n`` members, or with ``param`` (the distributed optimizer) ``halves`` = (gradient, parameter) ring
        phases (:func:`F.ring_halves_s`). Each link's ring time is the simulator's expression on the same
        numbers and a maximum is exact, so the result is the simulator's (as exactly as :func:`link_time` is
        :meth:`Link.checked_time_s`; inf where it would refuse a size on any of the ring's links)."""
        return self.rings([(ranks, n, halves)], inv, nbytes, param)[0]

    def rings(self, calls: list[tuple[list[dict], np.ndarray, tuple[int, int]]], inv: np.ndarray,
              nbytes: np.ndarray, param: np.ndarray | None = None) -> list[np.ndarray]:
        """:meth:`ring` of every (ranks, n, halves) of ``calls`` on the same rows and sizes (a sync's flat ring,
        the rings inside each zone and the leaders' ring), each link's times computed in one :func:`link_time`
        call over the rows of every call that holds it: :func:`link_time` is element-wise, so a concatenation
        gives every element the time of one call per ring, and a maximum is exact in any order."""
        outs = [np.zeros(len(inv)) for _ in calls]
        # pairs on links of equal parameters give a row equal times (elementwise in the row's sizes): one
        # computation over the rows holding any of them, maxed in once (a maximum is exact in any order)
        by_link: dict[tuple, tuple[Link, dict[int, list[tuple[int, int]]]]] = {}
        for ci, (ranks, _, _) in enumerate(calls):
            for q in sorted({q for r in ranks for q in r}):
                lk = self.link(q)
                by_link.setdefault(link_params(lk), (lk, {}))[1].setdefault(ci, []).append(q)
        many = [n > 1 for _, n, _ in calls]                 # per call, read for every link (the same arrays)
        n_min1 = [np.maximum(n, 1) for _, n, _ in calls]
        for lk, per_call in by_link.values():
            parts = []      # (call, selected rows, their member counts)
            for ci, qs in per_call.items():
                ranks = calls[ci][0]
                sel = (np.array([qs[0] in r for r in ranks]) if len(qs) == 1 else
                       np.array([any(q in r for q in qs) for r in ranks]))[inv] & many[ci]
                if sel.any():
                    parts.append((ci, sel, n_min1[ci][sel]))
            if not parts:
                continue
            chunks = [nbytes[sel] / n_sel for _, sel, n_sel in parts]
            if param is not None:   # both chunks in one link_time call (elementwise: the same times as two calls)
                chunks += [param[sel] / n_sel for _, sel, n_sel in parts]
            times = link_time(lk, chunks[0] if len(chunks) == 1 else np.concatenate(chunks))
            at, k = 0, sum(len(n_sel) for _, _, n_sel in parts)
            for ci, sel, n_sel in parts:
                tg = times[at:at + len(n_sel)]
                if param is None:
                    t = F.ring_s(n_sel, tg)
                else:
                    halves = calls[ci][2]
                    t = F.ring_halves_s(n_sel, halves[0], tg, halves[1], times[k + at:k + at + len(n_sel)],
                                        self.cache.ctx.settings.sharded_collective_scale)
                at += len(n_sel)
                out = outs[ci]
                out[sel] = np.maximum(out[sel], t)
        return outs


def sync_rows(ctx: SimContext, cache: LinkCache, groups: list[Group], D: np.ndarray, grad_bytes: np.ndarray,
              full_bytes: np.ndarray, param_bytes: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sync seconds, egress USD, hierarchical?) of one stage for rows ``D`` ([R, G] replicas per group, columns
    sorted by (zone, type)): ``stage_sync`` of planner.simulator.time for every row at once (the third: True
    where it models the row's sync as hierarchical, False where flat or nothing to sync). ``full_bytes``: what
    one ring carries across zones; ``param_bytes``: the distributed optimizer's per-GPU parameter bytes
    (reduce-scatter + all-gather; None: a plain all-reduce).

    A row's result is a function of its presence pattern (0, 1, >= 2 per group), its replicas per zone and
    its byte sizes only (every ring below reads nothing else), so rows equal in those are computed once."""
    first, inv = same_sync_rows(groups, D, grad_bytes, full_bytes, param_bytes)
    if first is None or len(first) == len(D):
        return _sync_rows(ctx, cache, groups, D, grad_bytes, full_bytes, param_bytes)
    t, u, h = _sync_rows(ctx, cache, groups, D[first], grad_bytes[first], full_bytes[first],
                         None if param_bytes is None else param_bytes[first])
    return t[inv], u[inv], h[inv]


def stacked_sync_rows(ctx: SimContext, cache: LinkCache, groups: list[Group], D: np.ndarray,
                      sizes: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]
                      ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`sync_rows` of the same rows ``D`` at each (grad, full, param) of ``sizes`` (a pool plan's stages; the
    params all None or all arrays), in one call on ``D`` stacked once per entry: a row's result is a function of
    its pattern, replicas per zone and sizes only, and every copy of ``D`` holds the same patterns (so each ring
    and each branch of :func:`_sync_conc` is taken as in one entry's call), so each block is that entry's call,
    bit for bit; the per-call work (patterns, ring pairs, one :func:`link_time` pass per link) is done once."""
    if len(sizes) < 2:
        return [sync_rows(ctx, cache, groups, D, *x) for x in sizes]
    r = len(D)
    param = None if sizes[0][2] is None else np.concatenate([x[2] for x in sizes])
    t, u, h = sync_rows(ctx, cache, groups, np.tile(D, (len(sizes), 1)), np.concatenate([x[0] for x in sizes]),
                        np.concatenate([x[1] for x in sizes]), param)
    return [(t[i * r:(i + 1) * r], u[i * r:(i + 1) * r], h[i * r:(i + 1) * r]) for i in range(len(sizes))]


def same_sync_rows(groups: list[Group], D: np.ndarray, *sizes: np.ndarray | None
                   ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(first row, inverse) of the classes of rows with the same presence pattern, replicas per zone and
    ``sizes``; (None, None) where that key does not fit an int64 (the caller then computes every row)."""
    if len(D) < 2:
        return None, None
    zones = sorted({g.zone for g in groups})
    onehot = np.array([[g.zone == z for z in zones] for g in groups], dtype=np.int64)
    parts = [(np.minimum(D, 2) @ (3 ** np.arange(D.shape[1], dtype=np.int64)), 3 ** D.shape[1])]
    parts += [(c, int(c.max()) + 1) for c in (D @ onehot).T]
    for x in sizes:
        if x is not None:
            _, xi = unique_inverse(x)
            parts.append((xi.reshape(-1).astype(np.int64), int(xi.max()) + 1))
    key, radix = np.zeros(len(D), dtype=np.int64), 1
    for col, n in parts:
        if radix * n >= 1 << 62:
            return None, None
        key, radix = key + col * radix, radix * n
    return unique_first(key)


def _sync_rows(ctx: SimContext, cache: LinkCache, groups: list[Group], D: np.ndarray, grad_bytes: np.ndarray,
               full_bytes: np.ndarray, param_bytes: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sync_rows` computed row by row (no classes)."""
    key = np.minimum(D, 2) @ (3 ** np.arange(D.shape[1], dtype=np.int64))
    first, inv = unique_first(key)
    codes = key[first]
    keys = (codes[:, None] // (3 ** np.arange(D.shape[1], dtype=np.int64))[None, :]) % 3
    inv = inv.reshape(-1)
    gkey = tuple(groups)
    pats = []
    for code, k in zip(codes.tolist(), keys):
        if (gkey, code) not in cache.patterns:
            cache.patterns[(gkey, code)] = _pattern(ctx, groups, k)
        pats.append(cache.patterns[(gkey, code)])
    d = int_row_sum(D)
    conc = np.array([min([groups[i].tp for i in range(len(groups)) if k[i] > 0] or [1]) for k in keys])
    time_s = np.zeros(len(d))
    usd = np.zeros(len(d))
    hier = np.zeros(len(d), dtype=bool)
    for c in sorted_unique(conc):
        rows = np.nonzero(conc[inv] == c)[0]
        sub_keys = sorted(set(inv[rows].tolist()))
        remap = np.full(len(keys), -1)
        remap[sub_keys] = np.arange(len(sub_keys))
        t, u, h = _sync_conc(ctx, _Rings(cache, groups, int(c)), [pats[k] for k in sub_keys], remap[inv[rows]],
                          D[rows], d[rows], grad_bytes[rows], full_bytes[rows],
                          None if param_bytes is None else param_bytes[rows])
        time_s[rows], usd[rows], hier[rows] = t, u, h
    return time_s, usd, hier


def _sync_conc(ctx: SimContext, ch: _Rings, pats: list[_Pattern], inv: np.ndarray, D: np.ndarray, d: np.ndarray,
               grad: np.ndarray, full: np.ndarray, param: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    nz = np.array([p.n_zones for p in pats])[inv]
    price = np.array([p.egress_usd_per_byte for p in pats])[inv]
    per_edge_flat = F.ring_edge_bytes(d, full)
    multi = nz > 1
    if not np.any(multi) or ctx.settings.grad_sync == "flat":
        flat = ch.ring([p.flat for p in pats], inv, d, grad, param)
        return (np.where(d > 1, flat, 0.0), np.where(multi & (d > 1), per_edge_flat * price, 0.0),
                np.zeros(len(d), dtype=bool))
    zmax = max(p.n_zones for p in pats)
    calls = [([p.flat for p in pats], d, (1, 1))]     # the flat ring, the rings inside each zone, the leaders'
    for zi in range(zmax):
        ranks = [p.zones[zi][1] if zi < p.n_zones else {} for p in pats]
        w = np.zeros((len(pats), D.shape[1]))
        for k, p in enumerate(pats):
            if zi < p.n_zones:
                w[k, p.zones[zi][0]] = 1.0
        # halves (2, 1) are read only with ``param`` (the distributed optimizer's inner rings: reduce-scatter +
        # gather of gradients, broadcast of the updated parameters); without it a zone's ring is timed plainly
        calls.append((ranks, (D * w[inv]).sum(axis=1), (2, 1)))
    calls.append(([p.leaders for p in pats], nz, (1, 1)))
    flat, *t_zones, cross = ch.rings(calls, inv, grad, param)      # one link_time pass per link (_Rings.rings)
    inner = np.zeros(len(d))
    for t_in in t_zones:
        inner = np.maximum(inner, F.zone_reduce_broadcast_s(t_in) if param is None else t_in)
    hier = inner + cross
    use_flat = (flat < hier) if ctx.settings.grad_sync == "auto" else np.zeros(len(d), dtype=bool)
    use_flat = use_flat | ~multi
    # the simulator prices the flat ring first and, across zones unless ``flat``, the hierarchical rings too:
    # a size refused on any of them raises there, so such a row is inf whichever mode is the faster
    t = np.where(np.isinf(flat) | (multi & np.isinf(hier)), np.inf, np.where(use_flat, flat, hier))
    per_edge = np.where(use_flat, per_edge_flat, F.ring_edge_bytes(nz, full))
    return (np.where(d > 1, t, 0.0), np.where(multi & (d > 1), per_edge * price, 0.0), ~use_flat & (d > 1))
