"""sailor-sim end to end: JSON keys, the table, Sailor plans, and one-line errors with exit status 2."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOOD = {"schema_version": 1, "model": "tiny", "num_layers": 4, "micro_batch_size": 2, "global_batch_size": 8,
        "stages": [{"first_layer": 0, "num_layers": 1, "replicas": [
            {"gpu_type": "A100-40", "tp": 1, "zone": "us-central1-a"},
            {"gpu_type": "V100-16", "tp": 2, "zone": "us-central1-b"}]},
                   {"first_layer": 1, "num_layers": 3, "replicas": [
                       {"gpu_type": "A100-40", "tp": 2, "zone": "us-central1-a"},
                       {"gpu_type": "V100-16", "tp": 1, "zone": "us-central1-b"}]}]}


def sim(*args, cwd=ROOT, extra_env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(extra_env or {})}
    return subprocess.run([sys.executable, "-m", "planner.cli_sim", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=60)


def write(tmp_path, data, name="plan.json"):
    f = tmp_path / name
    f.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return f


def test_json_output_has_the_promised_keys(tmp_path):
    out = sim(write(tmp_path, GOOD), "--json")
    assert out.returncode == 0, out.stderr
    est = json.loads(out.stdout)
    for key in ("iteration_time_s", "throughput_iters_per_s", "tokens_per_s", "peak_memory_bytes",
                "cost_per_iteration_usd", "egress_usd_per_iteration", "fits_in_memory", "stages"):
        assert key in est
    assert len(est["stages"]) == 2 and est["egress_usd_per_iteration"] > 0
    assert est["throughput_iters_per_s"] == pytest.approx(1 / est["iteration_time_s"])


def test_table_output(tmp_path):
    out = sim(write(tmp_path, GOOD))
    assert out.returncode == 0, out.stderr
    assert "it/s" in out.stdout and "free GB" in out.stdout and "ESTIMATE" in out.stdout


def test_memory_rows_compare_each_replica_with_its_own_gpu():
    """The README's plan: stage 0 puts an A100-40 and a V100-16 side by side. Every replica row shows its own
    peak against its own GPU's capacity (the old table paired the stage's max peak with its min capacity)."""
    plan = ROOT / "examples" / "plans" / "opt350m_hetero.json"
    est = json.loads(sim(plan, "--json").stdout)
    for st in est["stages"]:
        assert len(st["replica_peak_bytes"]) == len(st["gpu_types"]) == len(st["replica_capacity_bytes"])
        assert st["peak_memory_bytes"] == max(st["replica_peak_bytes"])
        assert st["fits_in_memory"] == all(p <= c for p, c in zip(st["replica_peak_bytes"], st["replica_capacity_bytes"]))
    out = sim(plan, extra_env={"COLUMNS": "80"})
    assert out.returncode == 0 and max(len(line) for line in out.stdout.splitlines()) <= 80, out.stdout
    rows = [line.split() for line in out.stdout.splitlines() if "A100-40 x" in line or "V100-16 x" in line]
    assert len(rows) == 4
    for r in rows:
        peak, cap, free, fits = float(r[-4]), float(r[-3]), float(r[-2]), r[-1]
        assert free == pytest.approx(cap - peak, abs=0.011) and (fits == "yes") == (free >= 0)


def test_sailor_plan_with_sailor_data(sailor_data_dir):
    plan = sailor_data_dir / "sailor/Planner/simulations/validation/clariden/OPT-350/N8/plan_config_N8_D2.json"
    out = sim(plan, "--sailor-data", sailor_data_dir, "--model", "OPT-350", "--json")
    assert out.returncode == 0, out.stderr
    est = json.loads(out.stdout)
    assert est["runtime"] == "sailor-deepspeed" and len(est["stages"]) == 4 and est["fits_in_memory"]
    assert not est["estimated_profiles"]


def _mutate(fn):
    data = json.loads(json.dumps(GOOD))
    fn(data)
    return data


@pytest.mark.parametrize("data, expected", [
    ("{oops", "not valid JSON"),
    (_mutate(lambda d: d.update(num_layers=5)), "'num_layers' is 5"),
    (_mutate(lambda d: d["stages"][0]["replicas"].pop()), "stages[1] has 2 replicas but stages[0] has 1"),
    (_mutate(lambda d: d["stages"][0]["replicas"][0].update(gpu_type="B300")), "stages[0].replicas[0]: field 'gpu_type' is 'B300'"),
    (_mutate(lambda d: d["stages"][0]["replicas"][0].update(tp=3)), "TP degree 3 does not divide"),
    (_mutate(lambda d: d.update(micro_batch_size=0)), "'micro_batch_size' must be >= 1, got 0"),
    (_mutate(lambda d: d.update(model="gpt-5")), "unknown model 'gpt-5'"),
])
def test_bad_input_one_line_exit_2(tmp_path, data, expected):
    out = sim(write(tmp_path, data))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], out.stderr


def test_missing_file_and_no_profile(tmp_path):
    out = sim(tmp_path / "nope.json")
    assert out.returncode == 2 and "nope.json: file not found" in out.stderr
    out = sim(write(tmp_path, GOOD), "--no-estimates")
    assert out.returncode == 2 and "no profile for GPU type" in out.stderr


@pytest.mark.parametrize("flag, content, expected", [
    ("--profiles", '{"format": "megatron-sailor-profile/1", "gpu_type": "A100-40", "entries": []}',
     "prof.json: field 'entries' must be a non-empty list"),
    ("--gpu-catalog", '{"A100-40": {"memory_bytes": -5}}', "cat.json: GPU type 'A100-40': field 'memory_bytes'"),
    ("--gpu-catalog", '{"X1": {"memory_bytes": 5}}', "cat.json: new GPU type 'X1' is missing field(s)"),
    ("--network", '{"format": "megatron-sailor-network/1", "class_links": {"warp": {"bw_bytes_per_s": 1}}}',
     "net.json: class_links: key 'warp' must be one of"),
    ("--network", '{"format": "megatron-sailor-network/1", "class_links": {"inter_node": {"bw_bytes_per_s": 0}}}',
     "net.json: class_links.inter_node: field 'bw_bytes_per_s' must be > 0"),
])
def test_bad_data_files(tmp_path, flag, content, expected):
    name = {"--profiles": "prof.json", "--gpu-catalog": "cat.json", "--network": "net.json"}[flag]
    out = sim(write(tmp_path, GOOD), flag, write(tmp_path, content, name))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert expected in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_gpu_catalog_extension_changes_the_estimate(tmp_path):
    cat = write(tmp_path, '{"A100-40": {"usd_per_hour": 100.0}}', "cat.json")
    base = json.loads(sim(write(tmp_path, GOOD), "--json").stdout)
    dear = json.loads(sim(write(tmp_path, GOOD), "--json", "--gpu-catalog", cat).stdout)
    assert dear["gpu_usd_per_iteration"] > base["gpu_usd_per_iteration"]
    assert dear["iteration_time_s"] == base["iteration_time_s"]


def test_planner_runs_without_torch(tmp_path):
    """planner/ must import and run on a machine without torch: block the import and run sailor-sim."""
    code = ("import sys; sys.modules['torch'] = None; from planner.cli_sim import main; "
            f"sys.exit(main([{str(write(tmp_path, GOOD))!r}, '--json']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["iteration_time_s"] > 0
