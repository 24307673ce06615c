"""planner.progress (and its runtime name megatron_sailor.train.progress): a bar / spinner on stderr only
when stderr is a terminal, items unchanged; the frontier and timeline drawers use it."""
from __future__ import annotations

import pytest

from tests.helpers.tty import PY, run_with_stderr

SNIPPET = ("import time; from planner.progress import progress_bar, progress_iter, status\n"
           "items = list(progress_iter(iter(range(5)), 'counting', total=5))\n"
           "with status('drawing x.png'):\n    time.sleep(0.5)\n"
           "for _ in progress_iter([1, 2], 'slow items'):\n    time.sleep(0.3)\n"
           "with progress_bar('replaying', total=2.0) as update:\n"
           "    for k in range(3):\n        update(k)\n        time.sleep(0.2)\n"
           "print(items)\n")


def test_progress_on_a_terminal_only() -> None:
    code, out, err = run_with_stderr([PY, "-c", SNIPPET], tty=True)
    assert code == 0 and out == "[0, 1, 2, 3, 4]\n"
    assert "drawing x.png" in err and "slow items" in err and "replaying" in err
    code, out, err = run_with_stderr([PY, "-c", SNIPPET], tty=False)
    assert code == 0 and out == "[0, 1, 2, 3, 4]\n" and err == ""


def test_runtime_name_is_the_same_implementation() -> None:
    import planner.progress as a
    import megatron_sailor.train.progress as b
    assert b.progress_iter is a.progress_iter and b.status is a.status


def test_drawers_show_a_spinner_on_a_terminal(tmp_path) -> None:
    pytest.importorskip("matplotlib", reason="extra 'plot' (CI installs .[all])")
    png = tmp_path / "timeline.png"
    cmd = [PY, "-m", "planner.cli_sim", "examples/plans/gpt_small_hetero.json", "--model", "tiny",
           "--timeline", str(png)]
    code, out, err = run_with_stderr(cmd, tty=True)
    assert code == 0 and png.is_file() and f"drawing {png}" in err and "drawing" not in out
    png = tmp_path / "frontier.png"
    cmd = [PY, "-m", "planner.cli_plan", "--model", "tiny", "--gpus", "A100-40@z=4", "--frontier", str(png)]
    code, out, err = run_with_stderr(cmd, tty=True)
    assert code == 0 and png.is_file() and f"drawing {png}" in err and "drawing" not in out
