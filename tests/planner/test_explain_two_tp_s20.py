"""The unused-GPU lines of a plan whose pool runs pipelines at two TP degrees (``SearchSpace.two_tp``): a leftover
is "too few for one more pipeline" only against the pool's smallest TP (docs/PLANNER.md 10.7)."""
from __future__ import annotations

from planner.cluster import parse_gpus
from planner.hardware import GPUCatalog
from planner.search import Objective
from planner.search.explain import unused_reasons
from planner.search.space import Candidate, PoolUse


def _cand(pools: tuple[PoolUse, ...], num_stages: int = 2) -> Candidate:
    n = sum(p.pipelines for p in pools)
    gpus = sum(p.pipelines * p.tp * num_stages for p in pools)
    return Candidate(key=1.0, num_stages=num_stages, mbs=1, layers_per_stage=(2, 2), pools=pools,
                     microbatches=(4,) * n, iteration_s=1.0, cost_usd=1.0, gpus=gpus)


TWO_TP = (PoolUse("A100-40", "us-a", 1, 1), PoolUse("A100-40", "us-a", 2, 1))   # S = 2: 2 + 4 GPUs


def test_a_leftover_below_one_smallest_tp_pipeline_is_too_few():
    cluster = parse_gpus("A100-40@us-a=7", GPUCatalog())
    lines = unused_reasons(cluster, _cand(TWO_TP), Objective("throughput"))
    assert lines == ["1 of 7 A100-40@us-a unused: too few for one more pipeline of S x TP = 2 x 1 GPUs"]


def test_a_leftover_that_holds_a_smallest_tp_pipeline_is_the_objectives_choice():
    cluster = parse_gpus("A100-40@us-a=9", GPUCatalog())
    lines = unused_reasons(cluster, _cand(TWO_TP), Objective("throughput"))
    assert len(lines) == 1 and lines[0].startswith("3 of 9 A100-40@us-a unused: more replicas would slow")
    # the same pool order reversed gives the same line (the smallest TP, not the last pool read)
    assert unused_reasons(cluster, _cand(TWO_TP[::-1]), Objective("throughput")) == lines
