"""Random small A100/V100 clusters for the chain-plan bound tests (one builder, shared by their test files)."""
from __future__ import annotations

import random

from planner.cluster import ClusterSpec, parse_gpus
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import NetworkModel
from planner.profiles import ProfileStore
from planner.search import Objective
from planner.simulator.settings import OURS, SimContext

GIB = 1024 ** 3
A, V = "A100-40", "V100-16"


def random_chain_case(model: ModelSpec, seed: int, max_pool_gpus: int, batches: tuple[int, ...]
                      ) -> tuple[SimContext, ClusterSpec, int, Objective]:
    """(context, cluster, global batch, objective) drawn from ``random.Random(seed)``: GPU memories from small to
    full size, 2-4 (type, zone) pools of 1..``max_pool_gpus`` GPUs over 1-3 zones, a batch from ``batches`` and
    one of the three objectives."""
    rng = random.Random(seed)
    catalog = GPUCatalog().with_entries({V: {"memory_bytes": int(rng.choice([1.5, 2.5, 4.0, 16.0]) * GIB)},
                                         A: {"memory_bytes": int(rng.choice([2.0, 3.0, 5.0, 40.0]) * GIB)}})
    zones = rng.sample(["us-a", "us-b", "eu-b"], rng.randint(1, 3))
    pools = {}
    for _ in range(rng.randint(2, 4)):
        pools[(rng.choice([A, V]), rng.choice(zones))] = rng.randint(1, max_pool_gpus)
    gpus = ",".join(f"{g}@{z}={n}" for (g, z), n in pools.items())
    objective = rng.choice([Objective("throughput"), Objective("cost"), Objective("value")])
    ctx = SimContext(model, ProfileStore(model, catalog), NetworkModel(catalog), catalog, OURS)
    return ctx, parse_gpus(gpus, catalog), rng.choice(list(batches)), objective
