"""launch/train_opt.sh flags: parsing, bad input (one error line, exit 2, nothing launched), --dry-run."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "launch" / "train_opt.sh"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PATH": os.environ["PATH"]}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def _plan(tmp_path: Path) -> Path:
    plan = {"schema_version": 1, "model": "tiny", "num_layers": 4, "micro_batch_size": 1, "global_batch_size": 4,
            "stages": [{"first_layer": 0, "num_layers": 2, "replicas": [{"gpu_type": "A100-40", "tp": 1, "zone": "z"}]},
                       {"first_layer": 2, "num_layers": 2, "replicas": [{"gpu_type": "A100-40", "tp": 1, "zone": "z"}]}]}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def _nodes(tmp_path: Path, gpu: str = "A100-40", host: str = "gpu1") -> Path:
    path = tmp_path / f"nodes_{gpu}_{host}.yaml"
    path.write_text(f"nodes:\n  - {{host: {host}, gpu_type: {gpu}, zone: z, gpus_per_node: 2}}\n")
    return path


def test_bash_syntax() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def test_default_dry_run_is_the_five_rank_cpu_demo(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "--nproc-per-node 5" in proc.stdout and "examples/gpt/pretrain_gpt.py" in proc.stdout
    assert "--emulate-cross-zone-latency-s" in proc.stdout
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


def test_plan_with_nodes_file_dry_run_prints_torchrun_per_node(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--plan", str(_plan(tmp_path)), "--nodes-file", str(_nodes(tmp_path, host="localhost")),
                "--iters", "3", "--dry-run", "--", "--clip-grad", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert "torchrun" in proc.stdout and "--train-iters 3" in proc.stdout and "--clip-grad 0.5" in proc.stdout
    assert "--num-layers" not in proc.stdout       # the plan's named model (tiny) is used


def test_model_flag(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--plan", str(_plan(tmp_path)), "--model", "tiny", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "--model tiny" in proc.stdout and "--nproc-per-node 2" in proc.stdout


def test_slurm_dry_run_writes_a_valid_script(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--plan", str(_plan(tmp_path)), "--nodes-file", str(_nodes(tmp_path)), "--slurm",
                "--dry-run")
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "out" / "job.sbatch"
    assert script.exists() and "#SBATCH" in script.read_text() and "srun" in script.read_text()
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0


@pytest.mark.parametrize("make_args,needle", [
    (lambda t: ["--plan", str(t / "nope.json")], "plan file not found"),
    (lambda t: ["--plan", str(_plan(t)), "--nodes-file", str(t / "none.yaml")], "node inventory not found"),
    (lambda t: ["--data-path", str(t / "corpus")], "data file not found"),
    (lambda t: ["--model", "nosuch"], "unknown model 'nosuch'"),
    (lambda t: ["--slurm", "--plan", str(_plan(t))], "--slurm needs --nodes-file"),
    (lambda t: ["--iters", "zero"], "--iters needs a positive integer"),
    (lambda t: ["--bogus"], "unknown argument '--bogus'"),
    (lambda t: ["--plan", str(_plan(t)), "--nodes-file", str(_nodes(t, gpu="V100-16")), "--dry-run"],
     "no A100-40 node"),
])
def test_bad_input(tmp_path: Path, make_args, needle: str) -> None:  # noqa: ANN001
    proc = _run(tmp_path, *make_args(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr and "error:" in proc.stderr
    assert "torchrun" not in proc.stdout and not (tmp_path / "out" / "metrics.jsonl").exists()


@pytest.mark.skipif(shutil.which("sbatch") is not None, reason="sbatch present: would submit")
def test_slurm_without_sbatch_is_an_error(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--plan", str(_plan(tmp_path)), "--nodes-file", str(_nodes(tmp_path)), "--slurm")
    assert proc.returncode == 2 and "sbatch not found" in proc.stderr


def test_stdlib_corpus_dry_run_trains_a_bpe_and_names_its_tokenizer(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--corpus", "stdlib", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    prep, train = [line for line in proc.stdout.splitlines() if line.strip()][-2:]
    assert "megatron_sailor.train.preprocess" in prep and "--train-bpe 1024" in prep and "site-packages" in prep
    out = tmp_path / "out"
    assert f"--tokenizer-type GPT2BPETokenizer --vocab-file {out}/stdlib-bpe/vocab.json" in train
    assert "--vocab-size" not in train and "--eval-interval 10" in train and "--lr-decay-style cosine" in train


def test_corpus_and_data_path_conflict(tmp_path: Path) -> None:
    data = tmp_path / "d"
    for ext in ("bin", "idx"):
        Path(f"{data}.{ext}").write_bytes(b"")
    proc = _run(tmp_path, "--corpus", "stdlib", "--data-path", str(data), "--dry-run")
    assert proc.returncode == 2 and proc.stderr.strip() == "error: give --data-path or --corpus, not both"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_failing_worker_ends_with_its_error_line_and_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path / "out")}
    proc = subprocess.run(["bash", str(SCRIPT), "--iters", "2", "--", "--sequence-parallel"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=280)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert lines[-1] == ("error: not implemented by megatron-sailor: --sequence-parallel (the runtime has no "
                         "sequence parallelism)")
    assert "Traceback" not in proc.stderr
