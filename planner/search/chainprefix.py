"""The (cut, group sequence) pairs of the chain search grown one segment at a time under the throughput
objective, each partial sequence dropped as soon as no completion of it can put a plan into the top K.

Contract: :func:`prefix_pairs` returns a subset of :func:`planner.search.chainseq.alive_pairs` (the same
order: cut-major, sequences in lexicographic order) that holds every pair that the throughput pre-filter
(:func:`planner.search.chainbound.pair_prefilter`) keeps and whose chain scores at or below the threshold at
some replica count D (:func:`planner.search.chains.iterate_d`); with ``sync_min=None``, every pair the
pre-filter and the chain bound (:func:`planner.search.chains.chain_lower_keys`) keep.

Why it is safe (docs/PLANNER.md 2.1, *chain prefix bound*). For a prefix of segments 0..i of a cut every
completion has: cmax, upd and the pool share at least the prefix's and the largest over the later segments
of their smallest over alive groups; the summed compute and the fill/drain (compute plus twice the p2p of
every boundary, a segment's own boundaries at its group's p2p, a boundary between segments at least the
smallest p2p between two different groups) at least the prefix's plus the later segments' smallest; D at
most the prefix's pool room, so m = ceil(N / D) micro-batches per pipeline at least ceil(N / room); the
period at m at least cmax and every round trip from a segment's first stage k counted at m (k >= S - m + 1,
checked at the smallest m), each from the row's own fill after k or, for a later segment, the floors; the
sync at least the smallest ring sync of stage 0 (and, where the iteration waits for every stage's sync, each
segment's last stage) at any D >= d_lo, where every D < d_lo makes (ceil(N / D) - 1) cmax + fill + upd exceed
the threshold. The pre-filter's value and (m - 1) period + fill + upd + sync are then <= those of every
completion at every D it can reach the threshold at (up to the rounding of sums, covered by ``SLACK``), so a
prefix above the threshold has no completion that either check keeps (``tests/planner/test_chain_prefix_s21.py``).
"""
from __future__ import annotations

import numpy as np

from planner.search.chaintab import ChainGroups, RangeTab
from planner.search.space import Objective

SLACK = 1e-9        # relative margin against the rounding of the summed compute (prefix + smallest rest)
TINY = np.finfo(float).tiny     # an iteration bound is never 0 (``Objective.allows`` refuses 0)


def range_term_table(rt: RangeTab, grp: ChainGroups, p2p: np.ndarray) -> np.ndarray:
    """[7, S + 1, S + 1, G]: per stage range lo..hi-1 and group, (cmax, csum, upd, frac, fill, units, usd) of a
    segment over that range on that group (units, whole numbers, as floats); fill = csum + 2 (stages - 1) x
    the group's own p2p (the segment's part of the fill/drain); usd the segment's GPU dollars per second."""
    s_num = rt.fits.shape[0] - 1
    ell = (np.arange(s_num + 1)[None, :] - np.arange(s_num + 1)[:, None]).clip(0)[:, :, None]
    with np.errstate(invalid="ignore"):
        fill = rt.comp_sum + 2 * np.where(ell > 1, (ell - 1) * np.diag(p2p)[None, None, :], 0.0)
    units = (grp.tp[None, None, :] * ell).astype(float)
    return np.stack([rt.comp_max, rt.comp_sum, rt.upd, units / grp.caps[grp.pool][None, None, :], fill, units,
                     units * grp.usd_per_s[None, None, :]])


class _Segments:
    """The cuts' segments on the range table ``T``: per segment i its bounds and the smallest of each term over
    its alive groups (per stage range where ``range_alive`` gives the alive groups of every range, which the
    caller promises equal ``seg_alive``; else per cut)."""

    def __init__(self, T: np.ndarray, bounds: np.ndarray, seg_alive: list[np.ndarray],
                 range_alive: np.ndarray | None, caps: np.ndarray) -> None:
        self.T, self.seg_alive, self.caps = T, seg_alive, caps
        self.lo = [bounds[:, i] for i in range(len(seg_alive))]
        self.hi = [bounds[:, i + 1] for i in range(len(seg_alive))]
        self.range_least = None if range_alive is None else _least(T, range_alive)            # [7, S+1, S+1]
        self.range_room = None if range_alive is None else _most_room(T[5], range_alive, caps)

    def least(self, i: int) -> np.ndarray:
        """[7, C]: segment i's smallest terms over its alive groups."""
        if self.range_least is not None:
            return self.range_least[:, self.lo[i], self.hi[i]]
        return _least(self.T[:, self.lo[i], self.hi[i], :], self.seg_alive[i])

    def room(self, i: int) -> np.ndarray:
        """[C]: the most pipelines segment i allows on any alive group (-1: none alive)."""
        if self.range_room is not None:
            return self.range_room[self.lo[i], self.hi[i]]
        return _most_room(self.T[5][self.lo[i], self.hi[i]], self.seg_alive[i], self.caps)

    def at(self, k: int, i: int, cut: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Term k of segment i of cuts ``cut`` on groups ``g``."""
        return self.T[k][self.lo[i][cut], self.hi[i][cut], g]


def _most_room(units: np.ndarray, alive: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """[...]: the largest over the alive groups of pool GPUs // GPUs (units [..., G]); -1 where none is alive."""
    return np.where(alive, caps // np.maximum(units.astype(np.int64), 1), -1).max(axis=-1)


def _rest_floors(segs: _Segments, n_cut: int, cross_p2p: float
                 ) -> tuple[list[tuple[np.ndarray, ...]], tuple[np.ndarray, ...]]:
    """(per segment i, and then the same over every segment): [C] floors of the segments after i (largest smallest cmax, summed smallest csum,
    largest smallest upd, largest smallest frac, summed smallest fill plus the boundaries' smallest p2p
    between two different groups, twice, summed fewest GPUs, summed least dollars per second) over each later
    segment's alive groups; 0 after the last."""
    n_seg = len(segs.lo)
    rest = [None] * n_seg
    cmax, csum, upd, frac, fill, units, usd = (np.zeros(n_cut) for _ in range(7))
    for i in range(n_seg - 1, -1, -1):
        rest[i] = (cmax, csum, upd, frac, fill + 2 * (n_seg - 1 - i) * cross_p2p, units, usd)
        low = segs.least(i)         # [7, C]
        cmax, csum, upd, frac, fill = (np.maximum(cmax, low[0]), csum + low[1], np.maximum(upd, low[2]),
                                       np.maximum(frac, low[3]), fill + low[4])
        units, usd = units + low[5], usd + low[6]
    return rest, (cmax, csum, upd, frac, fill + 2 * (n_seg - 1) * cross_p2p, units, usd)


def _rest_room(segs: _Segments, n_cut: int) -> tuple[list[np.ndarray], np.ndarray]:
    """(per segment i, and then over every segment): [C] the most pipelines the segments after i allow: the smallest over them of the largest,
    over their alive groups, of the group's pool GPUs // the segment's GPUs on it (D x a segment's GPUs fit in its
    pool); int64 max after the last."""
    big = np.iinfo(np.int64).max
    n_seg = len(segs.lo)
    out = [None] * n_seg
    acc = np.full(n_cut, big, dtype=np.int64)
    for i in range(n_seg - 1, -1, -1):
        out[i] = acc
        most = segs.room(i)
        acc = np.minimum(acc, np.where(most < 0, big, most))       # none alive: the cut is dropped anyway
    return out, acc


def _least(x: np.ndarray, alive: np.ndarray) -> np.ndarray:
    """[...]: the smallest of ``x`` [..., G] over the alive groups (``alive`` broadcast against it); 0 where
    none is alive (such a cut is dropped anyway)."""
    low = np.where(alive, x, np.inf).min(axis=-1)
    return np.where(np.isfinite(low), low, 0.0)


def _fails(objective: Objective, scale: float, threshold: float, it: np.ndarray, dollars: np.ndarray,
           gpus: np.ndarray) -> np.ndarray:
    """Where bounds on the iteration seconds, the dollars and the GPUs (each <= the real value) already fail the
    objective's constraints or put its key above the threshold."""
    it_s, c_s = np.maximum(it * scale, TINY), dollars * scale
    return ~objective.allows(it_s, c_s, gpus) | (objective.key(it_s, c_s) > threshold)


def block_starts(size: np.ndarray, chunk: int) -> list[int]:
    """The first cut of each block: consecutive cuts whose ``size`` adds up to at most ``chunk`` (a cut larger
    than ``chunk`` alone)."""
    starts, acc = [0], 0.0
    for k, x in enumerate(size.tolist()):
        if acc > 0 and acc + x > chunk:
            starts.append(k)
            acc = 0.0
        acc += x
    return starts if len(size) else []


def min_sync_from(sync: np.ndarray) -> np.ndarray:
    """[G, S, Dcap + 1]: the smallest of ``sync`` (a chain table's ring sync per group, stage, replica count) at
    any replica count >= d."""
    return np.minimum.accumulate(sync[:, :, ::-1], axis=2)[:, :, ::-1]


def prefix_pairs(seg_alive: list[np.ndarray], n_groups: int, rt: RangeTab, grp: ChainGroups, bounds: np.ndarray,
                 n_mb: int, threshold: float, p2p: np.ndarray, max_rows: int = 1 << 21,
                 sync_min: np.ndarray | None = None, every_stage_syncs: bool = True,
                 objective: Objective | None = None, egress: np.ndarray | None = None,
                 range_alive: np.ndarray | None = None, range_terms: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(cut rows of ``bounds`` [C, segments + 1], sequence indices into ``chain_sequences(n_groups,
    segments)``): :func:`planner.search.chainseq.alive_pairs` of ``seg_alive`` ([C, G] per segment) without
    the pairs whose every completion is proven above ``threshold`` by the throughput pre-filter's value or
    by the chain bound's (:func:`planner.search.chains.chain_lower_keys`; ``p2p``: the [G, G] p2p seconds)
    plus a sync floor: ``sync_min`` [G, S, Dcap + 1] the smallest ring sync of (group, stage) at any replica
    count >= d (None: no sync floor), read at the smallest D at which the chain can still reach the
    threshold, for stage 0 and (``every_stage_syncs``: the iteration waits for every stage's sync) the last
    stage of each segment. ``range_alive`` [S + 1, S + 1, G]: the alive groups of every stage range, when
    ``seg_alive[i]`` is ``range_alive[bounds[:, i], bounds[:, i + 1]]`` (the chain search's case; the floors are
    then taken per range, the same values); ``range_terms``: :func:`range_term_table` of ``rt``, ``grp`` and
    ``p2p`` when the caller has it. Memory: at most about ``max_rows`` partial sequences are extended at once."""
    objective = objective or Objective()
    plain = objective == Objective()      # throughput, no constraint: the iteration bound alone decides
    if objective.kind != "throughput" and sync_min is not None:
        raise ValueError("prefix_pairs: the sync floor needs the throughput objective (its threshold in seconds)")
    n_seg, n_cut = len(seg_alive), len(bounds)
    terms = range_terms if range_terms is not None else range_term_table(rt, grp, p2p)
    segs = _Segments(terms, bounds, seg_alive, range_alive, grp.caps[grp.pool])
    off = p2p[~np.eye(len(p2p), dtype=bool)]
    cross = float(np.nanmin(off)) if off.size else 0.0
    cross = cross if np.isfinite(cross) and cross > 0 else 0.0
    rest, whole = _rest_floors(segs, n_cut, cross)
    later_room, room_all = _rest_room(segs, n_cut)
    cut_ok = np.logical_and.reduce([a.any(axis=1) for a in seg_alive])
    scale = (1 - 1e-12) * (1 - SLACK)
    n_pools, total_caps = len(grp.caps), int(grp.caps.sum())
    picks = [[] for _ in range(n_seg)]        # per segment: [C] stages whose sync floor is read
    if sync_min is not None:
        picks[0].append(np.zeros(len(bounds), dtype=np.int64))
        if every_stage_syncs:
            for i in range(n_seg):
                picks[i].append(bounds[:, i + 1] - 1)
    d_top = None if sync_min is None else sync_min.shape[2] - 1
    # a later segment's picked stages: at least the smallest sync over every group there ([S, Dcap + 1])
    any_group = None if sync_min is None else sync_min.min(axis=0)
    s_num = int(bounds[0, -1]) if len(bounds) else 0
    ahead = [None] + [np.maximum(rest[j - 1][4] - 2 * cross, 0.0) / (s_num - bounds[:, j]) for j in range(1, n_seg)]

    def alive_rows(i, cut, g, acc):
        """(rows kept, the sync floor of each row): every completion's bound above the threshold drops it. The
        cheaper terms first; the rest only on the rows they keep (each stage's value is a bound on its own)."""
        cmax = np.maximum(acc[0], rest[i][0][cut])
        csum = acc[1] + rest[i][1][cut]
        upd = np.maximum(acc[2], rest[i][2][cut])
        fill = acc[4] + rest[i][4][cut]
        sync = acc[6].copy()
        frac = np.maximum(acc[3], rest[i][3][cut])

        def over(it, rr):
            """Rows ``rr`` whose completions all fail: iteration >= ``it``; dollars >= the GPU dollars of one
            pipeline at D = 1 (the smallest over D, 2.1 *chain bound*) + the known egress; GPUs >= one
            pipeline's. Throughput without constraints: ``it`` against the threshold alone."""
            if plain:
                return it * scale > threshold
            cr_ = cut[rr]
            dollars = (acc[8][rr] + rest[i][6][cr_]) * ((n_mb - 1) * cmax[rr] + fill[rr] + upd[rr]) \
                + n_mb * acc[9][rr]
            return _fails(objective, scale, threshold, it, dollars, acc[5][rr].sum(axis=1) + rest[i][5][cr_])

        every = np.arange(len(cut))
        ok = ~(over(np.maximum(n_mb * cmax * frac, csum) + upd, every) | over(fill + upd + sync, every))
        r = np.flatnonzero(ok)                              # stage 2: the pools' room
        units = acc[5][r]
        cm, fl, up = cmax[r], fill[r], upd[r]
        frac_r = np.maximum(frac[r], (units / grp.caps[None, :]).max(axis=1))     # the chain's share of each pool
        room = np.where(units > 0, grp.caps[None, :] // np.maximum(units, 1), np.iinfo(np.int64).max).min(axis=1)
        # every pool together: D x (the chain's GPUs, at least the prefix's plus the rest's fewest) <= all GPUs
        room = np.minimum(room, total_caps // np.maximum(units.sum(axis=1) + rest[i][5][cut[r]], 1))
        room = np.minimum(room, later_room[i][cut[r]])      # each later segment in some pool
        m_min = -(-n_mb // np.maximum(np.minimum(room, n_mb), 1))
        with np.errstate(invalid="ignore"):
            bad = over(np.maximum(n_mb * cm * frac_r, csum[r]) + up, r) \
                | over((m_min - 1) * cm + fl + up + sync[r], r)
        ok[r[bad]] = False
        keep = ~bad
        r, m_min, cm, fl, up = r[keep], m_min[keep], cm[keep], fl[keep], up[keep]
        cr, gr = cut[r], g[r]                               # stage 3: the sync floor and the round trips
        sy, later = sync[r], 0.0
        if sync_min is not None:
            # at D the iteration is >= (ceil(N / D) - 1) cmax + fill + upd; a D at which that exceeds the
            # threshold cannot hold the chain's plan, so D >= d_lo (m_max generous by 1e-9) and the sync is
            # >= its smallest value at any D >= d_lo
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                spare = np.maximum(threshold / scale - fl - up, 0.0)
                m_max = np.where(cm > 0, np.floor(spare / cm * (1 + 1e-9)) + 1, np.inf)
                d_lo = np.where(np.isfinite(m_max), np.ceil(n_mb / np.maximum(m_max, 1)), 1)
            d_lo = np.clip(d_lo, 1, d_top).astype(np.int64)
            for st in picks[i]:
                sy = np.maximum(sy, sync_min[gr, st[cr], d_lo])
            for j in range(i + 1, n_seg):       # a later segment's picked stages, on any group
                for st in picks[j]:
                    later = np.maximum(later, any_group[st[cr], d_lo])
        # round trips (formulas.round_trip_bounds) from each segment's first stage k = lo_j: counted in the
        # period of m micro-batches once m >= S - k + 1 (m >= m_min, so the gate at m_min is safe); from a
        # known segment the fill after k is this row's, from a later one the rest's floor
        lev = cm
        for j in range(n_seg):
            k = bounds[cr, j]
            gate = m_min >= s_num - k + 1
            if j <= i:
                trip = (acc[4][r] - acc[7][r, j] + rest[i][4][cr]) / (s_num - k)
            else:
                trip = ahead[j][cr]
            lev = np.where(gate, np.maximum(lev, trip), lev)
        with np.errstate(invalid="ignore"):
            bad = over((m_min - 1) * lev + fl + up + np.maximum(sy, later), r)
        ok[r[bad]] = False
        sync[r] = sy
        return ok, sync

    def start(i, cut, g):
        units = np.zeros((len(cut), n_pools), dtype=np.int64)
        units[np.arange(len(cut)), grp.pool[g]] = segs.at(5, i, cut, g)
        return (segs.at(0, i, cut, g), segs.at(1, i, cut, g), segs.at(2, i, cut, g), segs.at(3, i, cut, g),
                segs.at(4, i, cut, g), units, np.zeros(len(cut)),
                np.zeros((len(cut), n_seg)),       # the fill before each segment's first stage
                segs.at(6, i, cut, g), np.zeros(len(cut)))  # dollars per second of a pipeline, egress per mb

    def grow(i, cut, last, acc, idx):
        """Extend the partial sequences (segments 0..i-1) by segment i and on to the last; in pieces of at
        most ``max_rows`` extended rows (depth first, so the order is kept)."""
        if i == n_seg:
            return [(cut, idx)]
        ci, gi = np.nonzero(seg_alive[i])                        # cut-major, groups ascending within a cut
        cnt = np.bincount(ci, minlength=len(seg_alive[i]))
        first = np.concatenate([[0], np.cumsum(cnt)])[:-1]
        rep = cnt[cut]
        total = np.cumsum(rep)
        if len(cut) > 1 and total[-1] > max_rows:
            mid = int(np.searchsorted(total, total[-1] / 2))
            mid = min(max(mid, 1), len(cut) - 1)
            return (grow(i, cut[:mid], last[:mid], tuple(a[:mid] for a in acc), idx[:mid])
                    + grow(i, cut[mid:], last[mid:], tuple(a[mid:] for a in acc), idx[mid:]))
        p = np.repeat(np.arange(len(cut)), rep)
        offs = np.arange(len(p)) - np.repeat(total - rep, rep)
        g = gi[first[cut[p]] + offs].astype(np.int64)
        keep = g != last[p]
        p, g = p[keep], g[keep]
        c = cut[p]
        t = start(i, c, g)
        before = acc[4][p] + 2 * p2p[last[p], g]
        at = acc[7][p]
        at[:, i] = before
        acc = (np.maximum(acc[0][p], t[0]), acc[1][p] + t[1], np.maximum(acc[2][p], t[2]),
               np.maximum(acc[3][p], t[3]), before + t[4], acc[5][p] + t[5], acc[6][p], at, acc[8][p] + t[6],
               acc[9][p] + (0.0 if egress is None else egress[last[p], g]))
        ok, sync = alive_rows(i, c, g, acc)
        acc = acc[:6] + (sync,) + acc[7:]
        p, g, c, acc = p[ok], g[ok], c[ok], tuple(a[ok] for a in acc)
        return grow(i + 1, c, g, acc, idx[p] * (n_groups - 1) + g - (g > last[p]))

    # whole cuts first: every segment at its floors (the bounds of alive_rows with nothing known yet)
    cmx, csm, upd0, frc, fll, unt, usd0 = whole
    room0 = np.minimum(room_all, total_caps // np.maximum(unt, 1))
    m0 = -(-n_mb // np.maximum(np.minimum(room0, n_mb), 1))
    it_a, it_b = np.maximum(n_mb * cmx * frc, csm) + upd0, (m0 - 1) * cmx + fll + upd0
    if plain:
        cut_ok &= ~((it_a * scale > threshold) | (it_b * scale > threshold))
    else:
        dollars = usd0 * ((n_mb - 1) * cmx + fll + upd0)
        cut_ok &= ~(_fails(objective, scale, threshold, it_a, dollars, unt)
                    | _fails(objective, scale, threshold, it_b, dollars, unt))
    cut, last = np.nonzero(seg_alive[0] & cut_ok[:, None])
    cut, last = cut.astype(np.int64), last.astype(np.int64)
    acc = start(0, cut, last)
    keep, sync = alive_rows(0, cut, last, acc)
    acc = acc[:6] + (sync,) + acc[7:]
    cut, last, acc = cut[keep], last[keep], tuple(a[keep] for a in acc)
    parts = grow(1, cut, last, acc, last.copy())
    return (np.concatenate([c for c, _ in parts]).astype(np.int64),
            np.concatenate([q for _, q in parts]).astype(np.int64))
