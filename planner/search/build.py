"""Turn a search :class:`~planner.search.space.Candidate` into a :class:`~planner.plan.Plan`.

Pipelines are laid out pool by pool in (zone, GPU type) order; replica j of every stage belongs to pipeline
j, so every stage has the same replica list. A chain candidate (``cand.chain``) has D identical pipelines
whose stage s runs on ``cand.chain[s]`` (type, zone, TP): pipelines that change type and zone. Micro-batch counts are written per pipeline unless they are all
equal.
"""
from __future__ import annotations

from planner.plan import Plan, Replica, Stage
from planner.search.space import Candidate


def build_plan(cand: Candidate, num_layers: int, gbs: int, model_name: str | None, precision: str | None = None,
               optimizer: str | None = None, tie_embeddings: bool | None = None) -> Plan:
    """The plan of ``cand``; precision, optimizer and tied embeddings come from the candidate (the search
    space it was scored in). Passing a different value is a caller bug and raises ValueError."""
    for name, given in (("precision", precision), ("optimizer", optimizer), ("tie_embeddings", tie_embeddings)):
        if given is not None and given != getattr(cand, name):
            raise ValueError(f"build_plan: {name} {given!r} differs from the {getattr(cand, name)!r} the "
                             "candidate was scored with")
    replicas = tuple(Replica(gpu_type=p.gpu_type, tp=p.tp, zone=p.zone)
                     for p in cand.pools for _ in range(p.pipelines))
    stages, first = [], 0
    for s, n in enumerate(cand.layers_per_stage):
        if cand.chain:      # chain plan: every pipeline runs stage s on the same (type, zone, tp)
            g, z, tp = cand.chain[s]
            replicas = (Replica(gpu_type=g, tp=tp, zone=z),) * cand.num_pipelines
        stages.append(Stage(first_layer=first, num_layers=n, replicas=replicas))
        first += n
    counts = cand.microbatches
    uniform = len(set(counts)) == 1 and counts[0] * len(counts) * cand.mbs == gbs
    return Plan(num_layers=num_layers, stages=tuple(stages), micro_batch_size=cand.mbs, global_batch_size=gbs,
                precision=cand.precision, optimizer=cand.optimizer, recompute_activations=cand.recompute,
                tie_embeddings=cand.tie_embeddings, distributed_optimizer=cand.distributed_optimizer,
                microbatches_per_pipeline=None if uniform else tuple(counts), model=model_name)
