"""Per-node torchrun commands and the ``python -m launch`` CLI."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from planner.plan import Plan, Replica, Stage
from launch import cli, runner
from launch.assign import assign
from launch.inventory import NodeEmulation, Inventory, Node
from planner.rank_env import plan_rank_from_env
from launch.torchrun_cmds import LaunchConfig, build_commands

REPO = Path(__file__).resolve().parents[2]


def _plan() -> Plan:
    a = Replica(gpu_type="A100", tp=2, zone="z-a")
    v = Replica(gpu_type="V100", tp=1, zone="z-b")
    stages = (Stage(0, 1, (a, v)), Stage(1, 1, (Replica("A100", 1, "z-a"), v)))
    return Plan(num_layers=2, stages=stages, micro_batch_size=1, global_batch_size=2)


def _inventory() -> Inventory:
    return Inventory(nodes=(
        Node(host="a1", gpu_type="A100", zone="z-a", gpus_per_node=4, cpus_per_node=12),
        Node(host="v1", gpu_type="V100", zone="z-b", gpus_per_node=1, emulate=NodeEmulation(2.0, 0.005)),
        Node(host="v2", gpu_type="V100", zone="z-b", gpus_per_node=1)))


def _write_inputs(tmp_path: Path, hosts: tuple[str, str, str] = ("a1", "v1", "v2")) -> tuple[Path, Path]:
    plan_path = tmp_path / "plan.json"
    _plan().save(plan_path)
    inv = [{"host": h, "name": f"n{i}", "gpu_type": g, "zone": z, "gpus_per_node": n}
           for i, (h, g, z, n) in enumerate(zip(hosts, ("A100", "V100", "V100"), ("z-a", "z-b", "z-b"), (4, 1, 1)))]
    nodes_path = tmp_path / "nodes.json"
    nodes_path.write_text(json.dumps({"nodes": inv}))
    return plan_path, nodes_path


def test_commands_carry_topology_and_env() -> None:
    config = LaunchConfig(plan_path="plan.json", script_args=("--train-iters", "3"), master_port=29611)
    cmds = build_commands(assign(_plan(), _inventory()), config)
    assert [(c.node_name, c.node_rank) for c in cmds] == [("a1", 0), ("v1", 1), ("v2", 2)]
    a1, v1, v2 = (dict(c.env) for c in cmds)
    assert a1["SAILOR_RANK_MAP"] == "0,1,3" and v1["SAILOR_RANK_MAP"] == "2" and v2["SAILOR_RANK_MAP"] == "4"
    assert a1["OMP_NUM_THREADS"] == "4" and v1["OMP_NUM_THREADS"] == "1"
    assert a1["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and "CUDA_DEVICE_MAX_CONNECTIONS" not in v1
    assert v1["SAILOR_EMULATE_SLOWDOWN"] == "2.0" and "SAILOR_EMULATE_SLOWDOWN" not in v2
    assert {d["SAILOR_WORLD_SIZE"] for d in (a1, v1, v2)} == {"5"}
    argv = cmds[0].argv
    assert argv[:8] == ("torchrun", "--nnodes=3", "--nproc-per-node=3", "--node-rank=0", "--rdzv-backend=c10d",
                        "--rdzv-endpoint=a1:29611", "--rdzv-id=sailor", "--max-restarts=0")
    assert argv[8:] == ("--module", "megatron_sailor.train", "--sailor-plan", "plan.json", "--train-iters", "3")
    assert cmds[1].argv[1:4] == ("--nnodes=3", "--nproc-per-node=1", "--node-rank=1")
    assert all("--rdzv-endpoint=a1:29611" in c.argv for c in cmds)


def test_default_entry_is_the_training_module_and_script_overrides_it() -> None:
    import importlib.util
    from planner.rank_env import TRAIN_MODULE
    assert importlib.util.find_spec(f"{TRAIN_MODULE}.__main__") is not None
    cmds = build_commands(assign(_plan(), _inventory()), LaunchConfig(plan_path="p.json", script="my/train.py"))
    assert cmds[0].argv[8:] == ("my/train.py", "--sailor-plan", "p.json")


def test_every_worker_gets_its_plan_rank() -> None:
    cmds = build_commands(assign(_plan(), _inventory()), LaunchConfig(plan_path="p.json"))
    got = {}
    for cmd in cmds:
        nproc = int(next(a for a in cmd.argv if a.startswith("--nproc-per-node=")).split("=")[1])
        for local in range(nproc):
            env = {**dict(cmd.env), "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(nproc), "WORLD_SIZE": "5"}
            got[plan_rank_from_env(env)] = (cmd.node_name, local)
    assert got == {0: ("a1", 0), 1: ("a1", 1), 2: ("v1", 0), 3: ("a1", 2), 4: ("v2", 0)}


def test_shell_line_quotes_words() -> None:
    config = LaunchConfig(plan_path="my plan.json", script_args=("--name", "a b"))
    line = build_commands(assign(_plan(), _inventory()), config)[0].shell()
    words = shlex.split(line)
    assert words[words.index("--sailor-plan") + 1] == "my plan.json" and words[-1] == "a b"


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "launch", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


def test_cli_dry_run_prints_a_valid_script(tmp_path: Path) -> None:
    plan_path, nodes_path = _write_inputs(tmp_path)
    proc = _run_cli(str(plan_path), "--nodes-file", str(nodes_path), "--dry-run", "--", "--train-iters", "2")
    assert proc.returncode == 0, proc.stderr
    commands = [line for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert len(commands) == 3 and all(" torchrun --nnodes=3 " in c for c in commands)
    assert all(c.endswith("--train-iters 2") for c in commands)
    script = tmp_path / "dry.sh"
    script.write_text(proc.stdout)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


@pytest.mark.parametrize("hosts, message", [
    (("a1", "v1", "v1"), "duplicate host 'v1'"),
    (("a1", "v1", "a1"), "duplicate host 'a1'"),
])
def test_cli_bad_inventory_exits_2_one_line(tmp_path: Path, hosts: tuple[str, str, str], message: str) -> None:
    plan_path, nodes_path = _write_inputs(tmp_path, hosts)
    proc = _run_cli(str(plan_path), "--nodes-file", str(nodes_path), "--dry-run")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_too_few_gpus_names_the_resource(tmp_path: Path) -> None:
    plan_path, _ = _write_inputs(tmp_path)
    nodes = tmp_path / "few.yaml"
    nodes.write_text("nodes:\n  - {host: a1, gpu_type: A100, zone: z-a, gpus_per_node: 4}\n"
                     "  - {host: v1, gpu_type: V100, zone: z-b, gpus_per_node: 1}\n")
    proc = _run_cli(str(plan_path), "--nodes-file", str(nodes), "--dry-run")
    assert proc.returncode == 2
    assert "needs 2 V100 GPU(s) in zone z-b but the inventory has only 1 (v1)" in proc.stderr


def test_unreachable_host_launches_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture) -> None:
    plan_path, nodes_path = _write_inputs(tmp_path, ("localhost", "v1", "no-such-host"))
    resolved: list[str] = []

    def fake_resolver(host: str, port: object) -> list:
        resolved.append(host)
        if host == "no-such-host":
            raise OSError("Name or service not known")
        return [("fake",)]

    monkeypatch.setattr(runner.socket, "getaddrinfo", fake_resolver)
    monkeypatch.setattr(cli, "run_commands", lambda *a, **k: pytest.fail("launched despite a bad host"))
    assert cli.main([str(plan_path), "--nodes-file", str(nodes_path)]) == 2
    err = capsys.readouterr().err
    assert "node 'n2': host 'no-such-host' is unreachable" in err and "nothing was launched" in err
    assert resolved[:2] == ["localhost", "v1"]


def test_localhost_resolves_without_network() -> None:
    cmds = build_commands(assign(_plan(), Inventory(nodes=(
        Node(host="localhost", name="a", gpu_type="A100", zone="z-a", gpus_per_node=4),
        Node(host="127.0.0.1", name="b", gpu_type="V100", zone="z-b", gpus_per_node=2)))),
        LaunchConfig(plan_path="p.json"))
    runner.check_hosts(cmds)
    assert all(runner.is_local_host(c.host) for c in cmds)
    argv, env = runner.process_argv(cmds[0], "/tmp")
    assert argv[0] == "torchrun" and env is not None and env["SAILOR_RANK_MAP"] == "0,1,3"
    remote = cmds[0].__class__(node_name="r", host="gpu-7.cluster", node_rank=0, env=(("A", "1"),),
                               argv=("torchrun", "x.py"))
    argv, env = runner.process_argv(remote, "/work dir")
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"] and env is None
    assert argv[3:] == ["--", "gpu-7.cluster", "cd '/work dir' && A=1 torchrun x.py"]


def test_cli_node_option_runs_one_node_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture) -> None:
    plan_path, nodes_path = _write_inputs(tmp_path, ("localhost", "v1.cluster", "v2.cluster"))
    checked: list[str] = []
    monkeypatch.setattr(runner.socket, "getaddrinfo", lambda host, port: checked.append(host) or [()])
    calls: list[tuple] = []
    monkeypatch.setattr(cli, "run_commands", lambda cmds, **kw: calls.append((cmds, kw)) or 0)
    assert cli.main([str(plan_path), "--nodes-file", str(nodes_path), "--node", "n2"]) == 0
    (cmds, kw), = calls
    assert [c.node_name for c in cmds] == ["n2"] and kw == {"force_local": True}
    assert checked == ["localhost", "v2.cluster"]
    assert cli.main([str(plan_path), "--nodes-file", str(nodes_path), "--node", "n9"]) == 2
    assert "--node 'n9' runs nothing" in capsys.readouterr().err
