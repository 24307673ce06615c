"""An upper bound on the throughput of every plan on a cluster, derived from the simulator's own formulas.

Contract: :func:`throughput_bound(ctx, cluster, gbs)` returns a :class:`ThroughputBound` whose
``iteration_s`` is <= ``simulate(plan, ctx).iteration_time_s`` for EVERY plan that fits in memory per
``simulate`` (``ctx``: the context plans on ``cluster`` are simulated with, ``api.context_for``), trains in
``precision`` with ``optimizer``, and whose replicas use the cluster's GPUs (at most the pool's count per
type), one micro-batch size dividing ``gbs``, and for every replica a (micro-batch, TP) option of its type that the search may use
(:func:`planner.search.tasks.mbs_tp_options` under the default space). Nothing else about the plan is assumed:
any depth and layer split (uneven middle stages too), any mix of types, TP degrees and zones inside a stage or
along a pipeline, any micro-batch counts, any recomputation, the distributed optimizer on or off, tied or
untied embeddings. So it bounds our declared space, Sailor's space and issue 13's full space alike.
``cost_usd`` is likewise <= every such plan's $/iteration.

The proof is docs/PLANNER.md section 6 ("Upper bound and why 1.10x is out of reach"). For a plan with
micro-batch size b, largest TP degree T, S stages and D pipelines (m_j micro-batches on pipeline j), items =
embedding, each layer, head:

- item costs (:func:`item_tables`): per (type, TP <= T) the GPU-seconds per sample of each item without
  recomputation (recomputation only adds backward time), kept only where the smallest conceivable stage
  holding the item fits in memory (:func:`_item_min_memory`);
- the slowest pipeline's makespan (``P_j >= (m_j - 1) max_s c_s + fill``) summed as GPU-time over each type's
  GPUs: the work of GBS samples plus a bubble of (S - 1) micro-batches per pipeline at 1/TP of their work,
  weighted by a dual point of the assignment LP (:func:`dual_point`; any dual point is sound by weak
  duality); the fleet's GPUs in use; one fill plus the remaining work (:func:`_pipe_floor`);
- the gradient sync: the ring of the stage holding the most gradient over D members on the fastest link the
  cluster's pools have (flat, hierarchical, distributed optimizer: :func:`sync_floor`); coupled with the work
  through each item's smallest TP (:func:`_coupled`); the optimizer step: the cheapest of any item's holder.
The iteration floor is the minimum over (b, T, S, D). numpy only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.cluster import ClusterSpec
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext
from planner.simulator.stage import layer_sizes, recompute_keep_and_mask
from planner.search.linkfloor import affine_sync, link_floor, p2p_floor, sync_floor
from planner.search.space import SearchSpace
from planner.search.tasks import cluster_options


@dataclass(frozen=True)
class ItemTable:
    """Per (micro-batch size b, largest TP degree T a plan uses): the cheapest feasible cost of every item
    (embedding, each layer, head) on every type at every TP degree ``tps`` (all <= T).

    ``gpu_s_by_tp[g, k, i]``: GPU-seconds per sample of item i on type g at TP ``tps[k]`` (inf: that option
    cannot hold i); ``params_by_tp[k, i]``: the fewest parameters one GPU of a TP-``tps[k]`` replica holds for
    i; ``wall_s[i]``: the fastest wall seconds of one micro-batch of item i; ``update_s``: the cheapest
    optimizer step of a GPU holding the costliest item; ``usd_per_sample``: the cheapest GPU dollars of one
    sample's items."""

    mbs: int
    max_tp: int
    types: tuple[str, ...]
    tps: tuple[int, ...]
    gpu_s_by_tp: np.ndarray
    params_by_tp: np.ndarray
    wall_s: np.ndarray
    update_s: float
    usd_per_sample: float

    @property
    def gpu_s_per_sample(self) -> np.ndarray:
        """[g, i]: the cheapest over the TP degrees."""
        return self.gpu_s_by_tp.min(axis=1)

    @property
    def params(self) -> np.ndarray:
        return self.params_by_tp.min(axis=0)


@dataclass(frozen=True)
class ThroughputBound:
    """No plan of the scope (module docstring) iterates faster than ``iteration_s`` or costs less than
    ``cost_usd``."""

    iteration_s: float
    cost_usd: float
    compute_s: float             # GBS U alone: the pure compute bound (best micro-batch size and TP)
    mbs: int                     # the (b, T, S, D) whose floor is the smallest
    max_tp: int
    stages: int
    pipelines: int

    @property
    def iters_per_s(self) -> float:
        return 1.0 / self.iteration_s if self.iteration_s > 0 else math.inf


def _item_times(ctx: SimContext, costs, n_layers: int) -> np.ndarray:
    """fwd + bwd seconds of [embedding, layer 0..L-1, head] for one micro-batch (no recomputation: it only
    adds backward time), offset-adjusted and scaled as ``replica_costs`` does."""
    off = ctx.settings.profile_offset_s
    layers = F.offset_adjusted(costs.layer_fwd_s, off) + F.offset_adjusted(costs.layer_bwd_s, off)
    t = np.concatenate([[costs.embedding_fwd_s + costs.embedding_bwd_s], layers[:n_layers],
                        [costs.head_fwd_s + costs.head_bwd_s]])
    return t * ctx.settings.compute_scale


def _item_min_memory(ctx: SimContext, costs, tp: int, elem: int, max_dp: int, precision: str,
                     optimizer: str) -> tuple[np.ndarray, np.ndarray]:
    """(params, smallest peak bytes) of one GPU of a replica whose stage holds only item i, for each item.

    Each term of ``memory_terms`` is at least this for any stage holding i: weights and gradients of i's
    parameters, optimizer states sharded over at most ``max_dp`` replicas, the bucket, the activations one
    in-flight micro-batch keeps whatever recomputes (a layer: the causal mask; the embedding / head: theirs),
    the transient (a layer's activations, or the logits, and two boundary buffers) and the overhead."""
    m, st = ctx.model, ctx.settings
    lp, ep, hp, la, ea, ha = layer_sizes(ctx, costs, tp, elem)
    vocab = m.padded_vocab_for_tp(tp) * m.hidden_size // tp
    hp_min = max(hp - vocab, 0)             # a one-stage tied plan's head holds no matrix
    _, mask = recompute_keep_and_mask(ctx, costs, costs.mbs, tp, elem)
    boundary = m.boundary_activation_bytes(costs.mbs, elem)
    w, g, o = F.state_bytes_per_param(precision, optimizer)
    o_min = F.sharded_optimizer_bytes(o, max_dp, True)
    params = np.array([ep] + [lp] * m.num_layers + [hp_min], dtype=float)
    act = np.array([ea] + [mask] * m.num_layers + [ha], dtype=float)
    biggest = np.array([0.0] + [la] * m.num_layers + [ha], dtype=float)
    terms = F.memory_terms(params, act, 1, biggest, boundary, (w, g, o_min), st.activation_reserve_factor,
                           st.grad_bucket_elems, st.memory_overhead_bytes)
    return params, F.memory_total(terms)


def item_tables(ctx: SimContext, cluster: ClusterSpec, gbs: int, precision: str = "fp32",
                optimizer: str = "adamw") -> list[ItemTable]:
    """One :class:`ItemTable` per (micro-batch size dividing ``gbs``, largest TP) that lets every item fit
    on some type."""
    cluster = cluster.nonempty()
    types = tuple(cluster.gpu_types())
    opts = cluster_options(ctx, cluster, SearchSpace())
    out = []
    for b in sorted({m for o in opts.values() for m, _ in o if gbs % m == 0}):
        rows = [(g, tp) for g in types for m, tp in opts.get(g, ()) if m == b]
        per = {(g, tp): _option_costs(ctx, cluster, g, b, tp, precision, optimizer) for g, tp in rows}
        for cap_tp in sorted({tp for _, tp in rows}):
            tab = _table(ctx, types, b, cap_tp, {k: v for k, v in per.items() if k[1] <= cap_tp})
            if tab is not None:
                out.append(tab)
    return out


def _option_costs(ctx: SimContext, cluster: ClusterSpec, g: str, b: int, tp: int, precision: str,
                  optimizer: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(fits, wall s, params, update s) per item of one (type, micro-batch, TP) option."""
    from planner.simulator.memory import usable_bytes
    costs = ctx.profiles.get(g, b, tp)
    t = _item_times(ctx, costs, ctx.model.num_layers)
    p, mem = _item_min_memory(ctx, costs, tp, F.bytes_per_element(precision), cluster.total_gpus, precision,
                              optimizer)
    return mem <= usable_bytes(ctx, g), t, p, costs.update_s_per_param * p * ctx.settings.update_scale


def _table(ctx: SimContext, types: tuple[str, ...], b: int, cap_tp: int, per: dict) -> ItemTable | None:
    n_items = ctx.model.num_layers + 2
    tps = tuple(sorted({tp for _, tp in per}))
    e = np.full((len(types), len(tps), n_items), np.inf)
    params = np.full((len(tps), n_items), np.inf)
    wall, upd, usd = (np.full(n_items, np.inf) for _ in range(3))
    for (g, tp), (ok, t, p, u) in per.items():
        k, q = types.index(g), tps.index(tp)
        e[k, q] = np.where(ok, tp * t / b, np.inf)
        params[q] = np.where(ok, np.minimum(params[q], p), params[q])
        wall = np.where(ok, np.minimum(wall, t), wall)
        upd = np.where(ok, np.minimum(upd, u), upd)
        usd = np.where(ok, np.minimum(usd, ctx.catalog.get(g).usd_per_s * tp * t / b), usd)
    if not np.all(np.isfinite(wall)):       # an item fits nowhere: no plan with (b, T)
        return None
    return ItemTable(b, cap_tp, types, tps, e, params, wall, float(np.max(upd)), float(usd.sum()))


def dual_point(e: np.ndarray, gpus: np.ndarray, iters: int = 3000) -> np.ndarray:
    """A dual point y >= 0, sum_g gpus_g y_g = 1, of the assignment LP ``U = min t s.t. sum_g x_gi = 1 for
    every item i, sum_i x_gi e_gi <= gpus_g t for every type g`` (seconds per sample of the whole fleet),
    found by exponentiated supergradient ascent on :func:`dual_value`. Types that hold no item get y = 0
    (they hold no replica). By weak duality every such y bounds U from below, so the ascent needs no
    exactness for the bound to be sound; it only makes it tighter."""
    e = np.asarray(e, dtype=float)
    gpus = np.asarray(gpus, dtype=float)
    live = np.any(np.isfinite(e), axis=1) & (gpus > 0)
    y = np.zeros(len(gpus))
    if not live.any():
        return y
    el, gl = e[live], gpus[live]
    cols = np.arange(el.shape[1])
    z = gl / gl.sum()                       # z_g = gpus_g y_g on the simplex; start: y uniform
    best_z, best = z, -math.inf
    for it in range(iters):
        prod = np.where(np.isfinite(el), (z / gl)[:, None] * np.where(np.isfinite(el), el, 0.0), np.inf)
        arg = np.argmin(prod, axis=0)
        v = float(prod[arg, cols].sum())
        if v > best:
            best, best_z = v, z
        grad = np.zeros(len(gl))
        np.add.at(grad, arg, el[arg, cols] / gl[arg])
        grad = grad / (grad.max() or 1.0)
        z = z * np.exp(0.5 * grad / math.sqrt(it + 1))
        z = z / z.sum()
    y[live] = best_z / gl
    return y


def dual_value(e: np.ndarray, y: np.ndarray) -> float:
    """``sum_i min_g y_g e_gi`` (inf entries: the type cannot hold the item; an item no type holds gives inf,
    no assignment exists). With y >= 0, sum_g gpus_g y_g <= 1 it is <= the LP's U (weak duality)."""
    prod = np.where(np.isfinite(e), np.asarray(y, dtype=float)[:, None] * np.where(np.isfinite(e), e, 0.0), np.inf)
    return float(prod.min(axis=0).sum())


def _holder_min_y(e: np.ndarray, y: np.ndarray) -> float:
    """The smallest y_g over the types that can hold some item (only they hold replicas, hence bubbles)."""
    live = np.any(np.isfinite(e), axis=1)
    return float(y[live].min()) if live.any() else 0.0


def _pipe_floor(tab: ItemTable, gpus: np.ndarray, n_gpus: int, gbs: int, s_num: int, d: np.ndarray,
                fill_s: float, y: np.ndarray) -> np.ndarray:
    """Floor on the slowest pipeline's makespan for S stages and each D in ``d`` (docs/PLANNER.md 6.2):
    the types' GPU-time holds the work of GBS samples plus a bubble of (S-1)/T of every pipeline's work of one
    micro-batch (dual point y); the fleet's GPUs in use (<= D S T) hold the same on the best type; and a
    pipeline's fill plus the rest of the work (the work LP's dual value times GBS - D b)."""
    a, b_min = dual_value(tab.gpu_s_per_sample, y), _holder_min_y(tab.gpu_s_per_sample, y)
    e_min = float(np.min(tab.gpu_s_per_sample, axis=0).sum())
    bubble = (s_num - 1) * tab.mbs * d * e_min / tab.max_tp
    typed = gbs * a + bubble * b_min
    fleet = (gbs * e_min + bubble) / np.minimum(n_gpus, d * s_num * tab.max_tp)
    filled = fill_s + (gbs - d * tab.mbs) * a
    return np.maximum(np.maximum(typed, fleet), filled)


@dataclass(frozen=True)
class _Parts:
    """The coupled floor's per-item pieces for one (table, S): per sample at TP option k and above, the dual
    work ``work[g, k, u]`` and the bubble ``bubble[g, k, u]`` of one micro-batch; the sync weight per parameter."""

    mbs: int
    work: np.ndarray
    bubble: np.ndarray
    params: np.ndarray
    mult: np.ndarray
    weight: np.ndarray


def _parts(tab: ItemTable, y: np.ndarray, s_num: int, waits_for_all: bool) -> _Parts:
    e, params, mult, emb = _dedupe_items(tab)
    y_min = _holder_min_y(tab.gpu_s_per_sample, y)
    tps = np.array(tab.tps, dtype=float)
    fin = np.isfinite(e)
    ez = np.where(fin, e, 0.0)
    work = np.where(fin, y[:, None, None] * ez, np.inf)
    bubble = np.where(fin, (s_num - 1) * y_min * ez / tps[None, :, None], np.inf)
    # every stage waits for the slowest sync: the stage holding the most gradient has >= 1/S of all items';
    # else stage 0's sync (no backward left to hide it) holds the embedding's
    weight = np.full(params.shape[1], 4.0 / s_num) if waits_for_all else np.where(np.arange(params.shape[1]) == emb,
                                                                                4.0, 0.0)
    return _Parts(tab.mbs, work, bubble, params, mult, weight)


def _coupled(parts: _Parts, ms: np.ndarray, ns: np.ndarray, sync_a, sync_c) -> np.ndarray:
    """Floor on slowest makespan + sync (docs/PLANNER.md 6.3) when ``ns[v]`` pipelines run ``ms[v]``
    micro-batches (arrays [v, D]; one column per D): with the dual point fixed, the makespan is >= the sum over
    pipelines and items of b (m y_g e + (S-1) y_min e / t) at the item's (type g, TP t) in that pipeline, and
    the sync >= a + c w sum_i p_i(t_i), t_i the smallest TP among item i's holders; each item picks t_i
    independently."""
    w, bub = parts.work, parts.bubble
    best = np.full((w.shape[2],) + ms.shape[1:], np.inf)            # [u, D]
    for k in range(w.shape[1]):
        lines_w = w[:, k:].reshape(-1, w.shape[2])                   # holders' TP >= option k
        lines_b = bub[:, k:].reshape(-1, w.shape[2])
        total = np.zeros_like(best)
        for v in range(ms.shape[0]):
            env = np.min(lines_w[:, :, None] * ms[v][None, None, :] + lines_b[:, :, None], axis=0)   # [u, D]
            total = total + np.where(ns[v] > 0, ns[v] * parts.mbs * env, 0.0)
        held = np.isfinite(parts.params[k])             # some type holds the item at TP >= option k
        sync = np.where(held[:, None], (parts.weight * np.where(held, parts.params[k], 0.0))[:, None] * sync_c, np.inf)
        best = np.minimum(best, total + sync)
    return (parts.mult[:, None] * best).sum(axis=0) + sync_a


def _dedupe_items(tab: ItemTable) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(e [g, k, u], params [k, u], multiplicity [u], the embedding's column) over the distinct items."""
    e = tab.gpu_s_by_tp.reshape(-1, tab.gpu_s_by_tp.shape[-1])
    key = np.vstack([np.where(np.isfinite(e), e, -1.0),
                     np.where(np.isfinite(tab.params_by_tp), tab.params_by_tp, -1.0)])
    _, first, inverse, counts = np.unique(key.T, axis=0, return_index=True, return_inverse=True, return_counts=True)
    return tab.gpu_s_by_tp[:, :, first], tab.params_by_tp[:, first], counts.astype(float), int(np.ravel(inverse)[0])


def throughput_bound(ctx: SimContext, cluster: ClusterSpec, gbs: int, precision: str = "fp32",
                     optimizer: str = "adamw") -> ThroughputBound | None:
    """The bound of the module docstring; None when no (micro-batch size, TP) lets every item fit somewhere
    (then no plan of the scope fits in memory)."""
    cluster = cluster.nonempty()
    tables = item_tables(ctx, cluster, gbs, precision, optimizer)
    if not tables:
        return None
    types = tables[0].types
    gpus = np.array([sum(p.count for p in cluster.pools if p.gpu_type == g) for g in types], dtype=float)
    links = link_floor(ctx, cluster)
    elem = F.bytes_per_element(precision)
    n_gpus, zones, st = cluster.total_gpus, len(cluster.zones()), ctx.settings
    best: ThroughputBound | None = None
    compute = math.inf
    for tab in tables:
        y = dual_point(tab.gpu_s_per_sample, gpus)
        compute = min(compute, gbs * dual_value(tab.gpu_s_per_sample, y))
        hop = p2p_floor(ctx, links, tab.mbs, elem)
        n_mb = gbs // tab.mbs
        for s_num in range(1, ctx.model.num_layers + 3):
            d = np.arange(1, min(n_gpus // s_num, n_mb) + 1)
            if d.size == 0:
                break
            fill = float(tab.wall_s.sum()) + s_num * st.per_microbatch_overhead_s + 2 * (s_num - 1) * hop
            pipe = _pipe_floor(tab, gpus, n_gpus, gbs, s_num, d, fill, y)
            grad_b = F.grad_bytes(tab.params.sum() / s_num if st.dp_sync_waits_for_all else tab.params[0])
            sync = sync_floor(links, d, grad_b, grad_b / F.GRAD_BYTES_PER_PARAM * elem, zones)
            upd = tab.update_s / d                  # the distributed optimizer steps 1/D of the parameters
            a, c = affine_sync(links, d, elem, zones)
            # a sum over pipelines of one concave function of m_j (sum m_j = N, m_j >= 1) is smallest at a
            # vertex: one pipeline runs N - D + 1 micro-batches, the others one each
            ms, ns = np.stack([n_mb - d + 1.0, np.ones(len(d))]), np.stack([np.ones(len(d)), d - 1.0])
            coupled = _coupled(_parts(tab, y, s_num, st.dp_sync_waits_for_all), ms, ns, a, c)
            total = np.maximum(pipe + sync, coupled) + upd
            if np.isnan(total).any():
                raise ArithmeticError(f"throughput bound: NaN floor at micro-batch {tab.mbs}, {s_num} stages")
            k = int(np.argmin(total))
            if best is None or total[k] < best.iteration_s:
                best = ThroughputBound(float(total[k]), 0.0, 0.0, tab.mbs, tab.max_tp, s_num, int(d[k]))
    assert best is not None
    cost = min(gbs * t.usd_per_sample for t in tables)
    return ThroughputBound(best.iteration_s, cost, compute, best.mbs, best.max_tp, best.stages, best.pipelines)
