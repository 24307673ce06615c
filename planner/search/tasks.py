"""Search tasks: one (pipeline depth S, micro-batch size, TP per used GPU type), with a lower bound on the
objective over every plan of the task (used to visit tasks best-first and to skip tasks that cannot win)."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations, product

import numpy as np

from planner.cluster import ClusterSpec
from planner.errors import InputError
from planner.search.netvec import Group, LinkCache, bandwidth, link_time
from planner.search.space import Objective, SearchSpace
from planner.search.distopt import dist_dominated, plain_rows_cap, shards_of
from planner.search.pools import level_periods
from planner.search.tables import (NEVER, StageArrays, TypeTable, build_type_table, dist_min_dp,
                                   memory_terms_of, split_family, stage_arrays)
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext

ANALYTIC_OPTIONS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Task:
    num_stages: int
    mbs: int
    tps: tuple[tuple[str, int], ...]        # (gpu type, tp) of every used type, sorted by type
    bound: float
    recompute: bool = False
    dist: bool = False                      # the distributed optimizer
    dmax: int = 0                           # the largest total pipeline count of any row searched (0: any)


def mbs_tp_options(ctx: SimContext, gpu_type: str, node_size: int, space: SearchSpace) -> list[tuple[int, int]]:
    """(mbs, tp) pairs the search may use for a GPU type."""
    measured = ctx.profiles.options(gpu_type)
    if not measured:
        if not (ctx.profiles.allow_estimates and gpu_type in ctx.catalog):
            raise InputError(f"GPU type '{gpu_type}' has no profile for model '{ctx.model.name}' and no "
                             "analytic estimate is allowed")
        measured = [(m, t) for m in ANALYTIC_OPTIONS for t in ANALYTIC_OPTIONS]
    out = []
    for m, t in measured:
        if t > node_size or (space.mbs_options and m not in space.mbs_options):
            continue
        if space.tp_options and t not in space.tp_options:
            continue
        try:
            ctx.model.check_tp(t)
        except InputError:
            continue
        out.append((m, t))
    return sorted(out)


def splits_for(space: SearchSpace, num_layers: int, s_num: int) -> np.ndarray | None:
    if space.split == "family":
        return split_family(num_layers, s_num)
    if space.split == "even":
        if num_layers % s_num:
            return None
        return np.full((1, s_num), num_layers // s_num, dtype=np.int64)
    if space.split == "even_last":
        q, r = divmod(num_layers, s_num)
        return np.array([[q] * (s_num - r) + [q + 1] * r], dtype=np.int64)
    ids = np.array_split(np.arange(num_layers + 2), s_num)
    counts = [len(x) for x in ids]
    counts[0] -= 1
    counts[-1] -= 1
    if any(c < 1 for c in counts) and s_num > 1:
        return None
    return np.array([counts], dtype=np.int64)


@dataclass(frozen=True)
class SplitStats:
    """Per split ([K]) of one (type, TP, micro-batch, S, recompute): the slowest stage's optimizer step, the
    largest per-GPU parameter count, the busiest stage's compute and the summed compute."""

    upd_max: np.ndarray
    params_max: np.ndarray
    comp_max: np.ndarray
    comp_sum: np.ndarray


class Tables:
    """Caches of type tables and per-split stage arrays."""

    def __init__(self, ctx: SimContext, space: SearchSpace) -> None:
        self.ctx, self.space = ctx, space
        self._tt: dict[tuple[str, int, int], TypeTable] = {}
        self._arr: dict[tuple[str, int, int, int, bool], StageArrays | None] = {}
        self.min_overflow_bytes: float | None = None
        self.memo: dict[tuple, object] = {}       # the engine's per-pool models, shared across tasks

    def table(self, g: str, tp: int, mbs: int) -> TypeTable:
        key = (g, tp, mbs)
        if key not in self._tt:
            self._tt[key] = build_type_table(self.ctx, g, tp, mbs, self.space.precision)
        return self._tt[key]

    def arrays(self, g: str, tp: int, mbs: int, s_num: int, recompute: bool = False) -> StageArrays | None:
        key = (g, tp, mbs, s_num, recompute)
        if key not in self._arr:
            counts = splits_for(self.space, self.ctx.model.num_layers, s_num)
            arr = None
            if counts is not None:
                tt = self.table(g, tp, mbs)
                arr = stage_arrays(self.ctx, tt, counts, self.space.precision, self.space.optimizer, recompute,
                                   self.space.tie_embeddings)
                self._arr[("plain", g, tp, mbs, s_num, recompute)] = arr
                over = float((arr.memory_bytes.max(axis=1) - tt.usable_bytes).min())
                if self.min_overflow_bytes is None or over < self.min_overflow_bytes:
                    self.min_overflow_bytes = over
                if not arr.fits.any() and not (True in self.space.distributed_optimizer and
                                               (self.dist_dmin(g, tp, mbs, s_num, recompute) < NEVER).any()):
                    arr = None
            self._arr[key] = arr
        return self._arr[key]

    def dist_dmin(self, g: str, tp: int, mbs: int, s_num: int, recompute: bool, shards: int = 1,
                  counts: np.ndarray | None = None, per_stage: bool = False) -> np.ndarray:
        """[K] the smallest replica count at which each split fits on (g, tp) under the distributed optimizer
        (:func:`planner.search.tables.dist_min_dp`; ``counts``: these splits instead of the space's;
        ``per_stage``: [K, S], per stage)."""
        key = ("dmin", g, tp, mbs, s_num if counts is None else (counts.tobytes(), counts.shape), recompute, shards)
        plain = self._arr.get(("plain", g, tp, mbs, s_num, recompute)) if counts is None and shards == 1 else None
        if key not in self._arr and plain is not None and plain.fits.all():
            # one fine shard at D = 1 is exactly the plain memory: every stage of every split fits from D = 1
            self._arr[key] = np.ones(plain.memory_bytes.shape, dtype=np.int64)
        if key not in self._arr:
            if counts is None:
                counts = splits_for(self.space, self.ctx.model.num_layers, s_num)
            tkey = ("dmin-terms", g, tp, mbs, key[4], recompute)     # shared by every fine-shard count
            if tkey not in self._arr:
                self._arr[tkey] = memory_terms_of(self.ctx, self.table(g, tp, mbs), counts, self.space.precision,
                                                  self.space.optimizer, recompute, self.space.tie_embeddings)
            self._arr[key] = dist_min_dp(self.ctx, self.table(g, tp, mbs), counts, self.space.precision,
                                         self.space.optimizer, recompute, shards, self.space.tie_embeddings,
                                         self._arr[tkey])
        return self._arr[key] if per_stage else self._arr[key].max(axis=1)

    def dist_range(self, combo, mbs: int, s_num: int, recompute: bool) -> tuple[np.ndarray, np.ndarray]:
        """([K], [K]) per split the smallest and the largest total pipeline count D at which the task's plans
        with the distributed optimizer are kept: every type fits from the first on (memory is non-increasing in
        D); with recomputation and a monotone objective (``dp_sync_waits_for_all``), rows at which the split
        also fits without recomputation are left to the task without it (recomputation dominance, per row)."""
        key = ("dist-range", combo, mbs, s_num, recompute)
        if key not in self.memo:
            sh = shards_of(combo)
            lo = np.max([self.dist_dmin(g, t, mbs, s_num, recompute, sh[g]) for g, t in combo], axis=0)
            hi = np.full(len(lo), NEVER, dtype=np.int64)
            if recompute and self.ctx.settings.dp_sync_waits_for_all and False in self.space.recompute:
                hi = np.max([self.dist_dmin(g, t, mbs, s_num, False, sh[g]) for g, t in combo], axis=0) - 1
            self.memo[key] = (lo, hi)
        return self.memo[key]

    def raw_arrays(self, g: str, tp: int, mbs: int, counts: np.ndarray, recompute: bool) -> StageArrays:
        """Stage arrays of splits ``counts`` on (g, tp, mbs), kept even where no split fits (chain plans fit
        per stage)."""
        key = ("raw", g, tp, mbs, counts.tobytes(), counts.shape, recompute)
        if key not in self._arr:
            self._arr[key] = stage_arrays(self.ctx, self.table(g, tp, mbs), counts, self.space.precision,
                                          self.space.optimizer, recompute, self.space.tie_embeddings)
        return self._arr[key]

    def split_stats(self, g: str, tp: int, mbs: int, s_num: int, recompute: bool) -> SplitStats:
        """Per-split maxima and sums of :meth:`arrays` (computed once; the task bounds read them)."""
        key = ("stats", g, tp, mbs, s_num, recompute)
        if key not in self._arr:
            a = self.arrays(g, tp, mbs, s_num, recompute)
            self._arr[key] = SplitStats(a.update_s.max(axis=1), a.params.max(axis=1), a.compute_s.max(axis=1),
                                        a.compute_s.sum(axis=1))
        return self._arr[key]

    def levels(self, g: str, tp: int, mbs: int, s_num: int, recompute: bool, p2p_s: float,
               blocking: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """([K, S + 1] steady-period levels, [K] fill/drain, [K] busiest stage) of every split with one
        transfer time ``p2p_s`` on every boundary (row k equals the one-split computation on split k)."""
        key = ("levels", g, tp, mbs, s_num, recompute, p2p_s, blocking)
        if key not in self._arr:
            comp = self.arrays(g, tp, mbs, s_num, recompute).compute_s
            self._arr[key] = (level_periods(comp, p2p_s, blocking), F.fill_drain_s(comp, p2p_s),
                              F.busy_s(comp, p2p_s, blocking).max(axis=-1))
        return self._arr[key]

    def task_fits(self, combo, mbs: int, s_num: int, recompute: bool, dist: bool = False,
                  dmax: int = 0, relaxed: bool = False) -> np.ndarray:
        """[K] splits of the task where every used type fits. With recomputation, splits that also fit
        without it are dropped when the objective is monotone in compute (``dp_sync_waits_for_all``):
        recomputation only adds backward seconds there, so the same plan without it is at least as good.
        ``dist``: the distributed optimizer, whose memory depends on the row's pipeline count D <= ``dmax``:
        the splits whose :meth:`dist_range` meets 1..dmax (each row is checked against it later); ``relaxed``:
        a superset of them, cheaper (one fine shard per rank, which holds the least optimizer memory, and no
        recomputation dominance), for the cheap task bounds."""
        if dist and relaxed:
            return np.max([self.dist_dmin(g, t, mbs, s_num, recompute) for g, t in combo], axis=0) <= dmax
        if dist:
            lo, hi = self.dist_range(combo, mbs, s_num, recompute)
            return lo <= np.minimum(dmax, hi)
        key = ("fits", combo, mbs, s_num, recompute)
        if key in self.memo:
            return self.memo[key]
        fits = np.logical_and.reduce([self.arrays(g, t, mbs, s_num, recompute).fits for g, t in combo])
        if recompute and self.ctx.settings.dp_sync_waits_for_all:
            plain = [self.arrays(g, t, mbs, s_num, False) for g, t in combo]
            if all(a is not None for a in plain):
                fits = fits & ~np.logical_and.reduce([a.fits for a in plain])
        self.memo[key] = fits
        return fits


_CAPS: dict[tuple[int, str, int, int], tuple[ClusterSpec, tuple[tuple[str, int], ...]]] = {}


def caps_for(cluster: ClusterSpec, g: str, tp: int, s_num: int) -> tuple[tuple[str, int], ...]:
    """(zone, max pipelines) of every zone holding type g. Memoised by the cluster object's identity (hashing a
    many-pool cluster costs more than the answer; the entry keeps its cluster, so an id is never reused)."""
    key = (id(cluster), g, tp, s_num)
    hit = _CAPS.get(key)
    if hit is not None and hit[0] is cluster:
        return hit[1]
    if len(_CAPS) > 65536:
        _CAPS.clear()
    out = tuple((p.zone, p.count // (s_num * tp)) for p in sorted(cluster.pools, key=lambda p: p.zone)
                if p.gpu_type == g and p.count // (s_num * tp) > 0)
    _CAPS[key] = (cluster, out)
    return out


def enumerate_tasks(ctx: SimContext, cluster: ClusterSpec, tables: Tables, options: dict[str, list[tuple[int, int]]],
                    gbs: int, objective: Objective, space: SearchSpace, cache: LinkCache,
                    tick=None) -> list[Task]:
    """Every task with a finite cheap bound, sorted by it. ``tick(i, n)``: called per pipeline depth."""
    types = sorted(options)
    max_types = min(len(types), space.max_gpu_types or len(types))
    max_s = min(ctx.model.num_layers, space.max_stages or ctx.model.num_layers)
    mbs_all = sorted({m for g in types for m, _ in options[g]})
    tasks = []
    for s_num, mbs, rc, dist in product(range(1, max_s + 1), mbs_all, space.recompute, space.distributed_optimizer):
        if tick is not None and dist == space.distributed_optimizer[0]:
            tick(s_num - 1, max_s)
        if gbs % mbs:
            continue
        choices = {g: [t for m, t in options[g] if m == mbs and caps_for(cluster, g, t, s_num)
                       and tables.arrays(g, t, mbs, s_num, rc) is not None] for g in types}
        if space.tp_rule == "min_fit":
            choices = {g: c[:1] for g, c in choices.items()}
        for k in range(1, max_types + 1):
            for subset in combinations(types, k):
                combos = [tuple(zip(subset, tps)) for tps in product(*(choices[g] for g in subset))]
                if not dist:
                    combos = [c for c in combos if not dist_dominated(space, c)
                              and not 0 < plain_rows_cap(space, c) < len(c)]     # rows have D >= len(c)
                for combo, b in zip(combos, cheap_bounds(ctx, cluster, tables, combos, s_num, mbs, gbs // mbs,
                                                          objective, rc, dist)):
                    if b < np.inf:
                        tasks.append(Task(s_num, mbs, combo, float(b), rc, dist,
                                          task_dmax(cluster, combo, s_num, gbs // mbs) if dist
                                          else plain_rows_cap(space, combo)))
    tasks.sort(key=lambda t: (t.bound, t.num_stages, t.mbs))
    return tasks


def task_dmax(cluster: ClusterSpec, combo, s_num: int, n_mb: int) -> int:
    """The largest total pipeline count of any row of a task: its pools' capacity, at most N."""
    return int(min(n_mb, sum(c for g, t in combo for _, c in caps_for(cluster, g, t, s_num))))


def cheap_bounds(ctx: SimContext, cluster: ClusterSpec, tables: Tables, combos: list, s_num: int, mbs: int,
                 n_mb: int, objective: Objective, recompute: bool, dist: bool = False) -> np.ndarray:
    """``task_bound(..., with_sync=False)`` of many combos of one type subset at once ([C]): the same
    operations on the same values, one row per combo."""
    if not combos:
        return np.zeros(0)
    n_types = len(combos[0])
    fits = np.array([tables.task_fits(c, mbs, s_num, recompute, dist, task_dmax(cluster, c, s_num, n_mb),
                                      relaxed=True) for c in combos])          # [C, K]
    stats = [[tables.split_stats(g, t, mbs, s_num, recompute) for g, t in c] for c in combos]

    def masked_min(field: str) -> np.ndarray:                                                # [C, types]
        vals = np.array([[getattr(st, field) for st in row] for row in stats])              # [C, types, K]
        return np.where(fits[:, None, :], vals, np.inf).min(axis=2)

    upd = masked_min("upd_max").max(axis=1)
    m_min, f_min = masked_min("comp_max"), masked_min("comp_sum")
    cap = np.array([sum(c for g, t in combo for _, c in caps_for(cluster, g, t, s_num)) for combo in combos])
    d = np.arange(n_types, n_mb + 1, dtype=float)
    if len(d) == 0:
        return np.full(len(combos), np.inf)
    with np.errstate(invalid="ignore"):
        x = n_mb / d - 1            # per type f + m x, the minimum over types (exact in any order)
        per_type = np.minimum.reduce([f_min[:, j, None] + m_min[:, j, None] * x[None, :] for j in range(n_types)])
        span = np.maximum(f_min.max(axis=1)[:, None], per_type)
        span = span * (1 - 1e-12)
        it = span + 0.0 + (upd[:, None] / d[None, :] if dist else upd[:, None])
        usd = np.array([min(t * ctx.catalog.get(g).usd_per_s for g, t in c) for c in combos])
        rate = (d[None, :] * s_num) * usd[:, None]
        gpus = (d[None, :] * s_num) * np.array([min(t for _, t in c) for c in combos])[:, None]
        ok = objective.allows(it, rate * it, gpus) & (d[None, :] <= np.minimum(cap, n_mb)[:, None])
        keys = np.where(ok, objective.key(it, rate * it), np.inf)
    keys = np.where(fits.any(axis=1)[:, None], keys, np.inf)
    return keys.min(axis=1)


def task_bound(ctx: SimContext, cluster: ClusterSpec, tables: Tables, combo, s_num: int, mbs: int, n_mb: int,
               objective: Objective, cache: LinkCache, with_sync: bool = True, sync_out: dict | None = None,
               recompute: bool = False, dist: bool = False) -> float:
    """Lower bound on the objective of every plan of the task (inf: none can be feasible); without the
    gradient-sync term when ``with_sync`` is false (cheaper, weaker). ``sync_out['by_d']`` receives the
    sync lower bound per total pipeline count d (index d). ``dist``: the distributed optimizer (optimizer
    step / d, :func:`sync_lower_bound` halved)."""
    fits = tables.task_fits(combo, mbs, s_num, recompute, dist, task_dmax(cluster, combo, s_num, n_mb))
    if not fits.any():
        return np.inf
    stats = [tables.split_stats(g, t, mbs, s_num, recompute) for g, t in combo]
    upd = max(float(st.upd_max[fits].min()) for st in stats)
    cap = sum(c for g, t in combo for _, c in caps_for(cluster, g, t, s_num))
    d = np.arange(len(combo), min(cap, n_mb) + 1, dtype=float)
    if len(d) == 0:
        return np.inf
    if with_sync:
        grad = F.grad_bytes(float(np.max([st.params_max[fits] for st in stats], axis=0).min()))
        m_per = np.ceil(n_mb / d).astype(np.int64)      # the fullest pipeline runs at least this many
        t_types, f_types = [], []
        for g, t in combo:
            t_at, fill = _type_times(ctx, cluster, cache, tables, fits, g, t, s_num, mbs, m_per, recompute)
            t_types.append(t_at)
            f_types.append(fill)
        span = np.maximum(max(f_types), np.min(t_types, axis=0))
    else:   # busiest stage as the period, no transfers: weaker, much cheaper
        m_min = np.array([st.comp_max[fits].min() for st in stats])
        f_min = np.array([st.comp_sum[fits].min() for st in stats])
        span = np.maximum(f_min.max(), (f_min[None, :] + m_min[None, :] * (n_mb / d[:, None] - 1)).min(axis=1))
        span = span * (1 - 1e-12)
    sync = sync_lower_bound(cluster, combo, s_num, grad, d, cache) if with_sync else 0.0
    if dist:        # fp32: the parameter half moves as many bytes as the gradient half it replaces
        sync = sync * (1 - 1e-12 if tables.space.precision == "fp32" else 0.5)
    if sync_out is not None and with_sync:
        table = np.zeros(int(d[-1]) + 1)
        table[d.astype(np.int64)] = sync
        sync_out["by_d"] = table
    it = span + sync + (upd / d if dist else upd)
    rate = d * s_num * min(t * ctx.catalog.get(g).usd_per_s for g, t in combo)
    gpus = d * s_num * min(t for _, t in combo)
    ok = objective.allows(it, rate * it, gpus)
    keys = np.where(ok, objective.key(it, rate * it), np.inf)
    return float(keys.min())


def _type_times(ctx: SimContext, cluster: ClusterSpec, cache: LinkCache, tables: Tables, fits: np.ndarray, g: str,
                tp: int, s_num: int, mbs: int, m: np.ndarray, recompute: bool) -> tuple[np.ndarray, float]:
    """Lower bounds over the task's splits and the type's pools: T(m) at the counts ``m``, and the
    fill/drain."""
    nbytes = ctx.model.boundary_activation_bytes(mbs, F.bytes_per_element(tables.space.precision))
    conc = tp if ctx.settings.p2p_all_tp_ranks else 1
    p2p = 0.0 if s_num == 1 else min(cache.checked(Group(z, g, tp), Group(z, g, tp), conc, nbytes)
                                     for z, _ in caps_for(cluster, g, tp, s_num))
    levels_all, fill_all, _ = tables.levels(g, tp, mbs, s_num, recompute, p2p, ctx.settings.p2p_blocking)
    levels = levels_all[fits].min(axis=0)
    fill = float(fill_all[fits].min())
    times = F.pipeline_s(m, levels[np.minimum(m, len(levels)) - 1], fill) if np.isfinite(p2p) \
        else np.full(len(m), np.inf)
    return times * (1 - 1e-12), fill * (1 - 1e-12)


def _suffix_min(x: np.ndarray) -> np.ndarray:
    return np.minimum.accumulate(x[::-1])[::-1]


def sync_lower_bound(cluster: ClusterSpec, combo, s_num: int, grad_bytes: float, d: np.ndarray,
                     cache: LinkCache) -> np.ndarray:
    """A lower bound on the gradient sync of any plan of the task with d pipelines (0 for d = 1).

    One zone: a flat ring over d replicas, at least the fastest candidate link's ring time. Several zones:
    either a flat ring holding a cross-zone pair (its worst link is at most as fast as the fastest
    cross-zone link: raw transfer time without latency) or hierarchical: a cross ring over Z' >= 2 zone
    leaders plus 1.5 rings inside the fullest zone (>= ceil(d / Z') members); ring times enter through their
    suffix minimum over the member count, so no monotonicity is assumed.
    """
    groups = tuple(Group(z, g, t) for g, t in combo for z, _ in caps_for(cluster, g, t, s_num))
    conc = min(t for _, t in combo)
    per_zone: dict[str, int] = {}
    for g, t in combo:
        for z, c in caps_for(cluster, g, t, s_num):
            per_zone[z] = per_zone.get(z, 0) + c
    n_cap = max(int(d.max()) if len(d) else 1, sum(per_zone.values()))
    ring_intra, raw, c = _ring_tables(cache, groups, conc, grad_bytes, n_cap)
    di = d.astype(np.int64)
    out = np.where(d <= max(per_zone.values()), ring_intra[di - 1], np.inf)   # one zone holds them all
    if raw is not None:
        out = np.minimum(out, F.ring_s(d, raw[di - 1]))
        inner = _suffix_min(F.zone_reduce_broadcast_s(ring_intra))
        for z, cz in zip(range(2, len(c) + 2), c):
            fullest = np.ceil(d / z).astype(np.int64)
            out = np.where(d >= z, np.minimum(out, cz + inner[np.maximum(fullest, 1) - 1]), out)
    return np.where(d > 1, out, 0.0)


def _ring_tables(cache: LinkCache, groups: tuple[Group, ...], conc: int, grad_bytes: float, n_cap: int):
    """(fastest intra-zone ring time per member count, fastest cross-zone raw chunk time per count, fastest
    cross ring per zone count 2..Z), memoised: tasks differing only in micro-batch size share them."""
    key = ("ring-bounds", groups, conc, grad_bytes, n_cap)
    if key in cache.patterns:
        return cache.patterns[key]
    # links with the same parameters have the same times: one of each (the minimum over links is unchanged)
    intra = {_link_params(lk): lk for a in groups for b in groups if a.zone == b.zone
             for lk in [cache.get(a, b, conc)]}
    cross = {_link_params(lk): lk for a in groups for b in groups if a.zone != b.zone
             for lk in [cache.get(a, b, conc)]}
    n = np.arange(1, n_cap + 1, dtype=float)
    ring_intra = np.min([F.ring_s(n, link_time(lk, grad_bytes / n)) for lk in intra.values()], axis=0)
    raw = c = None
    if cross:
        raw = np.min([(grad_bytes / n) / bandwidth(lk, grad_bytes / n) for lk in cross.values()], axis=0)
        zs = np.arange(2, len({g.zone for g in groups}) + 1, dtype=float)
        c = np.min([F.ring_s(zs, link_time(lk, grad_bytes / zs)) for lk in cross.values()], axis=0)
    cache.patterns[key] = (ring_intra, raw, c)
    return cache.patterns[key]


def _link_params(link) -> tuple:
    """What :func:`link_time` and :func:`bandwidth` read of a link."""
    return (link.max_bw_bytes_per_s, link.latency_s, link.fit_gb_per_s, link.min_bw_bytes_per_s)
