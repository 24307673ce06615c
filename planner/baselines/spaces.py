"""Baselines as restricted search spaces (so they are scored by exactly the planner's cost model).

- ``grid``: the best homogeneous Megatron-style 3D grid users hand-tune today: one GPU type in one zone,
  pipeline depth S dividing the layer count with equal stages, one TP degree, D identical pipelines with
  D dividing the micro-batch count (every pipeline runs N / D micro-batches), any profiled micro-batch size.
- ``sailor``: the plan shape Sailor's planner produces (arXiv 2504.17096 and its public artifact): micro-batch
  size 1, the L + 2 layer ids (embedding, L transformer layers, head) split evenly over the stages, per GPU
  type the smallest TP whose stages fit memory, the same D on every stage and ceil(N / D) = N / D micro-batches
  per pipeline; we give it the best GPU choice (types, zones, D, S) our simulator can find in that shape,
  i.e. an upper bound on how well Sailor's plans score under our model. Pipelines stay homogeneous in
  (type, zone) as in our space, whereas Sailor may mix types across the stages of one pipeline.
- ``sailor-space``: Sailor's declared plan space as issue 13 defines it (the L layers split evenly with the
  extra layers on the last stages, the same replica count on every stage, one micro-batch size, free
  micro-batch counts per pipeline) *intersected with* our space: pipelines that keep one GPU type, TP and
  zone from the first stage to the last, and chain plans (identical pipelines changing type, TP and zone
  along their stages, up to 3 runs; Sailor's stated plans are such chains). Sailor's space also mixes
  pipelines of different chains in one stage, so this optimum is a lower bound on the optimum of Sailor's
  space (not the exact bound the issue asks for); it is exact over what it declares.
"""
from __future__ import annotations

from planner.errors import InputError
from planner.search.space import SearchSpace

# the baselines never recompute nor use the distributed optimizer (Sailor's space as issue 13 defines it has
# neither; a Megatron grid as users hand-tune it here neither)
GRID_SPACE = SearchSpace(split="even", uniform_microbatches=True, max_gpu_types=1, single_zone=True,
                         recompute=(False,), distributed_optimizer=(False,), chain_segments=1)
SAILOR_SHAPE_SPACE = SearchSpace(mbs_options=(1,), split="even_ids", tp_rule="min_fit", uniform_microbatches=True,
                                 recompute=(False,), distributed_optimizer=(False,), chain_segments=1)
SAILOR_SPACE_HOMOGENEOUS = SearchSpace(split="even_last", recompute=(False,), distributed_optimizer=(False,))
PLANNERS = {"ours": SearchSpace(), "grid": GRID_SPACE, "sailor": SAILOR_SHAPE_SPACE,
            "sailor-space": SAILOR_SPACE_HOMOGENEOUS}


def baseline_space(name: str, precision: str = "fp32", max_stages: int | None = None,
                   recompute: bool = True, chain_segments: int | None = None,
                   distributed_optimizer: bool = True, mixed_plans: bool = False,
                   chain_splits: str = "even", two_tp: bool = False) -> SearchSpace:
    """The named space; ``recompute=False`` keeps activation recomputation out of it,
    ``distributed_optimizer=False`` the distributed optimizer; ``chain_segments`` replaces the chain-plan
    limit of the spaces that hold chain plans (ours, sailor-space); ``mixed_plans`` adds the local search for
    mixed plans (docs/PLANNER.md 8) to ``ours`` (the other spaces never hold them); ``chain_splits`` sets the
    chain plans' layer splits of ``ours`` (sailor-space keeps Sailor's even split); ``two_tp`` lets ``ours`` give a
    GPU type up to two TP degrees in pool plans (``SearchSpace.two_tp`` = 2, searched exactly: docs/PLANNER.md 10.7)."""
    from dataclasses import replace
    if name not in PLANNERS:
        raise InputError(f"--planner must be one of {sorted(PLANNERS)}, got {name!r}")
    space = replace(PLANNERS[name], precision=precision, max_stages=max_stages)
    if chain_segments is not None and space.chain_segments > 1:
        space = replace(space, chain_segments=chain_segments)
    if not distributed_optimizer:
        space = replace(space, distributed_optimizer=(False,))
    if mixed_plans and name == "ours":
        space = replace(space, mixed_plans=True)
    if two_tp and name == "ours":
        space = replace(space, two_tp=2)
    if chain_splits != space.chain_splits and name == "ours":    # Sailor's space keeps Sailor's even split
        space = replace(space, chain_splits=chain_splits)
    return space if recompute else replace(space, recompute=(False,))
