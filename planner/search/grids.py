"""Grids of per-stage terms that the space's splits read instead of computing them per (split, stage).

Every per-stage quantity of :func:`planner.search.tables.stage_arrays` is an element-wise expression of a few
per-stage inputs: parameters, optimizer step and every memory term of (layers, first, last, S - s micro-batches
in flight), so of (layer count, position) for one depth; compute and backward seconds of (first layer, end
layer, first, last). Element-wise floating-point operations give each element the same result whatever array
it sits in, so computing the expressions once per grid entry and gathering them by flat index gives the
[K, S] arrays bit for bit (``tests/planner/test_search_speed_h13x.py``), for a fraction of the work: a split
family of K splits has K x S entries, its grids S x (L - S + 1) and 4 x (L + 1)^2 (the latter shared by every
depth). docs/PLANNER.md 2.3.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from planner.search.tables import StageArrays, TypeTable, _memory_terms, head_params, stage_compute, stage_params
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext


@dataclass(frozen=True)
class StageGrid:
    """The per-stage terms that depend only on a stage's layer count and position, for every count 1 .. C at
    every position of S stages (row c - 1: c layers; [C, S]). Parameters, optimizer step and every memory
    term are element-wise expressions of (layers, first, last, S - s in flight), so entry [c - 1, s] is what
    the same expressions give a stage of c layers at position s of any split, bit for bit: the [K, S] values of
    a batch of splits are gathered from here (:func:`grid_index`) instead of computed per (split, stage)."""

    params: np.ndarray
    update_s: np.ndarray
    memory_bytes: np.ndarray


def grid_index(counts: np.ndarray) -> np.ndarray | None:
    """[K, S] flat indices into a [C, S] :class:`StageGrid` field of splits ``counts`` (None: a stage with no
    layer, which the grid does not hold)."""
    if counts.size == 0 or counts.min() < 1:
        return None
    s_num = counts.shape[1]
    return (counts - 1) * s_num + np.arange(s_num)


@lru_cache(maxsize=64)
def _layout(blocks: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, ...]:
    """[1, E] layer count, first, last, micro-batches in flight (S - s) and depth of every entry of the
    depths ``blocks`` ((S, C) each: C x S entries, row-major (c - 1, s)), depth after depth."""
    cols: list[list[np.ndarray]] = [[], [], [], [], []]
    for s_num, cmax in blocks:
        c = np.repeat(np.arange(1, cmax + 1, dtype=np.int64), s_num)
        s = np.tile(np.arange(s_num), cmax)
        for out, x in zip(cols, (c, s == 0, s == s_num - 1, s_num - s, np.full(len(c), s_num))):
            out.append(x)
    arrs = tuple(np.concatenate(x)[None, :] for x in cols)
    for x in arrs:
        x.flags.writeable = False
    return arrs


@dataclass(frozen=True)
class DepthGrids:
    """:class:`StageGrid` of every depth of ``blocks`` ((S, C): stages of 1 .. C layers in pipelines of S stages)
    computed at once on flat [1, E] arrays (depth after depth, each row-major (c - 1, s)): the same element-wise
    expressions on the same per-entry inputs (layers, first, last, S - s in flight, the head's parameters at
    depth S), so each entry equals the per-depth computation bit for bit; one numpy call per term for all depths
    instead of one per depth."""

    blocks: tuple[tuple[int, int], ...]
    offsets: dict[int, tuple[int, int]]        # S -> (first entry, C)
    counts: np.ndarray
    first: np.ndarray
    last: np.ndarray
    params: np.ndarray
    update_s: np.ndarray
    memory_bytes: np.ndarray
    terms: tuple                # :func:`memory_terms_of`'s terms of every entry (the distributed optimizer's fit)

    def grid(self, s_num: int) -> StageGrid | None:
        if s_num not in self.offsets:
            return None
        return StageGrid(*(self.block(x, s_num) for x in (self.params, self.update_s, self.memory_bytes)))

    def block(self, flat: np.ndarray, s_num: int) -> np.ndarray:
        """[C, S] of depth ``s_num`` of a flat [1, E] array (a view)."""
        off, cmax = self.offsets[s_num]
        return flat[0, off:off + cmax * s_num].reshape(cmax, s_num)


def depth_grids(ctx: SimContext, tt: TypeTable, blocks: tuple[tuple[int, int], ...], precision: str,
                optimizer: str, recompute: bool = False, tie_embeddings: bool = False) -> DepthGrids:
    """:class:`DepthGrids` of ``tt`` for the depths ``blocks`` ((S, largest layer count) each)."""
    counts, first, last, inflight, depth = _layout(blocks)
    # the head's parameters at each entry's depth (they differ at S = 1 for a tied plan): integers, exact
    head = np.where(depth == 1, head_params(tt, 1, tie_embeddings), head_params(tt, 2, tie_embeddings))
    params = stage_params(tt, counts, first, last, head)
    terms = _memory_terms(ctx, tt, counts, params, first, last, precision, optimizer, recompute, inflight)
    upd = F.update_s(tt.update_s_per_param, params, 1, False) * ctx.settings.update_scale
    offsets, off = {}, 0
    for s_num, cmax in blocks:
        offsets[s_num] = (off, cmax)
        off += s_num * cmax
    return DepthGrids(blocks, offsets, counts, first, last, params, upd, F.memory_total(terms), terms)


_FIRST = np.array([False, True, False, True])[:, None, None]     # position classes: middle, first, last, both
_LAST = np.array([False, False, True, True])[:, None, None]


def compute_grid(ctx: SimContext, tt: TypeTable, recompute: bool) -> tuple[np.ndarray, np.ndarray]:
    """([4, L + 1, L + 1] compute seconds, the same of backward seconds) of a stage holding layers
    ``start`` .. ``end`` - 1 at entry [c, start, end], for the position classes c = middle, first, last, first
    and last stage (:func:`compute_index`): the element-wise expressions of :func:`stage_arrays`, so a split's
    values gathered from here are the ones it computes (entries with ``start > end`` are never read)."""
    n = len(tt.cum_fwd_s)
    starts = np.broadcast_to(np.arange(n)[:, None], (n, n))
    ends = np.broadcast_to(np.arange(n)[None, :], (n, n))
    return stage_compute(ctx, tt, starts[None], ends[None], _FIRST, _LAST, recompute)


def compute_index(counts: np.ndarray, num_layers: int) -> np.ndarray:
    """[K, S] flat indices into a :func:`compute_grid` array of splits ``counts`` of ``num_layers`` layers."""
    s_num = counts.shape[1]
    ends = np.cumsum(counts, axis=1)
    cls = (np.arange(s_num) == 0) + 2 * (np.arange(s_num) == s_num - 1)
    n = num_layers + 1
    return (cls * n + (ends - counts)) * n + ends


class GatheredRows:
    """A [K, S] array ``np.take(grid, index)`` gathered only where it is read: ``x[key]`` is
    ``np.take(grid, index[key])``, which equals ``np.take(grid, index)[key]`` element for element (a gather copies
    values; no arithmetic), and ``np.asarray(x)`` the whole array. For a field the search reads only for the rows
    it scores (the backward seconds: ``pools.pool_model``'s row, a chain's one split), so a family of K splits
    does not gather K x S values per (type, TP, micro-batch, depth) for a handful of rows (docs/PLANNER.md 2.3)."""

    __slots__ = ("_grid", "_index")

    def __init__(self, grid: np.ndarray, index: np.ndarray) -> None:
        self._grid, self._index = grid, index

    @property
    def shape(self) -> tuple[int, ...]:
        return self._index.shape

    @property
    def dtype(self) -> np.dtype:
        return self._grid.dtype

    @property
    def ndim(self) -> int:
        return self._index.ndim

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, key) -> np.ndarray:
        return self._grid.take(self._index[key])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.take(self._grid, self._index)
        return out if dtype is None else out.astype(dtype, copy=False)


def gathered_stage_arrays(tt: TypeTable, counts: np.ndarray, grid: StageGrid, index: np.ndarray,
                          cgrid: tuple[np.ndarray, np.ndarray], cindex: np.ndarray,
                          lazy: bool = False) -> StageArrays:
    """:func:`stage_arrays` of splits ``counts`` read from the grids of the same arguments: ``grid``
    (:meth:`DepthGrids.grid` of :func:`depth_grids`) at ``index`` (:func:`grid_index`) and ``cgrid``
    (:func:`compute_grid`) at ``cindex`` (:func:`compute_index`); the same values, bit for bit (the backward
    seconds as :class:`GatheredRows`, gathered where read). ``lazy``: compute, parameters and optimizer step as
    :class:`GatheredRows` too (memory and fits gathered: whether any split fits decides whether the others are
    read at all; :func:`gathered_in_full` gathers them)."""
    memory = grid.memory_bytes.take(index)       # (the method np.take calls: the same gather)
    take = GatheredRows if lazy else np.ndarray.take
    return StageArrays(compute_s=take(cgrid[0], cindex), bwd_s=GatheredRows(cgrid[1], cindex),
                       params=take(grid.params, index), update_s=take(grid.update_s, index),
                       memory_bytes=memory, fits=(memory <= tt.usable_bytes).all(axis=1), counts=counts)


def gathered_in_full(arr: StageArrays) -> StageArrays:
    """``arr`` of :func:`gathered_stage_arrays` with ``lazy``: compute and parameters gathered whole (``np.asarray``
    of a :class:`GatheredRows` is its ``np.take``), as without ``lazy``; the backward seconds and the optimizer step
    left gathered where read (the search reads the step by rows, and its per-split maximum from the parameters':
    ``Tables.split_stats``)."""
    return replace(arr, **{f: np.asarray(getattr(arr, f)) for f in ("compute_s", "params")
                           if isinstance(getattr(arr, f), GatheredRows)})
