"""Frontier: every front point is non-dominated, the chosen plan is on the front, constraints hold."""
import pytest

from planner.baselines.spaces import baseline_space
from planner.cluster import parse_gpus
from planner.frontier import frontier_for, pareto_flags
from planner.hardware import GPUCatalog
from planner.model import get_model
from planner.network import NetworkModel
from planner.profiles import ProfileStore
from planner.search import Objective
from planner.search.space import SearchSpace
from planner.simulator import OURS, SimContext


def test_pareto_flags_by_hand():
    pts = [(1.0, 1.0), (2.0, 1.0), (2.0, 2.0), (0.5, 0.5), (3.0, 5.0), (3.0, 6.0)]
    assert pareto_flags(pts) == [False, True, False, True, True, False]


@pytest.fixture(scope="module")
def setup():
    m, cat = get_model("opt-350m"), GPUCatalog()
    ctx = SimContext(m, ProfileStore(m, cat), NetworkModel(cat), cat, OURS, {})
    cluster = parse_gpus("A100-40@us-central1-a=8,V100-16@us-central1-b=8", cat)
    return ctx, cluster


@pytest.mark.parametrize("objective", [Objective("throughput"), Objective("cost", min_throughput_iters_per_s=0.02),
                                       Objective("throughput", max_cost_per_iter_usd=0.5)])
def test_front_is_non_dominated_and_holds_the_chosen_plan(setup, objective):
    ctx, cluster = setup
    fr = frontier_for(ctx, cluster, 64, objective, SearchSpace(max_stages=4), baseline_space("grid"), top_k=8)
    assert len(fr.points) >= 3 and fr.front()
    for p in fr.front():
        for q in fr.points:
            assert not (q.throughput_iters_per_s >= p.throughput_iters_per_s and
                        q.cost_per_iteration_usd <= p.cost_per_iteration_usd and
                        (q.throughput_iters_per_s > p.throughput_iters_per_s or
                         q.cost_per_iteration_usd < p.cost_per_iteration_usd))
    chosen = [p for p in fr.points if p.chosen]
    assert len(chosen) == 1
    c = chosen[0]
    if objective.min_throughput_iters_per_s is not None:
        assert c.throughput_iters_per_s >= objective.min_throughput_iters_per_s
    if objective.max_cost_per_iter_usd is not None:
        assert c.cost_per_iteration_usd <= objective.max_cost_per_iter_usd
    # the optimum of max-throughput (under a budget) or min-cost (over a floor) is non-dominated: anything
    # dominating it would also satisfy the constraint and beat it
    assert c.on_front
    assert fr.baseline is not None and fr.baseline.label.startswith("grid")
