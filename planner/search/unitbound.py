"""A lower bound on the objective of every pool plan of a search *unit* (pipeline depth S, micro-batch size,
recomputation, distributed optimizer), computed from the type tables alone, before any layer split is looked at.

Contract: :func:`unit_bounds` lists every unit of :func:`planner.search.tasks.enumerate_tasks`'s loop, in its
order, with ``bound`` <= the objective key of every pool plan of the unit (every TP per type, every contiguous
layer split, every row and micro-batch assignment; inf: no plan of the unit can meet the constraints or the
unit has no pool with room for a pipeline). The engine expands a unit into its tasks only when the bound is
below the threshold (docs/PLANNER.md 2.3, *Lazy task list*; ``tests/planner/test_unit_bound_h10e.py`` checks it
against the brute force).

The argument, per option o = (GPU type, TP) with capacity ``cap_p(o) = count_p // (S t)`` in pool p: a stage's
compute per micro-batch (forward + backward + overhead) summed over the stages of any contiguous split is the
whole model's, ``C_o(S) = scale (sum fwd + sum bwd) + S overhead`` (the per-layer sums telescope; recomputation
adds the layers' forward to the backward); the busiest stage is at least ``M_o(S) = max(C_o / S, the one-layer
first stage, the one-layer last stage)`` (per-layer times are >= 0). A pipeline of m >= 1 micro-batches takes
``T(m) = (m - 1) period(m) + fill >= (m - 1) M_o + C_o`` (period >= busiest stage, fill >= summed compute), so
with an iteration of ``it`` it runs at most ``(it - C_o) / M_o + 1`` micro-batches, and the N micro-batches need
``Phi(it) = sum_p max_o cap_p(o) n_o(it) >= N`` with ``n_o(it) = (it - C_o) / M_o + 1`` where ``it >= C_o``, else 0.

With ``SearchSpace.two_tp == 2`` a pool may hold pipelines of two TP degrees of its type at once, and
``max_o cap_p(o) n_o`` is no longer a bound (x pipelines at TP 2 and the rest at TP 1 run more when
``n_2 > 2 n_1``); the pool's term is then the integer knapsack ``max { sum_o x_o n_o(it) : sum_o t_o x_o <=
count // S, at most two options }``, the largest over the vertices of :func:`pair_hull` (:func:`mix_vertices`,
:func:`mixed_makespan_floor`; docs/PLANNER.md 10.8). With ``two_tp == 1`` nothing changes.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from itertools import product

import numpy as np

from planner.cluster import ClusterSpec
from planner.search.space import Objective, SearchSpace
from planner.search.tables import TypeTable
from planner.simulator.settings import SimContext

MARGIN = 1e-9           # relative, against rounding (the per-stage sums and the search's mirror)
BISECT_STEPS = 100


@dataclass(frozen=True)
class Unit:
    """One (S, micro-batch size, recomputation, distributed optimizer) of the task loop; ``order``: its position
    in :func:`planner.search.tasks.enumerate_tasks`'s loop."""

    num_stages: int
    mbs: int
    recompute: bool
    dist: bool
    bound: float
    order: int


@dataclass(frozen=True)
class OptionTerms:
    """Split-free compute and optimizer terms of one (type, TP, micro-batch, recomputation)."""

    work_s: float           # scale x (summed forward + summed backward) of the whole model, no overhead
    first_s: float          # compute of a first stage with one layer (overhead included)
    last_s: float           # ... of a last stage with one layer
    upd_per_param_s: float  # optimizer seconds per parameter (update_scale included)
    layer_params: int
    emb_params: int
    head_params: int        # S >= 2
    head_params_single: int  # S = 1 (a tied plan's single stage holds no output matrix)


def option_terms(ctx: SimContext, tt: TypeTable, recompute: bool, tie_embeddings: bool) -> OptionTerms:
    """:class:`OptionTerms` of one type table (the expressions of :func:`planner.search.tables.stage_compute`)."""
    st = ctx.settings
    scale, oh = st.compute_scale, st.per_microbatch_overhead_s
    f, b = tt.cum_fwd_s, tt.cum_bwd_s
    rc = 1.0 if recompute else 0.0

    def comp(lf: float, lb: float, fx: float, bx: float) -> float:
        return (lf + fx) * scale + (lb + rc * lf + bx) * scale + oh

    work = (f[-1] + tt.emb_fwd_s + tt.head_fwd_s) * scale + (b[-1] + rc * f[-1] + tt.emb_bwd_s + tt.head_bwd_s) * scale
    return OptionTerms(work_s=float(work),
                       first_s=comp(f[1] - f[0], b[1] - b[0], tt.emb_fwd_s, tt.emb_bwd_s),
                       last_s=comp(f[-1] - f[-2], b[-1] - b[-2], tt.head_fwd_s, tt.head_bwd_s),
                       upd_per_param_s=tt.update_s_per_param * st.update_scale,
                       layer_params=tt.layer_params, emb_params=tt.emb_params, head_params=tt.head_params,
                       head_params_single=tt.head_params_tied_single if tie_embeddings else tt.head_params)


def stage_terms(terms: list[OptionTerms], s: np.ndarray, num_layers: int, overhead_s: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """([S, O] summed compute C, busiest-stage floor M, optimizer-step floor U) at the depths ``s`` ([S])."""
    s2 = s[:, None].astype(float)
    work = np.array([t.work_s for t in terms])[None, :]
    c = work + s2 * overhead_s
    first = np.array([t.first_s for t in terms])[None, :]
    last = np.array([t.last_s for t in terms])[None, :]
    m = np.where(s2 == 1, c, np.maximum(c / s2, np.maximum(first, last)))
    lp = np.array([t.layer_params for t in terms], dtype=float)[None, :]
    ep = np.array([t.emb_params for t in terms], dtype=float)[None, :]
    hp = np.array([t.head_params for t in terms], dtype=float)[None, :]
    h1 = np.array([t.head_params_single for t in terms], dtype=float)[None, :]
    most = np.ceil(num_layers / s2)     # the stage with the most layers holds >= ceil(L / S)
    params = np.where(s2 == 1, num_layers * lp + ep + h1,
                      np.maximum(np.maximum(most * lp, lp + ep), np.maximum(lp + hp, (num_layers * lp + ep + hp) / s2)))
    upd = np.array([t.upd_per_param_s for t in terms])[None, :] * params
    return c, m, upd


def makespan_floor(cap: np.ndarray, c: np.ndarray, m: np.ndarray, n_mb: int) -> np.ndarray:
    """[S] the smallest ``it`` with ``Phi(it) >= n_mb`` from below (bisection; the value returned has
    ``Phi < n_mb`` or is the exact root's lower end, so it never exceeds the root). ``cap`` [S, P, O] pipelines
    of option o in pool p, ``c`` and ``m`` [S, O]; rows with no capacity give inf."""
    has = (cap > 0).any(axis=(1, 2))
    cm = np.where(cap > 0, c[:, None, :], np.inf).min(axis=(1, 2))
    cc, mm = c[:, None, :], m[:, None, :]

    def phi(it: np.ndarray) -> np.ndarray:
        x = it[:, None, None]
        per = cap * np.where(x >= cc, (x - cc) / mm + 1.0, 0.0)     # no micro-batch below the fill
        return per.max(axis=2).sum(axis=1)

    return _phi_root(phi, has, cm, c, n_mb)


def mixed_makespan_floor(mix: np.ndarray, c: np.ndarray, m: np.ndarray, n_mb: int) -> np.ndarray:
    """:func:`makespan_floor` where a pool may mix options: ``mix`` [S, P, K, O] holds, per pool, K candidate
    pipeline-count vectors over the options (:func:`mix_vertices`), and a pool runs at most
    ``max_k sum_o mix[s, p, k, o] n_o(it)`` micro-batches (docs/PLANNER.md 10.8)."""
    used = (mix > 0).any(axis=2)                                                              # [S, P, O]
    has = used.any(axis=(1, 2))
    cm = np.where(used, c[:, None, :], np.inf).min(axis=(1, 2))
    cc, mm = c[:, None, None, :], m[:, None, None, :]

    def phi(it: np.ndarray) -> np.ndarray:
        x = it[:, None, None, None]
        per = (mix * np.where(x >= cc, (x - cc) / mm + 1.0, 0.0)).sum(axis=3)   # [S, P, K]
        return per.max(axis=2).sum(axis=1)

    return _phi_root(phi, has, cm, c, n_mb)


def _phi_root(phi, has: np.ndarray, cm: np.ndarray, c: np.ndarray, n_mb: int) -> np.ndarray:
    """The bisection of :func:`makespan_floor` on a capacity function ``phi`` ([S] iterations -> [S] micro-batches,
    >= one pipeline of each option with room); ``has``: rows with room, ``cm`` their least summed compute."""
    c_big = np.where(np.isfinite(cm), c.max(axis=1), 1.0)
    lo = np.zeros(len(has))
    hi = 2.0 * c_big * (n_mb + 1)       # one pipeline of the slowest option alone runs >= n_mb by then
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(8):      # (M_o <= C_o, so one pipeline reaches n_mb by ``hi``: a guard, never looped)
            short = has & (phi(hi) < n_mb)
            if not short.any():
                break
            hi = np.where(short, 4.0 * hi, hi)
        lo, hi = _bisect(phi, lo, hi, n_mb)
    return np.where(has, np.maximum(lo, cm), np.inf)


@lru_cache(maxsize=1 << 14)
def pair_hull(units: int, t_a: int, t_b: int) -> tuple[tuple[int, int], ...]:
    """The vertices (x_a, x_b) of the upper-right hull of the integer points ``x >= 0`` with
    ``t_a x_a + t_b x_b <= units``: every such point is <= (componentwise) a convex combination of two of them,
    so for weights ``n_a, n_b >= 0`` the largest ``n_a x_a + n_b x_b`` over the points is the largest over the
    vertices (docs/PLANNER.md 10.8). ``t_a`` dividing ``t_b``: the two ends (the staircase is a line)."""
    top_b = units // t_b
    pts = [((units - t_b * y) // t_a, y) for y in range(top_b + 1)]
    if t_b % t_a == 0 or len(pts) <= 2:
        return tuple(dict.fromkeys((pts[0], pts[-1])))
    hull: list[tuple[int, int]] = []
    for p in pts:                           # upper hull of x_a as a function of x_b (monotone chain)
        while len(hull) >= 2:
            (a0, y0), (a1, y1) = hull[-2], hull[-1]
            if (a1 - a0) * (p[1] - y0) - (p[0] - a0) * (y1 - y0) > 0:
                break                       # a strict right turn keeps hull[-1]
            hull.pop()
        hull.append(p)
    return tuple(hull)


def mix_vertices(cap: np.ndarray, opts: list[tuple[str, int]], pools: list, s: np.ndarray, tp: np.ndarray,
                 max_tps: int = 2) -> np.ndarray:
    """[S, P, K, O] per pool (GPU type g, ``U = count // S`` TP units) the candidate pipeline-count vectors of a
    pool that may hold pipelines of up to two TP degrees of g: for every two options (g, t_a), (g, t_b) the
    vertices of :func:`pair_hull` (U, t_a, t_b), for a type with one option its capacity ``cap`` (zeros pad K).
    The pool's micro-batches ``max { sum_o x_o n_o : sum_o t_o x_o <= U, at most two o of g }`` are the largest
    over these vectors (docs/PLANNER.md 10.8). ``max_tps`` > 2 (more TP degrees per type): the LP relaxation's
    vectors ``U / t_o`` of each option alone instead (``sum_o x_o n_o <= U max_o n_o / t_o``), a weaker bound."""
    per: list[list[list[dict[int, int]]]] = []
    for i, si in enumerate(s):
        row = []
        for p_i, p in enumerate(pools):
            units = p.count // int(si)
            mine = sorted((o for o, (g, _) in enumerate(opts) if g == p.gpu_type), key=lambda o: tp[o])
            if len(mine) == 1:
                vecs = [{mine[0]: int(cap[i, p_i, mine[0]])}]
            elif max_tps > 2:
                vecs = [{o: units / int(tp[o])} for o in mine]
            else:
                vecs = [{a: xa, b: xb} for j, a in enumerate(mine) for b in mine[j + 1:]
                        for xa, xb in pair_hull(units, int(tp[a]), int(tp[b]))]
            row.append(vecs)
        per.append(row)
    k = max((len(v) for row in per for v in row), default=1)
    out = np.zeros((len(s), len(pools), k, len(opts)))
    for i, row in enumerate(per):
        for p_i, vecs in enumerate(row):
            for j, vec in enumerate(vecs):
                for o, x in vec.items():
                    out[i, p_i, j, o] = x
    return out


def _bisect(phi, lo: np.ndarray, hi: np.ndarray, n_mb: int) -> tuple[np.ndarray, np.ndarray]:
    """Halve [lo, hi] keeping ``phi(lo) < n_mb`` (or lo = 0) and ``phi(hi) >= n_mb``."""
    for _ in range(BISECT_STEPS):
        mid = 0.5 * (lo + hi)
        ok = phi(mid) >= n_mb
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    return lo, hi


def rate_floor(c: np.ndarray, m: np.ndarray, rate: np.ndarray, live: np.ndarray, it_hi: float) -> np.ndarray:
    """[S] a lower bound on a plan's dollars per micro-batch when its iteration is <= ``it_hi``: the smallest
    over live options of ``r_o it_hi / n_o(it_hi)`` (``r_o``: a pipeline's $/s; inf for an option with
    ``C_o > it_hi``, which can run no micro-batch), or ``r_o M_o`` (its limit) when ``it_hi`` is inf."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if np.isinf(it_hi):
            per = rate * m
        else:
            per = np.where(c <= it_hi, rate * it_hi * m / (it_hi - c + m), np.inf)
    return np.where(live, per, np.inf).min(axis=1)


def budget_floor(c: np.ndarray, m: np.ndarray, rate: np.ndarray, live: np.ndarray, usd_per_mb: float
                 ) -> np.ndarray:
    """[S] the smallest iteration at which some live option's dollars per micro-batch ``r_o it / n_o(it)`` are
    <= ``usd_per_mb`` (inf: none ever is): ``it >= C_o`` and ``it >= b (C_o - M_o) / (b - r_o M_o)`` where
    ``r_o M_o < b`` (the ratio falls towards ``r_o M_o`` as ``it`` grows)."""
    b = usd_per_mb
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(rate * m < b, np.maximum(c, b * (c - m) / (b - rate * m)), np.inf)
    return np.where(live, need, np.inf).min(axis=1)


def unit_bounds(ctx: SimContext, cluster: ClusterSpec, tables, options: dict[str, list[tuple[int, int]]], gbs: int,
                objective: Objective, space: SearchSpace) -> list[Unit]:
    """Every unit of the task loop (:func:`planner.search.tasks.enumerate_tasks`: S, then micro-batch size, then
    recomputation, then the distributed optimizer) with its bound; ``tables``: a
    :class:`planner.search.tasks.Tables` (its type tables). ``space.two_tp``
    >= 2: every pool's capacity term is :func:`mix_vertices`' knapsack (module docstring)."""
    types = sorted(options)
    two_tp = space.two_tp     # >= 2: a pool may hold pipelines of two TP degrees of its type
    num_layers = ctx.model.num_layers
    max_s = min(num_layers, space.max_stages or num_layers)
    s = np.arange(1, max_s + 1)
    pools = [p for p in cluster.pools if p.gpu_type in options and p.count > 0]
    by_key: dict[tuple[int, int, bool, bool], float] = {}
    for mbs in sorted({m for g in types for m, _ in options[g]}):
        if gbs % mbs:
            continue
        n_mb = gbs // mbs
        opts = [(g, t) for g in types for m, t in options[g] if m == mbs and any(
            p.gpu_type == g and p.count >= t for p in pools)]
        if not opts:
            continue
        tp = np.array([t for _, t in opts])
        match = np.array([[p.gpu_type == g for g, _ in opts] for p in pools])                   # [P, O]
        cap = np.where(match[None], np.array([p.count for p in pools])[None, :, None]
                       // (s[:, None, None] * tp[None, None, :]), 0)                             # [S, P, O]
        usd = np.array([ctx.catalog.get(g).usd_per_s for g, _ in opts])
        live = (cap > 0).any(axis=1)                                                              # [S, O]
        d_max = np.minimum(n_mb, cap.max(axis=2).sum(axis=1))                                     # [S]
        rate = s[:, None] * tp[None, :] * usd[None, :]              # one pipeline's $/s  [S, O]
        gpus = np.where(live, s[:, None] * tp[None, :], np.inf).min(axis=1)
        for rc in space.recompute:
            terms = [option_terms(ctx, tables.table(g, t, mbs), rc, space.tie_embeddings) for g, t in opts]
            c, m, upd = stage_terms(terms, s, num_layers, ctx.settings.per_microbatch_overhead_s)
            span = makespan_floor(cap, c, m, n_mb) if two_tp < 2 else \
                mixed_makespan_floor(mix_vertices(cap, opts, pools, s, tp, two_tp), c, m, n_mb)
            u_min = np.where(live, upd, np.inf).min(axis=1)
            work = n_mb * np.where(live, rate * m, np.inf).min(axis=1)       # every micro-batch holds a pipeline
            r_min = np.where(live, rate, np.inf).min(axis=1)
            # the objective's limits on the iteration: the throughput floor caps it, the budget floors it
            it_hi = 1.0 / objective.min_throughput_iters_per_s if objective.min_throughput_iters_per_s else np.inf
            per_it = rate_floor(c, m, rate, live, it_hi)      # the fewest dollars per micro-batch at <= it_hi
            it_budget = np.zeros(len(s)) if objective.max_cost_per_iter_usd is None else \
                budget_floor(c, m, rate, live, objective.max_cost_per_iter_usd / n_mb)
            for dist in space.distributed_optimizer:
                it = np.maximum(span + (u_min / np.maximum(d_max, 1) if dist else u_min), it_budget) * (1 - MARGIN)
                with np.errstate(invalid="ignore"):
                    dollars = np.maximum(np.maximum(work + r_min * u_min, r_min * it), n_mb * per_it) * (1 - MARGIN)
                    ok = objective.allows(it, dollars, gpus) & np.isfinite(it) & np.isfinite(dollars)
                    keys = np.where(ok, objective.key(it, dollars), np.inf)
                for i, si in enumerate(s):
                    by_key[(int(si), mbs, rc, dist)] = float(keys[i])
    out = []
    for order, (si, mbs, rc, dist) in enumerate(product(range(1, max_s + 1), sorted({m for g in types
                                                                                      for m, _ in options[g]}),
                                                       space.recompute, space.distributed_optimizer)):
        out.append(Unit(si, mbs, rc, dist, by_key.get((si, mbs, rc, dist), np.inf), order))
    return out


def task_floors(ctx: SimContext, cluster: ClusterSpec, tables, tasks: list, gbs: int, objective: Objective
                ) -> list[float]:
    """A lower bound on the objective key of every plan of each task (:class:`planner.search.tasks.Task`), from the
    same capacity argument per pool with the task's own TPs: per type g, ``M_g`` and ``C_g`` are the smallest
    busiest-stage and summed compute over the task's fitting splits (the cheap bound's relaxed fit), every
    pool of g offers ``count // (S t_g)`` pipelines of at most ``(it - C_g) / M_g + 1`` micro-batches each; every
    type runs >= 1 pipeline (a task's rows), so the optimizer step is >= the largest over types of its smallest
    slowest-stage step, the GPUs >= one pipeline per type and the $/s >= their sum (docs/PLANNER.md 2.3)."""
    from planner.search.caps import caps_for, task_dmax
    out = []
    for t in tasks:
        n_mb = gbs // t.mbs
        dmax = task_dmax(cluster, t.tps, t.num_stages, n_mb)
        fits = tables.task_fits(t.tps, t.mbs, t.num_stages, t.recompute, t.dist, dmax, relaxed=True)
        if not fits.any():
            out.append(np.inf)
            continue
        slots, upd, rate, gpus, work = [], 0.0, 0.0, 0, np.inf
        for g, tp in t.tps:
            st = tables.split_stats(g, tp, t.mbs, t.num_stages, t.recompute)
            m, c = float(st.comp_max[fits].min()), float(st.comp_sum[fits].min())
            upd = max(upd, float(st.upd_max[fits].min()))
            r = t.num_stages * tp * ctx.catalog.get(g).usd_per_s
            rate, gpus, work = rate + r, gpus + t.num_stages * tp, min(work, r * m)
            slots += [(cap, c, m) for _, cap in caps_for(cluster, g, tp, t.num_stages)]
        it = (slot_root(slots, n_mb) + (upd / max(dmax, 1) if t.dist else upd)) * (1 - MARGIN)
        dollars = max(rate * it, n_mb * work) * (1 - MARGIN)
        ok = bool(objective.allows(it, dollars, gpus)) and np.isfinite(it)
        out.append(float(objective.key(it, dollars)) if ok else np.inf)
    return out


def slot_root(slots: list[tuple[int, float, float]], n_mb: int) -> float:
    """The smallest ``it`` with ``sum cap ((it - C) / M + 1) [it >= C] >= n_mb`` over ``slots`` (cap, C, M)
    (piecewise linear and increasing, with a jump at every C: solved segment by segment; inf: no slot)."""
    a = b = 0.0
    prev = 0.0
    for cap, c, m in sorted(slots, key=lambda x: x[1]):
        if a > 0 and (n_mb - b) / a < c:      # the root lies before this slot opens
            return max((n_mb - b) / a, prev)
        a, b, prev = a + cap / m, b + cap * (1.0 - c / m), c
        if a * c + b >= n_mb:                   # reached by the jump at c
            return c
    return max((n_mb - b) / a, prev) if a > 0 else np.inf
