"""The task bound over a task's whole range of largest-stage gradients, on networks of fitted pair links.

A task's splits have different largest-stage gradients; the task bound prices the gradient sync once for the
task, at the smallest (``sync_lower_bound(..., grad_bytes=smallest)``). Under the earlier least-bandwidth ring
rule, which links could be a ring's link changed with the message size when a fitted bandwidth curve crossed
another, so the bound had to hold over the whole range; under the slowest-link-by-time rule every term is a
link time at the smallest size (docs/PLANNER.md 2.1, *Task bound*). Here an intra-zone link's fitted bandwidth
falls with the size (a convex fit) and the cross-zone link is constant with a large latency: the plans are
brute-forced (tests/planner/test_planner_bruteforce.py's independent enumeration), scored by ``simulate``, and
every task's bound must be <= its best plan. The first case is a cluster where a bound computed at the
smallest gradient alone (under the old rule) exceeded the best plan of the 2-stage task (0.0507 > 0.0466 s)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from planner.cluster import parse_gpus
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import Link, NetworkModel
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace
from planner.search.netvec import LinkCache
from planner.search.taskbound import task_bound
from planner.search.tasks import Tables
from planner.simulator import simulate
from planner.simulator.settings import OURS, SimContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_planner_bruteforce import _plan, count_splits, structures  # noqa: E402

UNTIED = ModelSpec("bfu", num_layers=4, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=2048,
                   vocab_size=8192, max_position_embeddings=4096, tied_embeddings=False)
GPU = "A100-40"
ZONES = ("us-a", "us-b")


def _ctx(c0: float, vertex_u: float, floor_gb_s: float, cross_latency_s: float) -> SimContext:
    """Intra-zone pair link: GB/s = c0 (u - vertex_u)^2 + floor (falls with the size below the vertex);
    cross-zone: a constant 10 GB/s with a large latency."""
    cat = GPUCatalog()
    npg = cat.get(GPU).gpus_per_node
    intra = Link(100e9, 1e-6, (c0, -2 * c0 * vertex_u, c0 * vertex_u ** 2 + floor_gb_s))
    cross = Link(10e9, cross_latency_s)
    pairs = {(za, GPU, npg, zb, GPU, npg): (intra if za == zb else cross) for za in ZONES for zb in ZONES}
    return SimContext(UNTIED, ProfileStore(UNTIED, cat), NetworkModel(cat, pair_links=pairs), cat, OURS)


CASES = [(20.0, 4.6, 6.0, 0.005, "A100-40@us-a=4,A100-40@us-b=2", 24)]
_rng = random.Random(8)
CASES += [(_rng.uniform(5, 30), _rng.uniform(3, 6), _rng.uniform(2, 10), _rng.choice([1e-3, 5e-3, 2e-2]),
           f"{GPU}@us-a={_rng.choice([2, 3, 4])},{GPU}@us-b={_rng.choice([2, 3, 4])}", _rng.choice([12, 24]))
          for _ in range(5)]


@pytest.mark.parametrize("c0,vertex_u,floor,lat,gpus,gbs", CASES)
def test_task_bound_holds_over_the_tasks_gradient_range(c0, vertex_u, floor, lat, gpus, gbs) -> None:
    ctx = _ctx(c0, vertex_u, floor, lat)
    cluster = parse_gpus(gpus, ctx.catalog)
    space = SearchSpace(max_stages=2, mbs_options=(1,), tp_options=(1,), recompute=(False,),
                        distributed_optimizer=(False,), precision="fp32")
    tables, cache = Tables(ctx, space), LinkCache(ctx)
    best: dict[tuple, float] = {}
    for split, mbs, pools, replicas, rc, do in structures(ctx, cluster, gbs, 2, (1,), (1,), (False,), (False,),
                                                          "fp32"):
        combo = tuple(sorted({(g, t) for g, _, t, _ in pools}))
        for per_pool in count_splits(gbs // mbs, [p[3] for p in pools]):
            plan = _plan(split, replicas, mbs, gbs, [m for seq in per_pool for m in seq], rc, do, "fp32")
            est = simulate(plan, ctx)
            if est.fits_in_memory:
                key = (len(split), mbs, combo)
                best[key] = min(best.get(key, float("inf")), est.iteration_time_s)
    assert any(s == 2 for s, _, _ in best)
    close = 0.0
    for (s_num, mbs, combo), t_best in best.items():
        bound = task_bound(ctx, cluster, tables, combo, s_num, mbs, gbs // mbs, Objective("throughput"), cache)
        assert bound <= t_best * (1 + 1e-9), (s_num, combo, bound, t_best)
        close = max(close, bound / t_best)
    assert close > 0.7          # not vacuous: the bound reaches most of some task's best plan
