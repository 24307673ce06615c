"""Shared pieces of the floor tests that compare ``plan_search`` with a floor on and off (one builder of the
random pool strings and one comparison, used by their test files)."""
from __future__ import annotations

import random

from planner.cluster import parse_gpus
from planner.search import Objective, SearchSpace, plan_search

TYPES = ("A100-40", "V100-16", "GH-96")


def random_pools(rng: random.Random, zones: tuple[str, ...], min_pools: int, max_pools: int) -> str:
    """A ``--gpus`` string of ``min_pools``-``max_pools`` distinct (type, zone) pools, 1-3 GPUs each."""
    pools = rng.sample([(g, z) for g in TYPES for z in zones], rng.randint(min_pools, max_pools))
    return ",".join(f"{g}@{z}={rng.randint(1, 3)}" for g, z in pools)


def assert_same_top3(ctx, gpus: str, objective: Objective, monkeypatch, switches: list[tuple[object, str]]) -> None:
    """``plan_search`` (3 stages, micro-batch 1-2, TP 1-2, the distributed optimizer and 2-segment chains, GBS 16)
    returns the same top 3 plans with every ``(module, flag)`` of ``switches`` on and set to False."""
    cluster = parse_gpus(gpus, ctx.catalog)
    space = SearchSpace(max_stages=3, mbs_options=(1, 2), tp_options=(1, 2), recompute=(False,),
                        distributed_optimizer=(False, True), tie_embeddings=True, chain_segments=2)
    on = plan_search(ctx, cluster, 16, objective, space, top_k=3)
    for module, flag in switches:
        monkeypatch.setattr(module, flag, False)
    off = plan_search(ctx, cluster, 16, objective, space, top_k=3)
    assert on.candidates and [(c.key, c.chain, c.pools, c.microbatches) for c in on.candidates] == \
        [(c.key, c.chain, c.pools, c.microbatches) for c in off.candidates]
