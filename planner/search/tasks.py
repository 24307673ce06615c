"""Search tasks: one (pipeline depth S, micro-batch size, TP per used GPU type), with a lower bound on the
objective over every plan of the task (used to visit tasks best-first and to skip tasks that cannot win;
the bounds are :mod:`planner.search.taskbound`'s), and the per-task caches of stage arrays (:class:`Tables`)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from itertools import combinations, product

import numpy as np

from planner.cluster import ClusterSpec
from planner.errors import InputError
from planner.search.caps import caps_for, task_dmax
from planner.search.midcaps import cap_bound_splits, cap_vectors
from planner.search.midlevels import add_levels, task_keep
from planner.search.splitlist import depth_blocks, even_last, splits_for  # noqa: F401
from planner.search.netvec import LinkCache
from planner.search.space import Objective, SearchSpace
from planner.search.distopt import dist_dominated, plain_rows_cap, shards_of
from planner.search.taskbound import cheap_bounds
from planner.search.grids import (DepthGrids, StageGrid, compute_grid, compute_index, depth_grids,
                                  gathered_in_full, gathered_stage_arrays, grid_index)
from planner.search.tables import (NEVER, StageArrays, TypeTable, build_type_table, dist_min_dp, memory_terms_of,
                                   stage_arrays)
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext

ANALYTIC_OPTIONS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Task:
    num_stages: int
    mbs: int
    tps: tuple[tuple[str, int], ...]        # (gpu type, tp) of every used (type, TP), sorted (a type twice:
                                            # two TP degrees, SearchSpace.two_tp)
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


def cluster_options(ctx: SimContext, cluster: ClusterSpec, space: SearchSpace) -> dict[str, list[tuple[int, int]]]:
    """Per GPU type of ``cluster``: the (mbs, tp) pairs the search may use, TP capped by the smaller of the
    cluster's and the context's GPUs per node (:func:`mbs_tp_options`); types with none are left out."""
    options = {g: mbs_tp_options(ctx, g, min(cluster.gpus_per_node(g), ctx.node_size(g)), space)
               for g in cluster.gpu_types()}
    return {g: o for g, o in options.items() if o}


@dataclass(frozen=True)
class SplitStats:
    """Per split ([K]) of one (type, TP, micro-batch, S, recompute): the slowest stage's optimizer step, the
    largest per-GPU parameter count, the busiest stage's compute and the summed compute."""

    upd_max: np.ndarray
    params_max: np.ndarray
    comp_max: np.ndarray
    comp_sum: np.ndarray


class Tables:
    """Caches of type tables and per-split stage arrays. ``options`` (per GPU type its (micro-batch size, TP)
    pairs, :func:`cluster_options`) and ``cluster`` (whose pools bound the TPs and pipeline counts, None: no
    bound): the split family gains the cap-bound middles of their tasks (:mod:`planner.search.midcaps`);
    options None: the family alone."""

    def __init__(self, ctx: SimContext, space: SearchSpace,
                 options: dict[str, list[tuple[int, int]]] | None = None, cluster: ClusterSpec | None = None) -> None:
        self.ctx, self.space = ctx, space
        self.options, self.cluster = options, cluster
        self._tt: dict[tuple[str, int, int], TypeTable] = {}
        self._arr: dict[tuple[str, int, int, int, bool], StageArrays | None] = {}
        self.min_overflow_bytes: float | None = None
        self.memo: dict[tuple, object] = {}       # the engine's per-pool models, shared across tasks

    def splits(self, s_num: int) -> np.ndarray | None:
        """[K, S] the layer splits of depth ``s_num`` every task searches: :func:`splits_for`, and for the
        split family the cap-bound middles of the options' tasks after them, then the front-loaded middles above
        the lowest fitting level that can still win by smaller round trips (docs/PLANNER.md 2.1, "Uneven middle
        stages"; :mod:`planner.search.midcaps`, :mod:`planner.search.midlevels`)."""
        key = ("splits", s_num)
        if key not in self.memo:
            base = splits_for(self.space, self.ctx.model.num_layers, s_num)
            if base is not None and self.space.split == "family" and self.options and s_num >= 4:
                caps = cap_vectors(self.ctx, self, self.options, s_num, self.cluster)
                extra = cap_bound_splits(self.ctx.model.num_layers, s_num, caps, base)
                if len(extra):
                    base = np.concatenate([base, extra])
                base = add_levels(self, s_num, caps, base)     # levels above the lowest that can still win
                base.flags.writeable = False
            self.memo[key] = base
        return self.memo[key]

    def table(self, g: str, tp: int, mbs: int) -> TypeTable:
        key = (g, tp, mbs)
        if key not in self._tt:
            self._tt[key] = build_type_table(self.ctx, g, tp, mbs, self.space.precision)
        return self._tt[key]

    def arrays(self, g: str, tp: int, mbs: int, s_num: int, recompute: bool = False) -> StageArrays | None:
        key = (g, tp, mbs, s_num, recompute)
        if key not in self._arr:
            counts = self.splits(s_num)
            arr = None
            if counts is not None:
                tt = self.table(g, tp, mbs)
                # parameters, optimizer step and memory gathered from the per-(layers, stage) grid, which the
                # distributed optimizer's dist_dmin reads too
                grid, index = self._grid(g, tp, mbs, s_num, recompute)
                if grid is None:
                    arr = stage_arrays(self.ctx, tt, counts, self.space.precision, self.space.optimizer, recompute,
                                       self.space.tie_embeddings)
                else:
                    # compute, parameters and step gathered once the table is kept (the chain plans read
                    # single rows of a table with no fitting split: gathered row by row)
                    arr = gathered_stage_arrays(tt, counts, grid, index, self._cgrid(g, tp, mbs, recompute),
                                                self.memo[("grid-index", s_num)][2], lazy=True)
                self._arr[("plain", g, tp, mbs, s_num, recompute)] = arr
                over = float((arr.memory_bytes.max(axis=1) - tt.usable_bytes).min())
                if self.min_overflow_bytes is None or over < self.min_overflow_bytes:
                    self.min_overflow_bytes = over
                if not arr.fits.any() and not (True in self.space.distributed_optimizer and
                                               (self.dist_dmin(g, tp, mbs, s_num, recompute) < NEVER).any()):
                    arr = None
                elif grid is not None:
                    arr = self._arr[("plain", g, tp, mbs, s_num, recompute)] = gathered_in_full(arr)
            self._arr[key] = arr
        return self._arr[key]

    def dist_dmin(self, g: str, tp: int, mbs: int, s_num: int, recompute: bool, shards: int = 1,
                  counts: np.ndarray | None = None, per_stage: bool = False) -> np.ndarray:
        """[K] the smallest replica count at which each split fits on (g, tp) under the distributed optimizer
        (:func:`planner.search.tables.dist_min_dp`; ``counts``: these splits instead of the space's;
        ``per_stage``: [K, S], per stage)."""
        key = ("dmin", g, tp, mbs, s_num if counts is None else (counts.tobytes(), counts.shape), recompute, shards)
        if not per_stage and key + ("max",) in self._arr:     # the per-split maxima, memoised with the table
            return self._arr[key + ("max",)]
        plain = self._arr.get(("plain", g, tp, mbs, s_num, recompute)) if counts is None and shards == 1 else None
        if key not in self._arr and plain is not None and plain.fits.all():
            # one fine shard at D = 1 is exactly the plain memory: every stage of every split fits from D = 1
            self._arr[key] = np.ones(plain.memory_bytes.shape, dtype=np.int64)
        if key not in self._arr and counts is not None:    # one of the space's splits, already computed: its row
            # (the depth's list is looked at only where its values are held: a chain's split builds no list)
            known = self._arr.get(("dmin", g, tp, mbs, counts.shape[1], recompute, shards))
            row = self._split_row(counts) if known is not None else None
            if row is not None:
                self._arr[key] = known[row:row + 1]
        index = None
        if key not in self._arr:        # the entries of the grids the splits read (None: not held there)
            index = self._grid_index_of(g, tp, mbs, counts, recompute) if counts is not None else \
                self._grid(g, tp, mbs, s_num, recompute)[1]
        if index is not None:
            grids = self._depths(g, tp, mbs, recompute)     # each entry's answer is its own: computed per entry
            fkey = ("dmin-flat", g, tp, mbs, recompute, shards)     # of every depth, then gathered
            if fkey not in self._arr:
                self._arr[fkey] = dist_min_dp(self.ctx, self.table(g, tp, mbs), grids.counts,
                                              self.space.precision, self.space.optimizer, recompute, shards,
                                              self.space.tie_embeddings, grids.terms,
                                              (grids.first, grids.last, grids.params))
            self._arr[key] = np.take(grids.block(self._arr[fkey], s_num), index)
        if key not in self._arr:
            if counts is None:
                counts = self.splits(s_num)
            tkey = ("dmin-terms", g, tp, mbs, key[4], recompute)     # shared by every fine-shard count
            if tkey not in self._arr:
                self._arr[tkey] = memory_terms_of(self.ctx, self.table(g, tp, mbs), counts, self.space.precision,
                                                  self.space.optimizer, recompute, self.space.tie_embeddings)
            self._arr[key] = dist_min_dp(self.ctx, self.table(g, tp, mbs), counts, self.space.precision,
                                         self.space.optimizer, recompute, shards, self.space.tie_embeddings,
                                         self._arr[tkey])
        if per_stage:
            return self._arr[key]
        self._arr[key + ("max",)] = self._arr[key].max(axis=1)
        return self._arr[key + ("max",)]

    def _split_index(self, s_num: int) -> tuple[np.ndarray | None, int, np.ndarray | None]:
        """(:func:`grid_index`, the largest layer count, :func:`compute_index`) of the space's splits of
        ``s_num`` stages ((None, 0, None): no splits, or one with an empty stage)."""
        ikey = ("grid-index", s_num)
        if ikey not in self.memo:
            counts = self.splits(s_num)
            index = None if counts is None else grid_index(counts)
            self.memo[ikey] = (index, 0, None) if index is None else \
                (index, int(counts.max()), compute_index(counts, self.ctx.model.num_layers))
        return self.memo[ikey]

    def _depths(self, g: str, tp: int, mbs: int, recompute: bool) -> DepthGrids:
        """:func:`depth_grids` of (g, tp, mbs) for the depths :func:`depth_blocks` gives."""
        key = ("depths", g, tp, mbs, recompute)
        if key not in self._arr:
            if "blocks" not in self.memo:
                max_s = min(self.ctx.model.num_layers, self.space.max_stages or self.ctx.model.num_layers)
                self.memo["blocks"] = depth_blocks(self.space, self.ctx.model.num_layers, max_s)
            self._arr[key] = depth_grids(self.ctx, self.table(g, tp, mbs), self.memo["blocks"],
                                         self.space.precision, self.space.optimizer, recompute,
                                         self.space.tie_embeddings)
        return self._arr[key]

    def _stage_grid(self, g: str, tp: int, mbs: int, s_num: int, recompute: bool) -> StageGrid | None:
        """:meth:`DepthGrids.grid` of depth ``s_num`` on (g, tp, mbs) (None: a depth the grids do not hold)."""
        key = ("stage-grid", g, tp, mbs, s_num, recompute)      # the depth's views, built once
        if key not in self._arr:
            self._arr[key] = self._depths(g, tp, mbs, recompute).grid(s_num)
        return self._arr[key]

    def _grid(self, g: str, tp: int, mbs: int, s_num: int, recompute: bool
              ) -> tuple[StageGrid | None, np.ndarray | None]:
        """(:class:`StageGrid`, :func:`grid_index`) for the space's splits of ``s_num`` stages on (g, tp, mbs)
        ((None, None): a depth the grids do not hold, or splits with a stage size its block does not hold:
        the blocks come from the split rule alone, :func:`depth_blocks`)."""
        grid = self._stage_grid(g, tp, mbs, s_num, recompute)
        if grid is None:
            return None, None
        index, cmax, _ = self._split_index(s_num)
        if index is None or cmax > self._depths(g, tp, mbs, recompute).offsets[s_num][1]:
            return None, None
        return grid, index

    def dist_range(self, combo, mbs: int, s_num: int, recompute: bool) -> tuple[np.ndarray, np.ndarray]:
        """([K], [K]) per split the smallest and the largest total pipeline count D at which the task's plans
        with the distributed optimizer are kept: every type fits from the first on (memory is non-increasing in
        D); with recomputation and a monotone objective (``dp_sync_waits_for_all``), rows at which the split
        also fits without recomputation are left to the task without it (recomputation dominance, per row)."""
        key = ("dist-range", combo, mbs, s_num, recompute)
        if key not in self.memo:
            sh = shards_of(combo)
            lo = np.max([self.dist_dmin(g, t, mbs, s_num, recompute, sh[(g, t)]) for g, t in combo], axis=0)
            hi = np.full(len(lo), NEVER, dtype=np.int64)
            if recompute and self.ctx.settings.dp_sync_waits_for_all and False in self.space.recompute:
                hi = np.max([self.dist_dmin(g, t, mbs, s_num, False, sh[(g, t)]) for g, t in combo], axis=0) - 1
            self.memo[key] = (lo, hi)
        return self.memo[key]

    def raw_arrays(self, g: str, tp: int, mbs: int, counts: np.ndarray, recompute: bool) -> StageArrays:
        """Stage arrays of splits ``counts`` on (g, tp, mbs), kept even where no split fits (chain plans fit
        per stage)."""
        key = ("raw", g, tp, mbs, counts.tobytes(), counts.shape, recompute)
        if key not in self._arr:
            # (the depth's list is looked at only once its table is kept: a chain's split builds no list)
            plain = self._arr.get(("plain", g, tp, mbs, counts.shape[1], recompute))
            row = self._split_row(counts) if plain is not None else None
            plain = plain if row is not None else None
            index = None if plain is not None else self._grid_index_of(g, tp, mbs, counts, recompute)
            if plain is not None:   # the formulas act row by row: row k of the space's splits is this split's
                self._arr[key] = StageArrays(*(getattr(plain, f)[row:row + 1]
                                               for f in StageArrays.__dataclass_fields__))
            elif index is not None:     # gathered from the depth's grids: the same values (grids.py)
                self._arr[key] = gathered_stage_arrays(self.table(g, tp, mbs), counts,
                                                       self._stage_grid(g, tp, mbs, counts.shape[1], recompute), index,
                                                       self._cgrid(g, tp, mbs, recompute), self._compute_index(counts))
            else:
                self._arr[key] = stage_arrays(self.ctx, self.table(g, tp, mbs), counts, self.space.precision,
                                              self.space.optimizer, recompute, self.space.tie_embeddings)
        return self._arr[key]

    def _cgrid(self, g: str, tp: int, mbs: int, recompute: bool) -> tuple[np.ndarray, np.ndarray]:
        """:func:`compute_grid` of (g, tp, mbs), shared by every depth."""
        ckey = ("cgrid", g, tp, mbs, recompute)
        if ckey not in self._arr:
            self._arr[ckey] = compute_grid(self.ctx, self.table(g, tp, mbs), recompute)
        return self._arr[ckey]

    def _grid_index_of(self, g: str, tp: int, mbs: int, counts: np.ndarray, recompute: bool) -> np.ndarray | None:
        """:func:`grid_index` of splits ``counts`` into the depth grids of (g, tp, mbs) (None: a depth or a
        stage size the grids do not hold)."""
        s_num = counts.shape[1]
        grids = self._depths(g, tp, mbs, recompute)
        if s_num not in grids.offsets or counts.size == 0 or counts.max() > grids.offsets[s_num][1]:
            return None
        key = ("counts-index", counts.tobytes(), counts.shape)
        if key not in self.memo:
            self.memo[key] = grid_index(counts)
        return self.memo[key]

    def _compute_index(self, counts: np.ndarray) -> np.ndarray:
        """:func:`compute_index` of splits ``counts`` (memoised: the chain plans read one split per depth for
        many types)."""
        key = ("compute-index", counts.tobytes(), counts.shape)
        if key not in self.memo:
            self.memo[key] = compute_index(counts, self.ctx.model.num_layers)
        return self.memo[key]

    def _split_row(self, counts: np.ndarray) -> int | None:
        """The index of the one split ``counts`` ([1, S]) among the space's splits of S stages (None: not there)."""
        if counts.shape[0] != 1:
            return None
        key = ("split-row", counts.tobytes(), counts.shape)
        if key not in self.memo:
            splits = self.splits(counts.shape[1])
            hit = [] if splits is None else np.nonzero((splits == counts).all(axis=1))[0]
            self.memo[key] = int(hit[0]) if len(hit) else None
        return self.memo[key]

    def split_stats(self, g: str, tp: int, mbs: int, s_num: int, recompute: bool) -> SplitStats:
        """Per-split maxima and sums of :meth:`arrays` (computed once; the task bounds read them)."""
        key = ("stats", g, tp, mbs, s_num, recompute)
        if key not in self._arr:
            a = self.arrays(g, tp, mbs, s_num, recompute)
            params_max = a.params.max(axis=1)
            tt = self.table(g, tp, mbs)
            per, scale = tt.update_s_per_param, self.ctx.settings.update_scale
            if 0.0 <= per < np.inf and 0.0 <= scale < np.inf:
                # the step is (per * params) * scale, stage by stage (tables.params_and_update, grids.depth_grids):
                # non-decreasing in the parameters (rounding is monotone), so the slowest stage's step is the
                # step of the largest stage's parameters, bit for bit
                upd_max = F.update_s(per, params_max, 1, False) * scale
            else:
                upd_max = np.asarray(a.update_s).max(axis=1)
            self._arr[key] = SplitStats(upd_max, params_max, a.compute_s.max(axis=1), a.compute_s.sum(axis=1))
        return self._arr[key]

    def levels(self, g: str, tp: int, mbs: int, s_num: int, recompute: bool, p2p_s: float,
               blocking: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """([K, S + 1] steady-period levels, [K] fill/drain, [K] busiest stage) of every split with one
        transfer time ``p2p_s`` on every boundary (row k equals the one-split computation on split k)."""
        key = ("levels", g, tp, mbs, s_num, recompute, p2p_s, blocking)
        if key not in self._arr:
            comp = self.arrays(g, tp, mbs, s_num, recompute).compute_s
            busiest = F.busy_s(comp, p2p_s, blocking).max(axis=-1)     # pools.level_periods' busiest stage
            self._arr[key] = (F.period_levels(busiest, F.round_trip_bounds(comp, p2p_s)), F.fill_drain_s(comp, p2p_s),
                              busiest)
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
        if dist and relaxed:        # (the maximum of two arrays at a time: the same maximum, no stacking)
            return (reduce(np.maximum, [self.dist_dmin(g, t, mbs, s_num, recompute) for g, t in combo]) <= dmax) \
                & self.level_keep(combo, mbs, s_num)
        if dist:
            lo, hi = self.dist_range(combo, mbs, s_num, recompute)
            return (lo <= np.minimum(dmax, hi)) & self.level_keep(combo, mbs, s_num)
        key = ("fits", combo, mbs, s_num, recompute)
        if key in self.memo:
            return self.memo[key]
        fits = np.logical_and.reduce([self.arrays(g, t, mbs, s_num, recompute).fits for g, t in combo])
        fits = fits & self.level_keep(combo, mbs, s_num)
        if recompute and self.ctx.settings.dp_sync_waits_for_all:
            plain = [self.arrays(g, t, mbs, s_num, False) for g, t in combo]
            if all(a is not None for a in plain):
                fits = fits & ~np.logical_and.reduce([a.fits for a in plain])
        self.memo[key] = fits
        return fits


    def level_keep(self, combo, mbs: int, s_num: int) -> np.ndarray | bool:
        """[K] the splits a task of ``combo`` at ``mbs`` searches (:func:`planner.search.midlevels.task_keep`)."""
        self.splits(s_num)
        return task_keep(self, combo, mbs, s_num)


def enumerate_tasks(ctx: SimContext, cluster: ClusterSpec, tables: Tables, options: dict[str, list[tuple[int, int]]],
                    gbs: int, objective: Objective, space: SearchSpace, cache: LinkCache,
                    tick=None) -> list[Task]:
    """Every task with a finite cheap bound, sorted by it. ``tick(i, n)``: called per pipeline depth. (The engine
    builds the same tasks unit by unit, only for units whose bound is below its threshold: :func:`unit_tasks`.)"""
    max_s = min(ctx.model.num_layers, space.max_stages or ctx.model.num_layers)
    mbs_all = sorted({m for g in options for m, _ in options[g]})
    tasks = []
    for s_num, mbs, rc, dist in product(range(1, max_s + 1), mbs_all, space.recompute, space.distributed_optimizer):
        if tick is not None and dist == space.distributed_optimizer[0]:
            tick(s_num - 1, max_s)
        tasks += unit_tasks(ctx, cluster, tables, options, gbs, objective, space, s_num, mbs, rc, dist)
    tasks.sort(key=lambda t: (t.bound, t.num_stages, t.mbs))
    return tasks


def unit_tasks(ctx: SimContext, cluster: ClusterSpec, tables: Tables, options: dict[str, list[tuple[int, int]]],
               gbs: int, objective: Objective, space: SearchSpace, s_num: int, mbs: int, rc: bool,
               dist: bool) -> list[Task]:
    """The tasks of one unit (S, micro-batch size, recomputation, distributed optimizer) with a finite cheap
    bound, in the loop's order (type subsets by size, then TP combinations)."""
    if gbs % mbs:
        return []
    types = sorted(options)
    max_types = min(len(types), space.max_gpu_types or len(types))
    choices = {g: [t for m, t in options[g] if m == mbs and caps_for(cluster, g, t, s_num)
                   and tables.arrays(g, t, mbs, s_num, rc) is not None] for g in types}
    if space.tp_rule == "min_fit":
        choices = {g: c[:1] for g, c in choices.items()}
    # TP sets per type: one TP degree, or (space.two_tp = 2, without the distributed optimizer) two, ascending
    most = 1 if dist else space.two_tp
    sets = {g: [ts for n in range(1, most + 1) for ts in combinations(c, n)] for g, c in choices.items()}
    tasks = []
    scale = ctx.settings.sharded_collective_scale
    for k in range(1, max_types + 1):
        for subset in combinations(types, k):
            combos = [tuple((g, t) for g, ts in zip(subset, pick) for t in ts)
                      for pick in product(*(sets[g] for g in subset))]
            if not dist:
                combos = [c for c in combos if not dist_dominated(space, c, scale)
                          and not 0 < plain_rows_cap(space, c, scale) < len(c)]     # rows have D >= len(c)
            for same in _by_length(combos):         # cheap_bounds takes combos of one length at a time
                for combo, b in zip(same, cheap_bounds(ctx, cluster, tables, same, s_num, mbs, gbs // mbs,
                                                       objective, rc, dist)):
                    if b < np.inf:
                        tasks.append(Task(s_num, mbs, combo, float(b), rc, dist,
                                          task_dmax(cluster, combo, s_num, gbs // mbs) if dist
                                          else plain_rows_cap(space, combo, scale)))
    return tasks


def _by_length(combos: list[tuple]) -> list[list[tuple]]:
    """``combos`` grouped by length, each group in order, groups by first appearance (one group when every
    combo has one TP per type: the list itself)."""
    out: dict[int, list[tuple]] = {}
    for c in combos:
        out.setdefault(len(c), []).append(c)
    return list(out.values())
