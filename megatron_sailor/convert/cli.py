"""``python -m megatron_sailor.convert``: Hugging Face OPT / GPT-2 checkpoints in and out.

    python -m megatron_sailor.convert from-hf HF_DIR --out CKPT [--seq-length N] [--make-vocab-size-divisible-by D]
                                              [--untie-embeddings-and-output-weights]
    python -m megatron_sailor.convert to-hf CKPT --out HF_DIR [--arch gpt2|opt]

``from-hf`` reads ``config.json`` and ``model.safetensors`` (or a sharded ``model.safetensors.index.json``, or
``pytorch_model.bin`` with ``torch.load(weights_only=True)``), writes CKPT as a ``--load``-able checkpoint
folder (iteration 0, fresh optimizer) plus ``CKPT/hf_config.json``, ``CKPT/hf_extra.safetensors`` and the
tokenizer files under ``CKPT/hf_tokenizer/``, and prints the training arguments that match it. A model
that ties its LM head to the word embedding (GPT-2 and OPT do by default) gives a tied checkpoint: train
it under a plan with ``"tie_embeddings": true`` (a Sailor plan_config ties unless
``--untie-embeddings-and-output-weights``); ``--untie-embeddings-and-output-weights`` converts it untied. ``to-hf``
converts the newest verified checkpoint in CKPT (a converted one or one written by training) into a
Hugging Face folder (``config.json``, ``model.safetensors``, tokenizer files). Bad input: one
``error: ...`` line, exit 2, nothing written. Needs the ``hf`` extra (safetensors; transformers only to
use the result).
"""
from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from planner.errors import InputError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "generation_config.json")


def _safetensors() -> Any:
    try:
        import safetensors.torch as st
    except ImportError as exc:
        raise InputError("needs the safetensors package: pip install -e \".[hf]\"") from exc
    return st


def read_hf(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config dict, state dict) of a Hugging Face model folder."""
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise InputError("no config.json (not a Hugging Face model folder)", source=str(folder))
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg})", source=str(cfg_path)) from None
    if not isinstance(config, dict):
        raise InputError("not a JSON object", source=str(cfg_path))
    st = _safetensors()
    try:
        if (folder / "model.safetensors").is_file():
            return config, st.load_file(str(folder / "model.safetensors"))
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
            sd: dict[str, Any] = {}
            for shard in shards:
                if "/" in shard or "\\" in shard or shard.startswith("."):
                    raise InputError(f"weight_map names a file outside the folder: {shard!r}", source=str(index))
                sd.update(st.load_file(str(folder / shard)))
            return config, sd
        if (folder / "pytorch_model.bin").is_file():
            import torch
            return config, torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a corrupt weights file is one line
        raise InputError(f"weights unreadable ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})",
                         source=str(folder)) from None
    raise InputError("no model.safetensors, model.safetensors.index.json or pytorch_model.bin", source=str(folder))


def _copy_tokenizer(src: Path, dst: Path) -> list[str]:
    found = [name for name in TOKENIZER_FILES if (src / name).is_file()]
    if found:
        dst.mkdir(parents=True, exist_ok=True)
        for name in found:
            shutil.copyfile(src / name, dst / name)
    return found


def from_hf(src: Path, out: Path, seq_length: int | None, divisible_by: int, untie: bool = False
            ) -> tuple[list[str], bool]:
    """Convert; returns (the training arguments that describe the model, whether it is tied)."""
    from planner.model import ModelSpec
    from megatron_sailor.convert.hf_maps import arch_of, dims_of, from_hf as convert
    from megatron_sailor.train.checkpoint import CheckpointError, list_checkpoints, write_full_checkpoint
    if out.exists() and (list_checkpoints(out) or (out / "hf_config.json").exists()):
        raise InputError("already holds a checkpoint; choose an empty --out folder", source=str(out))
    config, sd = read_hf(src)
    arch = arch_of(config)
    dims = dims_of(arch, config, seq_length)
    spec = ModelSpec(name=f"hf-{arch}", make_vocab_size_divisible_by=divisible_by, **dims)
    conv = convert(arch, config, sd, spec.padded_vocab_size, seq_length, untie=untie)
    spec = replace(spec, tied_embeddings=conv.tied)
    try:
        write_full_checkpoint(str(out), spec, conv.params, meta_extra={"hf_arch": arch, "hf_source": str(src)})
    except CheckpointError as exc:
        raise InputError(str(exc)) from None
    (out / "hf_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    _safetensors().save_file(conv.extra, str(out / "hf_extra.safetensors"))
    tok = _copy_tokenizer(src, out / "hf_tokenizer")
    args = ["--num-layers", dims["num_layers"], "--hidden-size", dims["hidden_size"], "--num-attention-heads",
            dims["num_heads"], "--ffn-hidden-size", dims["ffn_hidden_size"], "--seq-length", dims["seq_length"],
            "--max-position-embeddings", dims["max_position_embeddings"], "--vocab-size", dims["vocab_size"],
            "--make-vocab-size-divisible-by", divisible_by]
    if dims["activation"] != "gelu":
        args += ["--activation", dims["activation"]]
    if not conv.tied:
        args += ["--untie-embeddings-and-output-weights"]
    if "tokenizer.json" in tok:
        args += ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(out / "hf_tokenizer")]
    return [str(a) for a in args] + ["--load", str(out)], conv.tied


def to_hf(ckpt: Path, out: Path, arch: str | None) -> Path:
    """Convert the newest verified checkpoint in ``ckpt``; returns the checkpoint folder used."""
    from planner.model import ModelSpec
    from megatron_sailor.convert.hf_maps import ARCHS, hf_config, to_hf as convert
    from megatron_sailor.train.checkpoint import CheckpointError, choose_checkpoint, list_checkpoints, read_full_state
    if out.exists() and any(out.iterdir()):
        raise InputError("is not empty; choose a new --out folder (nothing is overwritten)", source=str(out))
    found = list_checkpoints(ckpt)
    if not found:
        raise InputError("no committed checkpoint (iter_*)", source=str(ckpt))
    try:
        meta = json.loads((found[0] / "meta.json").read_text(encoding="utf-8"))
        spec = ModelSpec(name="checkpoint", **meta.get("model", {}))
        path, _ = choose_checkpoint(str(ckpt), spec)
    except (OSError, ValueError, AttributeError, TypeError, InputError, CheckpointError) as exc:
        raise InputError(f"checkpoint unusable: {str(exc).splitlines()[0]}", source=str(ckpt)) from None
    base = json.loads((ckpt / "hf_config.json").read_text(encoding="utf-8")) if (ckpt / "hf_config.json").is_file() else None
    arch = arch or (base or {}).get("model_type")
    if arch not in ARCHS:
        raise InputError(f"give --arch {'|'.join(ARCHS)} (no hf_config.json from from-hf in {ckpt})")
    params = {name: e["param"] for name, e in read_full_state(str(path)).items()}
    extra_path = ckpt / "hf_extra.safetensors"
    extra = _safetensors().load_file(str(extra_path)) if extra_path.is_file() else {}
    dims = {k: v for k, v in spec.to_dict().items()}
    dims.setdefault("activation", "gelu")
    tied = spec.tied_embeddings
    sd = convert(arch, dims, params, extra, tied)
    out.mkdir(parents=True, exist_ok=True)
    _safetensors().save_file({k: v.contiguous() for k, v in sd.items()}, str(out / "model.safetensors"),
                             metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(hf_config(arch, dims, tied, base), indent=1), encoding="utf-8")
    _copy_tokenizer(ckpt / "hf_tokenizer", out)
    return path


def _parser() -> argparse.ArgumentParser:
    from planner.errors import OneLineParser
    p = OneLineParser(prog="python -m megatron_sailor.convert", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("from-hf", help="Hugging Face folder -> checkpoint folder for --load")
    a.add_argument("src", help="Hugging Face model folder (config.json + weights)")
    a.add_argument("--out", required=True, help="new checkpoint folder")
    a.add_argument("--seq-length", type=int, default=None, help="training sequence length (default: max positions)")
    a.add_argument("--make-vocab-size-divisible-by", type=int, default=128,
                   help="pad the vocabulary as the training run will (1: no padding, logits equal HF's)")
    a.add_argument("--untie-embeddings-and-output-weights", action="store_true",
                   help="an untied LM head (initialised with the word embedding) even when the model ties them")
    b = sub.add_parser("to-hf", help="checkpoint folder -> Hugging Face folder")
    b.add_argument("ckpt", help="checkpoint folder (--save of a run, or from-hf's --out)")
    b.add_argument("--out", required=True, help="new Hugging Face model folder")
    b.add_argument("--arch", choices=("gpt2", "opt"), default=None, help="needed when CKPT has no hf_config.json")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        if args.command == "from-hf":
            if args.make_vocab_size_divisible_by < 1 or (args.seq_length is not None and args.seq_length < 1):
                raise InputError("--make-vocab-size-divisible-by and --seq-length must be >= 1")
            train_args, tied = from_hf(Path(args.src), Path(args.out), args.seq_length,
                                       args.make_vocab_size_divisible_by, args.untie_embeddings_and_output_weights)
            print(f"wrote checkpoint folder {args.out} (iteration 0) from {args.src}, "
                  + ("tied embeddings: train under a plan with \"tie_embeddings\": true" if tied
                     else "untied LM head"))
            print("train with: " + shlex.join(train_args))
        else:
            used = to_hf(Path(args.ckpt), Path(args.out), args.arch)
            print(f"wrote Hugging Face model {args.out} (config.json, model.safetensors) from {used}")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
