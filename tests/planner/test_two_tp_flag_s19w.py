"""``sailor-plan --two-tp`` (``PlanRequest.two_tp``, ``SearchSpace.two_tp`` = 2): the declared space plus pool plans
that give one GPU type two TP degrees, searched exactly (docs/PLANNER.md 10.7; helper s19w wrote these tests for
the opt-in post-pass it replaced, helper s20w moved them to the in-search mode).

The pinned case of ``test_two_tp_pools_s19t.py`` (``H100-80@us-a=3``, GBS 8, the brute-force test model, written
as a model JSON so that the CLI plans it with the same context as ``bf_ctx``): the flag returns a plan >= 5 %
faster, with two TP degrees for H100-80, as fast as the hand-built pinned plan (an independent reference, the
brute force's two-TP optimum), that ``simulate``, ``Plan.load`` and ``sailor-sim`` score as reported. Without the
flag the output is the search's; where two TP degrees cannot help (cost objective, one GPU) the plan is the normal
one; a time limit stops the search with a bound over the larger space; ``--objective value`` works with it;
invalid combinations are one error line, exit 2.
"""
from __future__ import annotations

import json

import pytest

from planner import api
from planner.cli_plan import main
from planner.cli_sim import main as sim_main
from planner.cluster import parse_gpus
from planner.errors import InputError
from planner.plan import Plan
from planner.search import Objective, SearchSpace, build_plan, plan_search
from planner.simulator import simulate
from tests.planner.test_planner_bruteforce import BF_MODEL, bf_ctx
from tests.planner.test_two_tp_pools_s19t import PIN_GBS, PIN_GPUS, pinned_plan


@pytest.fixture()
def data(tmp_path):
    model = tmp_path / "bf.json"
    model.write_text(json.dumps(BF_MODEL.to_dict()))
    return ["--model", str(model), "--gpus", PIN_GPUS, "--gbs", str(PIN_GBS), "--no-comparator"]


def run_json(capsys, argv: list[str]) -> dict:
    assert main(argv + ["--json"]) == 0
    return json.loads(capsys.readouterr().out.split("plan written")[0])


def tps(plan_dict: dict) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for st in plan_dict["stages"]:
        for r in st["replicas"]:
            out.setdefault(r["gpu_type"], set()).add(r["tp"])
    return out


def test_two_tp_flag_wins_on_the_pinned_case_and_round_trips(capsys, tmp_path, data):
    ctx, _ = bf_ctx()
    plain = run_json(capsys, data)
    path = tmp_path / "plan.json"
    two = run_json(capsys, data + ["--two-tp", "-o", str(path)])
    t_plain, t_two = plain["estimate"]["iteration_time_s"], two["estimate"]["iteration_time_s"]
    assert t_two < t_plain / 1.05
    assert t_two == pytest.approx(simulate(pinned_plan(), ctx).iteration_time_s, rel=1e-9)    # the pinned plan
    assert tps(two["plan"]) == {"H100-80": {1, 2}} and tps(plain["plan"]) == {"H100-80": {1}}
    assert two["search"] == {"complete": True, "two_tp": True, "two_tp_plan": True}
    plan = Plan.load(path)
    assert plan.to_dict() == two["plan"]
    assert simulate(plan, ctx).iteration_time_s == pytest.approx(t_two, rel=1e-9)    # the test's own context
    assert sim_main([str(path), *data[:2], "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["iteration_time_s"] == pytest.approx(t_two, rel=1e-9)
    assert main(data + ["--two-tp"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("search finished: this is the best plan of the declared space with up to two TP degrees per GPU type "
            "(--two-tp) (exact search); it gives a GPU type two TP degrees") in text
    assert "H100-80@us-a TP 1: 3" in text and "H100-80@us-a TP 2: 5" in text


def test_without_the_flag_the_plan_and_output_are_the_searchs(capsys, data):
    """No flag: no two-TP field or line; the plan is plan_search's best over the default space (1 type, 1 TP)."""
    ctx, catalog = bf_ctx()
    out = run_json(capsys, data)
    assert out["search"] == {"complete": True}
    cl = parse_gpus(PIN_GPUS, catalog)
    best = plan_search(ctx, cl, PIN_GBS, Objective(), SearchSpace()).best
    assert simulate(build_plan(best, 4, PIN_GBS, "bf"), ctx).iteration_time_s == \
        pytest.approx(out["estimate"]["iteration_time_s"], rel=1e-12)
    assert main(data) == 0
    assert "two-tp" not in capsys.readouterr().out.lower()


@pytest.mark.parametrize("extra", [["--objective", "cost"], ["--gpus", "H100-80@us-a=1"]])
def test_where_two_tp_cannot_help_the_plan_is_the_normal_one(capsys, data, extra):
    plain = run_json(capsys, data + extra)
    two = run_json(capsys, data + extra + ["--two-tp"])
    assert two["plan"] == plain["plan"] and two["estimate"] == plain["estimate"]
    assert two["search"] == {"complete": True, "two_tp": True}
    assert main(data + extra + ["--two-tp"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("search finished: this is the best plan of the declared space with up to two TP degrees per GPU type "
            "(--two-tp) (exact search)") in text and "it gives a GPU type two TP degrees" not in text


def test_a_tiny_time_limit_stops_the_search_with_a_bound_over_the_larger_space(capsys, data):
    """``--time-limit-s 1e-6 --two-tp``: the best plan found so far, not complete, a bound <= its key, and the
    STOPPED line names the space with two TP degrees."""
    lim = ["--time-limit-s", "1e-6"]
    two = run_json(capsys, data + lim + ["--two-tp"])
    st = two["search"]
    assert st["complete"] is False and st["two_tp"] is True
    assert 0 < st["lower_bound_key"] <= st["objective_key"] * (1 + 1e-12)
    assert main(data + lim + ["--two-tp"]) == 0
    assert ("no plan of the declared space with up to two TP degrees per GPU type (--two-tp) scores below"
            in " ".join(capsys.readouterr().out.split()))


def test_value_objective_with_two_tp(capsys, data):
    """``--objective value --two-tp`` (refused by the post-pass before): the CLI's plan is plan_search's best of the
    default space with two_tp=2 under value, and no worse than the one-TP plan's value."""
    ctx, catalog = bf_ctx()
    objective = Objective("value")
    plain = run_json(capsys, data + ["--objective", "value"])
    two = run_json(capsys, data + ["--objective", "value", "--two-tp"])
    best = plan_search(ctx, parse_gpus(PIN_GPUS, catalog), PIN_GBS, objective, SearchSpace(two_tp=2)).best

    def key(out: dict) -> float:
        est = out["estimate"]
        return objective.key(est["iteration_time_s"], est["cost_per_iteration_usd"])

    assert key(two) == pytest.approx(best.key, rel=1e-9) and key(two) <= key(plain) * (1 + 1e-12)
    assert two["search"]["complete"] is True and two["search"]["two_tp"] is True


def test_invalid_combinations_are_one_error_line(capsys, data):
    for extra, msg in ((["--planner", "grid"], "error: --two-tp applies to --planner ours only, got --planner grid"),
                       (["--planner", "sailor"], "error: --two-tp applies to --planner ours only, got --planner "
                        "sailor")):
        assert main(data + extra + ["--two-tp"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [msg]
    _, catalog = bf_ctx()
    with pytest.raises(InputError):
        SearchSpace(two_tp=3)
    with pytest.raises(InputError):
        api.PlanRequest(cluster=parse_gpus(PIN_GPUS, catalog), global_batch_size=8, two_tp=1)
