"""Issue 11, items 5-7 and 9: every reported case through the CLI in-process, one line each (see oneline.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch import cli as launch_cli
from launch.elastic import cli as elastic_cli
from planner import cli_plan, cli_sim
from planner.errors import run_cli
from tests.adversarial.oneline import assert_refused

PLAN = {"schema_version": 1, "model": "tiny", "num_layers": 4, "micro_batch_size": 1, "global_batch_size": 2,
        "stages": [{"first_layer": 0, "num_layers": 4, "replicas": [{"gpu_type": "A100-40", "tp": 1, "zone": "z-a"}]}]}
SAILOR = {"pipeline_list": [{"layers_per_stage": [[0, 1, 2, 3, 4, 5]], "tmp_per_stage": [[[[["A100-40", 1, "z-a"]], 1]]]}],
          "mbs": 1, "gbs": 1}
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))


def sim(argv: list[str]) -> int:
    return run_cli(cli_sim.main, argv)


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _sailor(**change) -> str:  # noqa: ANN003
    d = json.loads(json.dumps(SAILOR))
    d["pipeline_list"][0].update(change)
    return json.dumps(d)


# name -> (file name, file text or None, argv builder (file path -> argv), expected text in the line)
SIM = {
    "plan nested 100,000 deep": ("p.json", _deep(100_000), "nested deeper"),
    "plan with a 5000-digit integer": ("p.json", json.dumps(PLAN).replace('"num_layers": 4', '"num_layers": ' + "9" * 5000), "p.json"),
    "plan with a 5 MB string": ("p.json", json.dumps({**PLAN, "model": "x" * 5_000_000}), "field 'model'"),
    "plan with duplicate keys": ("p.json", json.dumps(PLAN)[:-1] + ', "num_layers": 5}', "duplicate key 'num_layers'"),
    "plan model is a list": ("p.json", json.dumps({**PLAN, "model": [1, 2]}), "field 'model' must be a string"),
    "plan gbs 4.9": ("p.json", json.dumps({**PLAN, "global_batch_size": 4.9}), "field 'global_batch_size' must be an integer"),
    "plan unknown gpu_type": ("p.json", json.dumps(PLAN).replace('"A100-40"', '"NOPE-1"'),
                              "stages[0].replicas[0]: field 'gpu_type' is 'NOPE-1'"),
    "plan tp 3 on a 4-head model": ("p.json", json.dumps(PLAN).replace('"tp": 1', '"tp": 3'),
                                    "stages[0].replicas[0]: field 'tp': TP degree 3"),
    "plan num_layers 2 for a 4-layer model": ("p.json", json.dumps(PLAN).replace('"num_layers": 4', '"num_layers": 2'),
                                              "field 'num_layers' is 2 but model 'tiny' has 4"),
    "sailor layers_per_stage [5,5]": ("s.json", _sailor(layers_per_stage=[5, 5]), "layers_per_stage"),
    "sailor tmp_per_stage 7": ("s.json", _sailor(tmp_per_stage=7), "tmp_per_stage"),
    "sailor gpus_per_node 0": ("s.json", _sailor(tmp_per_stage=[[[[["A100-40", 0, "z-a"]], 1]]]), "must be >= 1, got 0"),
    "sailor gpus_per_node 'four'": ("s.json", _sailor(tmp_per_stage=[[[[["A100-40", "four", "z-a"]], 1]]]), "got 'four'"),
}


@pytest.mark.parametrize("case", sorted(SIM))
def test_sim_plan_files(case: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    name, text, expect = SIM[case]
    f = tmp_path / name
    f.write_text(text)
    assert_refused(sim, [str(f), "--model", "tiny"], capsys, tmp_path, expect)


DATA = {
    "catalog NaN": ("--gpu-catalog", "c.json", '{"A100-40": {"peak_fp32_flops": NaN}}', "NaN is not a number"),
    "catalog 1e400": ("--gpu-catalog", "c.json", '{"A100-40": {"peak_fp32_flops": 1e400}}', "not finite"),
    "catalog string number": ("--gpu-catalog", "c.json", '{"A100-40": {"peak_fp32_flops": "NaN"}}', "must be a number"),
    "network wrong type": ("--network", "n.json", '{"format": "megatron-sailor-network/1", "class_links": [1]}',
                           "field 'class_links' must be an object"),
    "network latency string": ("--network", "n.json", '{"format": "megatron-sailor-network/1", "class_links": '
                               '{"cross_zone": {"bw_bytes_per_s": 1e9, "latency_s": "1"}}}', "latency_s"),
    "network egress NaN": ("--network", "n.json", '{"format": "megatron-sailor-network/1", "egress_usd_per_gb": '
                           '{"a": {"b": NaN}}}', "NaN"),
    "profile entries wrong": ("--profiles", "pr.json", '{"format": "megatron-sailor-profile/1", "gpu_type": "A100-40", '
                              '"entries": [{"mbs": 1, "tp": 1, "embedding_s": [1, "x"], "layers_s": [[1, 1]], '
                              '"head_s": [1, 1], "update_s_per_param": 0}]}', "embedding_s"),
}


@pytest.mark.parametrize("case", sorted(DATA))
def test_sim_data_files(case: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    flag, name, text, expect = DATA[case]
    plan, f = tmp_path / "p.json", tmp_path / name
    plan.write_text(json.dumps(PLAN))
    f.write_text(text)
    assert_refused(sim, [str(plan), flag, str(f)], capsys, tmp_path, expect)


def _cluster(pool: dict) -> str:
    return json.dumps({"pools": [{"gpu_type": "A100-40", "zone": "z-a", "count": 4, **pool}]})


PLANNER = {
    "--gbs 0": (None, ["--gpus", "A100-40@z=4", "--gbs", "0"], "--gbs must be >= 1, got 0"),
    "--max-stages 0": (None, ["--gpus", "A100-40@z=4", "--max-stages", "0"], "--max-stages must be >= 1"),
    "--gpus 10^9": (None, ["--gpus", "A100-40@z=1000000000"], "at most 1000000 per pool"),
    "--gpus 10^18": (None, ["--gpus", "A100-40@z=1000000000000000000"], "at most 1000000 per pool"),
    "--gpus total over the cap": (None, ["--gpus", "A100-40@a=600000,A100-40@b=600000"], "at most 1000000"),
    "cluster gpu_type list": (("c.json", _cluster({"gpu_type": ["A100-40"]})), ["--cluster"], "field 'gpu_type'"),
    "cluster zone null": (("c.json", _cluster({"zone": None})), ["--cluster"], "field 'zone' must be a string, got None"),
    "cluster gpus_per_node 'four'": (("c.json", _cluster({"gpus_per_node": "four"})), ["--cluster"], "got 'four'"),
    "cluster count 10^7": (("c.json", _cluster({"count": 10 ** 7})), ["--cluster"], "must be <= 1000000"),
    "cluster YAML alias bomb": (("c.yaml", BOMB), ["--cluster"], "alias"),
    "cluster YAML duplicate key": (("c.yaml", "pools: []\npools: []\n"), ["--cluster"], "duplicate key 'pools'"),
    "trace inf": (("t.csv", ",Timestamp,A100-40_z-a\n0,0,inf\n"), ["--trace"], "got 'inf'"),
    "trace 1e400": (("t.csv", ",Timestamp,A100-40_z-a\n0,0,1e400\n"), ["--trace"], "got '1e400'"),
    "trace NaN": (("t.csv", ",Timestamp,A100-40_z-a\n0,0,NaN\n"), ["--trace"], "got 'NaN'"),
    "trace abc": (("t.csv", ",Timestamp,A100-40_z-a\n0,0,abc\n"), ["--trace"], "got 'abc'"),
    "trace 4.9": (("t.csv", ",Timestamp,A100-40_z-a\n0,0,4.9\n"), ["--trace"], "got '4.9'"),
    "-o into a missing folder": (None, ["--gpus", "A100-40@z=4", "-o", "{tmp}/missing/plan.json"], "does not exist"),
    "-o onto a folder": (None, ["--gpus", "A100-40@z=4", "-o", "{tmp}"], "is a folder"),
}


@pytest.mark.parametrize("case", sorted(PLANNER))
def test_planner_cli(case: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    file, argv, expect = PLANNER[case]
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if file:
        (tmp_path / file[0]).write_text(file[1])
        argv = argv + [str(tmp_path / file[0])]
    assert_refused(cli_plan.main, ["--model", "tiny", "--no-comparator", *argv], capsys, tmp_path, expect)
    assert not list(tmp_path.rglob("*.tmp"))


def test_inventory_alias_bomb(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    plan, nodes = tmp_path / "p.json", tmp_path / "n.yaml"
    plan.write_text(json.dumps(PLAN))
    nodes.write_text(BOMB)
    assert_refused(launch_cli.main, [str(plan), "--nodes-file", str(nodes), "--dry-run"], capsys, tmp_path, "alias")


def test_elastic_time_scale_zero(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace = tmp_path / "t.json"
    trace.write_text('[{"Time": 0, "GPUs": 2}]')
    assert_refused(elastic_cli.main, ["--trace", str(trace), "--time-scale", "0", "--train-iters", "2",
                                      "--work-dir", str(tmp_path / "w")], capsys, tmp_path, "--time-scale")


@pytest.mark.parametrize("tool", ["preprocess", "profile"])
def test_without_torch_the_extra_is_named(tool: str, tmp_path: Path, capsys: pytest.CaptureFixture,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.split(".")[0] in
                        ("torch", "megatron") else real(name, *a))
    if tool == "preprocess":
        from megatron_sailor.train.preprocess import main
        argv = ["--input", str(tmp_path / "in.txt"), "--output-prefix", str(tmp_path / "out")]
    else:
        from megatron_sailor.profiler.cli import main
        argv = ["--model", "tiny", "-o", str(tmp_path / "p.json")]
    assert_refused(main, argv, capsys, tmp_path, "megatron-sailor[runtime]")


def test_plan_schema_knows_every_plan_key() -> None:
    """The schema and planner/plan.py must agree on the keys (a new plan field needs both)."""
    from planner import plan as plan_mod
    from planner.schema.files import PlanFile, ReplicaIn, StageIn
    assert set(PlanFile.model_fields) == plan_mod._PLAN_KEYS
    assert set(StageIn.model_fields) == {"first_layer", "num_layers", "replicas", "grad_sync"}
    assert set(ReplicaIn.model_fields) == {"gpu_type", "tp", "zone"}


def _flag_cases() -> dict[str, tuple]:
    from launch import slurm as slurm_cli
    from megatron_sailor.profiler import cli as profile_cli
    from megatron_sailor.runtime import topology
    import sys
    from tests.helpers.launch import REPO
    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))
    import closed_loop
    plan_args = ["--model", "tiny", "--gpus", "A100-40@z=4"]
    return {
        "plan time limit -inf": (cli_plan.main, [*plan_args, "--time-limit-s", "-inf"], "--time-limit-s"),
        "plan gbs text": (cli_plan.main, [*plan_args, "--gbs", "abc"], "--gbs: invalid int value: 'abc'"),
        "plan unknown flag": (cli_plan.main, [*plan_args, "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        "sim no plan": (lambda a: run_cli(cli_sim.main, a), [], "required: plan"),
        "profile rounds text": (profile_cli.main, ["--model", "tiny", "--rounds", "abc", "-o", "p.json"],
                                "--rounds: invalid int value: 'abc'"),
        "profile rounds empty": (profile_cli.main, ["--model", "tiny", "--rounds", "", "-o", "p.json"], "--rounds"),
        "launch unknown flag": (launch_cli.main, ["p.json", "--nodes-file", "n.yaml", "--bogus"], "--bogus"),
        "slurm missing": (slurm_cli.main, ["--bogus"], "required"),
        "elastic missing": (elastic_cli.main, ["--bogus"], "required"),
        "topology missing": (topology.main, [], "required: plan"),
        "closed loop rounds text": (lambda a: run_cli(closed_loop.main, a), ["--profile-rounds", "abc"],
                                    "--profile-rounds: invalid int value"),
        "closed loop rounds 0": (lambda a: run_cli(closed_loop.main, a), ["--profile-rounds", "0"],
                                 "--profile-rounds must be >= 1, got 0"),
    }


@pytest.mark.parametrize("case", ["plan time limit -inf", "plan gbs text", "plan unknown flag", "sim no plan",
                                  "profile rounds text", "profile rounds empty", "launch unknown flag",
                                  "slurm missing", "elastic missing", "topology missing", "closed loop rounds text",
                                  "closed loop rounds 0"])
def test_argparse_errors_are_one_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A bad or missing flag value (argparse's own error) is one line and exit 2 on every CLI, no usage text."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    main, argv, expect = _flag_cases()[case]
    assert_refused(main, argv, capsys, tmp_path, expect)
