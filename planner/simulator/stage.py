"""Per (stage, replica) quantities: compute seconds, parameters held, activation bytes per micro-batch."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from planner.plan import Plan, Replica
from planner.profiles import LayerCosts
from planner.simulator import formulas as F
from planner.simulator.settings import SimContext
from planner.simulator.activations import (ActivationTerms, megatron_core_terms, recompute_peak_excess_bytes,
                                           stage_layers_bytes)
from planner.simulator.tied import head_params_for_plan


@dataclass(frozen=True)
class ReplicaCosts:
    """What one GPU of replica ``replica`` of stage ``stage`` does per micro-batch and holds."""

    stage: int
    replica: int
    gpu_type: str
    tp: int
    zone: str
    fwd_s: float
    bwd_s: float
    params: int                   # parameters held by one GPU (its TP shard)
    act_bytes_per_mb: float       # activations kept for backward per in-flight micro-batch
    max_layer_act_bytes: float    # largest single-layer activation (transient working set)
    update_s: float               # optimizer step of this GPU
    estimated: bool
    act_peak_extra_bytes: float = 0.0   # a forward's short-lived peak above what it keeps (full recompute)


# Pure functions of hashable inputs, evaluated once per distinct input (the search's brute-force tests simulate
# tens of thousands of plans built from a few dozen distinct (stage, GPU type, TP) pieces); each returns what
# the uncached function returns (tests/planner/test_simulate_speed_s17s.py).
_core_terms = lru_cache(maxsize=1024)(megatron_core_terms)


@lru_cache(maxsize=4096)
def _offset_sum_s(layer_s: tuple[float, ...], lo: int, hi: int, offset_s: float) -> float:
    """Seconds of layers ``[lo, hi)`` after :func:`F.offset_adjusted`, summed one after another."""
    return sum(F.offset_adjusted(layer_s[lo:hi], offset_s).tolist())


@lru_cache(maxsize=4096)
def _peak_excess_bytes(num_layers: int, recompute: tuple[str | None, str | None, int | None], live: float,
                       keep: float, mask: float, layer: float, after: float) -> float:
    return float(recompute_peak_excess_bytes(num_layers, recompute, live, keep, mask, layer, after))


def activation_terms(ctx: SimContext, mbs: int, tp: int, elem: int) -> ActivationTerms | None:
    """megatron-core's saved tensors under the ``megatron-core`` activation model, else None (Korthikanti)."""
    st = ctx.settings
    if st.activation_model != "megatron-core":
        return None
    return _core_terms(ctx.model, mbs, tp, elem, st.hidden_dropout > 0, st.attention_dropout > 0)


def layer_sizes(ctx: SimContext, costs: LayerCosts, tp: int, elem: int) -> tuple[int, int, int, float, float, float]:
    """(layer, embedding, head parameters; layer, embedding, head activation bytes per micro-batch) of one GPU:
    profiled where the profile has them, else from the model (:func:`activation_terms` or Korthikanti)."""
    m = ctx.model
    lp = costs.layer_params if costs.layer_params is not None else sum(m.layer_params(tp))
    ep = costs.embedding_params if costs.embedding_params is not None else sum(m.embedding_params(tp))
    hp = costs.head_params if costs.head_params is not None else sum(m.head_params(tp))
    mbs = costs.mbs
    terms = activation_terms(ctx, mbs, tp, elem)
    la = costs.layer_act_bytes if costs.layer_act_bytes is not None else \
        (terms.layer if terms else m.layer_activation_bytes(mbs, tp, elem))
    ea = costs.embedding_act_bytes if costs.embedding_act_bytes is not None else \
        (terms.embedding if terms else m.embedding_activation_bytes(mbs, elem))
    ha = costs.head_act_bytes if costs.head_act_bytes is not None else \
        (terms.head if terms else m.head_activation_bytes(mbs, tp, elem))
    return lp, ep, hp, la, ea, ha


def recompute_keep_and_mask(ctx: SimContext, costs: LayerCosts, mbs: int, tp: int, elem: int
                            ) -> tuple[float, float]:
    """(bytes one full-recompute group keeps, bytes of the causal mask a stage with layers keeps) per
    micro-batch: megatron-core's under its activation model when the profile has no measured activations,
    else (the boundary activation, 0)."""
    terms = activation_terms(ctx, mbs, tp, elem)
    if terms is None or costs.layer_act_bytes is not None:
        return ctx.model.boundary_activation_bytes(mbs, elem), 0.0
    return terms.group_input, terms.mask


def recompute_live_bytes(ctx: SimContext, mbs: int, tp: int, elem: int) -> float:
    """Bytes a recomputed layer's forward saves that live until its group's forward returns (megatron-core's
    activation model: :attr:`ActivationTerms.recompute_live`; 0 under the other models)."""
    terms = activation_terms(ctx, mbs, tp, elem)
    return terms.recompute_live if terms is not None else 0.0


def _offset_sum(layer_s, lo: int, hi: int, offset_s: float) -> float:
    if type(layer_s) is tuple:
        return _offset_sum_s(layer_s, lo, hi, offset_s)
    return sum(F.offset_adjusted(layer_s[lo:hi], offset_s).tolist())


def _for_replica(c: ReplicaCosts, j: int) -> ReplicaCosts:
    """``dataclasses.replace(c, replica=j)`` without its per-call field walk (the class has no __post_init__)."""
    out = object.__new__(ReplicaCosts)
    out.__dict__.update(c.__dict__)
    out.__dict__["replica"] = j
    return out


MEMO_MAX = 1 << 16      # entries of SimContext.memo before it starts afresh


def replica_costs(plan: Plan, ctx: SimContext, s: int, j: int, rep: Replica) -> ReplicaCosts:
    """What one GPU of replica j of stage s does and holds per micro-batch.

    Kept in ``ctx.memo`` under everything it reads, by value: the plan's fields below, the stage's layers and
    position (first, last), the replica's TP, the profile entry (:class:`LayerCosts`), the model and the runtime
    settings; so a plan sharing a stage with an earlier one reuses its figures, and a context whose settings,
    model or profiles are replaced computes new ones."""
    stage = plan.stages[s]
    costs = ctx.profiles.get(rep.gpu_type, plan.micro_batch_size, rep.tp)
    key = ("replica_costs", plan.micro_batch_size, plan.precision, plan.recompute_activations,
           plan.recompute_granularity, plan.recompute, plan.dp_degree, plan.distributed_optimizer,
           plan.tie_embeddings, plan.num_stages, s == 0, s == plan.num_stages - 1, stage.first_layer,
           stage.num_layers, rep.tp, costs, ctx.model, ctx.settings)
    memo = ctx.memo
    fields = memo.get(key)
    if fields is None:
        if len(memo) >= MEMO_MAX:
            memo.clear()
        fields = memo[key] = _replica_fields(plan, ctx, s, rep, costs)
    return ReplicaCosts(s, j, rep.gpu_type, rep.tp, rep.zone, *fields)


def _replica_fields(plan: Plan, ctx: SimContext, s: int, rep: Replica, costs: LayerCosts) -> tuple:
    """:class:`ReplicaCosts`' fields from ``fwd_s`` on (:func:`replica_costs`)."""
    stage = plan.stages[s]
    last = plan.num_stages - 1
    lo, hi = stage.first_layer, stage.layer_end
    off = ctx.settings.profile_offset_s
    fwd = _offset_sum(costs.layer_fwd_s, lo, hi, off)
    bwd = _offset_sum(costs.layer_bwd_s, lo, hi, off)
    lp, ep, hp, la, ea, ha = layer_sizes(ctx, costs, rep.tp, plan.bytes_per_element)
    params = lp * stage.num_layers
    keep, mask = recompute_keep_and_mask(ctx, costs, plan.micro_batch_size, rep.tp,
                                         plan.bytes_per_element)
    # full-layer recompute keeps only each layer's input; one layer's activations live while recomputed
    if plan.recompute_granularity is None:
        act = float(F.layer_activation_bytes(stage.num_layers, la, keep, plan.recompute_activations))
        bwd = float(F.recompute_bwd_s(fwd, bwd, plan.recompute_activations))
    else:   # megatron-core's explicit recompute fields: uniform / block groups, selective (activations.py)
        terms = activation_terms(ctx, plan.micro_batch_size, rep.tp, plan.bytes_per_element)
        from_terms = terms is not None and costs.layer_act_bytes is None
        scores = terms.scores if from_terms else None
        act, recomputed = stage_layers_bytes(plan, ctx.model, la, stage.num_layers, rep.tp, scores, keep,
                                             terms.selective_keep if from_terms else 0.0)
        bwd += recomputed * fwd
    extra = _peak_excess_bytes(
        stage.num_layers, plan.recompute, recompute_live_bytes(ctx, plan.micro_batch_size, rep.tp,
                                                               plan.bytes_per_element),
        keep, mask, la, ha if s == last else 0.0)
    act += float(F.stage_mask_bytes(stage.num_layers, mask))
    biggest = la if stage.num_layers else 0.0
    if s == 0:
        fwd += costs.embedding_fwd_s
        bwd += costs.embedding_bwd_s
        params += ep
        act += ea
    if s == last:
        fwd += costs.head_fwd_s
        bwd += costs.head_bwd_s
        params += head_params_for_plan(plan, ctx.model, rep.tp, costs.head_params)
        act += ha
        biggest = max(biggest, ha)
    scale = ctx.settings.compute_scale
    update_s = F.update_s(costs.update_s_per_param, params, plan.dp_degree, plan.distributed_optimizer) * \
        ctx.settings.update_scale
    return (fwd * scale, bwd * scale, int(params), act, biggest, update_s, costs.estimated, extra)


def all_replica_costs(plan: Plan, ctx: SimContext) -> list[list[ReplicaCosts]]:
    """``[stage][replica]`` costs. :func:`replica_costs` depends on the replica only through its GPU type, TP and
    zone, so equal replicas of a stage share one computation (only the ``replica`` index differs)."""
    out: list[list[ReplicaCosts]] = []
    for s, st in enumerate(plan.stages):
        seen: dict[Replica, ReplicaCosts] = {}
        row = []
        for j, rep in enumerate(st.replicas):
            first = seen.get(rep)
            if first is None:
                first = seen[rep] = replica_costs(plan, ctx, s, j, rep)
            row.append(first if first.replica == j else _for_replica(first, j))
        out.append(row)
    return out
