"""SLURM batch scripts (launch/slurm.py)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.plan import Plan, Replica, Stage
from launch.assign import assign
from launch.inventory import Inventory, Node
from launch.slurm import SlurmOptions, render_sbatch
from launch.torchrun_cmds import LaunchConfig, build_commands

REPO = Path(__file__).resolve().parents[2]
NODES_YAML = """nodes:
  - {host: gpu-a1, gpu_type: A100, zone: z-a, gpus_per_node: 4}
  - {host: gpu-v1, gpu_type: V100, zone: z-b, gpus_per_node: 1}
  - {host: gpu-v2, gpu_type: V100, zone: z-b, gpus_per_node: 1}
"""


def _plan() -> Plan:
    a, v = Replica("A100", 2, "z-a"), Replica("V100", 1, "z-b")
    return Plan(num_layers=2, stages=(Stage(0, 1, (a, v)), Stage(1, 1, (Replica("A100", 1, "z-a"), v))),
                micro_batch_size=1, global_batch_size=2)


def _inventory(hosts: tuple[str, ...] = ("gpu-a1", "gpu-v1", "gpu-v2")) -> Inventory:
    spec = (("A100", "z-a", 4), ("V100", "z-b", 1), ("V100", "z-b", 1))
    return Inventory(nodes=tuple(Node(host=h, name=f"n{i}", gpu_type=g, zone=z, gpus_per_node=n)
                                 for i, (h, (g, z, n)) in enumerate(zip(hosts, spec))))


def _render(opts: SlurmOptions, hosts: tuple[str, ...] = ("gpu-a1", "gpu-v1", "gpu-v2")) -> str:
    assignment = assign(_plan(), _inventory(hosts))
    cmds = build_commands(assignment, LaunchConfig(plan_path="plan.json", script_args=("--train-iters", "5")))
    return render_sbatch(assignment, cmds, opts)


def _bash_n(text: str, tmp_path: Path) -> int:
    path = tmp_path / "job.sbatch"
    path.write_text(text)
    return subprocess.run(["bash", "-n", str(path)]).returncode


def test_hetjob_has_one_component_per_pool(tmp_path: Path) -> None:
    text = _render(SlurmOptions(partition="gpu", time_limit="01:00:00", workdir="/shared/run"))
    assert _bash_n(text, tmp_path) == 0
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert directives.count("#SBATCH hetjob") == 1
    assert "#SBATCH --nodelist=gpu-a1" in directives and "#SBATCH --nodelist=gpu-v1,gpu-v2" in directives
    assert "#SBATCH --gres=gpu:4" in directives and "#SBATCH --gres=gpu:1" in directives
    assert directives.count("#SBATCH --partition=gpu") == 2
    sruns = [line for line in text.splitlines() if line.startswith("srun ")]
    assert [s.split()[1] for s in sruns] == ["--het-group=0", "--het-group=1", "--het-group=1"]
    assert all(s.endswith("&") and "--sailor-plan plan.json --train-iters 5" in s for s in sruns)
    words = shlex.split(sruns[0].rstrip("&"))
    assert "--nodelist=gpu-a1" in words and "SAILOR_RANK_MAP=0,1,3" in words and "torchrun" in words
    assert "cd /shared/run" in text and 'exit "$status"' in text


def test_single_allocation(tmp_path: Path) -> None:
    text = _render(SlurmOptions(hetjob=False))
    assert _bash_n(text, tmp_path) == 0
    assert "hetjob" not in text and "--het-group" not in text and "--gres" not in text
    assert "#SBATCH --nodes=3" in text and "#SBATCH --nodelist=gpu-a1,gpu-v1,gpu-v2" in text
    assert "#SBATCH --exclusive" in text


def test_loopback_hosts_are_refused() -> None:
    with pytest.raises(InputError, match="node 'n0' has loopback host 'localhost'"):
        _render(SlurmOptions(), hosts=("localhost", "gpu-v1", "gpu-v2"))


def test_cli_writes_script_and_reports_errors(tmp_path: Path) -> None:
    plan_path, nodes_path = tmp_path / "plan.json", tmp_path / "nodes.yaml"
    _plan().save(plan_path)
    nodes_path.write_text(NODES_YAML)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "launch.slurm", str(plan_path), "--nodes-file", str(nodes_path),
            "--partition", "p1"]
    proc = subprocess.run(argv + ["--", "--lr", "1e-4"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#!/bin/bash\n") and "--lr 1e-4 &" in proc.stdout
    assert _bash_n(proc.stdout, tmp_path) == 0
    nodes_path.write_text(NODES_YAML.replace("gpus_per_node: 4", "gpus_per_node: 1"))
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and "needs 3 A100 GPU(s) in zone z-a" in proc.stderr
