"""End to end: sailor-profile on 2 local gloo ranks (tiny model, micro-batch 1 and 2, TP 1 and 2, network),
then the planner plans from exactly those files, with the model profile taken in 2 round-robin rounds
(``--rounds 2``: probes of both TP degrees kept across rounds, the TP-2 block and the two TP-1 blocks
measuring with barriers between configurations). No timing assertions."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_profile_then_plan(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("WORLD_SIZE", None)
    prof, net, cat = tmp_path / "p.json", tmp_path / "n.json", tmp_path / "c.json"
    cmd = [sys.executable, "-m", "megatron_sailor.profiler.cli", "--model", "tiny", "--mbs", "1", "2",
           "--tp", "1", "2", "--warmup", "1", "--repeats", "2", "--rounds", "2", "--gpu-type", "cpu-test", "-o", str(prof),
           "--network-out", str(net), "--catalog-out", str(cat), "--sizes", "1024", "65536", "262144"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(prof.read_text())
    assert doc["gpu_type"] == "cpu-test" and doc["model"] == "tiny"
    assert sorted((e["mbs"], e["tp"]) for e in doc["entries"]) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    for e in doc["entries"]:
        assert len(e["layers_s"]) == 4 and all(f > 0 and b > 0 for f, b in e["layers_s"])
        assert e["update_s_per_param"] > 0 and e["layer_act_bytes"] > 0
    side = json.loads(Path(str(prof) + ".rounds.json").read_text())
    assert sorted((c["tp"], c["mbs"]) for c in side["configurations"]) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert all(len(v) == 2 for c in side["configurations"] for v in c["values"].values())
    # TP 2 holds half of a layer's sharded parameters
    pb = doc["param_bytes"]
    assert pb["2"]["layer"] < pb["1"]["layer"]
    entry = json.loads(cat.read_text())["cpu-test"]
    assert entry["gpus_per_node"] == 2 and entry["intra_node_bw_bytes_per_s"] > 0
    assert "inter_node" in json.loads(net.read_text())["class_links"]
    plan_path = tmp_path / "plan.json"
    plan = subprocess.run([sys.executable, "-m", "planner.cli_plan", "--model", "tiny", "--gpus", "cpu-test@z=2",
                           "--profiles", str(prof), "--gpu-catalog", str(cat), "--network", str(net),
                           "--gbs", "8", "--no-estimates", "--no-comparator", "-o", str(plan_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan_path.read_text())["stages"]
