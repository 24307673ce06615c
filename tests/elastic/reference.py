"""The uninterrupted reference run every elastic slow test compares with, and the comparisons.

One 4-rank run (3 stages, layers [1, 2, 1], TP 2 | 1 | 1, micro-batch 2; asynchronous periodic saves every
4 iterations, all kept) of the tiny GPT for 10 iterations; Adam eps 1e-4 as in docs/RUNTIME.md. The
``reference`` fixture (tests/elastic/conftest.py) runs it once per session.
"""
from __future__ import annotations

import json
from pathlib import Path

from launch.elastic.plans import demo_plan_dict
from tests.helpers.launch import torchrun

ITERS = 10
COMMON = ["--mock-data", "--seed", "3", "--adam-eps", "1e-4", "--lr", "3e-3", "--hidden-dropout", "0.1",
          "--attention-dropout", "0.1"]          # dropout on: a resume under another plan must reproduce its masks
EAGER = {"TORCH_COMPILE_DISABLE": "1"}     # what sailor-elastic's cpu-demo jobs run with
# elastic jobs: a job held at a trace change point waits up to half the collective timeout for the controller;
# at load averages of 20+ on 2 cores a new job's start-up exceeds the default 60 s, so hold up to 300 s
ELASTIC_JOB = ["--save-interval", "4", "--distributed-timeout-s", "600", *COMMON]


def _events(paths: list[Path]) -> list[dict]:
    out = []
    for p in paths:
        out += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return out


def _steps(events: list[dict]) -> dict[int, dict]:
    """Last record per iteration (a restarted attempt redoes iterations after its checkpoint)."""
    return {e["iteration"]: e for e in events if e["event"] == "step"}


def _plan(tmp: Path, n: int) -> Path:
    path = tmp / f"plan_{n}.json"
    path.write_text(json.dumps(demo_plan_dict(n, 4, 8, "tiny")))
    return path


def _full(path: Path) -> dict:
    from megatron_sailor.train.checkpoint import read_full_state
    return read_full_state(str(path))


def _max_diff(a: dict, b: dict) -> float:
    assert set(a) == set(b)
    return max(float((a[k][f] - b[k][f]).abs().max()) for k in a for f in ("param", "exp_avg", "exp_avg_sq"))


def _check_losses(steps: dict[int, dict], ref: list[float]) -> None:
    assert sorted(steps) == list(range(len(ref))), sorted(steps)
    for i, r in enumerate(ref):
        assert abs(steps[i]["loss"] - r) <= 1e-5 * abs(r), (i, steps[i]["loss"], r)


def _check_samples(steps: dict[int, dict], gbs: int = 8) -> None:
    """Iteration i consumed exactly samples [8i, 8i+8): nothing skipped, nothing repeated."""
    for i, e in sorted(steps.items()):
        assert (e["first_sample"], e["consumed_samples"]) == (i * gbs, (i + 1) * gbs), e




def run_reference(tmp: Path) -> dict:
    ev = tmp / "events.jsonl"
    proc = torchrun(4, "examples/gpt/pretrain_gpt.py",
                    ["--sailor-plan", str(_plan(tmp, 4)), "--train-iters", str(ITERS), "--save", str(tmp / "ckpt"),
                     "--save-interval", "4", "--keep-last", "0", "--async-save", "--elastic-events", str(ev),
                     *COMMON],
                    timeout_s=150, extra_env=EAGER)
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = _steps(_events([ev]))
    assert sorted(steps) == list(range(ITERS))
    return {"dir": tmp, "ckpt": tmp / "ckpt", "losses": [steps[i]["loss"] for i in range(ITERS)]}
