"""sailor-elastic on changing node inventories (fast: fake processes, fake sbatch / squeue / sacct on PATH)."""
from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
import yaml

from launch.elastic.nodes import CommandNodes, FileNodes, TraceOnNodes, availability_of, nodes_for
from launch.elastic.plans import CpuDemoPlanner
from launch.elastic.sources import TraceSource
from launch.inventory import Inventory, Node
from planner.errors import InputError


def _node(name: str, gpus: int, host: str = "127.0.0.1") -> dict:
    return {"host": host, "name": name, "gpu_type": "cpu", "zone": "local", "gpus_per_node": gpus}


def _write(path: Path, nodes: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"nodes": nodes}))
    os.replace(tmp, path)


def test_trace_counts_map_onto_nodes_in_file_order() -> None:
    inv = Inventory((Node("127.0.0.1", "cpu", "local", 1, "b"), Node("localhost", "cpu", "local", 2, "a"),
                     Node("127.0.0.2", "cpu", "local", 1, "c")))
    assert [(n.name, n.gpus_per_node) for n in nodes_for({"cpu@local": 3}, inv)] == [("b", 1), ("a", 2)]
    assert [(n.name, n.gpus_per_node) for n in nodes_for({"cpu@local": 2}, inv)] == [("b", 1), ("a", 1)]
    assert len(nodes_for({"cpu@local": 9}, inv)) == 3 and nodes_for({"cpu@local": 0}, inv) == ()
    with pytest.raises(InputError, match=r"pool\(s\) \['V100@z'\]"):
        nodes_for({"V100@z": 1}, inv)
    src = TraceOnNodes(TraceSource(((0.0, {"cpu@local": 3}), (5.0, {"cpu@local": 4})), unit="iter"), inv)
    assert availability_of(src.poll(0, 5)) == {"cpu@local": 4} and len(src.points) == 2


def test_inventory_file_and_command(tmp_path: Path) -> None:
    f = tmp_path / "nodes.yaml"
    _write(f, [_node("a", 2), _node("b", 1)])
    assert [n.name for n in FileNodes(str(f)).poll(0, 0)] == ["a", "b"]
    _write(f, [])
    assert FileNodes(str(f)).poll(0, 0) == ()
    _write(f, [_node("a", 2), {"host": "x", "gpu_type": "cpu", "zone": "local", "gpus_per_node": 0}])
    with pytest.raises(InputError, match="nodes.yaml.*gpus_per_node.*0"):
        FileNodes(str(f)).poll(0, 0)
    cmd = CommandNodes(f"echo '{json.dumps({'nodes': [_node('z', 3)]})}'")
    assert [(n.name, n.gpus_per_node) for n in cmd.poll(0, 0)] == [("z", 3)]


class _Proc:
    def __init__(self) -> None:
        self.rc = None
        self.procs: list = []

    def poll(self):  # noqa: ANN201
        return self.rc

    def terminate(self) -> None:
        self.rc = -15


class _Backend:
    overlap = True

    def __init__(self) -> None:
        self.calls: list = []

    def start(self, commands, assignment, work, index, workdir, after=None):  # noqa: ANN001, ANN201
        self.calls.append(commands)
        return _Proc()


def _resolver(host: str, port: object) -> object:
    if host.endswith(".invalid"):
        raise OSError("Name or service not known")
    return [()]


def _controller(tmp_path: Path, nodes: list[dict], backend=None):  # noqa: ANN001, ANN202
    from launch.elastic.controller import Controller, ControllerConfig
    f = tmp_path / "nodes.yaml"
    _write(f, nodes)
    cfg = ControllerConfig(work_dir=tmp_path / "w", train_iters=10, train_args=("--mock-data",), poll_s=0.0)
    c = Controller(cfg, FileNodes(str(f)), CpuDemoPlanner(4, 8, "tiny"), backend=backend or _Backend(),
                   resolver=_resolver)
    c.work.mkdir(parents=True)
    return c, f


def _start(c) -> None:  # noqa: ANN001
    from launch.elastic.timings import Reconfiguration
    nodes = c.source.poll(0, 0)
    choice, assignment = c.plan_on(nodes)
    c.job = c.launch(choice, Reconfiguration("start", time.time(), 4, 0.0, "initial", None, 4), assignment=assignment)
    c.last_nodes = nodes


def _maps(commands) -> dict:  # noqa: ANN001
    return {c.node_name: dict(c.env)["SAILOR_RANK_MAP"] for c in commands}


def test_nodes_join_and_leave_relaunch_on_the_nodes_present(tmp_path: Path) -> None:
    c, f = _controller(tmp_path, [_node("b", 1), _node("a", 2, "localhost")])
    _start(c)
    first = c.backend.calls[0]
    assert _maps(first) == {"b": "0", "a": "1,2"}                   # 3 ranks: [1, 3] TP 1 | 2
    assert all("--max-restarts=0" in cmd.argv for cmd in first)     # multi-node: the controller restarts
    endpoints = {a for cmd in first for a in cmd.argv if a.startswith("--rdzv-endpoint=")}
    assert len(endpoints) == 1                                       # one rendezvous, node 0's host
    _write(f, [_node("b", 1), _node("a", 2, "localhost"), _node("c", 1, "127.0.0.2")])
    assert c._step() is None
    assert _maps(c.backend.calls[1]) == {"a": "0,1", "b": "2", "c": "3"}   # c joined: 4 ranks
    old, new = c.job, c.successor
    new.events_path.write_text(json.dumps({"event": "waiting", "t_unix_s": time.time(), "attempt": 0}) + "\n")
    c._step()
    assert old.control.read_text().strip() == "stop"
    old.proc.rc = 0
    c._step()
    assert c.job is new and new.go.exists()
    _write(f, [_node("b", 1), _node("c", 1, "127.0.0.2")])          # a left: forced switch
    c._step()
    assert _maps(c.backend.calls[2]) == {"b": "0", "c": "1"}
    assert new.control.read_text().strip() == "stop"
    state = json.loads((c.work / "state.json").read_text()) if (c.work / "state.json").exists() else None
    c._save_if_changed()
    state = json.loads((c.work / "state.json").read_text())
    assert [j["index"] for j in state["live_jobs"]] == [1, 2] and state["live_jobs"][0]["took_over"]


def test_no_feasible_plan_keeps_the_job_and_says_why(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    c, f = _controller(tmp_path, [_node("a", 2), _node("b", 2)])
    _start(c)
    job = c.job
    _write(f, [_node("a", 2), _node("b", 2), _node("bad", 1, "gpu-9.invalid")])
    with caplog.at_level("INFO"):
        c._step()
    assert c.successor is None and job.control.read_text().strip() == "run"
    line = [r.getMessage() for r in caplog.records if "no feasible plan" in r.getMessage()]
    assert len(line) == 1 and "gpu-9.invalid" in line[0] and "is unreachable" in line[0]
    assert line[0].endswith("job 0 keeps running")
    caplog.clear()
    _write(f, [_node("a", 2)])                      # b lost; the 2-rank plan fits on a (TP 1 x 2)
    c._step()
    assert c.successor is not None and job.control.read_text().strip() == "stop"


def test_lost_nodes_without_a_plan_stop_with_a_checkpoint(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    c, f = _controller(tmp_path, [_node("a", 2), _node("b", 2)])
    _start(c)
    job = c.job
    _write(f, [])
    with caplog.at_level("INFO"):
        c._step()
    assert job.control.read_text().strip() == "stop" and c.successor is None
    assert any("no feasible plan on no nodes (no nodes present); job 0 lost nodes: stopping it with a checkpoint"
               in r.getMessage() for r in caplog.records)
    job.proc.rc = 0
    assert c._step() is None and c.job is None                      # parked, nothing launched
    assert len(c.backend.calls) == 1
    _write(f, [_node("b", 2)])
    assert c._step() is None and c.job is not None and _maps(c.backend.calls[1]) == {"b": "0,1"}


def test_unreachable_initial_inventory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from launch.elastic.cli import main
    f = tmp_path / "nodes.yaml"
    _write(f, [_node("a", 2, "gpu-1.invalid")])
    rc = main(["--nodes-file", str(f), "--planner", "cpu-demo", "--train-iters", "3", "--work-dir",
               str(tmp_path / "w"), "--", "--mock-data", "--lr", "1e-3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: node 'a': host 'gpu-1.invalid' is unreachable")
    assert not (tmp_path / "w").exists()                            # nothing written
    _write(f, [{"host": "h", "gpu_type": "cpu", "zone": "local", "gpus_per_node": 2, "colour": "red"}])
    assert main(["--nodes-file", str(f), "--train-iters", "3", "--work-dir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nodes.yaml" in err[0] and "colour" in err[0]


FAKE = r'''#!/usr/bin/env python3
import json, os, sys
d = os.environ["FAKE_SLURM"]
tool = os.path.basename(sys.argv[0])
with open(os.path.join(d, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps([tool] + sys.argv[1:]) + "\n")
if tool == "sbatch":
    n = len([f for f in os.listdir(d) if f.startswith("job_")]) + 1001
    open(os.path.join(d, f"job_{n}"), "w").write(open(sys.argv[-1]).read())
    print(f"{n};cluster")
elif tool == "squeue":
    jid = sys.argv[sys.argv.index("-j") + 1]
    if not os.path.exists(os.path.join(d, f"done_{jid}")):
        print("RUNNING")
elif tool == "sacct":
    jid = sys.argv[sys.argv.index("-j") + 1]
    print(open(os.path.join(d, f"done_{jid}")).read().strip())
'''


def test_slurm_mode_submits_the_next_hetjob_and_stops_the_running_one(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from launch.elastic.slurm_jobs import SlurmBackend
    from launch.slurm import SlurmOptions
    bin_dir, fake = tmp_path / "bin", tmp_path / "slurm"
    bin_dir.mkdir()
    fake.mkdir()
    for tool in ("sbatch", "squeue", "sacct", "scancel"):
        (bin_dir / tool).write_text(FAKE)
        (bin_dir / tool).chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM", str(fake))
    gpu = [dict(_node("g1", 2, "gpu-n1"), gpu_type="A100"), dict(_node("g2", 2, "gpu-n2"), gpu_type="A100"),
           dict(_node("v1", 2, "gpu-v1"), gpu_type="V100")]
    c, f = _controller(tmp_path, gpu[:2], backend=SlurmBackend(SlurmOptions(partition="p1"), min_poll_s=0.0))
    _start(c)
    calls = [json.loads(x) for x in (fake / "calls.jsonl").read_text().splitlines()]
    assert calls == [["sbatch", "--parsable", str(c.work / "job_0.sbatch")]]
    script = (fake / "job_1001").read_text()
    assert "#SBATCH --nodelist=gpu-n1,gpu-n2" in script and "#SBATCH --partition=p1" in script
    assert "SAILOR_RANK_MAP=0,1" in script and f"--output={c.work / 'job_0.log'}" in script
    assert c.job.proc.poll() is None
    _write(f, gpu[1:])                                   # g1 leaves, a V100 node joins
    c._step()
    assert c.job.control.read_text().strip() == "stop"   # the running job checkpoints and exits
    calls = [json.loads(x) for x in (fake / "calls.jsonl").read_text().splitlines()]
    assert ["sbatch", "--parsable", "--dependency=afterany:1001", str(c.work / "job_1.sbatch")] in calls
    second = (fake / "job_1002").read_text()
    assert "#SBATCH --nodelist=gpu-n2" in second and "gpu-n1" not in second and "--elastic-wait" in second
    (fake / "done_1001").write_text("0:0")              # the old job ended after its checkpoint
    c._step()
    assert c.job.index == 1 and c.job.go.exists()
    (fake / "done_1002").write_text("1:0")
    (c.work / "job_1.log").write_text("error: rank 0: distributed failure: timeout\n")
    c._step()                                             # failed: resubmitted on the nodes present
    assert c.failures == 1 and c.job.index == 2 and (fake / "job_1003").exists()


def test_nodes_command_output_is_read_like_an_inventory_file(tmp_path: Path) -> None:
    """--nodes-command's output is untrusted like an inventory file: the strict YAML reader refuses aliases;
    a failing command is one error naming it."""
    (tmp_path / "inv.yaml").write_text("a: &x [1, 2]\nb: *x\n")
    with pytest.raises(InputError, match="alias"):
        CommandNodes(f"cat {tmp_path / 'inv.yaml'}").poll(0, 0)
    with pytest.raises(InputError, match="exit status 3"):
        CommandNodes("exit 3").poll(0, 0)
