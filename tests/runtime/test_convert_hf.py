"""Hugging Face OPT / GPT-2 checkpoints in and out (python -m megatron_sailor.convert).

Small random models are built with transformers' own config classes (no download). Fast: a round trip
HF -> ours -> HF is bit-exact (weights and config) for tied GPT-2 and OPT and an untied GPT-2; a tied model
gives a tied checkpoint, ``--untie-embeddings-and-output-weights`` an untied one; bad input (OPT-350m's
post-LayerNorm / projected-embedding variant among it) is one line. Slow: convert in; our megatron-core
model's logits (1 rank, megatron's shared embedding/output weight) equal transformers' (fp32, 1e-5); train
under a heterogeneous tied 5-rank plan (TP 2 and 1, two zones, the head a copy on the last stage) whose
first loss equals transformers' (rel 1e-5); convert out: transformers' loss and logits equal ours again,
and ours -> HF -> ours is bit-exact after training.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from planner.errors import InputError

from tests.helpers.launch import REPO, python, torchrun

transformers = pytest.importorskip("transformers", reason="extra 'hf' (CI installs .[all])")
safetensors_torch = pytest.importorskip("safetensors.torch", reason="extra 'hf'")

DIMS = dict(layers=4, hidden=64, heads=4, ffn=256, positions=32, vocab=128)


def make_hf(arch: str, folder: Path, seed: int = 0, tied: bool = True) -> Path:
    torch.manual_seed(seed)
    d = DIMS
    if arch == "gpt2":
        cfg = transformers.GPT2Config(n_layer=d["layers"], n_embd=d["hidden"], n_head=d["heads"],
                                      n_positions=d["positions"], vocab_size=d["vocab"], bos_token_id=0,
                                      eos_token_id=0, tie_word_embeddings=tied)
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


def _ckpt_model(ckpt: Path) -> dict:
    return json.loads(next(ckpt.glob("iter_*/meta.json")).read_text())["model"]


@pytest.mark.parametrize("arch,tied", [("gpt2", True), ("opt", True), ("gpt2", False)])
def test_round_trip_is_bit_exact(arch: str, tied: bool, tmp_path: Path) -> None:
    src = make_hf(arch, tmp_path / "hf", tied=tied)
    assert ("lm_head.weight" in safetensors_torch.load_file(str(src / "model.safetensors"))) == (not tied)
    code, out, err = convert("from-hf", str(src), "--out", str(tmp_path / "ckpt"), "--make-vocab-size-divisible-by", "8")
    assert code == 0, err
    assert "--activation " + ("gelu_tanh" if arch == "gpt2" else "relu") in out
    assert ("--untie-embeddings-and-output-weights" in out) == (not tied)
    assert _ckpt_model(tmp_path / "ckpt")["tied_embeddings"] is tied
    code, _, err = convert("to-hf", str(tmp_path / "ckpt"), "--out", str(tmp_path / "back"))
    assert code == 0, err
    _same_weights(src, tmp_path / "back")
    a, b = (json.loads((p / "config.json").read_text()) for p in (src, tmp_path / "back"))
    assert {k for k in set(a) | set(b) if a.get(k) != b.get(k)} == set()
    assert b["tie_word_embeddings"] is tied


def test_untie_flag_gives_an_untied_checkpoint(tmp_path: Path) -> None:
    src = make_hf("gpt2", tmp_path / "hf")
    code, out, err = convert("from-hf", str(src), "--out", str(tmp_path / "ckpt"), "--make-vocab-size-divisible-by",
                             "8", "--untie-embeddings-and-output-weights")
    assert code == 0 and "untied LM head" in out and "--untie-embeddings-and-output-weights" in out, err
    assert _ckpt_model(tmp_path / "ckpt")["tied_embeddings"] is False
    code, _, err = convert("to-hf", str(tmp_path / "ckpt"), "--out", str(tmp_path / "back"))
    assert code == 0, err
    back = safetensors_torch.load_file(str(tmp_path / "back" / "model.safetensors"))
    assert torch.equal(back["lm_head.weight"], back["transformer.wte.weight"])
    assert json.loads((tmp_path / "back" / "config.json").read_text())["tie_word_embeddings"] is False


def test_opt_350m_variant_is_refused_in_one_line(tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = transformers.OPTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128,
                                 max_position_embeddings=32, vocab_size=128, word_embed_proj_dim=32,
                                 do_layer_norm_before=False)      # OPT-350m's shape of layers, scaled down
    transformers.OPTForCausalLM(cfg).save_pretrained(tmp_path / "hf")
    code, _, err = convert("from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ckpt"))
    assert code == 2 and err.strip().splitlines() == [
        "error: config.json: do_layer_norm_before = false (post-LayerNorm layers, as in OPT-350m) is not supported: "
        "the runtime trains pre-LayerNorm GPT layers with biases (needs do_layer_norm_before = true)"]
    assert not (tmp_path / "ckpt").exists()
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**cfg, "do_layer_norm_before": True}))
    code, _, err = convert("from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ckpt"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "word_embed_proj_dim = 32" in err


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
    untied = make_hf("gpt2", tmp_path / "untied", tied=False)
    sd = safetensors_torch.load_file(str(untied / "model.safetensors"))
    safetensors_torch.save_file({k: v for k, v in sd.items() if k != "lm_head.weight"}, str(untied / "model.safetensors"))
    code, _, err = convert("from-hf", str(untied), "--out", str(tmp_path / "ckpt"))
    assert code == 2 and err.strip().splitlines() == [
        "error: weights: tensor 'lm_head.weight' missing (config.json: tie_word_embeddings is false)"]
    assert not (tmp_path / "ckpt").exists()


def test_tied_checkpoint_whose_head_copy_differs_is_refused(tmp_path: Path) -> None:
    from megatron_sailor.convert.hf_maps import from_hf, to_hf
    from megatron_sailor.convert.cli import read_hf
    config, sd = read_hf(make_hf("gpt2", tmp_path / "hf"))
    conv = from_hf("gpt2", config, sd, padded_vocab=128)
    assert conv.tied and torch.equal(conv.params["output_layer.weight"], conv.params["embedding.word_embeddings.weight"])
    dims = {**conv.dims, "activation": "gelu_tanh"}
    assert "lm_head.weight" not in to_hf("gpt2", dims, conv.params, conv.extra, tied=True)
    no_head = {k: v for k, v in conv.params.items() if k != "output_layer.weight"}     # a 1-stage tied run's save
    assert "lm_head.weight" not in to_hf("gpt2", dims, no_head, conv.extra, tied=True)
    drifted = {**conv.params, "output_layer.weight": conv.params["output_layer.weight"] + 1e-3}
    with pytest.raises(InputError, match="tied_embeddings is true but output_layer.weight differs"):
        to_hf("gpt2", dims, drifted, conv.extra, tied=True)


def hf_logits(folder: Path, tokens: torch.Tensor) -> torch.Tensor:
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        return model(input_ids=tokens).logits


def hf_loss(folder: Path, rows: torch.Tensor) -> float:
    logits = hf_logits(folder, rows[:, :-1])
    return float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1)))


def our_logits(ckpt: Path, tokens: torch.Tensor, work: Path) -> torch.Tensor:
    """Logits of megatron-core's GPT with CKPT loaded (1 rank, tests/helpers/hf_logits.py)."""
    torch.save(tokens, work / "tokens.pt")
    proc = torchrun(1, "tests/helpers/hf_logits.py", [str(ckpt), str(work / "tokens.pt"), str(work / "ours.pt")],
                    timeout_s=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(work / "ours.pt", weights_only=True)


def assert_logits_equal(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype == torch.float32
    assert float((ours - theirs).abs().max()) <= 1e-5 * max(1.0, float(theirs.abs().max()))


def mock_rows(seed: int, count: int) -> torch.Tensor:
    from megatron_sailor.runtime.data import MockTokens
    src = MockTokens(seed=seed, seq_length=DIMS["positions"], vocab_size=DIMS["vocab"])
    return torch.stack([src.sample(i) for i in range(count)])


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("arch", ["gpt2"])     # OPT: test_opt_checkpoint_gives_hf_logits_on_one_rank (CI time)
def test_train_hf_model_under_heterogeneous_plan_and_back(arch: str, tmp_path: Path) -> None:
    src = make_hf(arch, tmp_path / "hf", seed=3)
    ckpt = tmp_path / "ckpt"
    code, out, err = convert("from-hf", str(src), "--out", str(ckpt), "--make-vocab-size-divisible-by", "8")
    assert code == 0 and "tied embeddings" in out, err
    probe = mock_rows(99, 4)[:, :-1]
    assert_logits_equal(our_logits(ckpt, probe, tmp_path), hf_logits(src, probe))
    train_args = out.strip().splitlines()[-1].removeprefix("train with: ").split()
    seed, gbs = 11, 8
    plan = json.loads((REPO / "examples" / "plans" / "gpt_small_hetero_tied.json").read_text())
    assert plan["tie_embeddings"] and plan["global_batch_size"] == gbs and len(plan["stages"]) > 1
    assert {r["tp"] for r in plan["stages"][0]["replicas"]} == {1, 2}
    proc = torchrun(5, "examples/gpt/pretrain_gpt.py",
                    ["--sailor-plan", str(REPO / "examples" / "plans" / "gpt_small_hetero_tied.json"), *train_args,
                     "--save", str(ckpt), "--mock-data", "--seed", str(seed), "--train-iters", "3", "--lr", "1e-3",
                     "--hidden-dropout", "0", "--attention-dropout", "0",
                     "--eval-iters", "1", "--metrics-file", str(tmp_path / "m.jsonl")], timeout_s=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = json.loads((tmp_path / "m.jsonl").read_text().splitlines()[0])["loss"]
    assert first == pytest.approx(hf_loss(src, mock_rows(seed, gbs)), rel=1e-5)
    valid = re.search(r"validation loss at iteration 3 \| lm loss value: (\S+)", proc.stdout)
    assert valid, proc.stdout
    from megatron_sailor.train.checkpoint import read_full_state
    ours = read_full_state(str(ckpt / "iter_0000003"))
    assert torch.equal(ours["output_layer.weight"]["param"], ours["embedding.word_embeddings.weight"]["param"])
    code, _, err = convert("to-hf", str(ckpt), "--out", str(tmp_path / "trained"))
    assert code == 0, err
    assert json.loads((tmp_path / "trained" / "config.json").read_text())["tie_word_embeddings"] is True
    trained = hf_loss(tmp_path / "trained", mock_rows(seed + 7, gbs))
    assert float(valid.group(1)) == pytest.approx(trained, rel=1e-5)
    assert trained != pytest.approx(hf_loss(src, mock_rows(seed + 7, gbs)), rel=1e-4)   # training moved it
    assert_logits_equal(our_logits(ckpt, probe, tmp_path), hf_logits(tmp_path / "trained", probe))
    code, _, err = convert("from-hf", str(tmp_path / "trained"), "--out", str(tmp_path / "again"),
                           "--make-vocab-size-divisible-by", "8")
    assert code == 0, err
    again = read_full_state(str(tmp_path / "again" / "iter_0000000"))
    assert sorted(ours) == sorted(again)
    for name in ours:
        assert torch.equal(ours[name]["param"], again[name]["param"]), name


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_opt_checkpoint_gives_hf_logits_on_one_rank(tmp_path: Path) -> None:
    """OPT's own conversion (learned positions, ReLU, its train-with flags) gives HF's logits under megatron-core;
    the heterogeneous-plan training round trip runs on GPT-2 above, the same runtime path."""
    src = make_hf("opt", tmp_path / "hf", seed=3)
    ckpt = tmp_path / "ckpt"
    code, out, err = convert("from-hf", str(src), "--out", str(ckpt), "--make-vocab-size-divisible-by", "8")
    assert code == 0 and "tied embeddings" in out, err
    probe = mock_rows(99, 4)[:, :-1]
    assert_logits_equal(our_logits(ckpt, probe, tmp_path), hf_logits(src, probe))
