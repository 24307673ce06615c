"""Start-up status of ``python -m launch.runner --status`` (launch/train_opt.sh uses it): on a terminal a
spinner on stderr until the command's first output; off a terminal nothing extra; stdout unchanged either
way; torchrun's warning lines dropped with --drop-torchrun-warnings; the exit status passes through."""
from __future__ import annotations

from launch.startup import is_torchrun_noise
from tests.helpers.tty import PY, run_with_stderr

CHILD = ("import sys, time; time.sleep(1.0); print('W1201 12:00:00.1 torch warning', file=sys.stderr); "
         "print('real warning', file=sys.stderr); print('first output'); sys.exit(3)")
RUNNER = [PY, "-m", "launch.runner", "--status", "starting 5 ranks", "--drop-torchrun-warnings", "--", PY, "-c", CHILD]


def test_status_on_a_terminal_only_and_output_unchanged() -> None:
    code, out, err = run_with_stderr(RUNNER, tty=True)
    assert code == 3 and out == "first output\n"
    assert "starting 5 ranks" in err and "real warning" in err and "torch warning" not in err
    code, out, err = run_with_stderr(RUNNER, tty=False)
    assert code == 3 and out == "first output\n" and err == "real warning\n"


def test_without_status_the_child_keeps_our_stdout() -> None:
    code, out, err = run_with_stderr([PY, "-m", "launch.runner", "--", PY, "-c", CHILD], tty=True)
    assert code == 3 and out == "first output\n" and "torch warning" in err and "starting" not in err


def test_torchrun_noise() -> None:
    assert is_torchrun_noise("W1201 12:00:00.123000 123 torch/distributed/run.py:766]")
    assert is_torchrun_noise("*****************************************")
    assert is_torchrun_noise("Setting OMP_NUM_THREADS environment variable for each process to be 1 in default")
    assert not is_torchrun_noise("error: plan.json: stages ... 3") and not is_torchrun_noise("iteration 5 | loss")
