"""verify.checked_plans: the production check once, its estimate reused for the plan annotated with the sync
modes it assumed (docs/PLANNER.md 2.3, Session 14, second pass). The reuse is exact: simulating the annotated
plan again gives the same estimate, field for field, and the annotation is with_chosen_sync_modes'."""
from __future__ import annotations

from dataclasses import replace

import pytest

from planner.cluster import parse_gpus
from planner.errors import InternalError
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import NetworkModel
from planner.profiles import ProfileStore
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.search.verify import check_candidates, checked_plans, with_estimated_sync_modes
from planner.simulator import simulate, with_chosen_sync_modes
from planner.simulator.settings import OURS, SAILOR_DEEPSPEED, SimContext

MODEL = ModelSpec("ev", num_layers=6, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=2048,
                  vocab_size=4096, max_position_embeddings=2048)


def _ctx(settings=OURS, tied: bool = False) -> SimContext:
    cat = GPUCatalog()
    model = replace(MODEL, tied_embeddings=tied)
    return SimContext(model, ProfileStore(model, cat), NetworkModel(cat), cat, settings)


CASES = [  # (settings, tied, cluster, objective): one and several zones, flat / auto / hierarchical presets
    (OURS, False, "A100-40@us-a=8,V100-16@us-b=8", "throughput"),
    (OURS, True, "A100-40@us-a=8,A100-40@us-b=8,V100-16@us-b=4", "throughput"),
    (OURS, False, "A100-40@us-a=8,A100-40@us-b=8,A100-40@us-c=8", "cost"),
    (OURS, True, "V100-16@us-a=12", "throughput"),
    (SAILOR_DEEPSPEED, False, "A100-40@us-a=8,V100-16@us-b=8", "throughput"),
    (replace(OURS, grad_sync="hierarchical"), False, "A100-40@us-a=8,A100-40@us-b=8", "throughput"),
    (replace(OURS, grad_sync="flat"), True, "A100-40@us-a=8,A100-40@us-b=8", "throughput"),
]


@pytest.mark.parametrize("settings, tied, gpus, objective", CASES)
def test_the_reused_estimate_is_the_annotated_plans_and_the_annotation_is_the_chosen_modes(settings, tied, gpus,
                                                                                          objective):
    ctx = _ctx(settings, tied)
    cluster = parse_gpus(gpus, ctx.catalog)
    space = SearchSpace(max_stages=4, tie_embeddings=tied)
    cands = plan_search(ctx, cluster, 64, Objective(objective), space, top_k=25, verify=False).candidates
    assert len(cands) >= 5
    pairs = checked_plans(ctx, cands, 64)
    modes = set()
    for c, (plan, est) in zip(cands, pairs):
        bare = build_plan(c, ctx.model.num_layers, 64, ctx.model.name)
        assert plan == with_chosen_sync_modes(bare, ctx)           # what api.plan wrote before
        assert simulate(plan, ctx) == est == simulate(bare, ctx)  # every field, bit for bit
        modes |= {st.grad_sync for st in plan.stages}
    assert modes - {None}       # some stage was annotated (the equality above is not vacuous)


def test_checked_plans_raises_where_check_candidates_does():
    ctx = _ctx()
    cluster = parse_gpus("A100-40@us-a=8,V100-16@us-b=8", ctx.catalog)
    best = plan_search(ctx, cluster, 64, Objective("throughput"), SearchSpace(max_stages=3), verify=False).best
    assert [p for p, _ in checked_plans(ctx, [best], 64)] == \
        [with_estimated_sync_modes(p, e) for p, e in check_candidates(ctx, [best], 64)]
    for bad in (replace(best, iteration_s=best.iteration_s * (1 + 1e-8)),
                replace(best, cost_usd=best.cost_usd * (1 - 1e-8)), replace(best, gpus=best.gpus + 1)):
        with pytest.raises(InternalError):
            checked_plans(ctx, [bad], 64)


def test_api_plan_reports_the_annotated_plans_and_their_estimates():
    from planner.api import PlanRequest, plan
    ctx = _ctx(tied=True)
    cluster = parse_gpus("A100-40@us-a=8,A100-40@us-b=8,V100-16@us-b=4", ctx.catalog)
    rep = plan(PlanRequest(cluster=cluster, global_batch_size=64, max_stages=4, top_k=6,
                       comparator=False), ctx)
    got = [(rep.plan, rep.estimate)] + list(rep.alternatives)
    assert len(got) >= 2
    for p, e in got:
        assert with_chosen_sync_modes(replace(p, stages=tuple(replace(s, grad_sync=None) for s in p.stages)),
                                      ctx) == p
        assert simulate(p, ctx) == e
