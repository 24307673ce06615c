"""Turn a search :class:`~planner.search.space.Candidate` into a :class:`~planner.plan.Plan`.

Pipelines are laid out pool by pool in (zone, GPU type) order; replica j of every stage belongs to pipeline
j, so every stage has the same replica list. A chain candidate (``cand.chain``) has D identical pipelines
whose stage s runs on ``cand.chain[s]`` (type, zone, TP): pipelines that change type and zone. A mixed candidate
(``cand.mix``, docs/PLANNER.md 8) runs its pipelines on several chains. Micro-batch counts are written per pipeline
unless they are all equal.
"""
from __future__ import annotations

from typing import Protocol

from planner.plan import Plan, Replica, Stage
from planner.search.space import Candidate


class PlanFlags(Protocol):
    """What a plan takes from the space it was scored in, besides its pipelines and split."""

    mbs: int
    precision: str
    optimizer: str
    recompute: bool
    tie_embeddings: bool
    distributed_optimizer: bool


def build_plan(cand: Candidate, num_layers: int, gbs: int, model_name: str | None, precision: str | None = None,
               optimizer: str | None = None, tie_embeddings: bool | None = None) -> Plan:
    """The plan of ``cand``; precision, optimizer and tied embeddings come from the candidate (the search
    space it was scored in). Passing a different value is a caller bug and raises ValueError."""
    for name, given in (("precision", precision), ("optimizer", optimizer), ("tie_embeddings", tie_embeddings)):
        if given is not None and given != getattr(cand, name):
            raise ValueError(f"build_plan: {name} {given!r} differs from the {getattr(cand, name)!r} the "
                             "candidate was scored with")
    return layout_plan(tuple(cand.layers_per_stage), cand.pipeline_chains(), tuple(cand.microbatches), cand,
                       num_layers, gbs, model_name)


def layout_plan(split: tuple[int, ...], pipes: list[tuple[tuple[str, str, int], ...]], counts: tuple[int, ...],
                flags: PlanFlags, num_layers: int, gbs: int, model_name: str | None) -> Plan:
    """The plan running pipeline j on ``pipes[j]`` (one (type, zone, TP) per stage) with ``counts[j]``
    micro-batches, on the layer split ``split``; micro-batch size, precision, optimizer, recomputation, tied
    embeddings and the distributed optimizer from ``flags``. Counts are written per pipeline unless equal."""
    stages, first = [], 0
    for s, n in enumerate(split):
        reps = tuple(Replica(gpu_type=c[s][0], tp=c[s][2], zone=c[s][1]) for c in pipes)
        stages.append(Stage(first_layer=first, num_layers=n, replicas=reps))
        first += n
    uniform = len(set(counts)) == 1 and counts[0] * len(counts) * flags.mbs == gbs
    return Plan(num_layers=num_layers, stages=tuple(stages), micro_batch_size=flags.mbs, global_batch_size=gbs,
                precision=flags.precision, optimizer=flags.optimizer, recompute_activations=flags.recompute,
                tie_embeddings=flags.tie_embeddings, distributed_optimizer=flags.distributed_optimizer,
                microbatches_per_pipeline=None if uniform else tuple(counts), model=model_name)
