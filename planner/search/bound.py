"""An upper bound on the throughput of every plan on a cluster, derived from the simulator's own formulas.

Contract: :func:`throughput_bound(ctx, cluster, gbs)` returns a :class:`ThroughputBound` whose
``iteration_s`` is <= ``simulate(plan, ctx).iteration_time_s`` for EVERY plan that fits in memory per
``simulate`` and whose replicas use the cluster's GPUs (at most the pool's count per type), one micro-batch size
dividing ``gbs``, and for every replica a (micro-batch, TP) option of its type that the search may use
(:func:`planner.search.tasks.mbs_tp_options` under the default space). Nothing else about the plan is assumed:
any depth and layer split (uneven middle stages too), any mix of types, TP degrees and zones inside a stage or
along a pipeline, any micro-batch counts, any recomputation, the distributed optimizer on or off, tied or
untied embeddings. So it bounds our declared space, Sailor's space and issue 13's full space alike.
``cost_usd`` is likewise <= every such plan's $/iteration.

The proof is docs/PLANNER.md section 6 ("Upper bound and why 1.10x is out of reach"); in short, for a plan with
micro-batch size b, S stages and D pipelines (m_j micro-batches on pipeline j, sum m_j b = GBS):

- every replica r (tp_r GPUs of type g) of pipeline j computes c_r >= b * sum_{items i in r} e_g(i, b) / tp_r
  per micro-batch (e: the type's cheapest GPU-seconds per sample of item i over the TP degrees whose smallest
  conceivable stage holding i fits in memory; items: embedding, each layer, head);
- the pipeline's makespan P_j >= (m_j - 1) max_s c_s + F_j with F_j >= F(b, S) (one micro-batch through every
  item on its fastest feasible (type, TP), S per-micro-batch overheads, 2 (S-1) cheapest p2p transfers);
  GPU-time accounting over the GPUs of each type gives max_j P_j >= max(GBS U(b), F(b, S) + (GBS - D b) U(b)),
  U(b) the fractional assignment LP of items to types (its dual, :func:`lp_per_sample_s`, is a valid bound
  for any dual point, so its numerical solution needs no exactness to be sound);
- the gradient sync >= the ring time of the stage holding the most gradient (>= 1/S of the smallest per-GPU
  parameters of all items) over D members on the fastest link the cluster has (flat or hierarchical, with or
  without the distributed optimizer); the optimizer step >= the cheapest step of any item's holder.
The iteration bound is the minimum over (b, S, D) of the sum. numpy only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.cluster import ClusterSpec
from planner.network import Endpoint, Link
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext
from planner.simulator.stage import layer_sizes, recompute_keep_and_mask
from planner.search.space import SearchSpace
from planner.search.tasks import mbs_tp_options


@dataclass(frozen=True)
class ItemTable:
    """Per (micro-batch size b, largest TP degree T a plan uses): the cheapest feasible cost of every item on
    every type over the TP degrees <= T.

    ``gpu_s_per_sample[g, i]``: GPU-seconds per sample of item i on type g (inf: no such TP of g can hold it);
    ``wall_s[i]``: the fastest wall seconds of one micro-batch of item i on any type; ``params[i]``: the
    fewest parameters one GPU holds for i; ``update_s``: the cheapest optimizer step of a GPU holding the
    costliest item; ``usd_per_sample``: the cheapest GPU dollars of one sample's items."""

    mbs: int
    max_tp: int
    types: tuple[str, ...]
    gpu_s_per_sample: np.ndarray
    wall_s: np.ndarray
    params: np.ndarray
    update_s: float
    usd_per_sample: float


@dataclass(frozen=True)
class ThroughputBound:
    """No plan of the scope (module docstring) iterates faster than ``iteration_s`` or costs less than
    ``cost_usd``; the terms are those of the (b, S, D) attaining the minimum."""

    iteration_s: float
    cost_usd: float
    compute_s: float             # GBS U alone: the pure compute bound (best micro-batch size and TP)
    mbs: int
    max_tp: int
    stages: int
    pipelines: int
    pipeline_s: float
    sync_s: float
    update_s: float

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
    opts = {g: mbs_tp_options(ctx, g, min(cluster.gpus_per_node(g), ctx.node_size(g)), SearchSpace())
            for g in types}
    out = []
    for b in sorted({m for o in opts.values() for m, _ in o if gbs % m == 0}):
        rows = [(g, tp) for g in types for m, tp in opts[g] if m == b]
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
    return mem <= usable_bytes(ctx, g), t, p, costs.update_s_per_param * p


def _table(ctx: SimContext, types: tuple[str, ...], b: int, cap_tp: int, per: dict) -> ItemTable | None:
    n_items = ctx.model.num_layers + 2
    e = np.full((len(types), n_items), np.inf)
    wall, params, upd, usd = (np.full(n_items, np.inf) for _ in range(4))
    for (g, tp), (ok, t, p, u) in per.items():
        k = types.index(g)
        e[k] = np.where(ok, np.minimum(e[k], tp * t / b), e[k])
        wall = np.where(ok, np.minimum(wall, t), wall)
        params = np.where(ok, np.minimum(params, p), params)
        upd = np.where(ok, np.minimum(upd, u), upd)
        usd = np.where(ok, np.minimum(usd, ctx.catalog.get(g).usd_per_s * tp * t / b), usd)
    if not np.all(np.isfinite(wall)):       # an item fits nowhere: no plan with (b, T)
        return None
    return ItemTable(b, cap_tp, types, e, wall, params, float(np.max(upd)), float(usd.sum()))


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
    """``sum_i min_g y_g e_gi`` over the types with y_g > 0 (inf entries excluded; an item no such type
    holds gives inf: the dual point then proves no assignment exists on those types)."""
    live = y > 0
    if not live.any():
        return 0.0
    prod = np.where(np.isfinite(e[live]), y[live, None] * np.where(np.isfinite(e[live]), e[live], 0.0), np.inf)
    return float(prod.min(axis=0).sum())


def link_floor(ctx: SimContext, cluster: ClusterSpec) -> list[tuple[float, float]]:
    """(latency s, peak B/s) of every link a plan on the cluster's pools can use between two nodes: each
    link's time at any size and concurrency is >= latency + bytes / peak (``Link.time_s``)."""
    net = ctx.network
    # a replica's node size is its type's in the context (``SimContext.replica_node_size`` for a plan)
    ends = {(p.zone, p.gpu_type, net.node_gpus(Endpoint(p.gpu_type, p.zone, ctx.node_size(p.gpu_type))))
            for p in cluster.nonempty().pools}
    links: list[Link] = []
    if net.pair_links:
        if ctx.replica_node_gpus:           # node sizes declared per replica: any size of the pool's zone and type
            ends = {(z, g, n) for (z, g, _) in ends for n in range(1, 1025)}
        links = [l for (za, ga, na, zb, gb, nb), l in net.pair_links.items()
                 if (za, ga, na) in ends and (zb, gb, nb) in ends] or list(net.pair_links.values())
    else:
        links = list(net.class_links.values())
    return [(l.latency_s, l.max_bw_bytes_per_s) for l in links]


def _t_floor(links: list[tuple[float, float]], nbytes):
    nbytes = np.asarray(nbytes, dtype=float)
    return np.min([lat + nbytes / bw for lat, bw in links], axis=0)


def _ring_floor(links, n, grad_b: float, param_b: float, inner: bool = False) -> np.ndarray:
    """Floor on a ring over n members (0 for n <= 1), the smaller of the plain and the distributed-optimizer
    form. Flat / cross-zone ring: ``F.ring_s`` or one gradient + one parameter half (``F.ring_halves_s``);
    ``inner`` (a zone's reduce to its leader and broadcast back): 1.5 rings, or two gradient halves + one
    parameter half (``planner.simulator.time.stage_sync``)."""
    n = np.asarray(n, dtype=float)
    safe = np.maximum(n, 1.0)
    g_chunk, p_chunk = _t_floor(links, grad_b / safe), _t_floor(links, param_b / safe)
    plain = F.ring_s(n, g_chunk)
    if inner:
        plain = F.zone_reduce_broadcast_s(plain)
    dist = F.ring_halves_s(n, 2 if inner else 1, g_chunk, 1, p_chunk)
    return np.where(n > 1, np.minimum(plain, dist), 0.0)


def sync_floor(links, d, grad_b: float, param_b: float, zones: int) -> np.ndarray:
    """Floor on a stage's gradient sync over d replicas holding grad_b gradient (param_b parameter) bytes per
    GPU: the smaller of the flat ring and every hierarchical split over 2..zones zones (the largest zone then
    has >= ceil(d / z) members; the sync is its reduce + broadcast plus the ring of the z leaders)."""
    d = np.asarray(d, dtype=float)
    best = _ring_floor(links, d, grad_b, param_b)
    for z in range(2, zones + 1):
        hier = _ring_floor(links, np.ceil(d / z), grad_b, param_b, inner=True) + \
            _ring_floor(links, float(z), grad_b, param_b)
        best = np.where(d >= z, np.minimum(best, hier), best)
    return np.where(d > 1, best, 0.0)


def p2p_floor(ctx: SimContext, links, mbs: int, elem: int) -> float:
    """Floor on one boundary crossing (``p2p_transfer_s``: the mean of two transfers of the activation)."""
    return float(_t_floor(links, ctx.model.boundary_activation_bytes(mbs, elem)))
def _pipe_floor(tab: ItemTable, gpus: np.ndarray, n_gpus: int, gbs: int, s_num: int, d: np.ndarray,
                fill_s: float, y: np.ndarray) -> np.ndarray:
    """Floor on the slowest pipeline's makespan for S stages and each D in ``d`` (docs/PLANNER.md 6.2):
    the types' GPU-time holds the work of GBS samples plus a bubble of (S-1)/T of every pipeline's work of one
    micro-batch (dual point y); the fleet's GPUs in use (<= D S T) hold the same on the best type; and a
    pipeline's fill plus the rest of the work (the work LP's dual value times GBS - D b)."""
    a, b_min = dual_value(tab.gpu_s_per_sample, y), float(y[y > 0].min()) if (y > 0).any() else 0.0
    e_min = float(np.min(tab.gpu_s_per_sample, axis=0).sum())
    bubble = (s_num - 1) * tab.mbs * d * e_min / tab.max_tp
    typed = gbs * a + bubble * b_min
    fleet = (gbs * e_min + bubble) / np.minimum(n_gpus, d * s_num * tab.max_tp)
    filled = fill_s + (gbs - d * tab.mbs) * a
    return np.maximum(np.maximum(typed, fleet), filled)


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
        for s_num in range(1, ctx.model.num_layers + 3):
            d = np.arange(1, min(n_gpus // s_num, gbs // tab.mbs) + 1)
            if d.size == 0:
                break
            fill = float(tab.wall_s.sum()) + s_num * st.per_microbatch_overhead_s + 2 * (s_num - 1) * hop
            pipe = _pipe_floor(tab, gpus, n_gpus, gbs, s_num, d, fill, y)
            # the stage that syncs last holds >= 1/S of all items' fewest parameters (every stage waits for
            # the slowest sync), or, when syncs overlap the backward, stage 0's (no slack) holds the embedding
            grad_b = F.grad_bytes(tab.params.sum() / s_num if st.dp_sync_waits_for_all else tab.params[0])
            sync = sync_floor(links, d, grad_b, grad_b / F.GRAD_BYTES_PER_PARAM * elem, zones)
            upd = tab.update_s / d                  # the distributed optimizer steps 1/D of the parameters
            total = pipe + sync + upd
            k = int(np.argmin(total))
            if best is None or total[k] < best.iteration_s:
                best = ThroughputBound(float(total[k]), 0.0, 0.0, tab.mbs, tab.max_tp, s_num, int(d[k]),
                                       float(pipe[k]), float(sync[k]), float(upd[k]))
    assert best is not None
    cost = min(gbs * t.usd_per_sample for t in tables)
    return ThroughputBound(best.iteration_s, cost, compute, best.mbs, best.max_tp, best.stages, best.pipelines,
                           best.pipeline_s, best.sync_s, best.update_s)
