"""Megatron-LM's README GPT-345M example with its ``--fp16`` (slow): scaled down, only ``--sailor-plan`` added.

Our plan format decides precision (an fp16 plan takes ``--fp16``; the flag contradicting an fp32 plan is one
line, exit 2); a Sailor plan_config carries no precision, so there the flags decide. Both heterogeneous plans
(TP 2 and 1, two zones, uneven layers 1|3) run the example in fp16 with Megatron-LM's dynamic loss scaler
defaults (initial scale 2^32, halved after every 2 overflowing steps, which are skipped), a validation loss and
its checkpoint (``--save/--load``).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers.launch import REPO, preprocess_sample_corpus, torchrun

PLANS = REPO / "examples" / "plans"
VALID_RE = re.compile(r"^validation loss at iteration (\d+) \| lm loss value: (\S+)", re.M)


def _gpt_345m_scaled_down(data: str, ckpt: Path, metrics: Path) -> list[str]:
    gpt_args = ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64 "
                "--max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 8 --lr 0.00015 "
                "--train-iters 4 --lr-decay-iters 3 --lr-decay-style cosine --min-lr 1.0e-5 --weight-decay 1e-2 "
                "--lr-warmup-fraction .01 --clip-grad 1.0 --fp16").split()
    data_args = ["--data-path", data, "--vocab-file", f"{data}-bpe/vocab.json", "--merge-file",
                 f"{data}-bpe/merges.txt", "--split", "949,50,1"]
    output_args = "--log-interval 2 --save-interval 4 --eval-interval 4 --eval-iters 1".split()
    return [*gpt_args, *data_args, *output_args, "--save", str(ckpt), "--load", str(ckpt), "--metrics-file",
            str(metrics)]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fp16_example_runs_under_our_fp16_plan_and_a_sailor_plan_config(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers", reason="extra 'text' (CI installs .[all])")
    data = str(tmp_path / "my-gpt2_text_document")
    preprocess_sample_corpus(data, "--train-bpe", "512", "--append-eod", timeout_s=300)
    bad = torchrun(5, "examples/gpt/pretrain_gpt.py",
                   [*_gpt_345m_scaled_down(data, tmp_path / "x", tmp_path / "x.jsonl"),
                    "--sailor-plan", str(PLANS / "gpt_small_hetero.json")], timeout_s=300)
    errors = {line.split("]:", 1)[-1].strip() for line in bad.stderr.splitlines() if "error: " in line}
    assert bad.returncode != 0 and errors == {
        f"error: {PLANS / 'gpt_small_hetero.json'}: --fp16 contradicts the plan (precision 'fp32')"}, bad.stderr
    for plan in ("gpt_small_hetero_fp16.json", "gpt_small_hetero_sailor.json"):
        metrics = tmp_path / f"{plan}.jsonl"
        proc = torchrun(5, "examples/gpt/pretrain_gpt.py",
                        [*_gpt_345m_scaled_down(data, tmp_path / f"ckpt_{plan}", metrics), "--sailor-plan",
                         str(PLANS / plan)], timeout_s=400)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert [r["loss_scale"] for r in rows] == [2.0 ** 32, 2.0 ** 32, 2.0 ** 31, 2.0 ** 30], rows
        assert all(r["skipped"] for r in rows) and all(6.0 < r["loss"] < 6.5 for r in rows), rows  # ln 512 = 6.24
        assert [int(m.group(1)) for m in VALID_RE.finditer(proc.stdout)] == [4]
        assert "saved checkpoint at iteration 4" in proc.stdout and (tmp_path / f"ckpt_{plan}" / "latest").is_file()
