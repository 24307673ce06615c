"""sailor-elastic units: availability sources, demo plans, the switch rule, control file, fault specs."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from megatron_sailor.train.elastic_hooks import _rank0_action, parse_faults
from launch.elastic.plans import (CpuDemoPlanner, PlanChoice, SailorPlanner, decide, demo_plan_dict,
                                           plan_fits)
from launch.elastic.sources import (CommandSource, FileSource, TraceSource, load_csv_trace,
                                             parse_availability, trace_source)
from planner.errors import InputError
from planner.plan import Plan

SAILOR = Path(__file__).resolve().parents[3] / "shared" / "data" / "sailor" / "sailor"


def test_json_trace_step_function(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_text(json.dumps([{"Time": 0, "GPUs": 4}, {"Time": 10, "GPUs": 2}, {"Time": 20, "GPUs": 4}]))
    src = trace_source(str(p), "cpu@local")
    assert [src.poll(t, 0)["cpu@local"] for t in (0, 9.9, 10, 15, 25)] == [4, 4, 2, 2, 4]
    fast = trace_source(str(p), "cpu@local", time_scale=0.1)
    assert fast.poll(1.0, 0)["cpu@local"] == 2
    by_iter = trace_source(str(p), "cpu@local", unit="iter")
    assert by_iter.poll(1e9, 9)["cpu@local"] == 4 and by_iter.poll(0, 10)["cpu@local"] == 2


def test_sailor_traces_load(sailor_data_dir: Path) -> None:
    src = trace_source(str(sailor_data_dir / "sailor/Controller/trace_based/a100_trace.json"), "A100-40@z")
    assert src.points[0][1] == {"A100-40@z": 4} and src.poll(126, 0) == {"A100-40@z": 3}
    pts = load_csv_trace(str(sailor_data_dir / "sailor/Planner/simulations/configs/gpu_trace_heterogeneous_imbalanced.csv"))
    assert pts[0][0] == 0.0 and pts[1][1] == {"A100-40@us-central1-a": 80, "V100-16@us-central1-a": 240}


@pytest.mark.parametrize("text,expected", [("3", {"p": 3}), ('{"GPUs": 5}', {"p": 5}),
                                           ('{"A100-40@z": 2, "V100-16@z": 1}', {"A100-40@z": 2, "V100-16@z": 1})])
def test_availability_forms(text: str, expected: dict) -> None:
    assert parse_availability(text, "p", "src") == expected


def test_bad_availability_names_the_source(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="avail.txt.*number or a JSON object"):
        parse_availability("lots", "p", str(tmp_path / "avail.txt"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"Time": 0}]))
    with pytest.raises(InputError, match="bad.json.*row 0"):
        trace_source(str(bad), "p")


def test_file_and_command_sources(tmp_path: Path) -> None:
    f = tmp_path / "avail"
    f.write_text("4\n")
    src = FileSource(str(f), "cpu@local")
    assert src.poll(0, 0) == {"cpu@local": 4}
    f.write_text('{"GPUs": 2}')
    assert src.poll(0, 0) == {"cpu@local": 2}
    assert CommandSource("echo 3", "cpu@local").poll(0, 0) == {"cpu@local": 3}
    with pytest.raises(InputError, match="exit status"):
        CommandSource("exit 3", "cpu@local").poll(0, 0)


@pytest.mark.parametrize("n,ranks", [(1, 1), (2, 2), (3, 3), (4, 4), (5, 4), (8, 8)])
def test_demo_plans_are_valid_and_use_the_ranks(n: int, ranks: int) -> None:
    plan = Plan.from_dict(demo_plan_dict(n, 4, 8, "tiny"))
    assert plan.world_size == ranks
    assert plan.num_layers == 4 and plan.global_batch_size == 8


def test_planner_is_called_for_real_clusters() -> None:
    choice = SailorPlanner(["--model", "opt-350m"], 64).plan({"A100-40@us-central1-a": 8})
    assert choice.plan.world_size <= 8 and choice.predicted_iteration_s > 0 and choice.plan_s < 30


@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf", "nan"])
def test_replan_time_limit_is_checked_when_the_planner_is_built(value: str) -> None:
    with pytest.raises(InputError, match="--time-limit-s must be a positive number"):
        SailorPlanner(["--model", "opt-350m", "--time-limit-s", value], 64)


def test_replans_get_the_time_limit() -> None:
    """Every replan is a limited search (default 45 s; the flag sets it; 'none' lifts it)."""
    from planner.cluster import parse_gpus
    from planner.hardware import GPUCatalog
    from planner.options import plan_request
    cluster = parse_gpus("A100-40@us-central1-a=8", GPUCatalog())
    for args, want in ((["--time-limit-s", "7.5"], 7.5), ([], 45.0), (["--time-limit-s", "none"], None)):
        planner = SailorPlanner(["--model", "opt-350m", *args], 64)
        assert plan_request(planner.args, cluster, 64, comparator=False).time_limit_s == want


def _choice(n: int, t: float) -> PlanChoice:
    return PlanChoice(Plan.from_dict(demo_plan_dict(n, 4, 8, "tiny")), t, 0.0)


def test_switch_rule_hysteresis() -> None:
    cur = _choice(2, 1.0)
    forced = decide(cur, _choice(1, 2.0), fits=False, horizon_s=100, cost_s=15)
    assert forced.switch and forced.forced
    better = decide(cur, _choice(4, 0.5), fits=True, horizon_s=100, cost_s=15)     # saves 50 s > 15 s
    assert better.switch and not better.forced and better.gain_s == pytest.approx(50)
    marginal = decide(cur, _choice(4, 0.9), fits=True, horizon_s=100, cost_s=15)   # saves 10 s < 15 s
    assert not marginal.switch and "<= cost" in marginal.reason
    assert not decide(cur, _choice(2, 1.0), fits=True, horizon_s=1e6, cost_s=0).switch   # same plan


def test_plan_fits_counts_pools() -> None:
    plan = CpuDemoPlanner(4, 8, "tiny").plan({"cpu@local": 4}).plan
    assert plan_fits(plan, {"cpu@local": 4}) and not plan_fits(plan, {"cpu@local": 3})


def test_control_file_hold_then_stop(tmp_path: Path) -> None:
    ctl = tmp_path / "control"
    ctl.write_text("run")
    assert _rank0_action(str(ctl), 5, 1.0) is False
    ctl.write_text("stop")
    assert _rank0_action(str(ctl), 5, 1.0) is True
    ctl.write_text("hold 6")
    assert _rank0_action(str(ctl), 5, 1.0) is False             # not there yet: no wait
    threading.Timer(0.2, lambda: ctl.write_text("stop")).start()
    start = time.monotonic()
    assert _rank0_action(str(ctl), 6, 5.0) is True              # held until the controller decided
    assert time.monotonic() - start >= 0.15


def test_fault_spec() -> None:
    assert parse_faults("attempt=0,rank=2,iteration=5,when=step; attempt=1,rank=0,iteration=8,when=save") == [
        {"attempt": 0, "rank": 2, "iteration": 5, "when": "step", "job": None, "action": "kill"},
        {"attempt": 1, "rank": 0, "iteration": 8, "when": "save", "job": None, "action": "kill"}]
    assert parse_faults("job=1,attempt=0,rank=3,when=start,action=kill-node") == [
        {"attempt": 0, "rank": 3, "iteration": -1, "when": "start", "job": 1, "action": "kill-node"}]


def test_fault_injector_selects_job_and_sleeps(monkeypatch: pytest.MonkeyPatch) -> None:
    from megatron_sailor.train.elastic_hooks import FaultInjector
    monkeypatch.setenv("SAILOR_FAULT_INJECT", "job=2,attempt=0,rank=0,iteration=3,when=save,action=sleep:0.2")
    monkeypatch.setenv("SAILOR_ELASTIC_JOB", "1")
    assert FaultInjector(0).faults == []
    monkeypatch.setenv("SAILOR_ELASTIC_JOB", "2")
    f = FaultInjector(0)
    start = time.monotonic()
    f("save", 2)
    assert time.monotonic() - start < 0.1
    f("save", 3)
    assert time.monotonic() - start >= 0.2


def test_cli_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from launch.elastic.cli import main
    assert main(["--availability-file", str(tmp_path / "none"), "--train-iters", "3",
                 "--work-dir", str(tmp_path / "w")]) == 2
    assert "none: file not found" in capsys.readouterr().err
    assert main(["--availability-file", str(tmp_path), "--time-unit", "iter", "--train-iters", "3",
                 "--work-dir", str(tmp_path / "w")]) == 2
    assert "--time-unit iter needs --trace" in capsys.readouterr().err


def test_trace_source_describe() -> None:
    src = TraceSource(((0.0, {"p": 4}), (3.0, {"p": 2})), unit="iter")
    assert src.describe() == "trace [0it:4, 3it:2]"


class _FakeProc:
    def __init__(self) -> None:
        self.rc = None
        self.pid = -1

    def poll(self):  # noqa: ANN201
        return self.rc

    def terminate(self) -> None:
        self.rc = -15


class _ScriptedController:
    """A Controller whose jobs are fake processes (no torchrun): exercises the hand-over logic."""

    @staticmethod
    def make(tmp_path: Path, avail: list[int]):  # noqa: ANN205
        from launch.elastic.controller import Controller, ControllerConfig
        from launch.elastic.jobs import LocalBackend
        from launch.elastic.nodes import LocalNodes

        class Src:
            value = {"cpu@local": avail[0]}
            name = "fake"

            def poll(self, elapsed_s, iteration):  # noqa: ANN001, ANN202
                return dict(self.value)

            def describe(self) -> str:
                return "fake"

        class Backend(LocalBackend):
            calls: list = []

            def start(self, commands, assignment, work, index, workdir, after=None):  # noqa: ANN001, ANN202
                self.calls.append(commands)
                return _FakeProc()

        cfg = ControllerConfig(work_dir=tmp_path, train_iters=10, train_args=(), poll_s=0.0)
        c = Controller(cfg, LocalNodes(Src()), CpuDemoPlanner(4, 8, "tiny"), backend=Backend())
        c.work.mkdir(parents=True, exist_ok=True)
        return c, Src


def _start(c) -> None:  # noqa: ANN001
    from launch.elastic.timings import Reconfiguration
    nodes = c.source.poll(0, 0)
    choice, assignment = c.plan_on(nodes)
    c.job = c.launch(choice, Reconfiguration("start", time.time(), 4, 0.0, "initial", None, 4), assignment=assignment)
    c.successor, c.last_nodes = None, nodes


def test_forced_switch_stops_now_and_hands_over_after_exit(tmp_path: Path) -> None:
    c, src = _ScriptedController.make(tmp_path, [4])
    _start(c)
    old = c.job
    src.value = {"cpu@local": 2}
    assert c._step() is None
    new = c.successor
    assert new is not None and new.choice.plan.world_size == 2
    assert "--elastic-wait" in c.backend.calls[-1][0].argv and "--elastic-wait" not in c.backend.calls[0][0].argv

    assert old.control.read_text().strip() == "stop" and not new.go.exists()
    assert c._step() is None and c.successor is new          # old job still checkpointing
    old.proc.rc = 0
    assert c._step() is None
    assert new.go.exists() and c.job is new and c.successor is None


def test_optional_switch_waits_for_the_new_job(tmp_path: Path) -> None:
    c, src = _ScriptedController.make(tmp_path, [2])
    _start(c)
    old = c.job
    src.value = {"cpu@local": 4}
    c._step()
    new = c.successor
    assert new is not None and old.control.read_text().strip() == "run"   # keeps training meanwhile
    new.events_path.write_text(json.dumps({"event": "waiting", "t_unix_s": time.time(), "attempt": 0}) + "\n")
    c._step()
    assert old.control.read_text().strip() == "stop"
    old.proc.rc = 0
    c._step()
    assert c.job is new and new.go.exists()


def test_successor_dying_before_takeover_is_a_failure(tmp_path: Path) -> None:
    c, src = _ScriptedController.make(tmp_path, [2])
    _start(c)
    src.value = {"cpu@local": 4}
    c._step()
    c.successor.proc.rc = 1
    assert c._step() is None and c.successor is None and c.failures == 1
