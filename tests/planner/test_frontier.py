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


def test_sailor_plan_frontier_cli(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "planner.cli_plan", "--model", "opt-350m", "--gpus",
                          "A100-40@us-central1-a=8,V100-16@us-central1-a=8", "--gbs", "64", "--max-stages", "3",
                          "--objective", "cost", "--min-throughput", "0.02", "--frontier", str(tmp_path / "f.png"),
                          "--frontier-json", str(tmp_path / "f.json"), "--json"],
                         capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                         timeout=300)
    assert out.returncode == 0, out.stderr
    fr = json.loads((tmp_path / "f.json").read_text())
    chosen = [p for p in fr["points"] if p["chosen"]]
    assert len(chosen) == 1 and chosen[0]["on_front"]
    assert fr["min_throughput_iters_per_s"] == 0.02
    plan_cost = json.loads(out.stdout)["estimate"]["cost_per_iteration_usd"]
    assert chosen[0]["cost_per_iteration_usd"] == pytest.approx(plan_cost, rel=1e-9)
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    assert fr["complete"] is True


@pytest.mark.slow
def test_sailor_plan_frontier_cli_shares_the_time_limit(tmp_path):
    """--time-limit-s reaches the frontier's searches: a limit far too short stops them, the JSON and the text
    say so, and the frontier still holds the chosen plan."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "planner.cli_plan", "--model", "opt-350m", "--gpus",
                          "A100-40@us-central1-a=32,V100-16@us-central1-b=32,A100-40@us-central1-b=16", "--gbs",
                          "256", "--time-limit-s", "0.05", "--frontier-json", str(tmp_path / "f.json")],
                         capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                         timeout=600)
    assert out.returncode == 0, out.stderr
    fr = json.loads((tmp_path / "f.json").read_text())
    assert fr["complete"] is False and any(p["chosen"] for p in fr["points"])
    assert "frontier searches STOPPED" in out.stdout


def test_frontier_text_names_the_points_the_picture_draws():
    """The text printed with --frontier lists the picture's chosen point and grid square (issue 16: the text
    said no grid plan was feasible while the picture showed one)."""
    from planner.frontier import Frontier, FrontierPoint, frontier_lines
    pts = (FrontierPoint(0.3, 0.2, 64, "4x10 32 A100-40+32 V100-16", True, chosen=True),
           FrontierPoint(0.1, 0.1, 8, "1x8 8 A100-40", True))
    grid = FrontierPoint(0.28, 0.12, 32, "grid: 1x32 32 A100-40", False)
    lines = frontier_lines(Frontier(pts, grid, 0.2, None))
    assert lines[0] == "frontier: 2 plans scored, 2 on the Pareto front"
    assert "4x10 32 A100-40+32 V100-16, 0.3000 it/s" in lines[1] and "(red star)" in lines[1]
    assert "grid: 1x32 32 A100-40, 0.2800 it/s" in lines[2] and "(orange square)" in lines[2]
    assert "no homogeneous grid plan" in frontier_lines(Frontier(pts, None, None, None))[-1]
