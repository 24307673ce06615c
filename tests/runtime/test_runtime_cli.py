"""pretrain_gpt.py: bad input (in-process, fast) and Sailor-plan runs under torchrun (slow)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.helpers.launch import REPO, free_port, python, torchrun

PLANS = REPO / "tests" / "helpers" / "plans"
MODEL_ARGS = ["--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
              "--max-position-embeddings", "32", "--vocab-size", "128", "--make-vocab-size-divisible-by", "8"]


def _pretrain_main():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("pretrain_gpt", REPO / "examples" / "gpt" / "pretrain_gpt.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def _run_in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, argv: list[str],
                    world_size: int = 5) -> tuple[int, str]:
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.delenv("SAILOR_RANK_MAP", raising=False)
    monkeypatch.delenv("SAILOR_WORLD_SIZE", raising=False)
    code = _pretrain_main()(argv)
    return code, capsys.readouterr().err


BAD_INPUTS = {
    "world_size": (MODEL_ARGS, 4, "world size 4 does not match the plan's 5 GPUs"),
    "tp_vs_heads": (["--num-layers", "4", "--hidden-size", "66", "--num-attention-heads", "3",
                     "--seq-length", "32", "--max-position-embeddings", "32", "--vocab-size", "128",
                     "--make-vocab-size-divisible-by", "8"], 5, "tp 2 does not divide num_attention_heads 3"),
    "layers": (["--num-layers", "6"] + MODEL_ARGS[2:], 5, "plan covers 4 transformer layers"),
    "missing_data": (MODEL_ARGS, 5, "data file not found"),
    "micro_batch": (MODEL_ARGS + ["--micro-batch-size", "4"], 5, "--micro-batch-size 4 contradicts the plan"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_error_line(case: str, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    args, world, expected = BAD_INPUTS[case]
    data = ["--data-path", str(tmp_path / "nope")] if case == "missing_data" else ["--mock-data"]
    argv = ["--sailor-plan", str(PLANS / "sailor_5rank_mixed.json"), "--train-iters", "2", "--lr", "1e-3", *data, *args]
    code, err = _run_in_process(monkeypatch, capsys, argv, world)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], err
    assert "Traceback" not in err


def _losses(path: Path) -> list[float]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(len(rows)))
    for r in rows:
        assert set(r) == {"iteration", "loss", "iteration_time_s", "tokens_per_s", "grad_norm"}
        assert r["iteration_time_s"] > 0 and r["tokens_per_s"] > 0
    return [r["loss"] for r in rows]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sailor_plan_on_real_data_matches_one_rank(tmp_path: Path) -> None:
    prefix = str(tmp_path / "corpus")
    proc = python(["-m", "megatron_sailor.train.preprocess", "--input", "examples/gpt/data/sample_corpus.txt",
                   "--output-prefix", prefix], timeout_s=120)
    assert proc.returncode == 0, proc.stderr
    common = MODEL_ARGS + ["--train-iters", "6", "--lr", "3e-3", "--adam-eps", "1e-4", "--seed", "5",
                           "--data-path", prefix]
    runs = {}
    for name, nproc in (("sailor_5rank_mixed", 5), ("sailor_1rank", 1)):
        metrics = tmp_path / f"{name}.jsonl"
        proc = torchrun(nproc, "examples/gpt/pretrain_gpt.py",
                        ["--sailor-plan", str(PLANS / f"{name}.json"), "--metrics-file", str(metrics), *common],
                        timeout_s=200)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = _losses(metrics)
    ours, ref = runs["sailor_5rank_mixed"], runs["sailor_1rank"]
    assert len(ours) == 6
    for a, b in zip(ours, ref):
        assert abs(a - b) <= 1e-5 * abs(b), (ours, ref)
    assert ours[-1] < ours[0] - 0.05, ours   # the loss goes down on real text


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_unreachable_rendezvous_fails_fast_with_one_line(tmp_path: Path) -> None:
    plan = tmp_path / "two.json"
    plan.write_text(json.dumps({"schema_version": 1, "num_layers": 4, "micro_batch_size": 2,
                                "global_batch_size": 4, "stages": [{"first_layer": 0, "num_layers": 4, "replicas": [
                                    {"gpu_type": "A", "tp": 1, "zone": "z-a"}, {"gpu_type": "A", "tp": 1,
                                                                                "zone": "z-a"}]}]}))
    env = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    proc = python(["examples/gpt/pretrain_gpt.py", "--sailor-plan", str(plan), "--train-iters", "1", "--lr", "1e-3",
                   "--mock-data", "--distributed-timeout-s", "5", *MODEL_ARGS], timeout_s=90, extra_env=env)
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: rank 1: cannot reach the rendezvous"), proc.stderr


def test_unsupported_plan_options_are_announced():
    from megatron_sailor.runtime.rank_runtime import warn_unsupported_plan_options
    from planner.plan import Plan, Replica, Stage
    base = dict(num_layers=2, stages=(Stage(0, 2, (Replica("cpu", 1, "z"),)),), micro_batch_size=1,
                global_batch_size=1)
    assert warn_unsupported_plan_options(Plan(**base)) == []
    msgs = warn_unsupported_plan_options(Plan(**base, precision="bf16", recompute_activations=True,
                                              distributed_optimizer=True, optimizer="sgd"))
    assert len(msgs) == 4 and "training in fp32" in msgs[0]
