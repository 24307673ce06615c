"""Megatron-LM arguments of the training job: schedule against megatron-core, defaults, refusals, split,
tokenizers (fast, in-process; no torch.distributed)."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from planner.errors import InputError
from tests.helpers.launch import REPO, tiny_model_args

PLAN = str(REPO / "tests" / "helpers" / "plans" / "sailor_5rank_mixed.json")   # gbs 8, mbs 2, 4 layers
MODEL = tiny_model_args(vocab_size=None)
VOCAB = ["--vocab-size", "128"]


def _parse(extra: list[str], vocab: list[str] = VOCAB):  # noqa: ANN202
    from megatron_sailor.train.arguments import parse_config
    return parse_config(["--sailor-plan", PLAN, "--train-iters", "20", "--mock-data", *MODEL, *vocab, *extra], 5)


def _megatron_lrs(style: str, max_lr: float, min_lr: float, warmup: int, decay: int, steps: int,
                  gbs: int) -> list[float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=max_lr)
    sched = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=max_lr, min_lr=min_lr, lr_warmup_steps=warmup,
                                    lr_decay_steps=decay, lr_decay_style=style, start_wd=0.0, end_wd=0.0,
                                    wd_incr_steps=decay, wd_incr_style="constant")
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        sched.step(increment=gbs)
    return out


@pytest.mark.parametrize("style", ["constant", "linear", "cosine", "inverse-square-root"])
@pytest.mark.parametrize("warmup", [["--lr-warmup-iters", "3"], ["--lr-warmup-fraction", "0.25"], []])
def test_schedule_equals_megatron_core(style: str, warmup: list[str]) -> None:
    cfg = _parse(["--lr", "3e-3", "--min-lr", "1e-4", "--lr-decay-style", style, "--lr-decay-iters", "16", *warmup])
    gbs = 8
    warm_samples = {"--lr-warmup-iters": 3 * gbs, "--lr-warmup-fraction": int(0.25 * 16 * gbs)}.get(
        warmup[0] if warmup else "", 0)
    ref = _megatron_lrs(style, 3e-3, 1e-4, warm_samples, 16 * gbs, 20, gbs)
    ours = [cfg.lr_schedule.lr_at(it * gbs) for it in range(20)]
    assert ours == pytest.approx(ref, rel=1e-12, abs=1e-15)
    assert len(set(ours)) >= (1 if style == "constant" and not warmup else 3)   # the schedule moves


def test_defaults_are_megatron_lms() -> None:
    cfg = _parse(["--lr", "1e-4"])
    assert cfg.optimizer.betas == (0.9, 0.999) and cfg.optimizer.eps == 1e-8
    assert cfg.optimizer.weight_decay == 0.01 and cfg.optimizer.clip_grad == 1.0
    s = cfg.lr_schedule
    assert (s.style, s.min_lr, s.warmup_samples, s.decay_samples) == ("linear", 0.0, 0, 20 * 8)
    assert (cfg.log_interval, cfg.eval_interval, cfg.eval_iters, cfg.seed) == (100, 1000, 100, 1234)


REFUSED = {
    "megatron_only": (["--lr", "1e-4", "--rampup-batch-size", "16", "16", "100"],
                      "not implemented by megatron-sailor: --rampup-batch-size (the global batch size is the plan's"),
    "megatron_flag": (["--lr", "1e-4", "--sequence-parallel"], "not implemented by megatron-sailor: --sequence-parallel"),
    "unknown": (["--lr", "1e-4", "--no-such-flag", "3"], "unrecognized argument: --no-such-flag"),
    "bad_choice": (["--lr", "1e-4", "--lr-decay-style", "steps"], "--lr-decay-style: invalid choice: 'steps'"),
    "no_lr": ([], "--lr is required"),
    "gbs": (["--lr", "1e-4", "--global-batch-size", "16"], "--global-batch-size 16 contradicts the plan (8)"),
    "warmup_both": (["--lr", "1e-4", "--lr-warmup-iters", "2", "--lr-warmup-fraction", "0.1"], "not both"),
    "warmup_long": (["--lr", "1e-4", "--lr-warmup-iters", "30"], "must end before the decay"),
    "split": (["--lr", "1e-4", "--split", "a,b"], "--split 'a,b'"),
    "wandb_name": (["--lr", "1e-4", "--wandb-project", "p"], "--wandb-project needs --wandb-exp-name"),
    "eval_interval": (["--lr", "1e-4", "--eval-interval", "0"], "--eval-interval must be >= 1"),
    "vocab_file": (["--lr", "1e-4", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "/nonexistent/v.json",
                    "--merge-file", "/nonexistent/m.txt"], "--vocab-file: file not found: /nonexistent/v.json"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refusals_are_one_line(case: str) -> None:
    extra, expected = REFUSED[case]
    with pytest.raises(InputError) as err:
        _parse(extra)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_cli_refusal_exit_status_and_single_line(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from megatron_sailor.train.loop import main
    for k, v in {"WORLD_SIZE": "5", "RANK": "0", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SAILOR_RANK_MAP", raising=False)
    code = main(["--sailor-plan", PLAN, "--train-iters", "2", "--mock-data", "--lr", "1e-4", *MODEL, *VOCAB,
                 "--use-legacy-models"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["error: not implemented by megatron-sailor: --use-legacy-models"]


def test_split_cuts_documents_like_megatron_core() -> None:
    from megatron_sailor.train.datasets import parse_split, split_bounds
    assert split_bounds(parse_split("969, 30, 1"), 2000) == [(0, 1938), (1938, 1998), (1998, 2000)]
    assert split_bounds(parse_split("98/2"), 10) == [(0, 10), (10, 10), (10, 10)]
    assert split_bounds(parse_split("1"), 7) == [(0, 7), (7, 7), (7, 7)]


def _corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "src"
    folder.mkdir()
    for k in range(12):
        body = "".join(f"def function_{k}_{j}(x):\n    return x * {j} + {k}\n\n" for j in range(40))
        (folder / f"mod{k:02d}.py").write_text(body, encoding="utf-8")
    return folder


def test_preprocess_trains_bpe_and_training_args_pick_its_vocab(tmp_path: Path, capsys) -> None:
    pytest.importorskip("tokenizers", reason="extra 'text' (CI installs .[all])")
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron_sailor.train.preprocess import main
    from megatron_sailor.train.tokenizer import TokenizerArgs, build_tokenizer
    prefix = str(tmp_path / "out" / "code")
    assert main(["--input", str(_corpus(tmp_path)), "--pattern", "*.py", "--train-bpe", "300",
                 "--append-eod", "--output-prefix", prefix]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].startswith(f"wrote {prefix}.bin and {prefix}.idx: 12 documents")
    vocab, merges = f"{prefix}-bpe/vocab.json", f"{prefix}-bpe/merges.txt"
    assert out[-1] == (f"train with: --data-path {prefix} --tokenizer-type GPT2BPETokenizer "
                       f"--vocab-file {vocab} --merge-file {merges}")
    tok = build_tokenizer(TokenizerArgs("GPT2BPETokenizer", vocab, merges))
    assert tok.vocab_size == len(json.loads(Path(vocab).read_text())) == 300
    ds = IndexedDataset(prefix)
    first = (tmp_path / "src" / "mod00.py").read_text()
    assert list(ds[0]) == tok.encode(first) + [tok.eod_id]
    assert len(ds[0]) < len(first.encode()) / 2          # the BPE merges: well under one token per byte
    cfg = _parse(["--lr", "1e-4", "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab,
                  "--merge-file", merges], vocab=[])
    assert cfg.model.vocab_size == 300 and cfg.model.padded_vocab_size == 304


def test_preprocess_bad_input_is_one_line_and_keeps_old_data(tmp_path: Path, capsys) -> None:
    from megatron_sailor.train.preprocess import main
    good = tmp_path / "good.txt"
    good.write_text("hello world\n")
    prefix = str(tmp_path / "d")
    assert main(["--input", str(good), "--output-prefix", prefix]) == 0
    before = Path(prefix + ".bin").read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\nnot json\n')
    capsys.readouterr()
    assert main(["--input", str(bad), "--output-prefix", prefix]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {bad}:2: not JSON")
    assert Path(prefix + ".bin").read_bytes() == before and not Path(prefix + ".tmp.bin").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_wandb_runs_offline_without_an_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb", reason="extra 'wandb' (CI installs .[all])")
    from megatron_sailor.train.loggers import LoggerConfig, TrainLoggers, wandb_mode
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))                  # no ~/.netrc with a key
    assert wandb_mode() == "offline"
    save = tmp_path / "wb"
    log = TrainLoggers(LoggerConfig(wandb_project="p", wandb_exp_name="e", wandb_save_dir=str(save)), 0,
                       {"lr": 1e-3}, None)
    assert log.paths == [f"W&B run (offline) in {save}"]
    log.train(1, 8, loss=4.0, lr=1e-3, grad_norm=1.0, iteration_time_s=0.1, batch_size=8)
    log.validation(1, 8, loss=3.9, ppl=49.4)
    log.close()
    runs = list((save / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and any(runs[0].glob("*.wandb"))
