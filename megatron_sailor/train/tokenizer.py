"""Tokenizers a Megatron-LM user names on the command line, for sailor-preprocess and the training job.

Contract: :func:`build_tokenizer` returns a :class:`Tokenizer` (``encode(text) -> list[int]``,
``vocab_size``, ``eod_id``) for

* ``GPT2BPETokenizer`` with ``--vocab-file`` (vocab.json) and ``--merge-file`` (merges.txt): GPT-2's
  byte-level BPE, loaded by the ``tokenizers`` library; vocabulary size = entries of vocab.json (as
  Megatron-LM's GPT2BPETokenizer); end of document = ``<|endoftext|>``;
* ``HuggingFaceTokenizer`` with ``--tokenizer-model DIR``: the ``tokenizer.json`` in DIR (``tokenizers``);
  vocabulary size includes added tokens, as Megatron-LM's ``len(tokenizer)``;
* ``NullTokenizer``: no text, ``--vocab-size`` ids (the training job only needs the size);
* ``ByteLevel`` (megatron-sailor's own, the default of sailor-preprocess): token = UTF-8 byte value,
  clipped to ``vocab_size - 1``.

:func:`train_bpe` trains a GPT-2-style byte-level BPE on local text files and writes vocab.json and
merges.txt that ``GPT2BPETokenizer`` (ours or Megatron-LM's) reads back. Missing files or the missing
``tokenizers`` package are one-line :class:`InputError` s.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from planner.errors import InputError

TOKENIZER_TYPES = ("GPT2BPETokenizer", "HuggingFaceTokenizer", "NullTokenizer", "ByteLevel")
EOD_TOKEN = "<|endoftext|>"


@dataclass(frozen=True)
class TokenizerArgs:
    tokenizer_type: str | None = None
    vocab_file: str | None = None
    merge_file: str | None = None
    tokenizer_model: str | None = None
    vocab_size: int | None = None


@dataclass(frozen=True)
class Tokenizer:
    name: str
    vocab_size: int
    eod_id: int | None
    encode: Callable[[str], list[int]]


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as exc:
        raise InputError("this tokenizer needs the 'tokenizers' package: pip install -e \".[text]\"") from exc
    return tokenizers


def _need_file(path: str | None, flag: str) -> str:
    if not path:
        raise InputError(f"{flag} is required for this --tokenizer-type")
    if not Path(path).is_file():
        raise InputError(f"{flag}: file not found: {path}")
    return path


def _gpt2_bpe(vocab_file: str, merge_file: str) -> Tokenizer:
    tk = _tokenizers()
    try:
        vocab = json.loads(Path(vocab_file).read_text(encoding="utf-8"))
        if not isinstance(vocab, dict) or not vocab:
            raise ValueError("not a JSON object of token -> id")
        tok = tk.Tokenizer(tk.models.BPE.from_file(vocab_file, merge_file))
    except Exception as exc:  # noqa: BLE001 - any malformed file becomes one line
        raise InputError(f"{vocab_file} / {merge_file}: not a GPT-2 vocab.json / merges.txt pair "
                         f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from exc
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    return Tokenizer("GPT2BPETokenizer", len(vocab), vocab.get(EOD_TOKEN),
                     lambda text: tok.encode(text).ids)


def _hf(model_dir: str) -> Tokenizer:
    tk = _tokenizers()
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        raise InputError(f"--tokenizer-model: no tokenizer.json in {model_dir}")
    try:
        tok = tk.Tokenizer.from_file(str(path))
    except Exception as exc:  # noqa: BLE001
        raise InputError(f"{path}: not a tokenizers file ({str(exc).splitlines()[0]})") from exc
    return Tokenizer("HuggingFaceTokenizer", tok.get_vocab_size(with_added_tokens=True),
                     tok.token_to_id(EOD_TOKEN), lambda text: tok.encode(text).ids)


def _byte_level(vocab_size: int) -> Tokenizer:
    return Tokenizer("ByteLevel", vocab_size, None,
                     lambda text: [min(b, vocab_size - 1) for b in text.encode("utf-8")])


def build_tokenizer(args: TokenizerArgs) -> Tokenizer:
    kind = args.tokenizer_type
    if kind is None and args.vocab_file and args.merge_file:
        kind = "GPT2BPETokenizer"
    if kind == "GPT2BPETokenizer":
        return _gpt2_bpe(_need_file(args.vocab_file, "--vocab-file"), _need_file(args.merge_file, "--merge-file"))
    if kind == "HuggingFaceTokenizer":
        if not args.tokenizer_model:
            raise InputError("--tokenizer-model DIR is required for --tokenizer-type HuggingFaceTokenizer")
        return _hf(args.tokenizer_model)
    if kind in ("NullTokenizer", "ByteLevel", None):
        if args.vocab_size is None or args.vocab_size < 2:
            raise InputError(f"--tokenizer-type {kind or 'NullTokenizer'} needs --vocab-size >= 2, "
                             f"got {args.vocab_size}")
        return _byte_level(args.vocab_size) if kind == "ByteLevel" else \
            Tokenizer("NullTokenizer", args.vocab_size, args.vocab_size - 1, _no_text)
    raise InputError(f"--tokenizer-type {kind!r} is not one of {', '.join(TOKENIZER_TYPES)}")


def _no_text(text: str) -> list[int]:
    raise InputError("NullTokenizer cannot encode text: give --tokenizer-type GPT2BPETokenizer or ByteLevel")


def train_bpe(files: list[str], vocab_size: int, out_dir: str) -> tuple[str, str]:
    """Train a GPT-2-style byte-level BPE on ``files``; write ``out_dir``/vocab.json, merges.txt."""
    tk = _tokenizers()
    if vocab_size < 257:
        raise InputError(f"--bpe-vocab-size must be >= 257 (256 bytes + {EOD_TOKEN}), got {vocab_size}")
    bpe = tk.ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train(files=files, vocab_size=vocab_size, min_frequency=2, special_tokens=[EOD_TOKEN],
              show_progress=False)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    bpe.save_model(out_dir)
    return str(Path(out_dir) / "vocab.json"), str(Path(out_dir) / "merges.txt")
