"""Per (group, stage) tables of one layer split for the chain-plan search, and per stage range their maxima.

Contract: :func:`chain_groups` lists the (GPU type, zone, TP) groups usable at one micro-batch size;
:func:`stage_tab` gives per group and stage of a split the simulator's compute, backward, optimizer step,
fit (with the distributed optimizer: the smallest replica count at which the stage fits) and ring sync per
replica count, and per group pair the p2p seconds and egress USD (the simulator's formulas on the same
links); :func:`range_tab` gives per stage range lo..hi-1 whether every stage fits and the largest and
summed compute and the slowest optimizer step.
:class:`Linked` holds one chain unit's core and pair tables and adds the sync table on first use.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.netvec import Group, LinkCache, link_time
from planner.search.space import Objective
from planner.search.tasks import Tables
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext


@dataclass(frozen=True)
class ChainGroups:
    """The groups usable at one micro-batch size: (type, zone, tp), pool index, GPUs per pool."""

    names: list[tuple[str, str, int]]
    pool: np.ndarray          # [G] index into caps
    caps: np.ndarray          # [P] GPUs of each (type, zone) pool
    tp: np.ndarray            # [G]
    usd_per_s: np.ndarray     # [G] one GPU

    # derived once per group list (cached on the instance: chain_units builds one per micro-batch size)
    @cached_property
    def memo(self) -> dict:
        """Look-ups of this group list's tables (:func:`with_pairs`), each with the link cache it came from."""
        return {}

    @cached_property
    def groups(self) -> tuple[Group, ...]:
        """The groups as :class:`planner.search.netvec.Group` (zone, type, TP)."""
        return tuple(Group(z, g, tp) for g, z, tp in self.names)


def chain_groups(cluster: ClusterSpec, options: dict[str, list[tuple[int, int]]], mbs: int, ctx: SimContext
                 ) -> ChainGroups:
    pools = sorted({(p.gpu_type, p.zone) for p in cluster.pools})
    caps = np.array([cluster.count(g, z) for g, z in pools], dtype=np.int64)
    names, pool = [], []
    for pi, (g, z) in enumerate(pools):
        for m, tp in options.get(g, []):
            if m == mbs and caps[pi] >= tp:
                names.append((g, z, tp))
                pool.append(pi)
    tp = np.array([n[2] for n in names], dtype=np.int64)
    usd = np.array([ctx.catalog.get(n[0]).usd_per_s for n in names], dtype=float)
    return ChainGroups(names, np.array(pool, dtype=np.int64), caps, tp, usd)


@dataclass(frozen=True)
class StageTab:
    """Per (group, stage) quantities of one split, and per group pair the p2p seconds and egress USD.
    :func:`stage_core` leaves ``sync``, ``p2p`` and ``egress`` None (the unit floor needs none of them);
    :func:`with_pairs` and :func:`with_sync` add them."""

    comp: np.ndarray      # [G, S]
    bwd: np.ndarray       # [G, S]
    upd: np.ndarray       # [G, S]
    fits: np.ndarray      # [G, S] (distributed optimizer: at some D <= Dcap)
    sync: np.ndarray | None   # [G, S, Dcap + 1] ring all-reduce of the stage over d identical replicas
    p2p: np.ndarray | None    # [G, G]
    egress: np.ndarray | None  # [G, G] USD per micro-batch crossing a -> b (forward and backward)
    dmin: np.ndarray      # [G, S] the smallest D at which the stage fits (1 without the distributed optimizer)
    upd_floor: np.ndarray  # [G, S] a lower bound on the optimizer step at every D (distributed: upd / Dcap)
    param_bytes: int | None = None   # the distributed optimizer's bytes per parameter element (None: off)
    params: np.ndarray | None = None   # [G, S] parameter elements of each stage (for the sync)
    d_cap: int = 0


def stage_tab(ctx: SimContext, cache: LinkCache, tables: Tables, grp: ChainGroups, mbs: int, counts: np.ndarray,
               recompute: bool, d_cap: int, precision: str, dist: bool = False) -> StageTab:
    """Every table: :func:`stage_core`, then :func:`with_pairs` and :func:`with_sync`."""
    core = stage_core(ctx, tables, grp, mbs, counts, recompute, d_cap, precision, dist)
    return with_sync(ctx, cache, grp, with_pairs(ctx, cache, grp, core, mbs, precision))


def stage_core(ctx: SimContext, tables: Tables, grp: ChainGroups, mbs: int, counts: np.ndarray, recompute: bool,
               d_cap: int, precision: str, dist: bool = False) -> StageTab:
    """Compute, backward, step and fit per (group, stage). ``dist``: the distributed optimizer (one group per
    stage: one fine shard per rank)."""
    s_num = counts.shape[1]
    n_g = len(grp.names)
    comp, bwd, upd, fits, params = (np.zeros((n_g, s_num)) for _ in range(5))
    dmin = np.ones((n_g, s_num), dtype=np.int64)
    seen: dict[tuple[str, int], int] = {}       # groups of one (type, TP) in other zones: the same rows
    for gi, (g, _, tp) in enumerate(grp.names):
        twin = seen.setdefault((g, tp), gi)
        if twin != gi:
            for x in (comp, bwd, upd, fits, params, dmin):
                x[gi] = x[twin]
            continue
        arr = tables.raw_arrays(g, tp, mbs, counts, recompute)
        comp[gi], bwd[gi], upd[gi], params[gi] = arr.compute_s[0], arr.bwd_s[0], arr.update_s[0], arr.params[0]
        if dist:        # per stage: memory is non-increasing in D, so the stage fits from its smallest D on
            if not (arr.memory_bytes[0] <= tables.table(g, tp, mbs).usable_bytes).all():    # at D = 1: plain
                dmin[gi] = tables.dist_dmin(g, tp, mbs, s_num, recompute, 1, counts, per_stage=True)[0]
            fits[gi] = dmin[gi] <= d_cap
        else:
            fits[gi] = arr.memory_bytes[0] <= tables.table(g, tp, mbs).usable_bytes
    pbytes = F.bytes_per_element(precision) if dist else None
    return StageTab(comp, bwd, upd, fits.astype(bool), None, None, None, dmin, upd / d_cap if dist else upd,
                    pbytes, params, d_cap)


def with_pairs(ctx: SimContext, cache: LinkCache, grp: ChainGroups, tab: StageTab, mbs: int, precision: str
               ) -> StageTab:
    """``tab`` with the p2p and egress tables (memoised per group list and activation size in ``cache``)."""
    nbytes = ctx.model.boundary_activation_bytes(mbs, F.bytes_per_element(precision))
    mine = grp.memo.get(("chain-p2p", nbytes))         # this group list's own look-up (no tuple hashed per unit)
    if mine is None or mine[0] is not cache:
        key = ("chain-p2p", grp.groups, nbytes)
        if key not in cache.patterns:
            cache.patterns[key] = pair_tables(ctx, cache, list(grp.groups), nbytes)
        mine = grp.memo[("chain-p2p", nbytes)] = (cache, *cache.patterns[key])
    return replace(tab, p2p=mine[1], egress=mine[2])


def with_sync(ctx: SimContext, cache: LinkCache, grp: ChainGroups, tab: StageTab) -> StageTab:
    """``tab`` with the ring sync per (group, stage, replica count) (memoised in ``cache``)."""
    groups = grp.groups
    params, d_cap, pbytes = tab.params, tab.d_cap, tab.param_bytes
    n_g, s_num = params.shape
    key = ("chain-sync", groups, params.tobytes(), d_cap, pbytes)
    if key not in cache.patterns:       # recomputation leaves parameters unchanged: shared by both settings
        d = np.arange(d_cap + 1, dtype=float)
        sync = np.zeros((n_g, s_num, d_cap + 1))
        done: dict[tuple, np.ndarray] = {}     # groups whose links time alike (all but the label) and params
        for gi, grp_i in enumerate(groups):
            link = cache.get(grp_i, grp_i, grp_i.tp)
            same = (link.max_bw_bytes_per_s, link.latency_s, link.fit_gb_per_s, link.min_bw_bytes_per_s,
                    params[gi].tobytes())
            if same in done:
                sync[gi] = done[same]
                continue
            nbytes = F.grad_bytes(params[gi])[:, None]                       # [S, 1]
            dd = np.maximum(d[None, :], 1)
            if pbytes is None:
                t = F.ring_s(d[None, :], link_time(link, nbytes / dd))
            else:       # reduce-scatter of gradients + all-gather of parameters (stage_sync's flat ring)
                t = F.ring_halves_s(d[None, :], 1, link_time(link, nbytes / dd), 1,
                                    link_time(link, (params[gi] * pbytes)[:, None] / dd),
                                    ctx.settings.sharded_collective_scale)
            sync[gi] = done[same] = np.where(d[None, :] > 1, t, 0.0)
        cache.patterns[key] = sync
    return replace(tab, sync=cache.patterns[key])


def pair_tables(ctx: SimContext, cache: LinkCache, groups: list[Group], nbytes: float
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Per group pair (a, b): p2p seconds of one crossing a -> b (mean of forward and backward, as
    ``p2p_transfer_s``) and the egress USD of one micro-batch crossing it both ways."""
    n_g = len(groups)
    p2p = np.zeros((n_g, n_g))
    egress = np.zeros((n_g, n_g))
    all_tp = ctx.settings.p2p_all_tp_ranks
    for a, ga in enumerate(groups):
        for b, gb in enumerate(groups):
            fwd = cache.checked(ga, gb, gb.tp if all_tp else 1, nbytes)
            back = cache.checked(gb, ga, ga.tp if all_tp else 1, nbytes)
            p2p[a, b] = 0.5 * (fwd + back)
            if ga.zone != gb.zone:      # forward: one copy per receiving TP rank; backward: per sending one
                k_fwd, k_bwd = (gb.tp, ga.tp) if all_tp else (1, 1)
                egress[a, b] = nbytes * (k_fwd * ctx.network.egress_usd_per_byte(ga.zone, gb.zone)
                                         + k_bwd * ctx.network.egress_usd_per_byte(gb.zone, ga.zone))
    return p2p, egress


@dataclass(frozen=True)
class RangeTab:
    """Per stage range lo..hi-1 (indices [lo, hi]) and group: every stage fits, the largest and summed compute,
    the slowest optimizer step."""

    fits: np.ndarray      # [S + 1, S + 1, G]
    comp_max: np.ndarray
    comp_sum: np.ndarray
    upd: np.ndarray


def range_tab(tab: StageTab) -> RangeTab:
    n_g, s_num = tab.comp.shape
    fits = np.zeros((s_num + 1, s_num + 1, n_g), dtype=bool)
    cmax, csum, upd = (np.zeros((s_num + 1, s_num + 1, n_g)) for _ in range(3))
    for lo in range(s_num):
        fits[lo, lo + 1:] = np.logical_and.accumulate(tab.fits[:, lo:], axis=1).T
        cmax[lo, lo + 1:] = np.maximum.accumulate(tab.comp[:, lo:], axis=1).T
        csum[lo, lo + 1:] = np.cumsum(tab.comp[:, lo:], axis=1).T
        upd[lo, lo + 1:] = np.maximum.accumulate(tab.upd_floor[:, lo:], axis=1).T
    return RangeTab(fits, cmax, csum, upd)


class Linked:
    """One unit's tables: :func:`stage_core` with the pair tables; the sync table is built on first use (only
    units with a chain left to score, or whose floor needs it)."""

    def __init__(self, ctx: SimContext, cache: LinkCache, tables: Tables, grp: ChainGroups, mbs: int,
                 counts: np.ndarray, rc: bool, d_cap: int, precision: str, dist: bool) -> None:
        self.ctx, self.cache, self.grp, self._full = ctx, cache, grp, None
        self.tab = with_pairs(ctx, cache, grp, stage_core(ctx, tables, grp, mbs, counts, rc, d_cap, precision, dist),
                              mbs, precision)

    def full(self) -> StageTab:
        if self._full is None:
            self._full = with_sync(self.ctx, self.cache, self.grp, self.tab)
        return self._full

    def for_floors(self, objective: Objective) -> StageTab:
        """The tables :func:`unit_floors` takes: with the sync table under ``value`` (its stage-0 sync term, 2.6)."""
        return self.full() if objective.kind == "value" else self.tab
