"""Search tasks: one (pipeline depth S, micro-batch size, TP per used GPU type), with a lower bound on the
objective over every plan of the task (used to visit tasks best-first and to skip tasks that cannot win)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations, product

import numpy as np

from planner.cluster import ClusterSpec
from planner.errors import InputError
from planner.search.netvec import Group, LinkCache, bandwidth, checked_time, link_time
from planner.search.space import Objective, SearchSpace
from planner.search.pools import level_periods
from planner.search.tables import StageArrays, TypeTable, build_type_table, split_family, stage_arrays
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


class Tables:
    """Caches of type tables and per-split stage arrays."""

    def __init__(self, ctx: SimContext, space: SearchSpace) -> None:
        self.ctx, self.space = ctx, space
        self._tt: dict[tuple[str, int, int], TypeTable] = {}
        self._arr: dict[tuple[str, int, int, int, bool], StageArrays | None] = {}
        self.min_overflow_bytes: float | None = None

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
                over = float((arr.memory_bytes.max(axis=1) - tt.usable_bytes).min())
                if self.min_overflow_bytes is None or over < self.min_overflow_bytes:
                    self.min_overflow_bytes = over
                if not arr.fits.any():
                    arr = None
            self._arr[key] = arr
        return self._arr[key]

    def raw_arrays(self, g: str, tp: int, mbs: int, counts: np.ndarray, recompute: bool) -> StageArrays:
        """Stage arrays of splits ``counts`` on (g, tp, mbs), kept even where no split fits (chain plans fit
        per stage)."""
        key = ("raw", g, tp, mbs, counts.tobytes(), counts.shape, recompute)
        if key not in self._arr:
            self._arr[key] = stage_arrays(self.ctx, self.table(g, tp, mbs), counts, self.space.precision,
                                          self.space.optimizer, recompute, self.space.tie_embeddings)
        return self._arr[key]

    def task_fits(self, combo, mbs: int, s_num: int, recompute: bool) -> np.ndarray:
        """[K] splits of the task where every used type fits. With recomputation, splits that also fit
        without it are dropped when the objective is monotone in compute (``dp_sync_waits_for_all``):
        recomputation only adds backward seconds there, so the same plan without it is at least as good."""
        fits = np.logical_and.reduce([self.arrays(g, t, mbs, s_num, recompute).fits for g, t in combo])
        if recompute and self.ctx.settings.dp_sync_waits_for_all:
            plain = [self.arrays(g, t, mbs, s_num, False) for g, t in combo]
            if all(a is not None for a in plain):
                fits = fits & ~np.logical_and.reduce([a.fits for a in plain])
        return fits


@lru_cache(maxsize=4096)
def caps_for(cluster: ClusterSpec, g: str, tp: int, s_num: int) -> tuple[tuple[str, int], ...]:
    """(zone, max pipelines) of every zone holding type g."""
    return tuple((p.zone, p.count // (s_num * tp)) for p in sorted(cluster.pools, key=lambda p: p.zone)
            if p.gpu_type == g and p.count // (s_num * tp) > 0)


def enumerate_tasks(ctx: SimContext, cluster: ClusterSpec, tables: Tables, options: dict[str, list[tuple[int, int]]],
                    gbs: int, objective: Objective, space: SearchSpace, cache: LinkCache) -> list[Task]:
    types = sorted(options)
    max_types = min(len(types), space.max_gpu_types or len(types))
    max_s = min(ctx.model.num_layers, space.max_stages or ctx.model.num_layers)
    mbs_all = sorted({m for g in types for m, _ in options[g]})
    tasks = []
    for s_num, mbs, rc in product(range(1, max_s + 1), mbs_all, space.recompute):
        if gbs % mbs:
            continue
        choices = {g: [t for m, t in options[g] if m == mbs and caps_for(cluster, g, t, s_num)
                       and tables.arrays(g, t, mbs, s_num, rc) is not None] for g in types}
        if space.tp_rule == "min_fit":
            choices = {g: c[:1] for g, c in choices.items()}
        for k in range(1, max_types + 1):
            for subset in combinations(types, k):
                for tps in product(*(choices[g] for g in subset)):
                    combo = tuple(zip(subset, tps))
                    b = task_bound(ctx, cluster, tables, combo, s_num, mbs, gbs // mbs, objective, cache,
                                   with_sync=False, recompute=rc)
                    if b < np.inf:
                        tasks.append(Task(s_num, mbs, combo, b, rc))
    tasks.sort(key=lambda t: (t.bound, t.num_stages, t.mbs))
    return tasks


def task_bound(ctx: SimContext, cluster: ClusterSpec, tables: Tables, combo, s_num: int, mbs: int, n_mb: int,
               objective: Objective, cache: LinkCache, with_sync: bool = True, sync_out: dict | None = None,
               recompute: bool = False) -> float:
    """Lower bound on the objective of every plan of the task (inf: none can be feasible); without the
    gradient-sync term when ``with_sync`` is false (cheaper, weaker). ``sync_out['by_d']`` receives the
    sync lower bound per total pipeline count d (index d)."""
    arrs = [tables.arrays(g, t, mbs, s_num, recompute) for g, t in combo]
    fits = tables.task_fits(combo, mbs, s_num, recompute)
    if not fits.any():
        return np.inf
    upd = max(float(a.update_s[fits].max(axis=1).min()) for a in arrs)
    grad = F.grad_bytes(float(np.max([a.params[fits] for a in arrs], axis=0).max(axis=1).min()))
    cap = sum(c for g, t in combo for _, c in caps_for(cluster, g, t, s_num))
    d = np.arange(len(combo), min(cap, n_mb) + 1, dtype=float)
    if len(d) == 0:
        return np.inf
    if with_sync:
        m_per = np.ceil(n_mb / d).astype(np.int64)      # the fullest pipeline runs at least this many
        t_types, f_types = [], []
        for a, (g, t) in zip(arrs, combo):
            t_of_m, fill = _type_times(ctx, cluster, cache, a, fits, g, t, s_num, mbs, n_mb, tables.space.precision)
            t_types.append(t_of_m[m_per - 1])
            f_types.append(fill)
        span = np.maximum(max(f_types), np.min(t_types, axis=0))
    else:   # busiest stage as the period, no transfers: weaker, much cheaper
        m_min = np.array([a.compute_s[fits].max(axis=1).min() for a in arrs])
        f_min = np.array([a.compute_s[fits].sum(axis=1).min() for a in arrs])
        span = np.maximum(f_min.max(), (f_min[None, :] + m_min[None, :] * (n_mb / d[:, None] - 1)).min(axis=1))
        span = span * (1 - 1e-12)
    sync = sync_lower_bound(cluster, combo, s_num, grad, d, cache) if with_sync else 0.0
    if sync_out is not None and with_sync:
        table = np.zeros(int(d[-1]) + 1)
        table[d.astype(np.int64)] = sync
        sync_out["by_d"] = table
    it = span + sync + upd
    rate = d * s_num * min(t * ctx.catalog.get(g).usd_per_s for g, t in combo)
    gpus = d * s_num * min(t for _, t in combo)
    ok = objective.allows(it, rate * it, gpus)
    keys = np.where(ok, objective.key(it, rate * it), np.inf)
    return float(keys.min())


def _type_times(ctx: SimContext, cluster: ClusterSpec, cache: LinkCache, a: StageArrays, fits: np.ndarray, g: str,
                tp: int, s_num: int, mbs: int, n_mb: int, precision: str) -> tuple[np.ndarray, float]:
    """Lower bounds over the task's splits and the type's pools: T(m) for m = 1..N, and the fill/drain."""
    nbytes = ctx.model.boundary_activation_bytes(mbs, F.bytes_per_element(precision))
    conc = tp if ctx.settings.p2p_all_tp_ranks else 1
    p2p = 0.0 if s_num == 1 else min(checked_time(cache.get(Group(z, g, tp), Group(z, g, tp), conc), nbytes)
                                     for z, _ in caps_for(cluster, g, tp, s_num))
    comp = a.compute_s[fits]
    levels = level_periods(comp, p2p, ctx.settings.p2p_blocking).min(axis=0)
    fill = float(F.fill_drain_s(comp, p2p).min())
    times = F.pipeline_s_of_m(levels, fill, n_mb) if np.isfinite(p2p) else np.full(n_mb, np.inf)
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
    intra = {id(lk): lk for a in groups for b in groups if a.zone == b.zone for lk in [cache.get(a, b, conc)]}
    cross = {id(lk): lk for a in groups for b in groups if a.zone != b.zone for lk in [cache.get(a, b, conc)]}
    n = np.arange(1, n_cap + 1, dtype=float)
    ring_intra = np.min([F.ring_s(n, link_time(lk, grad_bytes / n)) for lk in intra.values()], axis=0)
    raw = c = None
    if cross:
        raw = np.min([(grad_bytes / n) / bandwidth(lk, grad_bytes / n) for lk in cross.values()], axis=0)
        zs = np.arange(2, len({g.zone for g in groups}) + 1, dtype=float)
        c = np.min([F.ring_s(zs, link_time(lk, grad_bytes / zs)) for lk in cross.values()], axis=0)
    cache.patterns[key] = (ring_intra, raw, c)
    return cache.patterns[key]
