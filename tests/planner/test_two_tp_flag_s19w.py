"""``sailor-plan --two-tp`` (``PlanRequest.two_tp``, ``SearchSpace.two_tp_pass``): the opt-in pass over pool plans
that give one GPU type two TP degrees (docs/PLANNER.md 10.6, helper s19w), run after the search from its best plan.

The pinned case of ``test_two_tp_pools_s19t.py`` (``H100-80@us-a=3``, GBS 8, the brute-force test model, written
as a model JSON so that the CLI plans it with the same context as ``bf_ctx``): the flag returns a plan >= 5 %
faster, with two TP degrees for H100-80, at least as fast as the hand-built pinned plan (an independent
reference), that ``simulate``, ``Plan.load`` and ``sailor-sim`` score as reported. Without the flag the output
is the search's; where two TP degrees cannot help (cost objective, one GPU) the plan is the normal one; the time
limit stops the pass cleanly; invalid combinations are one error line, exit 2.
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
from planner.search import twotp as T
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
    assert t_two <= simulate(pinned_plan(), ctx).iteration_time_s * (1 + 1e-9)    # the hand-built two-TP plan
    assert tps(two["plan"]) == {"H100-80": {1, 2}} and tps(plain["plan"]) == {"H100-80": {1}}
    assert two["search"] == {"complete": True, "two_tp": "complete", "two_tp_plan": True}
    plan = Plan.load(path)
    assert plan.to_dict() == two["plan"]
    assert simulate(plan, ctx).iteration_time_s == pytest.approx(t_two, rel=1e-9)    # the test's own context
    assert sim_main([str(path), *data[:2], "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["iteration_time_s"] == pytest.approx(t_two, rel=1e-9)
    assert main(data + ["--two-tp"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "then the opt-in --two-tp pass found this plan" in text and "H100-80@us-a TP 1: 3" in text
    assert "--two-tp pass finished: this plan is its plan" in text


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
    assert two["search"] == {"complete": True, "two_tp": "complete"}
    assert main(data + extra + ["--two-tp"]) == 0
    assert "--two-tp pass finished: no two-TP plan beat the search's plan" in capsys.readouterr().out


def test_a_tiny_time_limit_gives_the_normal_plan_and_says_the_pass_did_not_run(capsys, data):
    lim = ["--time-limit-s", "1e-6"]
    plain = run_json(capsys, data + lim)
    two = run_json(capsys, data + lim + ["--two-tp"])
    assert two["plan"] == plain["plan"] and two["search"]["two_tp"] == "not run"
    assert main(data + lim + ["--two-tp"]) == 0
    assert "--two-tp pass NOT run: the search used the time limit" in capsys.readouterr().out


def test_a_pass_stopped_by_its_deadline_keeps_the_normal_plan_and_says_so(capsys, data, monkeypatch):
    """The deadline arriving just as the pass starts (``stop`` always true): the search's plan, a STOPPED line."""
    improve = T.two_tp_improve
    monkeypatch.setattr(T, "two_tp_improve", lambda *a, **kw: improve(*a, **{**kw, "stop": lambda: True}))
    plain = run_json(capsys, data)
    two = run_json(capsys, data + ["--two-tp"])
    assert two["plan"] == plain["plan"] and two["search"] == {"complete": True, "two_tp": "stopped"}
    assert main(data + ["--two-tp"]) == 0
    assert "--two-tp pass STOPPED at the time limit" in " ".join(capsys.readouterr().out.split())


def test_two_tp_improve_stop_keeps_the_best_so_far():
    """``stop`` after k questions: ``stopped``, and the plan (if any) no better than the unstopped pass's."""
    ctx, catalog = bf_ctx()
    cl = parse_gpus(PIN_GPUS, catalog)
    space = SearchSpace(distributed_optimizer=(False,))
    full = T.two_tp_improve(ctx, cl, PIN_GBS, float("inf"), Objective(), space)
    assert not full.stopped and full.best is not None
    for k in (0, 1, 3, full.tasks, full.tasks + 1, 10 ** 6):
        calls = []

        def stop(k=k, calls=calls) -> bool:
            calls.append(1)
            return len(calls) > k

        res = T.two_tp_improve(ctx, cl, PIN_GBS, float("inf"), Objective(), space, stop=stop)
        assert res.stopped == (k < len(calls))
        assert res.stopped or k == 10 ** 6 or res.best.key == full.best.key
        assert res.best is None or res.best.key >= full.best.key * (1 - 1e-12)
        if k in (0, 10 ** 6):
            assert res.stopped == (k == 0) and (res.best is None) == (k == 0)
        if k == 10 ** 6:
            assert res.best.key == full.best.key


def test_invalid_combinations_are_one_error_line(capsys, data):
    for extra, msg in ((["--objective", "value"], "error: --two-tp applies to the throughput and cost objectives "
                        "only, got --objective value"),
                       (["--planner", "grid"], "error: --two-tp applies to --planner ours only, got --planner grid")):
        assert main(data + extra + ["--two-tp"]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [msg]
    ctx, catalog = bf_ctx()
    with pytest.raises(InputError):
        SearchSpace(two_tp_pass="yes")
    with pytest.raises(InputError):
        api.PlanRequest(cluster=parse_gpus(PIN_GPUS, catalog), global_batch_size=8, two_tp=1)
    with pytest.raises(InputError, match="objectives only"):     # the search itself refuses it too
        plan_search(ctx, parse_gpus(PIN_GPUS, catalog), 8, Objective("value"), SearchSpace(two_tp_pass=True))
