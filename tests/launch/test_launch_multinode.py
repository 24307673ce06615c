"""End to end: the generated per-node commands, run as several local "nodes" (one torchrun each, c10d
rendezvous on localhost, --nnodes > 1, uneven processes per node, a non-identity rank map)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planner.plan import Plan, Replica, Stage
from tests.helpers.launch import free_port, tiny_model_args

REPO = Path(__file__).resolve().parents[2]

# A tiny gloo program of our own: remaps to the plan rank exactly as the runtime must, then checks
# collectives and reports where every plan rank ran.
GLOO_SCRIPT = '''
import argparse, json, os
import torch
import torch.distributed as dist
from planner.rank_env import rank_and_world_from_env

parser = argparse.ArgumentParser()
parser.add_argument("--sailor-plan", required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()
torchrun_rank = int(os.environ["RANK"])
plan_rank, world = rank_and_world_from_env(os.environ)
os.environ["RANK"] = str(plan_rank)
dist.init_process_group("gloo", rank=plan_rank, world_size=world)
total = torch.tensor([float(plan_rank)])
dist.all_reduce(total)
info = {"plan_rank": dist.get_rank(), "torchrun_rank": torchrun_rank, "node": os.environ["SAILOR_NODE_NAME"],
        "local_rank": int(os.environ["LOCAL_RANK"]), "sum": total.item(),
        "slowdown": os.environ.get("SAILOR_EMULATE_SLOWDOWN")}
everyone = [None] * world
dist.all_gather_object(everyone, info)
if dist.get_rank() == 0:
    with open(args.out, "w") as f:
        json.dump(everyone, f)
dist.barrier()
dist.destroy_process_group()
'''


def _write_inputs(tmp_path: Path, plan: Plan, gpus: tuple[int, int]) -> tuple[Path, Path]:
    plan_path, nodes_path = tmp_path / "plan.json", tmp_path / "nodes.yaml"
    plan.save(plan_path)
    nodes_path.write_text(
        "nodes:\n"
        f"  - {{host: localhost, name: node-a, gpu_type: A100, zone: z-a, gpus_per_node: {gpus[0]}}}\n"
        f"  - {{host: 127.0.0.1, name: node-b, gpu_type: V100, zone: z-b, gpus_per_node: {gpus[1]},"
        " emulate: {slowdown: 2.0, link_delay_s: 0.0}}\n")
    return plan_path, nodes_path


def _launch(plan_path: Path, nodes_path: Path, script: Path | None, script_args: list[str],
            timeout_s: int) -> subprocess.CompletedProcess:
    """``python -m launch``; ``script=None``: the default entry (torchrun --module megatron_sailor.train)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "launch", str(plan_path), "--nodes-file", str(nodes_path),
            *(["--script", str(script)] if script else []), "--master-port", str(free_port()),
            "--run-id", f"test-{os.getpid()}",
            "--torchrun", f"{sys.executable} -m torch.distributed.run", "--", *script_args]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_gloo_all_reduce_across_two_local_nodes(tmp_path: Path) -> None:
    a2, a1, v = Replica("A100", 2, "z-a"), Replica("A100", 1, "z-a"), Replica("V100", 1, "z-b")
    plan = Plan(num_layers=2, stages=(Stage(0, 1, (a2, v)), Stage(1, 1, (a1, v))), micro_batch_size=1,
                global_batch_size=2)
    plan_path, nodes_path = _write_inputs(tmp_path, plan, gpus=(3, 2))
    script = tmp_path / "gloo_check.py"
    script.write_text(GLOO_SCRIPT)
    out = tmp_path / "ranks.json"
    proc = _launch(plan_path, nodes_path, script, ["--out", str(out)], timeout_s=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    everyone = json.loads(out.read_text())
    assert [e["plan_rank"] for e in everyone] == [0, 1, 2, 3, 4]
    assert {e["sum"] for e in everyone} == {10.0}
    where = {e["plan_rank"]: (e["node"], e["local_rank"]) for e in everyone}
    assert where == {0: ("node-a", 0), 1: ("node-a", 1), 2: ("node-b", 0), 3: ("node-a", 2), 4: ("node-b", 1)}
    assert {e["slowdown"] for e in everyone if e["node"] == "node-b"} == {"2.0"}
    assert {e["slowdown"] for e in everyone if e["node"] == "node-a"} == {None}
    # torchrun numbers each node's workers contiguously; the plan order interleaves the nodes here.
    assert sorted(e["torchrun_rank"] for e in everyone) == [0, 1, 2, 3, 4]
    assert any(e["torchrun_rank"] != e["plan_rank"] for e in everyone)
    for node in ("node-a", "node-b"):
        ranks = sorted(e["torchrun_rank"] - e["local_rank"] for e in everyone if e["node"] == node)
        assert len(set(ranks)) == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_training_module_on_two_local_nodes(tmp_path: Path) -> None:
    a, v = Replica("A100", 1, "z-a"), Replica("V100", 1, "z-b")
    plan = Plan(num_layers=2, stages=(Stage(0, 1, (a, v)), Stage(1, 1, (a, v))), micro_batch_size=1,
                global_batch_size=4, model="tiny")
    plan_path, nodes_path = _write_inputs(tmp_path, plan, gpus=(2, 2))
    metrics = tmp_path / "metrics.jsonl"
    args = [*tiny_model_args(num_layers=2, hidden_size=32, seq_length=16), "--train-iters", "3", "--lr", "1e-3",
            "--seed", "1", "--mock-data", "--metrics-file", str(metrics)]
    proc = _launch(plan_path, nodes_path, None, args, timeout_s=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert metrics.exists() and metrics.read_text().strip(), "no metrics written"
