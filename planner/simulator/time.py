"""Iteration time: 1F1B per pipeline with p2p between stages, data-parallel gradient sync, optimizer step.

Per pipeline j with m_j micro-batches and per-stage busy time per micro-batch T_s::

    T_j = (m_j - 1) * period  +  sum_s (F_s + B_s)  +  2 * sum_b p_b
    period = max(max_s T_s, max_{k: m_j > S-k} round_trip_k / (S - k))

(fill + drain: one micro-batch crosses every stage forward and backward and every boundary b twice).
T_s = F_s + B_s + overhead, plus the stage's own transfers (2 per adjacent boundary) when p2p blocks.
The iteration is the slowest pipeline, then the gradient sync (after a barrier, or overlapped with the
remaining backward of earlier stages), then the slowest optimizer step.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.network import Endpoint, Link
from planner.plan import Plan, Replica
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext
from planner.simulator.stage import ReplicaCosts


@dataclass(frozen=True)
class SyncCost:
    """One gradient synchronisation (a stage's or the tied embeddings'): seconds, cross-zone bytes, mode."""

    time_s: float
    cross_zone_bytes: dict[tuple[str, str], float]   # (src zone, dst zone) -> bytes per iteration
    mode: str


def endpoint(ctx: SimContext, s: int, j: int, rep: Replica) -> Endpoint:
    """Replica j of stage s as a network endpoint (its zone, type and node size)."""
    return Endpoint(rep.gpu_type, rep.zone, ctx.replica_node_size(s, j, rep.gpu_type))


def sends_to_every_tp_rank(plan: Plan, ctx: SimContext) -> bool:
    """True when one rank of the sending replica sends the whole tensor to every TP rank of the receiving
    one (the plan's ``p2p_pattern`` "tp0-to-all" under ``p2p_from_plan``; else the preset's rule)."""
    if ctx.settings.p2p_from_plan:
        return plan.p2p_pattern == "tp0-to-all"
    return ctx.settings.p2p_all_tp_ranks


def p2p_transfer_s(ctx: SimContext, a: Endpoint, b: Endpoint, tp_a: int, tp_b: int, nbytes: float,
                   all_tp: bool | None = None) -> float:
    """Seconds of one boundary crossing, the mean of forward (a -> b) and backward (b -> a).

    One rule, shared with the search (``link(concurrent=k).time_s(bytes)``): k = the receiving replica's TP
    for our runtime (``p2p_all_tp_ranks``: TP rank 0 sends the whole activation to each receiving TP rank,
    k messages through one node link), k = 1 for DeepSpeed's pipe engine (each TP rank sends 1/TP of the
    activation, so one activation crosses in all). A node-pair link (Sailor's fits, ``shared``) divides its
    bandwidth among the k messages; a per-GPU-pair class link does not (its bandwidth is the effective
    figure of one boundary crossing). docs/SIMULATOR.md, "Network fits", derives it.
    """
    net = ctx.network
    all_tp = ctx.settings.p2p_all_tp_ranks if all_tp is None else all_tp
    k_fwd, k_bwd = (tp_b, tp_a) if all_tp else (1, 1)
    fwd = net.link(a, b, concurrent=k_fwd).checked_time_s(nbytes)
    bwd = net.link(b, a, concurrent=k_bwd).checked_time_s(nbytes)
    return 0.5 * (fwd + bwd)


def p2p_seconds(plan: Plan, ctx: SimContext, j: int, seen: dict | None = None) -> list[float]:
    """Transfer seconds of one activation (or its gradient) across each boundary of pipeline j. ``seen``: the
    crossings of this plan timed so far (by both endpoints and TP degrees), shared by its pipelines."""
    nbytes = ctx.model.boundary_activation_bytes(plan.micro_batch_size, plan.bytes_per_element)
    reps = plan.pipeline(j)
    all_tp = sends_to_every_tp_rank(plan, ctx)
    seen = {} if seen is None else seen
    out = []
    for b in range(len(reps) - 1):
        a, c = endpoint(ctx, b, j, reps[b]), endpoint(ctx, b + 1, j, reps[b + 1])
        key = (a, c, reps[b].tp, reps[b + 1].tp)
        t = seen.get(key)
        if t is None:
            t = seen[key] = p2p_transfer_s(ctx, a, c, reps[b].tp, reps[b + 1].tp, nbytes, all_tp)
        out.append(t)
    return out


def _compute(costs: list[ReplicaCosts], ctx: SimContext) -> list[float]:
    return [F.compute_s(c.fwd_s, c.bwd_s, ctx.settings.per_microbatch_overhead_s) for c in costs]


def stage_busy_s(costs: list[ReplicaCosts], p2p_s: list[float], ctx: SimContext) -> list[float]:
    """Busy seconds per micro-batch of each stage of one pipeline (steady state, :func:`formulas.busy_s`)."""
    return F.busy_s_1d(_compute(costs, ctx), [float(p) for p in p2p_s], ctx.settings.p2p_blocking)


def _period_s(comp: list[float], p2p: list[float], m: int, ctx: SimContext) -> float:
    busy = F.busy_s_1d(comp, p2p, ctx.settings.p2p_blocking)
    levels = F.period_levels_1d(F.max_1d(busy), F.round_trip_bounds_1d(comp, p2p))
    return float(levels[min(m, len(levels)) - 1])


def steady_period_s(costs: list[ReplicaCosts], p2p_s: list[float], m: int, ctx: SimContext) -> float:
    """Seconds per micro-batch in the 1F1B steady state.

    At least the busiest stage's time; and stage k keeps at most ``S-k`` micro-batches in flight, so when
    ``m > S-k`` a round trip from k to the last stage and back (compute of stages >= k plus two transfers per
    boundary) is shared by ``S-k`` micro-batches: ``period >= round_trip_k / (S-k)``. The second bound binds
    when transfers are slow next to balanced stages (:func:`formulas.round_trip_bounds`; evaluated here by
    their one-pipeline twins on Python floats, :func:`formulas.busy_s_1d` and the functions after it).
    """
    return _period_s(_compute(costs, ctx), [float(p) for p in p2p_s], m, ctx)


def pipeline_seconds(costs: list[ReplicaCosts], p2p_s: list[float], m: int, ctx: SimContext) -> float:
    comp, p2p = _compute(costs, ctx), [float(p) for p in p2p_s]
    fill_drain = F.fill_drain_s_1d(comp, p2p)
    return float(F.pipeline_s(m, _period_s(comp, p2p, m, ctx), fill_drain))


def _ring_s(n: int, nbytes: float, link: Link) -> float:
    if n <= 1 or nbytes <= 0:
        return 0.0
    return F.ring_s(n, link.checked_time_s(nbytes / n))


def sync_rule(plan: Plan, ctx: SimContext, s: int) -> str:
    """The sync mode stage s is modelled with: the plan's ``grad_sync`` for that stage when it names one (the
    runtime runs exactly that), else the preset's rule (``auto``: the faster of flat and hierarchical)."""
    return plan.stages[s].grad_sync or ctx.settings.grad_sync


def stage_sync(plan: Plan, ctx: SimContext, s: int, costs: list[ReplicaCosts]) -> SyncCost:
    """Gradient all-reduce of stage s over its D replicas (heterogeneous TP: fine-shard groups); the mode is
    :func:`sync_rule`'s. One zone: both modes are the runtime's flat all-reduce."""
    reps = plan.stages[s].replicas
    if len(reps) == 1:
        return SyncCost(0.0, {}, "none")
    grad_bytes = F.grad_bytes(max(c.params for c in costs))   # the smallest-TP replica's GPUs hold the most
    full_bytes = F.grad_bytes(max(c.params * c.tp for c in costs))   # the whole stage's gradient (all shards)
    dist = plan.distributed_optimizer
    param_bytes = max(c.params for c in costs) * plan.bytes_per_element if dist else None
    # the distributed optimizer: reduce-scatter of fp32 gradients, all-gather of updated parameters
    moved = (full_bytes + max(c.params * c.tp for c in costs) * plan.bytes_per_element) / 2 if dist else full_bytes
    ends = [endpoint(ctx, s, j, r) for j, r in enumerate(reps)]
    return zone_aware_sync(ends, ctx, sync_rule(plan, ctx, s), grad_bytes, moved, min(r.tp for r in reps),
                           param_bytes)


def zone_aware_sync(ends: list[Endpoint], ctx: SimContext, rule: str, grad_bytes: float, moved_bytes: float,
                    conc: int, param_bytes: float | None = None) -> SyncCost:
    """Sum of one gradient over replicas at ``ends`` (ring order), in mode ``rule`` (``flat``: one ring;
    ``hierarchical``: reduce + broadcast inside each zone, a ring over the zone leaders; ``auto``: the faster).
    ``grad_bytes``: per GPU; ``moved_bytes``: what one ring carries across zones (all shards); ``conc``:
    concurrent streams per link (the smallest TP); ``param_bytes``: the distributed optimizer's parameter
    half (None: a plain all-reduce). One zone: the flat ring.

    A ring waits for its slowest link *by time*: every step moves one chunk over every link of the ring at
    once and ends when the slowest of those transfers does, so a ring's time is the largest over its distinct
    links of the ring time on that link (latency included; the distributed optimizer's halves: the whole
    ring-phase time per link, so the maximum is taken of one non-decreasing function of both sizes per link).
    Each link's time is non-decreasing in the message size (``Link.time_s``), a maximum of non-decreasing
    functions is non-decreasing, and so is ``auto``'s minimum of flat and hierarchical: the modelled sync
    never falls as the gradient grows, which the search's split dominance relies on (docs/PLANNER.md 2.1).
    (An earlier rule timed the ring on its least-bandwidth link at the chunk size, ignoring latency; with
    fitted bandwidths that cross, a larger gradient could switch it to a faster link and the sync dropped.)"""
    d = len(ends)
    zones: dict[str, list[Endpoint]] = {}
    for e in ends:
        zones.setdefault(e.zone, []).append(e)
    dist = param_bytes is not None

    def ring(n: int, link: Link, grad_halves: int = 1, param_halves: int = 1) -> float:
        if not dist:
            return _ring_s(n, grad_bytes, link)
        return _halves_s(n, grad_bytes, param_bytes, link, grad_halves, param_halves,
                         ctx.settings.sharded_collective_scale)

    def slowest(members: list[Endpoint], grad_halves: int = 1, param_halves: int = 1) -> float:
        # a link is a function of its endpoint pair: each distinct pair once, in first-occurrence order (so a
        # missing pair, or a fit refused at the chunk size, raises for the same first pair); max() of times
        # does not depend on which of equal links comes first
        n = len(members)
        pairs = [(members[i], members[(i + 1) % n]) for i in range(n)]
        links = [ctx.network.link(a, b, concurrent=conc) for a, b in _distinct_pairs(pairs)]
        return max(ring(n, link, grad_halves, param_halves) for link in links)

    flat_t = slowest(ends)
    zone_list = sorted(zones)
    flat_bytes = _ring_cross_bytes(zone_list, d, moved_bytes)
    if len(zones) == 1 or rule == "flat":
        return SyncCost(flat_t, flat_bytes if len(zones) > 1 else {}, "flat")
    inner = 0.0
    for z in zone_list:
        members = zones[z]
        if len(members) > 1:
            # reduce to the leader (reduce-scatter + gather) and broadcast back: ~ 3 ring halves
            # (distributed optimizer: the broadcast carries the updated parameters)
            t = F.zone_reduce_broadcast_s(slowest(members)) if not dist else \
                slowest(members, grad_halves=2, param_halves=1)
            inner = max(inner, t)
    cross = slowest([zones[z][0] for z in zone_list])
    hier_t = inner + cross
    hier_bytes = _ring_cross_bytes(zone_list, len(zone_list), moved_bytes)
    if rule == "auto" and flat_t < hier_t:
        return SyncCost(flat_t, flat_bytes, "flat")
    return SyncCost(hier_t, hier_bytes, "hierarchical")


def _distinct_pairs(pairs: list[tuple[Endpoint, Endpoint]]) -> list[tuple[Endpoint, Endpoint]]:
    """The distinct endpoint pairs of ``pairs`` in first-occurrence order: first by object identity (cheap; a
    ring of many replicas repeats the same endpoint objects), then by value."""
    by_id: dict[tuple[int, int], tuple[Endpoint, Endpoint]] = {}
    for a, b in pairs:
        by_id.setdefault((id(a), id(b)), (a, b))
    return list(dict.fromkeys(by_id.values()))


def _halves_s(n: int, grad_bytes: float, param_bytes: float, link: Link, grad_halves: int,
              param_halves: int, scale: float) -> float:
    """Ring phases of the distributed optimizer: ``grad_halves`` passes (n - 1 steps) of gradient chunks
    (reduce-scatter, gather) and ``param_halves`` of parameter chunks (all-gather, broadcast), times the
    backend's ``scale`` (:func:`F.ring_halves_s`)."""
    if n <= 1 or grad_bytes <= 0:
        return 0.0
    return F.ring_halves_s(n, grad_halves, link.checked_time_s(grad_bytes / n), param_halves,
                           link.checked_time_s(param_bytes / n), scale)


def _ring_cross_bytes(zone_list: list[str], n: int, grad_bytes: float) -> dict[tuple[str, str], float]:
    """Bytes on each cross-zone edge of a ring ordered by zone: 2 (n-1)/n of the gradient, per edge."""
    if len(zone_list) < 2:
        return {}
    per_edge = float(F.ring_edge_bytes(n, grad_bytes))
    z = len(zone_list)
    return {(zone_list[i], zone_list[(i + 1) % z]): per_edge for i in range(z)}


def sync_seconds(plan: Plan, ctx: SimContext, syncs: list[SyncCost], costs: list[list[ReplicaCosts]]) -> float:
    """Time the gradient sync adds after the last backward of the slowest pipeline."""
    if ctx.settings.dp_sync_waits_for_all:
        return max((sc.time_s for sc in syncs), default=0.0)
    # stage s finishes its last backward before stages < s do: it overlaps with their remaining backward
    extra = 0.0
    for s, sc in enumerate(syncs):
        slack = sum(max(c.bwd_s for c in costs[t]) for t in range(s))
        extra = max(extra, sc.time_s - slack)
    return max(0.0, extra)
