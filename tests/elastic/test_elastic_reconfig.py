"""sailor-elastic across (emulated) nodes and faults during reconfiguration (slow: real torchrun jobs).

Each test ends at the target iteration with the reference run's loss sequence (1e-5 relative) and every
sample consumed exactly once (tests/elastic/reference.py). "Nodes" are torchrun agents on loopback
addresses (localhost, 127.0.0.1, 127.0.0.2) with their own rank maps; the iteration-unit trace pauses the job
at each change point, so the change iterations are exact.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.elastic.reference import ELASTIC_JOB, ITERS, _check_losses, _check_samples, _events, _steps
from tests.helpers.launch import REPO, python

pytestmark = pytest.mark.slow


def _node(name: str, gpus: int, host: str) -> dict:
    return {"host": host, "name": name, "gpu_type": "cpu", "zone": "local", "gpus_per_node": gpus}


def _write_nodes(path: Path, nodes: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump({"nodes": nodes}))
    os.replace(tmp, path)


def _args(tmp: Path, trace: list[dict], nodes: list[dict] | None = None, max_failures: int = 1) -> list[str]:
    (tmp / "trace.json").write_text(json.dumps(trace))
    extra = []
    if nodes is not None:
        _write_nodes(tmp / "nodes.yaml", nodes)
        extra = ["--nodes-file", str(tmp / "nodes.yaml")]
    return ["-m", "launch.elastic.cli", "--trace", str(tmp / "trace.json"), "--time-unit", "iter", *extra,
            "--planner", "cpu-demo", "--gbs", "8", "--train-iters", str(ITERS), "--work-dir", str(tmp / "work"),
            "--max-restarts", "2", "--max-failures", str(max_failures), "--", *ELASTIC_JOB]


def _check_run(work: Path, reference: dict) -> dict:
    steps = _steps(_events(sorted(work.glob("events_*.jsonl"))))
    _check_losses(steps, reference["losses"])
    _check_samples(steps)
    return json.loads((work / "report.json").read_text())


@pytest.mark.timeout(420)
def test_three_nodes_join_leave_and_one_dies_while_the_new_job_starts(reference: dict, tmp_path: Path) -> None:
    """3 GPUs (b:1, a:2) -> 4 (c joins; its node dies while the new job starts) -> 2 (c gone, a down to 1)."""
    nodes = [_node("b", 1, "127.0.0.1"), _node("a", 2, "localhost"), _node("c", 1, "127.0.0.2")]
    trace = [{"Time": 0, "GPUs": 3}, {"Time": 3, "GPUs": 4}, {"Time": 6, "GPUs": 2}]
    # plan rank 3 runs on node c: it kills its node; rank 0 (node a) pauses 3 s before it reports "waiting",
    # so the controller sees the dead node before it would stop job 0 for the hand-over
    fault = "job=1,attempt=0,rank=3,when=start,action=kill-node;job=1,attempt=0,rank=0,when=start,action=sleep:3"
    proc = python(_args(tmp_path, trace, nodes, max_failures=2), timeout_s=400,
                  extra_env={"SAILOR_FAULT_INJECT": fault})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    work = tmp_path / "work"
    report = _check_run(work, reference)
    assert [(j["ranks"], j["nodes"]) for j in report["jobs"]] == [(3, ["b", "a"]), (4, ["a", "b", "c"]),
                                                                  (2, ["b", "a"])]
    assert report["failures"] == 1 and "job 1 exited with status" in out and "before taking over" in out
    loads = [e["iteration"] for e in _events([work / "events_2.jsonl"]) if e["event"] == "loaded"]
    assert loads == [6]                      # job 0 trained on to the next change; job 2 resumed there
    assert "rank(s) on b:1, a:2" in out and "rank(s) on a:2, b:1, c:1" in out and "rank(s) on b:1, a:1" in out


@pytest.mark.timeout(420)
def test_second_change_during_the_checkpoint(reference: dict, tmp_path: Path) -> None:
    """4 GPUs on a, b -> 2 at iteration 3 (a); while job 0 writes its stop checkpoint (slowed to 3 s) the
    inventory file changes so that the 2 GPUs are b's: the controller finishes the hand-over, then switches."""
    nodes = [_node("a", 2, "localhost"), _node("b", 2, "127.0.0.1")]
    trace = [{"Time": 0, "GPUs": 4}, {"Time": 3, "GPUs": 2}]
    fault = "job=0,attempt=0,rank=0,iteration=3,when=save,action=sleep:3"
    args = _args(tmp_path, trace, nodes)
    work = tmp_path / "work"
    seen: dict = {}

    def rewrite_during_checkpoint() -> None:
        deadline = time.time() + 380
        while time.time() < deadline:
            ev = _events([work / "events_0.jsonl"]) if (work / "events_0.jsonl").is_file() else []
            if any(e["event"] == "stop_seen" for e in ev):
                _write_nodes(tmp_path / "nodes.yaml", list(reversed(nodes)))
                seen["t"] = time.time()
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=rewrite_during_checkpoint, daemon=True)
    watcher.start()
    proc = python(args, timeout_s=400, extra_env={"SAILOR_FAULT_INJECT": fault})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    saved = [e for e in _events([work / "events_0.jsonl"]) if e["event"] == "saved" and e["iteration"] == 3]
    assert "t" in seen and saved and seen["t"] < saved[0]["t_unix_s"]     # the change came during the save
    report = _check_run(work, reference)
    assert [(j["ranks"], j["nodes"]) for j in report["jobs"]] == [(4, ["a", "b"]), (2, ["a"]), (2, ["b"])]
    assert report["failures"] == 0


@pytest.mark.timeout(420)
def test_controller_killed_and_restarted_resumes_from_its_state(reference: dict, tmp_path: Path) -> None:
    """SIGKILL the controller while job 1 (2 ranks) starts up beside the held job 0; a new controller on the
    same work folder stops both (job 0 with a checkpoint) and finishes the run."""
    trace = [{"Time": 0, "GPUs": 4}, {"Time": 3, "GPUs": 2}]
    cmd = [sys.executable, *_args(tmp_path, trace)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    work = tmp_path / "work"
    first = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 300
        while not (work / "job_1.log").exists() and time.time() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert (work / "job_1.log").exists(), "job 1 never started"
        time.sleep(0.5)                                     # let the state file record job 1
        first.send_signal(signal.SIGKILL)
        first.wait()
        state = json.loads((work / "state.json").read_text())
        assert not state["finished"] and [j["index"] for j in state["live_jobs"]] == [0, 1]
        second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=380)
    finally:
        if first.poll() is None:
            first.kill()
    out = second.stdout + second.stderr
    assert second.returncode == 0, out[-4000:]
    assert "resuming from" in out and "2 job(s) started before" in out
    report = _check_run(work, reference)
    assert [j["index"] for j in report["jobs"]] == [2] and report["jobs"][0]["ranks"] == 2
    loads = [e["iteration"] for e in _events([work / "events_2.jsonl"]) if e["event"] == "loaded"]
    assert loads == [3]                                     # job 0's stop checkpoint
    assert json.loads((work / "state.json").read_text())["finished"]


@pytest.mark.timeout(300)
def test_rank_killed_in_the_first_iteration_of_the_new_plan(reference: dict, tmp_path: Path) -> None:
    trace = [{"Time": 0, "GPUs": 4}, {"Time": 3, "GPUs": 2}]
    fault = "job=1,attempt=0,rank=1,iteration=3,when=step"
    proc = python(_args(tmp_path, trace), timeout_s=280, extra_env={"SAILOR_FAULT_INJECT": fault})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    work = tmp_path / "work"
    report = _check_run(work, reference)
    loads = [(e["attempt"], e["iteration"]) for e in _events([work / "events_1.jsonl"]) if e["event"] == "loaded"]
    assert loads == [(0, 3), (1, 3)]                      # torchrun restarted job 1 from the hand-over checkpoint
    assert [j["ranks"] for j in report["jobs"]] == [4, 2] and report["failures"] == 0


@pytest.mark.timeout(300)
def test_warm_standby_keeps_the_loss_sequence(reference: dict, tmp_path: Path) -> None:
    """--warm-standby: jobs forked from one warm interpreter, 4 -> 2 -> 4 ranks, same losses and samples."""
    trace = [{"Time": 0, "GPUs": 4}, {"Time": 3, "GPUs": 2}, {"Time": 6, "GPUs": 4}]
    args = _args(tmp_path, trace)
    proc = python([*args[:args.index("--")], "--warm-standby", *args[args.index("--"):]], timeout_s=280)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    work = tmp_path / "work"
    report = _check_run(work, reference)
    assert [j["ranks"] for j in report["jobs"]] == [4, 2, 4] and "warm standby started" in out
    assert not list(work.glob("job_*.n1.log")) and (work / "standby" / "job_2.rc").is_file()
    assert [r["resumed_iteration"] for r in report["reconfigurations"]] == [3, 6]
