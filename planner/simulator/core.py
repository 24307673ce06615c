"""``simulate(plan, ctx)``: the one cost model used by the planner's search and by every report."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from planner.errors import InputError
from planner.plan import Plan
from planner.simulator import formulas as F
from planner.simulator.checks import check_plan_inputs
from planner.simulator.memory import MemoryBreakdown, replica_memory, usable_bytes
from planner.simulator.settings import SimContext
from planner.simulator.stage import ReplicaCosts, all_replica_costs
from planner.simulator.tied import tied_sync_seconds
from planner.simulator.time import (SyncCost, p2p_seconds, pipeline_seconds, sends_to_every_tp_rank, stage_busy_s,
                                    stage_sync, sync_seconds)


@dataclass(frozen=True)
class StageEstimate:
    """One pipeline stage of an :class:`Estimate`."""

    stage: int
    first_layer: int
    num_layers: int
    replicas: int
    gpu_types: tuple[str, ...]
    tp_degrees: tuple[int, ...]
    zones: tuple[str, ...]
    compute_s: float            # slowest replica's fwd+bwd per micro-batch
    busy_s: float               # slowest replica's steady-state seconds per micro-batch (with blocking p2p)
    p2p_s: float                # one transfer to the next stage (slowest pipeline); 0 on the last stage
    sync_s: float
    sync_mode: str
    update_s: float
    peak_memory_bytes: float    # max over this stage's GPUs
    memory_capacity_bytes: float  # the smallest GPU of the stage
    fits_in_memory: bool
    estimated_profile: bool
    peak_flops_per_s: float = 0.0   # summed peak FLOP/s of the stage's GPUs (at the plan's precision)
    mfu: float = 0.0                # the stage's model FLOP/s over peak_flops_per_s
    replica_peak_bytes: tuple[float, ...] = ()       # per replica (same order as gpu_types)
    replica_capacity_bytes: tuple[float, ...] = ()   # usable bytes of that replica's GPU type


@dataclass(frozen=True)
class Estimate:
    """What :func:`simulate` predicts for a plan: time, throughput, memory, cost, per stage."""

    iteration_time_s: float
    throughput_iters_per_s: float
    tokens_per_s: float
    samples_per_s: float
    peak_memory_bytes: float
    fits_in_memory: bool
    cost_per_iteration_usd: float
    gpu_usd_per_iteration: float
    egress_usd_per_iteration: float
    cross_zone_bytes_per_iteration: float
    pipeline_s: tuple[float, ...]
    sync_s: float
    update_s: float
    bottleneck_stage: int
    num_gpus: int
    estimated_profiles: bool
    runtime: str
    stages: tuple[StageEstimate, ...]
    model_flops_per_s: float = 0.0  # achieved model FLOP/s (3 x forward FLOPs per sample, no recompute)
    peak_flops_per_s: float = 0.0   # summed peak FLOP/s of every GPU used (at the plan's precision)
    mfu: float = 0.0                # heterogeneous MFU: model_flops_per_s / peak_flops_per_s
    runtime_constants_file: str = ""   # where the preset's measured constants came from ("" = code defaults)

    def to_dict(self) -> dict:
        return asdict(self)


def _egress(plan: Plan, ctx: SimContext, syncs) -> tuple[float, float]:
    """(cross-zone bytes, egress USD) per iteration: p2p across zones + gradient sync across zones."""
    nbytes = ctx.model.boundary_activation_bytes(plan.micro_batch_size, plan.bytes_per_element)
    all_tp = sends_to_every_tp_rank(plan, ctx)
    total_b, usd = 0.0, 0.0
    for j, m in enumerate(plan.microbatch_counts):
        reps = plan.pipeline(j)
        for b in range(len(reps) - 1):
            a, c = reps[b], reps[b + 1]
            if a.zone != c.zone:
                # forward: one copy per receiving TP rank (a -> c); backward: one per TP rank of a (c -> a)
                fwd, bwd = (m * nbytes * c.tp, m * nbytes * a.tp) if all_tp else (m * nbytes, m * nbytes)
                total_b += fwd + bwd
                usd += fwd * ctx.network.egress_usd_per_byte(a.zone, c.zone) \
                    + bwd * ctx.network.egress_usd_per_byte(c.zone, a.zone)
    for sc in syncs:
        for (za, zb), moved in sc.cross_zone_bytes.items():
            total_b += moved
            usd += moved * ctx.network.egress_usd_per_byte(za, zb)
    return total_b, usd


def _pipelines(plan: Plan, ctx: SimContext, costs: list[list[ReplicaCosts]]
               ) -> tuple[list[list[float]], list[list[float]], tuple[float, ...]]:
    """Per pipeline j: p2p seconds per boundary, busy seconds per stage, 1F1B seconds. Computed once per distinct
    (replica and its node size per stage): pipelines equal in these have equal costs (:func:`all_replica_costs`),
    transfers and busy times; the seconds once more per distinct micro-batch count."""
    S = plan.num_stages
    p2p, busy, pipes = [], [], []
    first: dict[tuple, int] = {}
    crossings: dict = {}
    for j, m in enumerate(plan.microbatch_counts):
        key = tuple((st.replicas[j], ctx.replica_node_size(s, j, st.replicas[j].gpu_type))
                    for s, st in enumerate(plan.stages))
        k = first.setdefault(key, j)
        row = [costs[s][j] for s in range(S)]
        if k == j:
            p2p.append(p2p_seconds(plan, ctx, j, crossings))
            busy.append(stage_busy_s(row, p2p[j], ctx))
        else:
            p2p.append(p2p[k])
            busy.append(busy[k])
        same = k != j and plan.microbatch_counts[k] == m
        pipes.append(pipes[k] if same else pipeline_seconds(row, p2p[j], m, ctx))
    return p2p, busy, tuple(pipes)


def _stage_estimate(plan: Plan, s: int, costs: list[ReplicaCosts], mems: list[MemoryBreakdown],
                    ctx: SimContext, busy: list[float], p2p: float, sync, util: tuple[float, float]
                    ) -> StageEstimate:
    """Stage s's estimate; ``util``: its (peak FLOP/s, MFU) from :func:`_utilisation`."""
    st = plan.stages[s]
    totals = [m.total_bytes for m in mems]
    usable = {g: usable_bytes(ctx, g) for g in dict.fromkeys(c.gpu_type for c in costs)}
    capacity = tuple(usable[c.gpu_type] for c in costs)
    return StageEstimate(
        stage=s, first_layer=st.first_layer, num_layers=st.num_layers, replicas=len(st.replicas),
        gpu_types=tuple(r.gpu_type for r in st.replicas), tp_degrees=tuple(r.tp for r in st.replicas),
        zones=tuple(r.zone for r in st.replicas), compute_s=max(c.fwd_s + c.bwd_s for c in costs),
        busy_s=max(busy), p2p_s=p2p, sync_s=sync.time_s, sync_mode=sync.mode,
        update_s=max(c.update_s for c in costs), peak_memory_bytes=max(totals),
        memory_capacity_bytes=min(capacity), fits_in_memory=all(t <= u for t, u in zip(totals, capacity)),
        estimated_profile=any(c.estimated for c in costs), peak_flops_per_s=util[0], mfu=util[1],
        replica_peak_bytes=tuple(totals), replica_capacity_bytes=capacity)


def _utilisation(plan: Plan, ctx: SimContext, iteration_s: float
                 ) -> tuple[list[tuple[float, float]], float, float]:
    """Per stage (peak FLOP/s, MFU); model FLOP/s and peak FLOP/s of the whole plan."""
    m = ctx.model
    out, flops, peak = [], 0.0, 0.0
    for s, st in enumerate(plan.stages):
        work = float(F.model_flops_per_sample(st.num_layers, m.layer_fwd_flops(1), m.head_fwd_flops(1),
                                              s == plan.num_stages - 1)) * plan.global_batch_size
        top = sum(ctx.catalog.get(r.gpu_type).flops_for(plan.precision) * r.tp for r in st.replicas)
        out.append((top, float(F.mfu(work, iteration_s, top))))
        flops, peak = flops + work, peak + top
    return out, flops / iteration_s, peak


def _memories(plan: Plan, ctx: SimContext, s: int, row: list[ReplicaCosts]) -> list[MemoryBreakdown]:
    """:func:`replica_memory` of each replica of stage s, once per distinct (replica, micro-batches in flight):
    equal replicas of a stage have equal costs (:func:`all_replica_costs`), and the memory depends on the
    replica's index only through its pipeline's micro-batch count."""
    reps, counts, seen, out = plan.stages[s].replicas, plan.microbatch_counts, {}, []
    for j, c in enumerate(row):
        key = (reps[j], counts[j])
        mem = seen.get(key)
        if mem is None:
            mem = seen[key] = replica_memory(plan, ctx, c)
        out.append(mem)
    return out


def simulate(plan: Plan, ctx: SimContext) -> Estimate:
    """Predict iteration time, per-GPU peak memory and $/iteration of ``plan``."""
    if ctx.settings.constants_error:
        raise InputError(ctx.settings.constants_error)
    check_plan_inputs(plan, ctx)
    costs = all_replica_costs(plan, ctx)
    S, D = plan.num_stages, plan.dp_degree
    p2p, busy, pipes = _pipelines(plan, ctx, costs)
    syncs = [stage_sync(plan, ctx, s, costs[s]) for s in range(S)]
    sync_s = sync_seconds(plan, ctx, syncs, costs)
    tied_s, tied_bytes = tied_sync_seconds(plan, ctx, syncs[0].mode)   # stage 0's mode (one rule)
    sync_s += tied_s                                   # after the stage syncs (runtime order)
    syncs_with_tied = syncs + [SyncCost(tied_s, tied_bytes, "tied-embedding")]
    update_s = max(c.update_s for row in costs for c in row)
    iteration_s = max(pipes) + sync_s + update_s
    mems = [_memories(plan, ctx, s, costs[s]) for s in range(S)]
    util, model_flops_s, peak_flops_s = _utilisation(plan, ctx, iteration_s)
    stages = tuple(_stage_estimate(plan, s, costs[s], mems[s], ctx, [busy[j][s] for j in range(D)],
                                   max((p2p[j][s] for j in range(D)), default=0.0) if s < S - 1 else 0.0,
                                   syncs[s], util[s]) for s in range(S))
    cross_b, egress_usd = _egress(plan, ctx, syncs_with_tied)
    gpu_usd = sum(ctx.catalog.get(rep.gpu_type).usd_per_s * rep.tp for _, _, rep in plan.replicas()) * iteration_s
    bottleneck = max(range(S), key=lambda s: stages[s].busy_s)
    samples = plan.global_batch_size
    return Estimate(
        iteration_time_s=iteration_s, throughput_iters_per_s=1.0 / iteration_s,
        tokens_per_s=samples * ctx.model.seq_length / iteration_s, samples_per_s=samples / iteration_s,
        peak_memory_bytes=max(st.peak_memory_bytes for st in stages),
        fits_in_memory=all(st.fits_in_memory for st in stages),
        cost_per_iteration_usd=gpu_usd + egress_usd, gpu_usd_per_iteration=gpu_usd,
        egress_usd_per_iteration=egress_usd, cross_zone_bytes_per_iteration=cross_b, pipeline_s=pipes,
        sync_s=sync_s, update_s=update_s, bottleneck_stage=bottleneck, num_gpus=plan.world_size,
        estimated_profiles=any(st.estimated_profile for st in stages), runtime=ctx.settings.name, stages=stages,
        model_flops_per_s=model_flops_s, peak_flops_per_s=peak_flops_s, mfu=model_flops_s / peak_flops_s,
        runtime_constants_file=ctx.settings.constants_file)
