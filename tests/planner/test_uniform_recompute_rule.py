"""Uniform full recomputation: a group size that does not divide a stage's layers is refused by the plan
(megatron-core 0.16.1 raises IndexError in ``_checkpointed_forward`` on it); block never is."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.plan import Plan, Replica, Stage, uniform_recompute_conflict


@pytest.mark.parametrize("layers, group, bad_stage", [
    ([3], 2, 0), ([1, 3], 2, 1), ([4, 5], 2, 1), ([6, 4], 4, 0), ([0, 3, 0], 2, 1),
])
def test_uniform_group_not_dividing_a_stage_is_a_conflict(layers, group, bad_stage) -> None:
    msg = uniform_recompute_conflict(layers, ("full", "uniform", group))
    assert msg is not None
    assert f"'recompute_num_layers' {group}" in msg
    assert f"stages[{bad_stage}].num_layers {layers[bad_stage]}" in msg


@pytest.mark.parametrize("layers, recompute", [
    ([3], ("full", "uniform", 1)),        # groups of one layer always fit
    ([4], ("full", "uniform", 2)),
    ([3], ("full", "uniform", 5)),        # the group is clamped to the stage: one group of 3
    ([3, 2], ("full", "uniform", 3)),     # stage 1 runs one group of 2
    ([0, 4, 0], ("full", "uniform", 2)),  # embedding-only / head-only stages recompute nothing
    ([3], ("full", "block", 2)),
    ([3], ("full", "block", 5)),
    ([3], ("selective", None, None)),
    ([3], (None, None, None)),
])
def test_runnable_recompute_is_no_conflict(layers, recompute) -> None:
    assert uniform_recompute_conflict(layers, recompute) is None


def _stages(layers: list[int]) -> tuple[Stage, ...]:
    out, first = [], 0
    for n in layers:
        out.append(Stage(first, n, (Replica("A100-40", 1, "z"),)))
        first += n
    return tuple(out)


def test_plan_refuses_the_conflict_and_accepts_its_neighbours() -> None:
    base = dict(num_layers=4, stages=_stages([1, 3]), micro_batch_size=1, global_batch_size=1,
                recompute_granularity="full")
    with pytest.raises(InputError, match=r"'recompute_num_layers' 2 does not divide stages\[1\].num_layers 3"):
        Plan(**base, recompute_method="uniform", recompute_num_layers=2)
    assert Plan(**base, recompute_method="uniform", recompute_num_layers=3).recompute == ("full", "uniform", 3)
    assert Plan(**base, recompute_method="block", recompute_num_layers=2).recompute == ("full", "block", 2)
    assert Plan(num_layers=3, stages=_stages([3]), micro_batch_size=1, global_batch_size=1,
                recompute_activations=True).recompute == ("full", "uniform", 1)


def test_plan_file_error_names_the_file(tmp_path: Path) -> None:
    plan = Plan(num_layers=4, stages=_stages([1, 3]), micro_batch_size=1, global_batch_size=1).to_dict()
    plan.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=2)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    with pytest.raises(InputError) as info:
        Plan.load(path)
    assert str(info.value).startswith(f"{path}: field 'recompute_num_layers' 2 does not divide stages[1]")


def test_sailor_sim_refuses_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from planner.cli_sim import main
    from planner.errors import run_cli
    plan = Plan(num_layers=3, stages=_stages([3]), micro_batch_size=1, global_batch_size=1).to_dict()
    plan.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=2)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    assert run_cli(main, ["--model", "opt-350m", str(path)]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: field 'recompute_num_layers' 2"), captured.err
    assert captured.out == ""
