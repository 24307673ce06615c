"""Per (S, micro-batch size) tables for the bound on Sailor's whole space (:mod:`planner.search.mixbound`).

Contract: :func:`mix_unit` returns, for S stages on Sailor's split (the L layers even, the extra layers on the
last stages) at micro-batch size b, per (group, stage) the simulator's compute per micro-batch, the largest
in-flight count at which the stage fits, the optimizer step; per group pair a floor on one boundary crossing;
and per replica count D a floor on the gradient sync and the optimizer step that EVERY plan of Sailor's space
with (S, b, D) pays, whatever mix of groups its stages hold (docs/PLANNER.md section 7). numpy only.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from planner.cluster import ClusterSpec
from planner.errors import InputError
from planner.network import Endpoint, Link
from planner.plan import Plan, Replica, Stage, region_of
from planner.search.linkfloor import link_floor, p2p_floor
from planner.search.chaintab import ChainGroups, chain_groups, stage_core
from planner.search.netvec import link_time
from planner.search.tasks import Tables, even_last
from planner.simulator import formulas as F
from planner.simulator.memory import replica_memory, usable_bytes
from planner.simulator.settings import SimContext
from planner.simulator.stage import all_replica_costs
from planner.simulator.time import p2p_transfer_s

REL = 1e-12     # float slack: a comparison is relaxed by this much so that rounding can only loosen the bound


@dataclass(frozen=True)
class MixUnit:
    """One (S, b): groups (type, zone, TP), their pools and TP; per (group, stage) ``comp`` (seconds per
    micro-batch), ``kmax`` (the most micro-batches in flight at which the replica fits, 0: never); ``p2p``
    [G, G] a floor on one crossing a -> b; ``sync`` [D + 1] a floor on the gradient sync of a plan with D
    pipelines (index D); ``upd`` the optimizer-step floor."""

    s_num: int
    mbs: int
    n_mb: int
    grp: ChainGroups
    comp: np.ndarray
    kmax: np.ndarray
    p2p: np.ndarray
    sync: np.ndarray
    upd: float
    d_max: int

    @property
    def usable(self) -> np.ndarray:
        return self.kmax >= 1


@dataclass
class MixMemo:
    """What :func:`mix_unit` reuses across the units of one bound: the ring floors (by the links' timings, the
    size and the member counts), the p2p table per micro-batch size, and the core tables and in-flight counts
    per (S, micro-batch size), which do not depend on the smallest TP degree."""

    rings: dict = field(default_factory=dict)
    p2p: dict = field(default_factory=dict)
    core: dict = field(default_factory=dict)


def _kmax(ctx: SimContext, grp: ChainGroups, counts: np.ndarray, mbs: int, fits: np.ndarray, precision: str
          ) -> np.ndarray:
    """[G, S] the most in-flight micro-batches (<= S - s) at which each replica fits: S - s where
    ``stage_core`` says it fits; else from ``replica_memory`` on a one-pipeline plan of the group at one and
    at S micro-batches (memory is affine in the in-flight count, ``memory_terms``); relaxed by REL."""
    s_num = counts.shape[1]
    left = s_num - np.arange(s_num)
    out = np.where(fits, left[None, :], 0).astype(np.int64)
    done: dict[tuple[str, int], np.ndarray] = {}
    for gi, (g, z, tp) in enumerate(grp.names):
        if fits[gi].all():
            continue
        if (g, tp) not in done:
            mem = []
            for m in (1, s_num):
                stages, first = [], 0
                for s, n in enumerate(counts[0]):
                    stages.append(Stage(first, int(n), (Replica(g, tp, z),)))
                    first += int(n)
                plan = Plan(num_layers=int(counts.sum()), stages=tuple(stages), micro_batch_size=mbs,
                            global_batch_size=mbs * m, microbatches_per_pipeline=(m,), precision=precision)
                mem.append(np.array([replica_memory(plan, ctx, row[0]).total_bytes
                                     for row in all_replica_costs(plan, ctx)]))
            cap = usable_bytes(ctx, g) * (1 + REL)
            slope = np.where(left > 1, (mem[1] - mem[0]) / np.maximum(left - 1, 1), 0.0)
            k = np.where(mem[0] <= cap, left, 0)
            for s in range(s_num):
                if mem[0][s] <= cap and left[s] > 1 and slope[s] > 0:
                    k[s] = min(left[s], int(np.floor((cap - mem[0][s]) / slope[s] * (1 + REL))) + 1)
            done[(g, tp)] = k
        out[gi] = np.where(fits[gi], out[gi], done[(g, tp)])
    return out


def _endpoint(ctx: SimContext, g: str, z: str) -> Endpoint:
    return Endpoint(g, z, ctx.node_size(g))


def pair_p2p(ctx: SimContext, cluster: ClusterSpec, grp: ChainGroups, mbs: int, precision: str) -> np.ndarray:
    """[G, G] one crossing's seconds as ``p2p_transfer_s`` times it (the smaller of both TP patterns); where
    the context declares node sizes per replica, the link floor of ``bound.p2p_floor`` instead."""
    n_g = len(grp.names)
    elem = F.bytes_per_element(precision)
    if ctx.replica_node_gpus:
        return np.full((n_g, n_g), p2p_floor(ctx, link_floor(ctx, cluster), mbs, elem))
    nbytes = ctx.model.boundary_activation_bytes(mbs, elem)
    out = np.zeros((n_g, n_g))
    for a, (ga, za, ta) in enumerate(grp.names):
        for b, (gb, zb, tb) in enumerate(grp.names):
            ts = []
            for all_tp in (True, False):
                try:
                    ts.append(p2p_transfer_s(ctx, _endpoint(ctx, ga, za), _endpoint(ctx, gb, zb), ta, tb, nbytes,
                                             all_tp))
                except InputError:      # a refused size or no link: simulate raises for every plan sending it
                    ts.append(np.inf)
            out[a, b] = min(ts)
    return out


def _key(link) -> tuple:
    return (link.max_bw_bytes_per_s, link.latency_s, link.fit_gb_per_s, link.min_bw_bytes_per_s, link.shared)


def _ring(memo: dict, links, n: np.ndarray, nbytes: float) -> np.ndarray:
    """Smallest ring all-reduce over n members (``F.ring_s`` of one chunk ``nbytes / n``) over ``links``
    (a ring's time is the largest over its edges: at least the smallest edge's); kept in ``memo`` by the
    links' timings, the size and the member counts."""
    n = np.asarray(n, dtype=float)
    key = (tuple(sorted(_key(l) for l in links)), float(nbytes), n.tobytes())
    if key not in memo:
        memo[key] = _ring_raw(links, n, nbytes)
    return memo[key]


def _ring_raw(links, n: np.ndarray, nbytes: float) -> np.ndarray:
    safe = np.maximum(n, 1.0)
    best = np.full(n.shape, np.inf)
    for link in links:
        best = np.minimum(best, F.ring_s(n, link_time(link, nbytes / safe)))
    return np.where(n > 1, best, 0.0)


def _halves(memo: dict, links, n: np.ndarray, nbytes: float, dist: tuple[float, float], grad_halves: int
            ) -> np.ndarray:
    """Smallest distributed-optimizer ring phases over n members (``F.ring_halves_s``: ``grad_halves`` passes of
    gradient chunks ``nbytes / n`` and one of parameter chunks ``dist[0] / n``, times the backend scale
    ``dist[1]``) over ``links`` (a ring's time is the largest over its edges, each a function of its link)."""
    n = np.asarray(n, dtype=float)
    key = ("halves", tuple(sorted(_key(l) for l in links)), float(nbytes), dist, grad_halves, n.tobytes())
    if key not in memo:
        safe = np.maximum(n, 1.0)
        best = np.full(n.shape, np.inf)
        for link in links:
            best = np.minimum(best, F.ring_halves_s(n, grad_halves, link_time(link, nbytes / safe), 1,
                                                    link_time(link, dist[0] / safe), dist[1]))
        memo[key] = np.where(n > 1, best, 0.0)
    return memo[key]


def _distinct(links: list) -> list:
    """The links of different timing (labels aside): each is timed once."""
    out = {}
    for l in links:
        out.setdefault(_key(l), l)
    return list(out.values())


def _suffix_min(a: np.ndarray) -> np.ndarray:
    return np.minimum.accumulate(a[::-1])[::-1]


def _zones_needed(grp: ChainGroups, usable: np.ndarray, d: np.ndarray, tp_min: int) -> np.ndarray:
    """[len(d)] the fewest zones a stage of D replicas of the groups ``usable`` spans: its replicas hold
    >= D x tp_min GPUs of those groups' pools, so it spans at least the fewest zones whose largest pools hold
    that many (inf: no zones can)."""
    pool_zone = {int(grp.pool[i]): grp.names[i][1] for i in np.nonzero(usable)[0]}
    caps: dict[str, int] = {}
    for p, z in pool_zone.items():
        caps[z] = caps.get(z, 0) + int(grp.caps[p])
    cum = np.cumsum(sorted(caps.values(), reverse=True))
    need = np.searchsorted(cum, d * tp_min, side="left") + 1.0
    return np.where(d * tp_min > cum[-1], np.inf, need)


def stage_sync_floor(ctx: SimContext, grp: ChainGroups, usable: np.ndarray, grad_b: float, d_max: int,
                      cluster: ClusterSpec, rings: dict, tp_min: int = 1,
                      dist: tuple[float, float] | None = None, spans_regions: bool = False) -> np.ndarray:
    """[d_max + 1] floor on one stage's sync over D replicas of the groups ``usable`` (each GPU reduces
    >= ``grad_b`` bytes): min of the flat ring (any member pair's link) and every hierarchical split (z >= 2
    zones: the largest zone's reduce + broadcast, 1.5 rings over >= ceil(D / z) members, plus the leaders'
    ring over z cross-zone members). Per-replica node sizes: the link floors of ``bound.link_floor``.
    ``dist`` = (parameter bytes per GPU, ``sharded_collective_scale``): the distributed optimizer's sync
    instead (``time.zone_aware_sync``: the ring is one gradient + one parameter half, the zone's reduce +
    broadcast two gradient halves + one parameter half, each times the scale). ``spans_regions``: the floor of
    a stage whose replicas sit in >= 2 regions (:mod:`planner.search.mixregion`): its flat ring and the
    leaders' ring of every hierarchical split then have an edge between two regions, so only those links
    count as cross-zone ones (not with per-replica node sizes)."""
    def ring(links, n):
        return _ring(rings, links, n, grad_b) if dist is None else _halves(rings, links, n, grad_b, dist, 1)

    def zone(links, n):
        return F.zone_reduce_broadcast_s(_ring(rings, links, n, grad_b)) if dist is None else \
            _halves(rings, links, n, grad_b, dist, 2)

    d = np.arange(d_max + 1, dtype=float)
    idx = np.nonzero(usable)[0]
    names = [grp.names[i] for i in idx]
    zones = sorted({z for _, z, _ in names})
    concs = sorted({t for _, _, t in names})
    same, cross = [], []
    if ctx.replica_node_gpus:
        floor = [Link(bw, lat) for lat, bw in link_floor(ctx, cluster)]
        same, cross = floor, floor
    else:
        seen = set()
        for ga, za, _ in names:
            for gb, zb, _ in names:
                for c in concs:
                    key = (ga, za, gb, zb, c)
                    if key in seen:
                        continue
                    seen.add(key)
                    link = ctx.network.link(_endpoint(ctx, ga, za), _endpoint(ctx, gb, zb), concurrent=c)
                    if za == zb:
                        same.append(link)
                    elif not spans_regions or region_of(za) != region_of(zb):
                        cross.append(link)
        same, cross = _distinct(same), _distinct(cross)
    z_min = _zones_needed(grp, usable, d, tp_min)
    if spans_regions:           # >= 2 regions: >= 2 zones
        z_min = np.maximum(z_min, 2.0)
    # a ring spanning >= 2 zones has a cross-zone edge (its time is the largest over its edges)
    flat = np.where(z_min >= 2, ring(cross, d) if cross else np.inf, ring(same + cross, d))
    best = flat
    inner_all = _suffix_min(zone(same, d)) if same else np.zeros_like(d)
    for z in range(2, len(zones) + 1):
        n_in = np.ceil(d / z)
        inner = inner_all[np.minimum(n_in.astype(int), d_max)]     # >= ceil(D / z) members
        inner = np.where(n_in > 1, inner, 0.0)
        lead = float(ring(cross, np.array([float(z)]))[0]) if cross else np.inf
        best = np.where((d >= z) & (z >= z_min), np.minimum(best, inner + lead), best)
    return np.where(d > 1, best, 0.0)


def mix_unit(ctx: SimContext, cluster: ClusterSpec, tables: Tables, options: dict, gbs: int, s_num: int, mbs: int,
             precision: str = "fp32", tp_min: int = 1, memo: MixMemo | None = None) -> MixUnit | None:
    """The tables of one (S, b) for the plans whose smallest TP degree is ``tp_min`` (groups of smaller TP are
    left out; some replica has TP ``tp_min``, so the stage holding it reduces that TP's gradient). None: no
    group at b, some stage fits on no group, or no group of TP ``tp_min`` fits anywhere. ``memo``: shared by
    the units of one bound (a fresh one by default)."""
    memo = memo if memo is not None else MixMemo()
    grp = chain_groups(cluster, options, mbs, ctx)
    if not grp.names or gbs % mbs:
        return None
    n_mb = gbs // mbs
    counts = even_last(ctx.model.num_layers, s_num)
    d_max = min(n_mb, cluster.total_gpus // s_num)
    if d_max < 1:
        return None
    if (s_num, mbs) not in memo.core:
        core = stage_core(ctx, tables, grp, mbs, counts, False, max(d_max, 1), precision, False)
        memo.core[(s_num, mbs)] = (core, _kmax(ctx, grp, counts, mbs, core.fits, precision))
    core, kmax = memo.core[(s_num, mbs)]
    kmax = np.where((grp.tp < tp_min)[:, None], 0, kmax)
    usable = kmax >= 1
    exact = usable & (grp.tp == tp_min)[:, None]
    if not usable.any(axis=0).all() or not exact.any():
        return None
    per_stage, with_min = [], []
    for s in range(s_num):
        grad_b = float(F.grad_bytes(core.params[usable[:, s], s].min()))
        per_stage.append(stage_sync_floor(ctx, grp, usable[:, s], grad_b, d_max, cluster, memo.rings, tp_min))
        if exact[:, s].any():      # this stage holds the TP-tp_min replica: its sync reduces that TP's gradient
            grad_t = float(F.grad_bytes(core.params[exact[:, s], s].min()))
            with_min.append(stage_sync_floor(ctx, grp, usable[:, s], grad_t, d_max, cluster, memo.rings, tp_min))
    per_stage = np.array(per_stage)
    if ctx.settings.dp_sync_waits_for_all:      # the slowest stage's sync, >= the one holding TP tp_min
        sync = np.maximum(per_stage.max(axis=0), np.min(with_min, axis=0))
    else:                                       # stage 0's (no backward left to hide it)
        sync = per_stage[0]
    upd = float(max(core.upd[usable[:, s], s].min() for s in range(s_num)))
    if mbs not in memo.p2p:
        memo.p2p[mbs] = pair_p2p(ctx, cluster, grp, mbs, precision)
    return MixUnit(s_num, mbs, n_mb, grp, core.comp, kmax, memo.p2p[mbs], sync, upd, d_max)
