"""Turn a search :class:`~planner.search.space.Candidate` into a :class:`~planner.plan.Plan`.

Pipelines are laid out pool by pool in (zone, GPU type) order; replica j of every stage belongs to pipeline
j, so every stage has the same replica list. Micro-batch counts are written per pipeline unless they are all
equal.
"""
from __future__ import annotations

from planner.plan import Plan, Replica, Stage
from planner.search.space import Candidate


def build_plan(cand: Candidate, num_layers: int, gbs: int, model_name: str | None, precision: str = "fp32",
               optimizer: str = "adamw", tie_embeddings: bool = False) -> Plan:
    replicas = tuple(Replica(gpu_type=p.gpu_type, tp=p.tp, zone=p.zone)
                     for p in cand.pools for _ in range(p.pipelines))
    stages, first = [], 0
    for n in cand.layers_per_stage:
        stages.append(Stage(first_layer=first, num_layers=n, replicas=replicas))
        first += n
    counts = cand.microbatches
    uniform = len(set(counts)) == 1 and counts[0] * len(counts) * cand.mbs == gbs
    return Plan(num_layers=num_layers, stages=tuple(stages), micro_batch_size=cand.mbs, global_batch_size=gbs,
                precision=precision, optimizer=optimizer, tie_embeddings=tie_embeddings,
                microbatches_per_pipeline=None if uniform else tuple(counts), model=model_name)
