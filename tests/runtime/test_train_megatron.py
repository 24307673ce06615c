"""Megatron-LM habits under torchrun (slow): a heterogeneous 5-rank plan with a cosine schedule, warm-up,
validation and TensorBoard matches a 1-rank run of the same model; Megatron-LM's GPT-345M README command,
scaled down, runs with only --sailor-plan added."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.launch import REPO, preprocess_sample_corpus, tiny_model_args, torchrun

PLANS = REPO / "tests" / "helpers" / "plans"
MODEL = tiny_model_args(vocab_size=None)
VALID_RE = re.compile(r"^validation loss at iteration (\d+) \| lm loss value: (\S+) \| lm loss PPL: (\S+) \|$")


def _validation(stdout: str) -> dict[int, float]:
    return {int(m.group(1)): float(m.group(2)) for m in map(VALID_RE.match, stdout.splitlines()) if m}


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.slow
@pytest.mark.timeout(700)
def test_schedule_validation_and_tensorboard_match_one_rank(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="extra 'tensorboard' (CI installs .[all])")
    prefix = str(tmp_path / "corpus")
    preprocess_sample_corpus(prefix, "--vocab-size", "128", timeout_s=300)
    common = [*MODEL, "--vocab-size", "128", "--data-path", prefix, "--train-iters", "8", "--lr", "3e-3",
              "--min-lr", "3e-4", "--lr-decay-style", "cosine", "--lr-warmup-iters", "2", "--adam-eps", "1e-4",
              "--eval-interval", "4", "--eval-iters", "2", "--log-interval", "4", "--seed", "5"]
    runs = {}
    for name, nproc in (("sailor_5rank_mixed", 5), ("sailor_1rank", 1)):
        tb = tmp_path / f"tb_{name}"
        proc = torchrun(nproc, "examples/gpt/pretrain_gpt.py",
                        ["--sailor-plan", str(PLANS / f"{name}.json"), "--tensorboard-dir", str(tb), *common],
                        timeout_s=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert f"logging: TensorBoard events in {tb}" in proc.stdout
        runs[name] = (_validation(proc.stdout), _scalars(tb))
    (valid, tb), (ref_valid, ref_tb) = runs["sailor_5rank_mixed"], runs["sailor_1rank"]
    assert sorted(valid) == [4, 8] and sorted(ref_valid) == [4, 8]
    for it in (4, 8):
        assert valid[it] == pytest.approx(ref_valid[it], rel=1e-5)
    assert valid[8] < valid[4]
    lrs = [v for _, v in tb["learning-rate"]]
    assert [s for s, _ in tb["learning-rate"]] == list(range(1, 9))
    assert lrs[0] == 0.0 and lrs[2] == pytest.approx(3e-3) and lrs[-1] < lrs[2]      # warm-up, then cosine
    for tag in ("lm loss", "grad-norm"):
        assert [v for _, v in tb[tag]] == pytest.approx([v for _, v in ref_tb[tag]], rel=1e-5)
    assert [s for s, _ in tb["lm loss validation"]] == [4, 8]
    assert [s for s, _ in tb["lm loss vs samples"]] == [8 * k for k in range(1, 9)]


@pytest.mark.slow
@pytest.mark.timeout(700)
def test_megatron_readme_gpt_command_scaled_down_runs_with_only_the_plan_added(tmp_path: Path) -> None:
    """Megatron-LM's README GPT example (GPT_ARGS, DATA_ARGS, OUTPUT_ARGS, --save/--load), sizes scaled
    down and --fp16 left out (precision is the runtime issue's), plus --sailor-plan."""
    pytest.importorskip("tokenizers", reason="extra 'text' (CI installs .[all])")
    data = str(tmp_path / "my-gpt2_text_document")
    preprocess_sample_corpus(data, "--train-bpe", "512", "--append-eod", timeout_s=300)
    vocab, merges = f"{data}-bpe/vocab.json", f"{data}-bpe/merges.txt"
    ckpt = str(tmp_path / "ckpt")
    gpt_args = ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 "
                "--max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 8 --lr 0.00015 "
                "--train-iters 6 --lr-decay-iters 4 --lr-decay-style cosine --min-lr 1.0e-5 --weight-decay 1e-2 "
                "--lr-warmup-fraction .01 --clip-grad 1.0").split()
    data_args = ["--data-path", data, "--vocab-file", vocab, "--merge-file", merges, "--data-impl", "mmap",
                 "--split", "949,50,1"]
    output_args = "--log-interval 2 --save-interval 3 --eval-interval 3 --eval-iters 1".split()
    proc = torchrun(5, "examples/gpt/pretrain_gpt.py",
                    [*gpt_args, *data_args, *output_args, "--save", ckpt, "--load", ckpt,
                     "--sailor-plan", str(REPO / "examples" / "plans" / "gpt_small_hetero.json")], timeout_s=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(_validation(proc.stdout)) == [3, 6]
    assert "saved checkpoint at iteration 6" in proc.stdout and (Path(ckpt) / "latest").is_file()
