"""Split dominance where a link's fit refuses small messages (docs/PLANNER.md 2.1, *Split dominance*).

``simulate`` refuses a plan whose gradient-sync chunk is below a link fit's valid start, so a split with smaller
stages can be refused on a row where one with larger stages is accepted. ``run_task`` then adds the smallest
stage's parameters (negated) to the split criteria, so a split never dominates one with a larger smallest stage.
Here the intra-zone link's concave fit starts between the chunk sizes the plans send, and the search must equal
an independent brute force that skips refused plans. These 8 cases do not need the criterion (with the gate
forced off the search returns the same plans: on a 2-stage split of this model the split that dominates has
the larger smallest stage too); they check that refusal and the gate keep the search exact, and the gate test
checks when the criterion is added. The criterion's soundness is the argument in docs/PLANNER.md 2.1."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from planner.cluster import parse_gpus
from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.network import Link, NetworkModel
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search import taskrun
from planner.simulator import simulate
from planner.simulator.settings import OURS, SimContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_planner_bruteforce as bf  # noqa: E402
from test_search_bounds_fitted import GPU, UNTIED as MODEL, ZONES  # noqa: E402


def _ctx(a: float, vertex_u: float, root_u: float, lat: float) -> SimContext:
    """Intra-zone: GB/s = -a (u - vertex)^2 + a (vertex - root)^2, zero at u = root (refused below its valid
    start, a little above the root); cross-zone: a constant 10 GB/s with latency ``lat``."""
    cat = GPUCatalog()
    npg = cat.get(GPU).gpus_per_node
    m = a * (vertex_u - root_u) ** 2
    intra = Link(100e9, 1e-6, (-a, 2 * a * vertex_u, -a * vertex_u ** 2 + m))
    cross = Link(10e9, lat)
    pairs = {(za, GPU, npg, zb, GPU, npg): (intra if za == zb else cross) for za in ZONES for zb in ZONES}
    return SimContext(MODEL, ProfileStore(MODEL, cat), NetworkModel(cat, pair_links=pairs), cat, OURS)


def _cases() -> list[tuple]:
    rng = np.random.default_rng(97)
    out = []
    while len(out) < 8:
        a, v, r = float(rng.uniform(0.2, 2.0)), float(rng.uniform(5.0, 8.0)), float(rng.uniform(1.5, 4.5))
        start = Link(100e9, 0.0, (-a, 2 * a * v, -a * v * v + a * (v - r) ** 2)).valid_from_bytes()
        if 6e6 <= start <= 30e6:       # between the chunks of 2-stage plans with 2-6 pipelines
            out.append((a, v, r, float(rng.choice([1e-4, 2e-3])), int(rng.choice([4, 6])),
                        int(rng.choice([0, 2])), int(rng.choice([12, 18, 24]))))
    return out


CASES = _cases()


def _brute(ctx, cluster, gbs, objective, monkeypatch) -> tuple[float, int]:
    """The brute force's best key, refused plans skipped; and how many were refused."""
    refused = []

    def scored(plan, c):
        try:
            return simulate(plan, c)
        except InputError:
            refused.append(1)
            return SimpleNamespace(iteration_time_s=math.inf, cost_per_iteration_usd=math.inf, num_gpus=0,
                                   fits_in_memory=True)

    monkeypatch.setattr(bf, "simulate", scored)
    best, _, n = bf.brute_force_best(ctx, cluster, gbs, objective, 2, (1,), (1,), (False,), dist_opts=(False,),
                                     precision="fp32")
    assert n > len(refused)
    return best, len(refused)


@pytest.mark.parametrize("a,vertex_u,root_u,lat,na,nb,gbs", CASES)
def test_search_equals_brute_force_when_small_chunks_are_refused(a, vertex_u, root_u, lat, na, nb, gbs,
                                                                   monkeypatch) -> None:
    ctx = _ctx(a, vertex_u, root_u, lat)
    cluster = parse_gpus(f"{GPU}@us-a={na}" + (f",{GPU}@us-b={nb}" if nb else ""), ctx.catalog)
    space = SearchSpace(max_stages=2, mbs_options=(1,), tp_options=(1,), recompute=(False,),
                        distributed_optimizer=(False,), precision="fp32")
    objective = Objective("throughput")
    best, refused = _brute(ctx, cluster, gbs, objective, monkeypatch)
    assert refused > 0                 # the case exercises refusal
    res = plan_search(ctx, cluster, gbs, objective, space)
    if not math.isfinite(best):
        assert res.best is None
        return
    got = simulate(build_plan(res.best, ctx.model.num_layers, gbs, None), ctx).iteration_time_s
    assert got == pytest.approx(best, rel=1e-9), (got, best)


def test_the_criterion_is_added_only_where_a_chunk_can_be_refused() -> None:
    """The gate: a network without fits (no valid start) adds nothing; the refusing one does."""
    from planner.search.netvec import LinkCache
    from planner.search.tasks import Tables, Task
    space = SearchSpace(max_stages=2, mbs_options=(1,), tp_options=(1,), recompute=(False,),
                        distributed_optimizer=(False,), precision="fp32")
    task = Task(2, 1, ((GPU, 1),), 0.0, False, False, 0)
    refusing = _ctx(*CASES[0][:4])
    plain = SimContext(MODEL, refusing.profiles, NetworkModel(refusing.catalog), refusing.catalog, OURS)
    for ctx, want in ((refusing, True), (plain, False)):
        cluster = parse_gpus(f"{GPU}@us-a=6", ctx.catalog)
        got = taskrun._refusal_possible(ctx, cluster, LinkCache(ctx), Tables(ctx, space), task, 1e6, space)
        assert got is want
