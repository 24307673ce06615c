"""Checkpoint resharding and fault tests on CPU/gloo (slow: several torchrun launches, each under a timeout).

One uninterrupted 4-rank run (3 stages, layers [1, 2, 1], TP 2 | 1 | 1, micro-batch 2; asynchronous periodic
saves) is the reference:
* resume its iteration-4 checkpoint on 2 ranks (2 stages [2, 2], TP 1, micro-batch 1): same losses;
* sailor-elastic on a static 4-GPU trace with a rank SIGKILLed mid-training and rank 0 SIGKILLed while
  writing a checkpoint: torchrun restarts the job twice, the previous checkpoint loads, same final weights;
* sailor-elastic on a 4 -> 2 -> 4 trace: same loss sequence, no sample skipped or repeated, timings logged;
* a truncated newest checkpoint is refused (older one used), another model's checkpoint stops the run.
Adam eps = 1e-4 as in the runtime's correctness tests (docs/RUNTIME.md).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from launch.elastic.plans import demo_plan_dict
from tests.elastic.reference import (COMMON, EAGER, ELASTIC_JOB, ITERS, _check_losses, _check_samples, _events,
                                     _full, _max_diff, _plan, _steps)
from tests.helpers.launch import free_port, python, torchrun

pytestmark = pytest.mark.slow


@pytest.mark.timeout(200)
def test_resume_under_another_plan_reshards(reference: dict, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    shutil.copytree(reference["ckpt"] / "iter_0000004", ckpt / "iter_0000004")
    ev = tmp_path / "events.jsonl"
    proc = torchrun(2, "examples/gpt/pretrain_gpt.py",
                    ["--sailor-plan", str(_plan(tmp_path, 2)), "--train-iters", str(ITERS), "--load", str(ckpt),
                     "--save", str(ckpt), "--elastic-events", str(ev), *COMMON], timeout_s=120, extra_env=EAGER)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed from" in proc.stdout and "iteration 4, consumed samples 32" in proc.stdout
    steps = _steps(_events([ev]))
    assert sorted(steps) == list(range(4, ITERS))
    for i in range(4, ITERS):
        assert abs(steps[i]["loss"] - reference["losses"][i]) <= 1e-5 * abs(reference["losses"][i])
    _check_samples(steps)
    assert _max_diff(_full(ckpt / f"iter_{ITERS:07d}"), _full(reference["ckpt"] / f"iter_{ITERS:07d}")) < 1e-5


def _elastic(tmp: Path, trace: list[dict], extra_env: dict | None = None, timeout_s: float = 240):  # noqa: ANN202
    (tmp / "trace.json").write_text(json.dumps(trace))
    return python(["-m", "launch.elastic.cli", "--trace", str(tmp / "trace.json"), "--time-unit", "iter",
                   "--planner", "cpu-demo", "--gbs", "8", "--train-iters", str(ITERS), "--work-dir", str(tmp / "work"),
                   "--max-restarts", "2", "--max-failures", "1", "--", *ELASTIC_JOB],
                  timeout_s=timeout_s, extra_env=extra_env)


@pytest.mark.timeout(300)
def test_killed_rank_and_killed_save_resume_from_last_checkpoint(reference: dict, tmp_path: Path) -> None:
    faults = "attempt=0,rank=2,iteration=5,when=step;attempt=1,rank=0,iteration=8,when=save"
    proc = _elastic(tmp_path, [{"Time": 0, "GPUs": 4}], {"SAILOR_FAULT_INJECT": faults}, timeout_s=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    work = tmp_path / "work"
    events = _events([work / "events_0.jsonl"])
    loads = [(e["attempt"], e["iteration"]) for e in events if e["event"] == "loaded"]
    assert loads == [(1, 4), (2, 4)], loads          # both restarts resumed from the iteration-4 checkpoint
    assert "torchrun restart 2 resumed at iteration 4" in proc.stdout
    _check_losses(_steps(events), reference["losses"])
    final = work / "checkpoints" / f"iter_{ITERS:07d}"
    assert _max_diff(_full(final), _full(reference["ckpt"] / f"iter_{ITERS:07d}")) <= 1e-6


@pytest.mark.timeout(300)
def test_trace_4_2_4_keeps_the_loss_sequence(reference: dict, tmp_path: Path) -> None:
    trace = [{"Time": 0, "GPUs": 4}, {"Time": 3, "GPUs": 2}, {"Time": 6, "GPUs": 4}]
    proc = _elastic(tmp_path, trace, timeout_s=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    work = tmp_path / "work"
    report = json.loads((work / "report.json").read_text())
    assert [j["ranks"] for j in report["jobs"]] == [4, 2, 4]
    assert [r["gpus"] for r in report["reconfigurations"]] == [[4, 2], [2, 4]]
    assert [r["resumed_iteration"] for r in report["reconfigurations"]] == [3, 6]
    for r in report["reconfigurations"]:
        assert {"plan_s", "checkpoint_s", "stop_s", "start_s", "load_s", "first_iteration_s", "total_s"} <= set(r)
    assert proc.stdout.count("re-planning") == 2 and proc.stdout.count("reconfiguration availability") == 2
    steps = _steps(_events(sorted(work.glob("events_*.jsonl"))))
    _check_losses(steps, reference["losses"])
    _check_samples(steps)


@pytest.mark.timeout(200)
def test_bad_checkpoints_are_refused(reference: dict, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for it in (4, 8):
        shutil.copytree(reference["ckpt"] / f"iter_{it:07d}", ckpt / f"iter_{it:07d}")
    (ckpt / "latest").write_text("iter_0000008\n")
    layer = ckpt / "iter_0000008" / "layer_00002.pt"
    layer.write_bytes(layer.read_bytes()[:100])                  # truncated
    plan1 = tmp_path / "one.json"
    plan1.write_text(json.dumps(demo_plan_dict(1, 4, 8, "tiny")))
    env = {"MASTER_PORT": str(free_port()), **EAGER}
    base = ["examples/gpt/pretrain_gpt.py", "--sailor-plan", str(plan1), "--load", str(ckpt), *COMMON]
    proc = python([*base, "--train-iters", "5"], timeout_s=120, extra_env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "iter_0000008" in proc.stderr and "truncated" in proc.stderr
    assert "resumed from" in proc.stdout and "iter_0000004: iteration 4" in proc.stdout
    # another model's checkpoint: the run stops with one line, it never starts from scratch
    env = {"MASTER_PORT": str(free_port()), **EAGER}
    proc = python([*base, "--train-iters", "5", "--hidden-size", "32", "--num-attention-heads", "4"],
                  timeout_s=120, extra_env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "checkpoint of another model" in proc.stderr and "hidden_size: checkpoint 64 vs run 32" in proc.stderr
    assert "iteration    1/" not in proc.stdout
