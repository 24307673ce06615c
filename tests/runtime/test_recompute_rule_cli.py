"""pretrain_gpt.py refuses uniform full recomputation whose group does not divide a stage's layers (megatron-core
0.16.1 raises IndexError in ``_checkpointed_forward`` on it) with one line and exit 2, before any process group;
the runnable neighbours (block, a clamped or dividing group) still train."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.launch import REPO, python, tiny_model_args

PLANS = REPO / "tests" / "helpers" / "plans"


def _plan(tmp_path: Path, layers: int, method: str, group: int) -> Path:
    plan = {"schema_version": 1, "num_layers": layers, "micro_batch_size": 2, "global_batch_size": 4,
            "recompute_granularity": "full", "recompute_method": method, "recompute_num_layers": group,
            "stages": [{"first_layer": 0, "num_layers": layers,
                        "replicas": [{"gpu_type": "A", "tp": 1, "zone": "z"}]}]}
    path = tmp_path / f"plan_{method}_{group}_{layers}.json"
    path.write_text(json.dumps(plan))
    return path


def test_runtime_capabilities_use_the_plan_rule() -> None:
    from megatron_sailor.runtime.capabilities import check_runtime_supports, unsupported_options
    from planner.errors import InputError
    from planner.plan import Plan, Replica, Stage
    plan = Plan(num_layers=3, stages=(Stage(0, 3, (Replica("cpu", 1, "z"),)),), micro_batch_size=1,
                global_batch_size=1, recompute_granularity="full", recompute_method="uniform",
                recompute_num_layers=3)
    assert unsupported_options(plan) == []
    object.__setattr__(plan, "recompute_num_layers", 2)      # past Plan validation: the runtime still refuses
    with pytest.raises(InputError, match=r"plan field 'recompute_num_layers' 2 does not divide stages\[0\]"):
        check_runtime_supports(plan, source="p.json")


def test_sailor_plan_recompute_flags_are_checked_against_its_stages() -> None:
    from megatron_sailor.train.arguments import parse_config
    from planner.errors import InputError
    sailor = str(PLANS / "sailor_1rank.json")                  # one stage of --num-layers 4 layers
    base = ["--sailor-plan", sailor, "--train-iters", "1", "--mock-data", "--lr", "1e-3", *tiny_model_args(),
            "--recompute-granularity", "full", "--recompute-method"]
    assert parse_config([*base, "uniform", "--recompute-num-layers", "2"], 1).plan.recompute == ("full", "uniform", 2)
    assert parse_config([*base, "block", "--recompute-num-layers", "4"], 1).plan.recompute == ("full", "block", 4)
    with pytest.raises(InputError) as info:
        parse_config([*base, "uniform", "--recompute-num-layers", "3"], 1)
    assert str(info.value).startswith(f"{sailor}: recompute flags: field 'recompute_num_layers' 3 does not divide "
                                      "stages[0].num_layers 4")


@pytest.mark.slow
@pytest.mark.parametrize("method, group, layers, ok", [
    ("uniform", 2, 3, False), ("uniform", 5, 3, True), ("block", 5, 3, True), ("uniform", 2, 4, True)])
def test_cli_refuses_exactly_the_crashing_uniform_groups(tmp_path: Path, method: str, group: int, layers: int,
                                                         ok: bool) -> None:
    metrics = tmp_path / "metrics.jsonl"
    proc = python(["examples/gpt/pretrain_gpt.py", "--sailor-plan", str(_plan(tmp_path, layers, method, group)),
                   "--train-iters", "1", "--lr", "1e-3", "--mock-data", "--metrics-file", str(metrics),
                   *tiny_model_args(num_layers=layers)], timeout_s=300)
    assert "Traceback" not in proc.stderr and "IndexError" not in proc.stderr, proc.stderr[-2000:]
    if ok:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert metrics.exists()
        return
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and "plan_uniform_2_3.json: field 'recompute_num_layers' 2 does not " \
        "divide stages[0].num_layers 3: uniform full recomputation runs groups of 2 layers" in lines[0]
    assert proc.stdout == "" and not metrics.exists()         # refused before anything started or was written
