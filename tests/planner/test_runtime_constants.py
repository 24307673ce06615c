"""The megatron-sailor preset's constants file and the core-sharing term."""
import json
import subprocess
import sys

import pytest

from planner.errors import InputError
from planner.simulator.constants import DEFAULT_FILE, core_share_scale, load_runtime_constants
from planner.simulator.settings import OURS, ours
from tests.conftest import ROOT

GOOD = {"format": "megatron-sailor-runtime-constants/1", "machine": "m", "measured_by": "sailor-profile ...",
        "measured_at": "2026-01-01T00:00:00Z", "per_microbatch_overhead_s": 0.001, "memory_overhead_bytes": 5e8,
        "activation_reserve_factor": 1.25,
        "core_share": {"cores": 2, "ranks_per_core_slowdown": [[0.5, 1.0], [1.0, 1.1], [1.5, 1.7], [2.0, 2.2]]}}


def test_the_default_preset_reads_the_data_file():
    c = load_runtime_constants()
    assert c.source == str(DEFAULT_FILE)
    assert OURS.constants_file == str(DEFAULT_FILE)
    assert (OURS.memory_overhead_bytes, OURS.per_microbatch_overhead_s, OURS.activation_reserve_factor) == \
        (c.memory_overhead_bytes, c.per_microbatch_overhead_s, c.activation_reserve_factor)


def test_the_measured_sharded_collective_scale_reaches_the_preset(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps(dict(GOOD, sharded_collective_scale=3.25)))
    assert ours(f).sharded_collective_scale == 3.25
    f.write_text(json.dumps(GOOD))
    assert ours(f).sharded_collective_scale == 1.0      # not measured: NCCL's ring collectives
    assert OURS.sharded_collective_scale == 1.0         # the shipped file plans GPU clusters: not measured there


def test_a_given_file_sets_the_preset_and_is_named_in_the_estimate(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps(GOOD))
    s = ours(f)
    assert (s.per_microbatch_overhead_s, s.memory_overhead_bytes, s.activation_reserve_factor) == (0.001, 5e8, 1.25)
    from tests.planner.test_simulator import plan, ctx_with
    from planner.simulator import simulate
    assert simulate(plan(), ctx_with(s)).runtime_constants_file == str(f)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(activation_reserve_factor=0.5), "field 'activation_reserve_factor' must be >= 1"),
    (lambda d: d.update(memory_overhead_bytes=-1), "field 'memory_overhead_bytes' must be >= 0.0, got -1"),
    (lambda d: d.pop("machine"), "missing required key\\(s\\) \\['machine'\\]"),
    (lambda d: d.update(sharded_collective_scale=0.5), "field 'sharded_collective_scale' must be >= 1"),
    (lambda d: d.update(sharded_collective_scale="fast"), "field 'sharded_collective_scale'"),
    (lambda d: d["core_share"]["ranks_per_core_slowdown"].append([1.0, 3.0]), "one ranks-per-core value twice"),
    (lambda d: d.update(format="x"), "field 'format'"),
])
def test_bad_files_are_one_line_errors_naming_file_and_field(tmp_path, change, message):
    data = json.loads(json.dumps(GOOD))
    change(data)
    f = tmp_path / "c.json"
    f.write_text(json.dumps(data))
    with pytest.raises(InputError, match=message) as exc:
        load_runtime_constants(f)
    assert str(f) in str(exc.value) and "\n" not in str(exc.value)


def test_a_bad_file_named_by_the_environment_stops_sailor_sim_with_exit_2(tmp_path):
    from tests.planner.test_cli_sim import GOOD as PLAN
    f = tmp_path / "c.json"
    f.write_text(json.dumps(dict(GOOD, memory_overhead_bytes="lots")))
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(PLAN))
    r = subprocess.run([sys.executable, "-m", "planner.cli_sim", str(p)], capture_output=True, text=True, cwd=ROOT,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "SAILOR_RUNTIME_CONSTANTS": str(f)})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert str(f) in r.stderr and "memory_overhead_bytes" in r.stderr and "'lots'" in r.stderr


def test_core_sharing_interpolates_the_measured_table_relative_to_the_profile():
    table = ((0.5, 1.0), (1.0, 1.1), (1.5, 1.7), (2.0, 2.2))
    assert core_share_scale(2, 2, 2, table) == 1.0
    assert core_share_scale(3, 2, 2, table) == pytest.approx(1.7 / 1.1)
    assert core_share_scale(4, 2, 1, table) == pytest.approx(2.2 / 1.0)
    assert core_share_scale(6, 2, 2, table) == pytest.approx(2.2 * 3.0 / 2.0 / 1.1)    # beyond: time slicing
    assert core_share_scale(3, 16, 2, table) == 1.0
    assert core_share_scale(3, 2, 2) == pytest.approx(1.5)                          # no table: ranks / cores


def test_a_noisy_dip_in_the_table_never_makes_more_ranks_faster(tmp_path):
    data = json.loads(json.dumps(GOOD))
    data["core_share"]["ranks_per_core_slowdown"] = [[0.5, 1.0], [1.0, 2.0], [1.5, 1.5], [2.0, 2.5]]
    f = tmp_path / "c.json"
    f.write_text(json.dumps(data))
    c = load_runtime_constants(f)
    assert [x for _, x in c.core_share_table] == [1.0, 2.0, 2.0, 2.5]
    scales = [core_share_scale(n, 2, 1, c.core_share_table) for n in range(1, 7)]
    assert scales == sorted(scales)
