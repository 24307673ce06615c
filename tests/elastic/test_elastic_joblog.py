"""Items a user acts on: the job's own last error line, finished runs, the failure count's limit, fresh
benchmark folders."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch.elastic.joblog import committed_iteration, last_error_line


def test_last_error_line_prefers_the_jobs_own_error(tmp_path: Path) -> None:
    log = tmp_path / "job_3.log"
    log.write_text("iteration 1/10 | loss 4.2\n"
                   "error: checkpoint refused: runs/c: checkpoint of another model (hidden_size: 64 vs 32)\n"
                   "Traceback (most recent call last):\n  File x\n"
                   "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    assert last_error_line([log]).startswith("error: checkpoint refused: runs/c: checkpoint of another model")


def test_last_error_line_falls_back_to_the_exception(tmp_path: Path) -> None:
    log = tmp_path / "job_0.log"
    log.write_text("Traceback (most recent call last):\n  File \"a.py\", line 3\nValueError: bad value 7\n"
                   "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n  rank 0 failed\n")
    assert last_error_line([log]) == "ValueError: bad value 7"
    empty = tmp_path / "job_1.log"
    empty.write_text("")
    assert last_error_line([empty, tmp_path / "absent.log"]) == ""


def _commit(root: Path, it: int, meta_it: int | None = None, sealed: bool = True) -> None:
    from planner.schema.checkpoint_meta import seal
    d = root / f"iter_{it:07d}"
    d.mkdir(parents=True)
    meta = {"iteration": it if meta_it is None else meta_it}
    (d / "meta.json").write_text(json.dumps(seal(meta) if sealed else meta))


def test_committed_iteration_ignores_tmp_and_inconsistent(tmp_path: Path) -> None:
    assert committed_iteration(tmp_path / "none") is None
    _commit(tmp_path, 4)
    (tmp_path / "iter_0000008.tmp").mkdir()
    _commit(tmp_path, 12, meta_it=3)            # name and meta disagree: not trusted
    _commit(tmp_path, 16, sealed=False)         # no writer's seal: not trusted
    assert committed_iteration(tmp_path) == 4


class _Src:
    def poll(self, elapsed_s, iteration):  # noqa: ANN001, ANN201
        return {"cpu@local": 2}

    def describe(self) -> str:
        return "fake"


def test_a_run_at_its_target_iteration_is_finished(tmp_path: Path) -> None:
    from launch.elastic.controller import Controller, ControllerConfig
    from launch.elastic.plans import CpuDemoPlanner

    class C(Controller):
        def launch(self, *a, **k):  # noqa: ANN002, ANN003, ANN201
            raise AssertionError("nothing may be launched")

    _commit(tmp_path / "w" / "checkpoints", 30)
    c = C(ControllerConfig(work_dir=tmp_path / "w", train_iters=30, train_args=()), _Src(),
          CpuDemoPlanner(4, 8, "tiny"))
    assert c.run() == 0 and c.failures == 0
    assert json.loads((tmp_path / "w" / "report.json").read_text())["iterations_done"] == 30


def test_failure_count_never_exceeds_the_limit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tests.elastic.test_elastic_units import _ScriptedController, _start
    c, _ = _ScriptedController.make(tmp_path, [2])
    c.cfg = type(c.cfg)(**{**c.cfg.__dict__, "max_failures": 2})
    _start(c)
    (tmp_path / "job_0.log").write_text("error: rank 1: distributed failure: connection reset\n")
    c.job.proc.rc = 1
    with caplog.at_level("INFO"):
        assert c._step() is None                  # failure 1 of 2: relaunched
        (tmp_path / "job_1.log").write_text("error: data file not found: x.bin\n")
        c.job.proc.rc = 1
        assert c._step() == 1                     # failure 2 of 2: gives up
    text = caplog.text
    assert "error: rank 1: distributed failure: connection reset (failure 1 of 2)" in text
    assert "error: data file not found: x.bin (failure 2 of 2: giving up)" in text
    assert "3 of 2" not in text and c.failures == 2


def test_benchmark_uses_a_fresh_folder_unless_resumed(tmp_path: Path) -> None:
    import importlib.util
    spec = importlib.util.spec_from_file_location("reconf", Path(__file__).parents[2] / "benchmarks" / "reconfigure.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    first = mod.run_folder(tmp_path, resume=False)
    second = mod.run_folder(tmp_path, resume=False)
    assert (first.name, second.name) == ("run_001", "run_002")
    assert mod.run_folder(tmp_path, resume=True) == second
