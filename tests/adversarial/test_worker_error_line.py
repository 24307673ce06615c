"""Issue 11 item 8: when a worker exits 2 with its one line, the launcher shows that line last and exits 2
(torchrun's ChildFailedError traceback around it is dropped)."""
from __future__ import annotations

import sys

import pytest

from launch import runner
from launch.torchrun_cmds import NodeCommand

FAKE_TORCHRUN = r"""
import sys
print("[rank0]: error: plan.json: stages[0]: field 'tp' must be >= 1, got 0", file=sys.stderr)
print("Traceback (most recent call last):", file=sys.stderr)
print('  File "torch/distributed/run.py", line 1, in <module>', file=sys.stderr)
print("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: train.py FAILED", file=sys.stderr)
sys.exit(1)
"""


def _last_lines(err: str) -> list[str]:
    return [x for x in err.splitlines() if x.strip()]


def test_runner_main_shows_the_worker_line_last(capsys: pytest.CaptureFixture) -> None:
    code = runner.main(["--", sys.executable, "-c", FAKE_TORCHRUN])
    lines = _last_lines(capsys.readouterr().err)
    assert code == 2
    assert lines[-1] == "error: plan.json: stages[0]: field 'tp' must be >= 1, got 0"
    assert not any("Traceback" in x or "ChildFailedError" in x for x in lines), lines


def test_run_commands_exits_2_with_the_worker_line(capsys: pytest.CaptureFixture) -> None:
    cmd = NodeCommand(node_name="n0", host="localhost", node_rank=0, env=(),
                      argv=(sys.executable, "-c", FAKE_TORCHRUN))
    assert runner.run_commands([cmd], poll_s=0.05) == 2
    assert _last_lines(capsys.readouterr().err)[-1].startswith("error: plan.json")


def test_other_failures_keep_their_status_and_traceback(capsys: pytest.CaptureFixture) -> None:
    code = runner.main(["--", sys.executable, "-c", "raise SystemExit('boom: not an input error')"])
    assert code == 1 and "boom" in capsys.readouterr().err


@pytest.mark.slow
def test_real_torchrun_worker_error_is_the_last_line(tmp_path) -> None:  # noqa: ANN001
    from tests.adversarial.trainer import MODEL, PLAN
    from tests.helpers.launch import free_port, python
    (tmp_path / "not-a-folder.txt").write_text("x")              # --load of a regular file: worker exits 2
    out = python(["-m", "launch.runner", "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
                  "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "examples/gpt/pretrain_gpt.py",
                  "--sailor-plan", str(PLAN), *MODEL, "--mock-data", "--train-iters", "1",
                  "--load", str(tmp_path / "not-a-folder.txt")], timeout_s=300)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = _last_lines(out.stderr)
    assert lines[-1].startswith("error: ") and "ChildFailedError" not in out.stderr, out.stderr[-2000:]
