"""Plan fields that say what the runtime runs: per-stage gradient sync mode and the p2p pattern."""
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.plan import Plan, Stage
from planner.simulator import OURS, chosen_sync_modes, simulate, with_chosen_sync_modes
from tests.planner.test_simulator import ctx_with, plan

ROOT = Path(__file__).resolve().parents[2]
ZONES = ["us-a-1", "us-a-1", "us-b-1", "us-b-1"]


def test_old_plans_load_with_null_modes_and_the_default_pattern():
    data = plan(split=(2, 2), d=2, gbs=4).to_dict()
    for st in data["stages"]:
        del st["grad_sync"]
    del data["p2p_pattern"]
    p = Plan.from_json(json.dumps(data))
    assert all(st.grad_sync is None for st in p.stages) and p.p2p_pattern == "tp0-to-all"


def test_roundtrip_keeps_the_fields():
    p = plan(split=(2, 2), d=2, gbs=4)
    p = replace(p, stages=(replace(p.stages[0], grad_sync="flat"), replace(p.stages[1], grad_sync="hierarchical")))
    q = Plan.from_json(p.to_json())
    assert q == p and [s.grad_sync for s in q.stages] == ["flat", "hierarchical"]
    assert json.loads(p.to_json())["p2p_pattern"] == "tp0-to-all"


@pytest.mark.parametrize("change, message", [
    (lambda d: d["stages"][0].update(grad_sync="auto"), "stages\\[0\\]: field 'grad_sync' must be one of .*'auto'"),
    (lambda d: d["stages"][1].update(grad_sync=1), "stages\\[1\\]: field 'grad_sync' .*got 1"),
    (lambda d: d.update(p2p_pattern="all-to-all"), "field 'p2p_pattern' must be 'tp0-to-all', got 'all-to-all'"),
])
def test_bad_values_name_file_field_and_value(change, message):
    data = plan(split=(2, 2), d=2, gbs=4).to_dict()
    change(data)
    with pytest.raises(InputError, match=message) as exc:
        Plan.from_json(json.dumps(data), source="p.json")
    assert str(exc.value).startswith("p.json") and "\n" not in str(exc.value)


def test_constructor_refuses_bad_values():
    with pytest.raises(InputError, match="'grad_sync' must be null, 'flat' or 'hierarchical', got 'ring'"):
        Stage(0, 1, plan().stages[0].replicas, grad_sync="ring")
    with pytest.raises(InputError, match="'p2p_pattern'"):
        plan(p2p_pattern="nope")


def test_sailor_sim_bad_mode_is_one_line_exit_2(tmp_path):
    data = plan(split=(2, 2), d=2, gbs=4).to_dict()
    data["stages"][0]["grad_sync"] = "fast"
    f = tmp_path / "p.json"
    f.write_text(json.dumps(data))
    r = subprocess.run([sys.executable, "-m", "planner.cli_sim", str(f)], capture_output=True, text=True,
                       cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(f) in lines[0]
    assert "grad_sync" in lines[0] and "'fast'" in lines[0]


def test_a_stage_mode_in_the_plan_is_what_the_simulator_models():
    pl = plan(split=(4,), d=4, gbs=8, zones=ZONES)
    ctx = ctx_with(OURS)                                      # preset rule: auto
    flat = simulate(pl, ctx_with(OURS.with_(grad_sync="flat")))
    hier = simulate(pl, ctx_with(OURS.with_(grad_sync="hierarchical")))
    assert flat.sync_s != hier.sync_s
    for mode, ref in (("flat", flat), ("hierarchical", hier)):
        fixed = replace(pl, stages=(replace(pl.stages[0], grad_sync=mode),))
        est = simulate(fixed, ctx)
        assert est.stages[0].sync_mode == mode and est.sync_s == ref.sync_s
        assert est.cross_zone_bytes_per_iteration == ref.cross_zone_bytes_per_iteration


def test_chosen_modes_are_the_auto_choice_and_writing_them_changes_nothing():
    pl = plan(split=(2, 2), d=4, gbs=8, zones=ZONES)
    ctx = ctx_with(OURS)
    est = simulate(pl, ctx)
    modes = chosen_sync_modes(pl, ctx)
    assert modes == tuple(st.sync_mode for st in est.stages)
    assert set(modes) <= {"flat", "hierarchical"}
    written = with_chosen_sync_modes(pl, ctx)
    assert tuple(st.grad_sync for st in written.stages) == modes
    assert simulate(written, ctx).iteration_time_s == est.iteration_time_s
    single = plan(split=(2, 2), d=1, gbs=4)
    assert chosen_sync_modes(single, ctx) == (None, None)
    assert with_chosen_sync_modes(single, ctx) == single
