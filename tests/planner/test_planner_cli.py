"""sailor-plan: outputs, files, traces, comparators and bad input (one line, exit status 2, no plan file)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from planner.cli_plan import main
from planner.plan import Plan
from planner.simulator import Estimate

SAILOR_DIR = Path(os.environ.get("SAILOR_DATA", Path(__file__).resolve().parents[3] / "shared" / "data" / "sailor"))
BASIC = ["--model", "opt-350m", "--gpus", "A100-40@us-central1-a=32"]


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def need_sailor():
    if not (SAILOR_DIR / "sailor" / "Planner").is_dir():
        pytest.skip(f"Sailor data folder not found at {SAILOR_DIR} (set SAILOR_DATA)")
    return ["--sailor-data", str(SAILOR_DIR), "--model", "OPT-350"]


def test_fresh_install_command_prints_summary(capsys):
    rc, out, _ = run(capsys, *BASIC)
    assert rc == 0
    assert "it/s" in out and "tokens/s" in out and "$" in out and "comparator" in out and "bottleneck" in out


def test_json_output_and_plan_file_roundtrip(capsys, tmp_path):
    path = tmp_path / "plan.json"
    rc, out, _ = run(capsys, *BASIC, "--json", "-o", str(path))
    assert rc == 0
    data = json.loads(out)
    assert {"plan", "estimate", "search_time_s", "candidates_evaluated"} <= set(data)
    assert set(data["estimate"]) == set(Estimate.__dataclass_fields__)
    plan = Plan.from_dict(data["plan"])
    assert Plan.load(path) == plan
    assert data["estimate"]["fits_in_memory"] is True
    from planner.cli_sim import main as sim_main
    assert sim_main([str(path), "--model", "opt-350m", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["iteration_time_s"] == pytest.approx(data["estimate"]["iteration_time_s"], rel=1e-12)


def test_grid_planner_and_top_k(capsys):
    rc, out, _ = run(capsys, *BASIC, "--planner", "grid", "--json")
    assert rc == 0
    grid = json.loads(out)
    rc, out, _ = run(capsys, *BASIC, "--json", "--top", "3")
    ours = json.loads(out)
    assert ours["estimate"]["throughput_iters_per_s"] >= grid["estimate"]["throughput_iters_per_s"] * (1 - 1e-12)
    assert len(ours["alternatives"]) == 2
    assert ours["comparator"]["throughput_iters_per_s"] == pytest.approx(grid["estimate"]["throughput_iters_per_s"])


def test_cluster_file_and_trace(capsys, tmp_path):
    cl = tmp_path / "c.yaml"
    cl.write_text("pools:\n  - {gpu_type: A100-40, zone: us-central1-a, count: 8, gpus_per_node: 4}\n"
                  "  - {gpu_type: V100-16, zone: us-central1-b, count: 8}\n")
    rc, out, _ = run(capsys, "--model", "opt-350m", "--cluster", str(cl), "--json")
    assert rc == 0 and json.loads(out)["plan"]["stages"]
    tr = tmp_path / "t.csv"
    tr.write_text(",Timestamp,A100-40_us-central1-a,V100-16_us-central1-a\n0,1,8,0\n1,2,8,16\n2,3,0,0\n")
    rc, out, _ = run(capsys, "--model", "opt-350m", "--trace", str(tr), "--json")
    assert rc == 0
    steps = json.loads(out)["steps"]
    assert len(steps) == 3 and "plan" in steps[0] and "plan" in steps[1] and "no GPUs" in steps[2]["error"]
    rc, out, _ = run(capsys, "--model", "opt-350m", "--trace", str(tr))
    assert rc == 0 and "step" in out


@pytest.mark.parametrize("argv,needle", [
    (["--model", "opt-350m", "--gpus", "A100-40@z-a=0"], "no GPUs"),
    (["--model", "opt-350m"], "no GPUs"),
    (["--model", "opt-350m", "--gpus", "B300@z-a=8"], "unknown GPU type 'B300'"),
    (["--model", "opt-350m", "--gpus", "A100-40@us-a=8", "--max-cost-per-iter", "0.0001"], "over by $"),
    (["--model", "opt-350m", "--gpus", "A100-40@us-a=8", "--min-throughput", "50"], "short by"),
    (["--model", "llama-3-8b", "--gpus", "V100-16@us-a=2"], "fits on no available GPU"),
    (["--model", "opt-350m", "--gpus", "A100-40@us-a=8", "--max-gpus", "0"], "max_gpus must be > 0"),
    (["--model", "nosuch", "--gpus", "A100-40@us-a=8"], "unknown model"),
    (["--model", "opt-350m", "--gpus", "A100-40@us-a=8", "--chain-segments", "0"], "--chain-segments must be"),
    (["--model", "opt-350m", "--gpus", "A100-40@us-a=8", "--chain-segments", "9"], "--chain-segments must be"),
])
def test_bad_input_exits_2_with_one_line(capsys, tmp_path, argv, needle):
    path = tmp_path / "plan.json"
    rc, out, err = run(capsys, *argv, "-o", str(path))
    assert rc == 2
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1
    assert not path.exists()


def test_floor_and_budget_messages_give_amounts(capsys):
    rc, _, err = run(capsys, "--model", "opt-350m", "--gpus", "A100-40@us-a=8", "--min-throughput", "50")
    assert rc == 2 and "--min-throughput 50 it/s is out of reach: the fastest plan reaches" in err


def test_sailor_data_heterogeneous_plan(capsys):
    base = need_sailor()
    rc, out, _ = run(capsys, *base, "--gpus", "A100-40@us-central1-a=32,V100-16@us-central1-a=96", "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["estimate"]["fits_in_memory"] and data["plan"]["global_batch_size"] == 1024


def test_cost_objective_returns_multi_stage_plan_when_cheaper(capsys):
    base = need_sailor()
    # two zones: a pipeline keeps the slow cross-zone gradient sync off the critical path (with Sailor's fits
    # read per node pair, one zone's A100 data parallelism is cheapest as a single stage)
    gpus = ["--gpus", "A100-40@us-central1-a=16,A100-40@us-central1-b=16", "--min-throughput", "0.1"]
    rc, out, _ = run(capsys, *base, *gpus, "--objective", "cost", "--json", "--no-comparator")
    assert rc == 0
    best = json.loads(out)
    rc, out, _ = run(capsys, *base, *gpus, "--objective", "cost", "--json", "--no-comparator", "--max-stages", "1")
    single = json.loads(out)
    assert len(best["plan"]["stages"]) > 1
    assert best["estimate"]["cost_per_iteration_usd"] < single["estimate"]["cost_per_iteration_usd"]
    assert best["estimate"]["throughput_iters_per_s"] >= 0.1


def test_plan_and_sim_report_heterogeneous_mfu(capsys, tmp_path):
    """sailor-plan --json and sailor-sim --json carry the plan's and every stage's MFU; the tables show it."""
    from planner.cli_sim import main as sim_main
    path = tmp_path / "plan.json"
    rc, out, _ = run(capsys, "--model", "opt-350m", "--gpus", "A100-40@us-central1-a=8,V100-16@us-central1-a=8",
                     "--json", "--no-comparator", "-o", str(path))
    assert rc == 0
    est = json.loads(out)["estimate"]
    assert 0 < est["mfu"] < 1 and est["peak_flops_per_s"] > 0
    assert est["mfu"] == pytest.approx(est["model_flops_per_s"] / est["peak_flops_per_s"], rel=1e-12)
    assert all(0 < st["mfu"] < 1 for st in est["stages"])
    assert sum(st["peak_flops_per_s"] for st in est["stages"]) == pytest.approx(est["peak_flops_per_s"], rel=1e-12)
    assert sim_main([str(path), "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["mfu"] == pytest.approx(est["mfu"], rel=1e-12)
    assert sim_main([str(path)]) == 0
    assert "MFU" in capsys.readouterr().out
    rc, out, _ = run(capsys, *BASIC, "--no-comparator")
    assert rc == 0 and "MFU" in out


def test_chain_plans_written_and_flag_leaves_them_out(capsys, tmp_path):
    """A cluster where only a chain plan fits (each zone too small for a pool pipeline, a whole model too big
    for one GPU): sailor-plan writes a plan whose pipelines cross zones, sailor-sim scores it the same, every
    stage carries the sync mode the estimate assumed; --chain-segments 1 finds nothing and says so."""
    cat = tmp_path / "cat.json"
    cat.write_text(json.dumps({"V100-16": {"memory_bytes": int(0.65 * 1024 ** 3)}}))
    model = tmp_path / "m.json"
    model.write_text(json.dumps({"name": "chainwin", "num_layers": 4, "hidden_size": 1024, "num_heads": 8,
                                 "ffn_hidden_size": 4096, "seq_length": 256, "vocab_size": 1024,
                                 "max_position_embeddings": 256}))
    base = ["--model", str(model), "--gpu-catalog", str(cat), "--gpus", "V100-16@us-a=3,V100-16@eu-b=2",
            "--gbs", "4", "--max-stages", "3"]
    path = tmp_path / "plan.json"
    rc, out, err = run(capsys, *base, "--json", "-o", str(path))
    assert rc == 0, err
    rep = json.loads(out)
    stages = rep["plan"]["stages"]
    assert len({r["zone"] for st in stages for r in st["replicas"][:1]}) == 2
    assert all(st.get("grad_sync") in ("flat", "hierarchical") for st in stages if len(st["replicas"]) > 1)
    rc, out, err = run(capsys, *base, "--chain-segments", "1", "-o", str(tmp_path / "none.json"))
    assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1
