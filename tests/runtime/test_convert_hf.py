"""Hugging Face OPT / GPT-2 checkpoints in and out (python -m megatron_sailor.convert).

Small random models are built with transformers' own config classes (no download). Fast: a round trip
HF -> ours -> HF is bit-exact (weights and config); bad input is one line. Slow: convert in, train under a
heterogeneous 5-rank plan (TP 2 and 1, two zones), convert out; transformers' loss on the same tokens equals
ours (fp32, rel 1e-5) before and after training, and ours -> HF -> ours is bit-exact after training.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from tests.helpers.launch import REPO, python, torchrun

transformers = pytest.importorskip("transformers", reason="extra 'hf' (CI installs .[all])")
safetensors_torch = pytest.importorskip("safetensors.torch", reason="extra 'hf'")

DIMS = dict(layers=4, hidden=64, heads=4, ffn=256, positions=32, vocab=128)


def make_hf(arch: str, folder: Path, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    d = DIMS
    if arch == "gpt2":
        cfg = transformers.GPT2Config(n_layer=d["layers"], n_embd=d["hidden"], n_head=d["heads"],
                                      n_positions=d["positions"], vocab_size=d["vocab"], bos_token_id=0,
                                      eos_token_id=0)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.OPTConfig(num_hidden_layers=d["layers"], hidden_size=d["hidden"], num_attention_heads=d["heads"],
                                     ffn_dim=d["ffn"], max_position_embeddings=d["positions"], vocab_size=d["vocab"],
                                     word_embed_proj_dim=d["hidden"])
        model = transformers.OPTForCausalLM(cfg)
    model.save_pretrained(folder)
    return folder


def convert(*args: str) -> tuple[int, str, str]:
    from megatron_sailor.convert.cli import main
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _same_weights(a: Path, b: Path) -> None:
    x, y = (safetensors_torch.load_file(str(p / "model.safetensors")) for p in (a, b))
    assert sorted(x) == sorted(y)
    for k in x:
        assert x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]), k


@pytest.mark.parametrize("arch", ["gpt2", "opt"])
def test_round_trip_is_bit_exact(arch: str, tmp_path: Path) -> None:
    src = make_hf(arch, tmp_path / "hf")
    code, out, err = convert("from-hf", str(src), "--out", str(tmp_path / "ckpt"), "--make-vocab-size-divisible-by", "8")
    assert code == 0, err
    assert "--activation " + ("gelu_tanh" if arch == "gpt2" else "relu") in out
    code, _, err = convert("to-hf", str(tmp_path / "ckpt"), "--out", str(tmp_path / "back"))
    assert code == 0, err
    _same_weights(src, tmp_path / "back")
    a, b = (json.loads((p / "config.json").read_text()) for p in (src, tmp_path / "back"))
    assert {k for k in set(a) | set(b) if a.get(k) != b.get(k)} == set()


def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    src = make_hf("gpt2", tmp_path / "hf")
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**cfg, "model_type": "llama"}))
    code, _, err = convert("from-hf", str(src), "--out", str(tmp_path / "ckpt"))
    assert code == 2 and err.strip().splitlines() == ["error: config.json: model_type 'llama' is not supported "
                                                      "(supported: gpt2, opt)"]
    assert not (tmp_path / "ckpt").exists()
    (src / "config.json").write_text(json.dumps(cfg))
    (src / "model.safetensors").write_bytes(b"not a safetensors file")
    code, _, err = convert("from-hf", str(src), "--out", str(tmp_path / "ckpt"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "weights unreadable" in err
    code, _, err = convert("to-hf", str(tmp_path / "nothing"), "--out", str(tmp_path / "o"))
    assert code == 2 and "no committed checkpoint" in err and not (tmp_path / "o").exists()


def hf_loss(folder: Path, rows: torch.Tensor) -> float:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=rows[:, :-1]).logits
    return float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1)))


def mock_rows(seed: int, count: int) -> torch.Tensor:
    from megatron_sailor.runtime.data import MockTokens
    src = MockTokens(seed=seed, seq_length=DIMS["positions"], vocab_size=DIMS["vocab"])
    return torch.stack([src.sample(i) for i in range(count)])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("arch", ["gpt2", "opt"])
def test_train_hf_model_under_heterogeneous_plan_and_back(arch: str, tmp_path: Path) -> None:
    src = make_hf(arch, tmp_path / "hf", seed=3)
    ckpt = tmp_path / "ckpt"
    code, out, err = convert("from-hf", str(src), "--out", str(ckpt), "--make-vocab-size-divisible-by", "8")
    assert code == 0, err
    train_args = out.strip().splitlines()[-1].removeprefix("train with: ").split()
    seed, gbs = 11, 8
    proc = torchrun(5, "examples/gpt/pretrain_gpt.py",
                    ["--sailor-plan", str(REPO / "examples" / "plans" / "gpt_small_hetero.json"), *train_args,
                     "--save", str(ckpt), "--mock-data", "--seed", str(seed), "--train-iters", "3", "--lr", "1e-3",
                     "--hidden-dropout", "0", "--attention-dropout", "0",
                     "--eval-iters", "1", "--metrics-file", str(tmp_path / "m.jsonl")], timeout_s=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[0])["loss"]
    assert first == pytest.approx(hf_loss(src, mock_rows(seed, gbs)), rel=1e-5)
    valid = re.search(r"validation loss at iteration 3 \| lm loss value: (\S+)", proc.stdout)
    assert valid, proc.stdout
    code, _, err = convert("to-hf", str(ckpt), "--out", str(tmp_path / "trained"))
    assert code == 0, err
    trained = hf_loss(tmp_path / "trained", mock_rows(seed + 7, gbs))
    assert float(valid.group(1)) == pytest.approx(trained, rel=1e-5)
    assert trained != pytest.approx(hf_loss(src, mock_rows(seed + 7, gbs)), rel=1e-4)   # training moved it
    code, _, err = convert("from-hf", str(tmp_path / "trained"), "--out", str(tmp_path / "again"),
                           "--make-vocab-size-divisible-by", "8")
    assert code == 0, err
    from megatron_sailor.train.checkpoint import read_full_state
    ours = read_full_state(str(ckpt / "iter_0000003"))
    again = read_full_state(str(tmp_path / "again" / "iter_0000000"))
    assert sorted(ours) == sorted(again)
    for name in ours:
        assert torch.equal(ours[name]["param"], again[name]["param"]), name
