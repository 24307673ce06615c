"""Chain plans: D identical pipelines whose stage s runs on its own group (GPU type, TP, zone).

A *chain* is the sequence of stage groups of one pipeline; it may change GPU type, TP degree and zone from
stage to stage (Sailor's plans for 128 A100 + 384 V100: V100 TP 4 -> four A100 TP 1 -> two V100 TP 4; for
five zones: two stages in two zones). Declared family (docs/PLANNER.md, section 1.1): the groups form 2 ..
``space.chain_segments`` contiguous runs (*segments*; one run is a homogeneous pipeline, searched by the main
search), adjacent runs differ; the layers are split evenly with the extra layers on the last stages (Sailor's
split), or with ``space.chain_splits == "segment"`` each segment has its own layer total, split evenly inside
it (:func:`planner.search.chainseq.segment_splits`; searched after the even split, one split and cut at a
time, each pruned by its own :func:`unit_floors`); every GPU fits with S - s micro-batches in flight; all D pipelines run the same chain, so the D
replicas of a stage are one group and its gradient all-reduce is a ring over one link; the micro-batch counts
differ by at most one (the first pipelines take the extra ones), the smallest makespan of identical pipelines.
Pool capacity: D x (sum of the TP degrees of the chain's stages in that (type, zone)) <= its GPUs.

Every term is the simulator's (:mod:`planner.simulator.formulas` on the same links, p2p as the mean of the
forward and backward crossing, egress on every cross-zone boundary), evaluated on arrays of chains; the
engine's production check re-simulates every plan returned.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations, product

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.chainbound import pair_prefilter
from planner.search.chainprefix import block_starts, min_sync_from, prefix_pairs, range_term_table
from planner.search.chainfloor import unit_floors
from planner.search.distopt import chain_dist_options
from planner.search.chainvalue import chain_value_keys, segment_value_keys
from planner.search.chainseq import DENSE_MAX, alive_pairs as _alive_pairs, decode_sequences, segment_splits
from planner.search.chaintab import ChainGroups, Linked, RangeTab, StageTab, chain_groups, range_tab, stage_tab
from planner.search.netvec import LinkCache
from planner.search.space import Candidate, Objective, SearchSpace, SearchStats
from planner.search.tasks import Tables, even_last
from planner.search.tied import TiedSync
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext


def segment_table(rt: RangeTab, grp: ChainGroups, n_mb: int, objective: Objective) -> np.ndarray:
    """[S + 1, S + 1, G]: :func:`segment_lower_keys` of a chain holding only stages lo..hi-1 on group g. Every
    term of the bound grows when segments are added (largest and summed compute, optimizer step, the pool
    share, dollars, GPUs), so each segment's entry is a lower bound for every chain containing it."""
    s1 = rt.fits.shape[0]
    length = (np.arange(s1)[None, :] - np.arange(s1)[:, None]).clip(0)[:, :, None]          # hi - lo
    units = grp.tp[None, None, :] * length
    use = units / grp.caps[grp.pool][None, None, :]
    it = (np.maximum(n_mb * rt.comp_max * use, rt.comp_sum) + rt.upd) * (1 - 1e-12)
    cost = n_mb * rt.comp_max * units * grp.usd_per_s[None, None, :] * (1 - 1e-12)
    ok = rt.fits & objective.allows(it, cost, units) & (use <= 1.0)
    key = objective.key(it, cost)
    if objective.kind == "value":      # time and dollars of the same D (2.6)
        key = np.maximum(key, segment_value_keys(n_mb * rt.comp_max, rt.comp_sum, rt.upd, use,
                                                 units * grp.usd_per_s[None, None, :], 0.0, it))
    return np.where(ok, key, np.inf)


def chains_for_cuts(tab: StageTab, rt: RangeTab, grp: ChainGroups, s_num: int, n_seg: int, seqs: np.ndarray | None,
                    n_mb: int, objective: Objective, threshold, chunk: int = 1_000_000, stop=lambda: False,
                    cuts: np.ndarray | None = None, sync_min=None, every_stage_syncs: bool = True):
    """Yield chains [C, S] (group index per stage) of ``n_seg`` segments (every way to cut the S stages, or
    only ``cuts`` ([K, n_seg - 1] inner bounds), every sequence of ``chain_sequences(len(grp.names), n_seg)``:
    ``seqs`` is that table or None, the rows then decoded from their index, :func:`decode_sequences`) whose
    every stage fits and whose lower bounds (each segment's alone,
    :func:`segment_table`, then the whole chain's, :func:`segment_lower_keys`) can still reach
    ``threshold()`` (re-read per chunk). Above ``DENSE_MAX`` the pairs are grown segment by segment and pruned
    (:func:`planner.search.chainprefix.prefix_pairs`; ``sync_min``: a callable giving its sync floor table,
    called only there under the throughput objective, and ``every_stage_syncs``)."""
    if cuts is None:
        cuts = np.array(list(combinations(range(1, s_num), n_seg - 1)), dtype=np.int64).reshape(-1, n_seg - 1)
    bounds = np.column_stack([np.zeros(len(cuts), dtype=np.int64), cuts, np.full(len(cuts), s_num)])
    n_groups = len(grp.names)
    n_seqs = n_groups * (n_groups - 1) ** (n_seg - 1)
    if seqs is not None and len(seqs) != n_seqs:
        raise ValueError("chains_for_cuts: seqs must be chain_sequences(len(grp.names), n_seg)")
    single = segment_table(rt, grp, n_mb, objective)
    if threshold() < np.inf:    # pruned as they grow: blocks of at most ``chunk`` pairs of the first two segments
        alive = rt.fits & (single <= threshold())
        size = np.prod([alive[bounds[:, i], bounds[:, i + 1]].sum(axis=1).astype(float) for i in range(2)],
                       axis=0)
        starts = block_starts(size, chunk)
    else:                       # every pair enumerated: at most ``chunk`` sequences' worth of cuts
        starts = list(range(0, len(bounds), max(1, chunk // max(1, n_seqs))))
    ends = list(starts[1:]) + [len(bounds)]
    stages = np.arange(s_num)
    terms = range_term_table(rt, grp, tab.p2p)
    for k0, k1 in zip(starts, ends):
        if stop():
            return
        b = bounds[k0:k1]
        alive = rt.fits & (single <= threshold())
        thr = threshold()
        seg_alive = [alive[b[:, i], b[:, i + 1]] for i in range(n_seg)]
        # partial sequences pruned as they grow (chainprefix), unless the dense mask is small (cheaper whole)
        if thr < np.inf and len(b) * n_groups ** n_seg > DENSE_MAX:
            kk, qq = prefix_pairs(seg_alive, len(grp.names), rt, grp, b, n_mb, thr, tab.p2p,
                                  sync_min=None if sync_min is None or objective.kind != "throughput" else
                                  sync_min(), every_stage_syncs=every_stage_syncs, objective=objective,
                                  egress=tab.egress, range_alive=alive, range_terms=terms)
        else:
            kk, qq = _alive_pairs(seg_alive, len(grp.names))
        for j0 in range(0, len(kk), chunk):         # (the prefix path may return more than a chunk)
            k_, q_ = kk[j0:j0 + chunk], qq[j0:j0 + chunk]
            sub = decode_sequences(q_, n_groups, n_seg) if seqs is None else seqs[q_]      # [pairs, n_seg]
            rows = pair_prefilter(rt, grp, b, sub, k_, np.arange(len(q_)), n_mb, objective, thr)   # (faster)
            if rows is not None:
                k_, sub = k_[rows], sub[rows]
            lb = segment_lower_keys(tab, rt, grp, b[k_], sub, n_mb, objective, True)
            keep = np.isfinite(lb) & (lb <= thr)
            k_, sub = k_[keep], sub[keep]
            if len(k_):
                yield np.take_along_axis(sub, _segment_of_stage(b[k_], stages), axis=1)


def _segment_of_stage(bounds: np.ndarray, stages: np.ndarray) -> np.ndarray:
    """[C, S]: the segment of each stage for chains given by their segment bounds ([C, segments + 1]): how many
    inner bounds are <= the stage (one comparison per inner bound, added up)."""
    seg = np.zeros((len(bounds), len(stages)), dtype=np.int64)
    for i in range(1, bounds.shape[1] - 1):
        seg += bounds[:, i:i + 1] <= stages[None, :]
    return seg


def segment_lower_keys(tab: StageTab, rt: RangeTab, grp: ChainGroups, bounds: np.ndarray, seqs: np.ndarray,
                       n_mb: int, objective: Objective, joint: bool = False) -> np.ndarray:
    """[C]: for chains given by their segment bounds ([C, segments + 1]) and groups ([C, segments]), a lower
    bound on the objective over every D (inf where no D can be feasible), from segment sums only
    (docs/PLANNER.md 2.1, *chain bound*): with D pipelines of period P the makespan is at least
    ceil(N / D) P >= N P / D (the fill/drain is at least the period) and at least the fill; P is at least every
    stage's compute; D is at most n_pool / (the chain's GPUs in that pool) for every pool it uses. So
    iteration >= max(N P u, sum of compute) + optimizer step with u = max over pools of the chain's GPUs
    there over the pool's GPUs, and GPU dollars >= N P (dollars per second of one pipeline); egress is exact."""
    n_seg = seqs.shape[1]
    s1, n_g = rt.comp_max.shape[1], rt.comp_max.shape[2]
    cmax_f, csum_f, upd_f = rt.comp_max.reshape(-1), rt.comp_sum.reshape(-1), rt.upd.reshape(-1)
    pool_caps = grp.caps[grp.pool]           # [G] the GPUs of each group's pool
    pools, frac = [], []
    for i in range(n_seg):      # one flat index per segment; the first segment starts every sum (0 + x is x)
        lo, hi, g = bounds[:, i], bounds[:, i + 1], seqs[:, i]
        flat = (lo * s1 + hi) * n_g + g
        units = grp.tp[g] * (hi - lo)
        if i == 0:
            comp_max, comp_sum, upd = cmax_f[flat], csum_f[flat], upd_f[flat]
            usd, gpus = units * grp.usd_per_s[g], units.astype(float)
        else:
            comp_max = np.maximum(comp_max, cmax_f[flat])
            comp_sum = comp_sum + csum_f[flat]
            upd = np.maximum(upd, upd_f[flat])       # (distributed optimizer: the step at the largest D)
            usd = usd + units * grp.usd_per_s[g]
            gpus = gpus + units
        pool = grp.pool[g]
        pools.append(pool)
        frac.append(units / pool_caps[g])
    # the chain's share of segment i's pool, summed over the segments in that pool (in segment order)
    same = {(i, j): pools[i] == pools[j] for i in range(n_seg) for j in range(i + 1, n_seg)}
    use = None
    for i in range(n_seg):
        share = None
        for j in range(n_seg):
            t = frac[j] if i == j else np.where(same[min(i, j), max(i, j)], frac[j], 0.0)
            share = t if share is None else share + t
        use = share if use is None else np.maximum(use, share)
    egress = sum(tab.egress[seqs[:, i], seqs[:, i + 1]] for i in range(n_seg - 1))
    it = (np.maximum(n_mb * comp_max * use, comp_sum) + upd) * (1 - 1e-12)
    cost = (n_mb * comp_max * usd + n_mb * egress) * (1 - 1e-12)
    ok = objective.allows(it, cost, gpus) & (use <= 1.0)
    key = objective.key(it, cost)
    if joint and objective.kind == "value":      # ``joint``: time and dollars of the same D (2.6)
        key = np.maximum(key, segment_value_keys(n_mb * comp_max, comp_sum, upd, use, usd, n_mb * egress, it))
    return np.where(ok, key, np.inf)


@dataclass
class ChainScores:
    """Per chain: steady-period levels, fill/drain, optimizer step, pipeline rate, GPUs, egress, max D."""

    gs: np.ndarray
    levels: np.ndarray
    fill: np.ndarray
    upd: np.ndarray
    usd_per_s: np.ndarray
    gpus: np.ndarray
    egress_per_mb: np.ndarray
    d_max: np.ndarray
    d_min: np.ndarray         # the smallest D at which every stage fits (distributed optimizer; else 1)


def score_chains(ctx: SimContext, tab: StageTab, grp: ChainGroups, gs: np.ndarray, n_mb: int) -> ChainScores:
    c_num, s_num = gs.shape
    st = np.arange(s_num)
    comp = tab.comp[gs, st]
    p2p = tab.p2p[gs[:, :-1], gs[:, 1:]]
    busy = F.busy_s(comp, p2p, ctx.settings.p2p_blocking)
    levels = F.period_levels(busy.max(axis=1), F.round_trip_bounds(comp, p2p))
    fill = F.fill_drain_s(comp, p2p)
    units = np.zeros((c_num, len(grp.caps)), dtype=np.int64)
    rows = np.arange(c_num)
    for s in range(s_num):      # one entry per row per stage: a buffered += adds each once, as np.add.at does
        units[rows, grp.pool[gs[:, s]]] += grp.tp[gs[:, s]]
    with np.errstate(divide="ignore"):
        room = np.where(units > 0, grp.caps[None, :] // np.maximum(units, 1), np.iinfo(np.int64).max)
    d_max = np.minimum(room.min(axis=1), n_mb)
    return ChainScores(gs=gs, levels=levels, fill=fill, upd=tab.upd[gs, st].max(axis=1),
                       usd_per_s=(grp.tp[gs] * grp.usd_per_s[gs]).sum(axis=1), gpus=grp.tp[gs].sum(axis=1),
                       egress_per_mb=tab.egress[gs[:, :-1], gs[:, 1:]].sum(axis=1), d_max=d_max,
                       d_min=tab.dmin[gs, st].max(axis=1))


def _pipeline_s(sc: ChainScores, m: int, s_num: int) -> np.ndarray:
    """T(m) of every chain; inf for a chain sending over a link whose fit ``simulate`` refuses."""
    t = F.pipeline_s(m, sc.levels[:, min(m, s_num + 1) - 1], sc.fill)
    return np.where(np.isfinite(sc.fill), t, np.inf)


def chain_lower_keys(sc: ChainScores, n_mb: int, s_num: int, objective: Objective, dist: bool = False
                     ) -> np.ndarray:
    """A lower bound on the objective of each chain over every D (inf where no D can be feasible): the
    makespan at D max (the fewest micro-batches per pipeline) plus the optimizer step, no sync; the GPU
    dollars of D pipelines are >= D rate ((N / D - 1) period_1 + fill + update), linear in D, so >= its
    value at D = 1 or D max; egress N x per-micro-batch egress exactly. ``dist``: the distributed optimizer
    (the step is update / D: at least update / D max; D x update / D is constant, still linear in D)."""
    m_min = np.ceil(n_mb / np.maximum(sc.d_max, 1)).astype(np.int64)
    lev = sc.levels[np.arange(len(m_min)), np.minimum(m_min, s_num + 1) - 1]
    div = (lambda d: d) if dist else (lambda d: 1.0)                    # noqa: E731
    with np.errstate(invalid="ignore"):
        it = np.where(np.isfinite(sc.fill), (m_min - 1) * lev + sc.fill + sc.upd / div(np.maximum(sc.d_max, 1)),
                      np.inf)
    p1 = sc.levels[:, 0]
    lin = lambda d: d * ((n_mb / d - 1) * p1 + sc.fill + sc.upd / div(d))       # noqa: E731
    cost = sc.usd_per_s * np.minimum(lin(1.0), lin(np.maximum(sc.d_max, 1).astype(float))) \
        + n_mb * sc.egress_per_mb
    ok = objective.allows(it * (1 - 1e-12), cost * (1 - 1e-12), sc.gpus) & (sc.d_max >= np.maximum(sc.d_min, 1))
    key = objective.key(it, cost) * (1 - 1e-12)
    if objective.kind == "value":      # time and dollars of the same D (2.6)
        with np.errstate(invalid="ignore"):
            key = np.maximum(key, chain_value_keys(n_mb, lev, sc.fill, sc.upd, dist, np.maximum(sc.d_max, 1),
                                                   sc.usd_per_s, n_mb * sc.egress_per_mb, it))
    return np.where(ok, key, np.inf)


def iterate_d(ctx: SimContext, sc: ChainScores, tab: StageTab, n_mb: int, s_num: int, objective: Objective,
              uniform: bool, tied: tuple[TiedSync, list[tuple[str, str, int]]] | None = None,
              threshold=None, d_from: int = 1):
    """Yield (D, chain indices, iteration s, cost USD, GPUs, keys) for every D from ``d_from`` to the largest D max.
    ``tied``: (the memo, the group names) when the plans tie their embeddings. ``threshold`` (a callable,
    read once per D): a chain whose key without the tied all-reduce (>= 0 seconds and dollars added, every
    key and constraint non-decreasing in both) is above it gets key inf without pricing that all-reduce."""
    st = np.arange(s_num)
    slack = np.cumsum(tab.bwd[sc.gs, st], axis=1) - tab.bwd[sc.gs, st]        # backward of the stages before
    pbytes = tab.param_bytes
    for d in range(max(1, d_from), int(sc.d_max.max(initial=0)) + 1):
        sel = np.nonzero((sc.d_max >= d) & (sc.d_min <= d))[0]
        if len(sel) == 0 and (sc.d_max >= d).any():
            continue
        if uniform and n_mb % d:
            continue
        if len(sel) == 0:
            break
        m = -(-n_mb // d)
        span = _pipeline_s(sc, m, s_num)[sel]
        per_stage = tab.sync[sc.gs[sel], st, d]                                   # [C', S]
        if ctx.settings.dp_sync_waits_for_all:
            sync = per_stage.max(axis=1)
        else:
            sync = np.maximum(0.0, (per_stage - slack[sel]).max(axis=1))
        tied_usd, upd = 0.0, (sc.upd[sel] / d if pbytes is not None else sc.upd[sel])
        if tied is not None:       # the shared weight's all-reduce follows the stage syncs
            memo, names = tied
            live = np.ones(len(sel), dtype=bool)
            if threshold is not None:
                it0 = span + sync + upd
                c0 = d * sc.usd_per_s[sel] * it0 + n_mb * sc.egress_per_mb[sel]
                k0 = np.where(objective.allows(it0, c0, d * sc.gpus[sel]) & np.isfinite(it0),
                              objective.key(it0, c0), np.inf)
                live = ~(k0 > threshold())
            te = np.zeros((len(sel), 2))
            te[~live, 0] = np.inf
            te[live] = np.array([memo.chain(names[sc.gs[c, 0]], names[sc.gs[c, -1]], d, s_num, pbytes)
                                 for c in sel[live]], dtype=float).reshape(-1, 2)
            sync, tied_usd = sync + te[:, 0], np.where(live, te[:, 1], 0.0)
        it = span + sync + upd
        cost = d * sc.usd_per_s[sel] * it + n_mb * sc.egress_per_mb[sel] + tied_usd
        gpus = d * sc.gpus[sel]
        ok = objective.allows(it, cost, gpus) & np.isfinite(it)
        yield d, sel, it, cost, gpus, np.where(ok, objective.key(it, cost), np.inf)


def chain_units(ctx: SimContext, cluster: ClusterSpec, options: dict[str, list[tuple[int, int]]], gbs: int,
                space: SearchSpace):
    """The chain search's units in its order: (S, Sailor's layer counts [1, S], micro-batch size, micro-batches,
    the groups, the largest replica count, recomputation, distributed optimizer), for every unit with groups."""
    L = ctx.model.num_layers
    max_s = min(L, space.max_stages or L)
    mbs_all = sorted({m for o in options.values() for m, _ in o})
    by_mbs: dict[int, ChainGroups] = {}     # one group list per micro-batch size (its derived tables cached on it)
    for s_num in range(2, max_s + 1):
        counts = even_last(L, s_num)
        for mbs in mbs_all:
            if gbs % mbs:
                continue
            n_mb = gbs // mbs
            if mbs not in by_mbs:
                by_mbs[mbs] = chain_groups(cluster, options, mbs, ctx)
            grp = by_mbs[mbs]
            if not grp.names:
                continue
            d_cap = min(n_mb, int(grp.caps.max()))
            for rc, dist in product(space.recompute, chain_dist_options(space, ctx.settings.sharded_collective_scale)):
                yield s_num, counts, mbs, n_mb, grp, d_cap, rc, dist


def search_chains(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache,
                  options: dict[str, list[tuple[int, int]]], gbs: int, objective: Objective, space: SearchSpace,
                  best, stats: SearchStats, stop=lambda: False, where: list[int] | None = None) -> bool:
    """Push the best chain plans into ``best`` (a top-K holder with ``threshold()`` and ``push``). Returns
    False when ``stop()`` ended the search before every chain was bounded or scored. A segment count of a
    unit whose :func:`unit_floors` exceeds the threshold is skipped before its cuts (result-neutral, 2.1);
    the floor needs only :func:`stage_core` and the pair tables, the range table is built for units with a
    segment count left and the sync table when a chain of the unit reaches :func:`iterate_d`. ``where``: set
    to [the index of the unit being searched] (:mod:`planner.search.chainrest` bounds the rest from it)."""
    if space.chain_segments < 2 or space.single_zone:
        return True
    for ui, (s_num, counts, mbs, n_mb, grp, d_cap, rc, dist) in enumerate(chain_units(ctx, cluster, options, gbs,
                                                                                      space)):
        if where is not None:
            where[:] = [ui]
        if stop():
            return False
        linked = Linked(ctx, cache, tables, grp, mbs, counts, rc, d_cap, space.precision, dist)
        tab, n_max = linked.tab, min(space.chain_segments, s_num)
        floors = unit_floors(linked.for_floors(objective), grp, n_mb, objective, n_max, best.threshold())
        live = bool((floors[2:] <= best.threshold()).any())    # else no chain of the split can enter (2.1, 2.6)
        rt = range_tab(tab) if live else None
        memo: list = []

        def sync_min() -> np.ndarray:       # built on first use (the prefix path of a large enough unit)
            if not memo:
                memo.append(min_sync_from(linked.full().sync))
            return memo[0]

        for n_seg in range(2, n_max + 1 if live else 2):
            if stop():
                return False
            if floors[n_seg] > best.threshold():      # no chain of n_seg segments can enter (2.1)
                continue
            for gs in chains_for_cuts(tab, rt, grp, s_num, n_seg, None,
                                      n_mb, objective, best.threshold, stop=stop, sync_min=sync_min,
                                      every_stage_syncs=ctx.settings.dp_sync_waits_for_all):
                score_cut(ctx, linked, grp, gs, n_mb, s_num, objective, space, best, stats, counts[0],
                          mbs, rc, cache, dist)
                if stop():
                    return False
            if stop():
                return False
        if space.chain_splits == "segment" and not _search_segment_splits(
                ctx, cache, tables, grp, (s_num, counts, mbs, n_mb, d_cap, rc, dist), n_max, objective,
                space, best, stats, stop):
            return False
    return True


def _search_segment_splits(ctx, cache, tables, grp, unit, n_max, objective, space, best, stats, stop) -> bool:
    """The chains of one unit under every segment split but the even one (searched before): per segment count,
    cut and split, its own tables, its :func:`unit_floors` against the threshold, then :func:`chains_for_cuts`
    of that one cut. False when ``stop()`` ended it."""
    s_num, even, mbs, n_mb, d_cap, rc, dist = unit
    for n_seg in range(2, n_max + 1):
        for cut in combinations(range(1, s_num), n_seg - 1):
            for split in segment_splits(ctx.model.num_layers, (0,) + cut + (s_num,)):
                if stop():
                    return False
                if np.array_equal(split, even):
                    continue
                linked = Linked(ctx, cache, tables, grp, mbs, split, rc, d_cap, space.precision, dist)
                floors = unit_floors(linked.for_floors(objective), grp, n_mb, objective, n_seg, best.threshold())
                if floors[n_seg] > best.threshold():
                    continue
                for gs in chains_for_cuts(linked.tab, range_tab(linked.tab), grp, s_num, n_seg, None, n_mb,
                                          objective, best.threshold, stop=stop,
                                          cuts=np.array([cut], dtype=np.int64)):
                    score_cut(ctx, linked, grp, gs, n_mb, s_num, objective, space, best, stats, split[0], mbs,
                              rc, cache, dist)
    return True


def score_cut(ctx, linked: Linked, grp, gs, n_mb, s_num, objective, space, best, stats, layers, mbs, rc, cache,
              dist=False, d_from: int = 1) -> None:
    """Score chains ``gs`` ([C, S] groups; every stage fits) of one split (``layers``) at every D (from ``d_from``)
    and push each D's best ``best.k`` under the threshold into ``best`` (the search's path; also
    :mod:`planner.search.chainrefine`)."""
    sc = score_chains(ctx, linked.tab, grp, gs, n_mb)
    lb = chain_lower_keys(sc, n_mb, s_num, objective, dist)
    keep = np.nonzero(np.isfinite(lb) & (lb <= best.threshold()))[0]
    stats.chains_bounded += len(gs)
    if len(keep) == 0:
        return
    sc = ChainScores(*(getattr(sc, f)[keep] for f in ChainScores.__dataclass_fields__))
    tied = (cache.tied, grp.names) if space.tie_embeddings else None
    for d, sel, it, cost, gpus, keys in iterate_d(ctx, sc, linked.full(), n_mb, s_num, objective,
                                                  space.uniform_microbatches, tied, best.threshold, d_from):
        if dist and d == 1 and False in chain_dist_options(space, ctx.settings.sharded_collective_scale):
            continue        # one pipeline: the same plan as without the distributed optimizer (searched too)
        stats.chains_exact += len(sel)
        for i in np.argsort(keys, kind="stable")[:best.k]:
            if not np.isfinite(keys[i]) or keys[i] > best.threshold():
                break
            c = sel[i]
            q, r = divmod(n_mb, d)
            best.push(Candidate(
                key=float(keys[i]), num_stages=s_num, mbs=mbs, layers_per_stage=tuple(int(x) for x in layers),
                pools=(), microbatches=tuple([q + 1] * r + [q] * (d - r)), iteration_s=float(it[i]),
                cost_usd=float(cost[i]), gpus=int(gpus[i]), precision=space.precision,
                optimizer=space.optimizer, recompute=rc, tie_embeddings=space.tie_embeddings,
                chain=tuple(grp.names[g] for g in sc.gs[c]), distributed_optimizer=dist))


def score_chain(ctx: SimContext, cluster: ClusterSpec, tables: Tables, cache: LinkCache,
                chain: tuple[tuple[str, str, int], ...], pipelines: int, mbs: int, gbs: int,
                recompute: bool = False, distributed_optimizer: bool = False,
                layers: tuple[int, ...] | None = None) -> Candidate | None:
    """The search's score of one chain plan (``chain``: (type, zone, tp) per stage, ``pipelines`` = D, ``layers``
    per stage: Sailor's even split when None), as :func:`search_chains` computes it; None when a stage does
    not fit or the pools lack room for D."""
    options = {g: [(mbs, tp)] for g, _, tp in chain}
    options = {g: sorted({(mbs, tp) for g2, _, tp in chain if g2 == g}) for g in options}
    grp = chain_groups(cluster, options, mbs, ctx)
    s_num, n_mb = len(chain), gbs // mbs
    q, r = divmod(ctx.model.num_layers, s_num)
    counts = np.array([list(layers or [q] * (s_num - r) + [q + 1] * r)], dtype=np.int64)
    if counts.shape[1] != s_num or counts.sum() != ctx.model.num_layers or counts.min() < 1:
        raise ValueError(f"score_chain: layers {layers} do not split the model's layers over {s_num} stages")
    tab = stage_tab(ctx, cache, tables, grp, mbs, counts, recompute, min(n_mb, int(grp.caps.max())),
                     tables.space.precision, distributed_optimizer)
    gs = np.array([[grp.names.index(c) for c in chain]], dtype=np.int64)
    if not tab.fits[gs[0], np.arange(s_num)].all():
        return None
    sc = score_chains(ctx, tab, grp, gs, n_mb)
    if sc.d_max[0] < pipelines or sc.d_min[0] > pipelines:
        return None
    tie = tables.space.tie_embeddings
    for d, _, it, cost, gpus, keys in iterate_d(ctx, sc, tab, n_mb, s_num, Objective(), False,
                                                (cache.tied, grp.names) if tie else None):
        if d == pipelines:
            q2, r2 = divmod(n_mb, d)
            return Candidate(key=float(keys[0]), num_stages=s_num, mbs=mbs,
                             layers_per_stage=tuple(int(x) for x in counts[0]), pools=(),
                             microbatches=tuple([q2 + 1] * r2 + [q2] * (d - r2)), iteration_s=float(it[0]),
                             cost_usd=float(cost[0]), gpus=int(gpus[0]), precision=tables.space.precision,
                             optimizer=tables.space.optimizer, recompute=recompute, chain=tuple(chain),
                             tie_embeddings=tie, distributed_optimizer=distributed_optimizer)
    return None
