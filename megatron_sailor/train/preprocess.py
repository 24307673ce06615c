"""sailor-preprocess: build a megatron-core indexed dataset (.bin/.idx) from local text.

Inputs (``--input``): a ``.txt`` file (one document per non-empty line), a ``.jsonl`` file (one JSON object
per line, text under ``--json-keys``, as Megatron-LM's tools/preprocess_data.py), or a folder (every file
matching ``--pattern``, searched recursively in sorted order, is one document; ``--max-files`` /
``--max-bytes`` cap a large tree such as Python's standard library).

Tokenizers (``megatron_sailor.train.tokenizer``): ``ByteLevel`` (default; byte values clipped to
``--vocab-size - 1``), ``GPT2BPETokenizer`` with ``--vocab-file``/``--merge-file``, ``HuggingFaceTokenizer``
with ``--tokenizer-model DIR``, or ``--train-bpe N``: train a GPT-2-style byte-level BPE of N tokens on the
input with the ``tokenizers`` library first (vocab.json and merges.txt written to ``PREFIX-bpe/``).
The last line printed is the training job's tokenizer arguments. ``--write-sample-text`` (re)writes
``--input`` as a deterministic English-like corpus first (no downloads).

    sailor-preprocess --input examples/gpt/data/sample_corpus.txt --output-prefix runs/corpus
    sailor-preprocess --input "$(python -c 'import sysconfig;print(sysconfig.get_paths()["stdlib"])')" \
        --pattern '*.py' --max-files 200 --train-bpe 2048 --append-eod --output-prefix runs/stdlib
"""
from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
from pathlib import Path
from typing import Iterator

from planner.errors import InputError
from megatron_sailor.train.tokenizer import TOKENIZER_TYPES, Tokenizer, TokenizerArgs, build_tokenizer, train_bpe


def require_runtime(tool: str) -> None:
    """InputError naming the extra to install when torch / megatron-core are missing."""
    import importlib.util
    for module in ("torch", "megatron.core"):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise InputError(f"{tool} needs the runtime extra ({module} is not installed): "
                             "pip install 'megatron-sailor[runtime]'")

_WORDS = ("the model trains on many small machines in several zones and every stage keeps its own "
          "layers while gradients travel between replicas of different sizes so the plan decides how "
          "to split work across pipelines and the loss goes down step by step").split()


def write_sample_text(path: str, lines: int = 2000, seed: int = 0) -> None:
    """A deterministic corpus of simple sentences (grammar-free but with learnable word statistics)."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        start = rng.randrange(len(_WORDS))
        n = rng.randrange(6, 16)
        out.append(" ".join(_WORDS[(start + k) % len(_WORDS)] for k in range(n)) + ".")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(out) + "\n", encoding="utf-8")


def tokenize(text: str, vocab_size: int) -> list[int]:
    """The ByteLevel tokenizer (kept for callers of the earlier API)."""
    return [min(b, vocab_size - 1) for b in text.encode("utf-8")]


def input_files(path: str, pattern: str, max_files: int | None, max_bytes: int | None,
                exclude_dirs: tuple[str, ...] = ()) -> list[Path]:
    """The files of a folder input (sorted, capped, none under a folder named in ``exclude_dirs``);
    a file input is itself."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise InputError("input not found (a .txt/.jsonl file or a folder)", source=path)
    files, total = [], 0
    skip = set(exclude_dirs)
    for f in sorted(q for q in p.rglob(pattern) if q.is_file() and not skip & set(q.relative_to(p).parts[:-1])):
        size = f.stat().st_size
        if max_bytes is not None and files and total + size > max_bytes:
            break
        files.append(f)
        total += size
        if max_files is not None and len(files) >= max_files:
            break
    if not files:
        raise InputError(f"no file matches --pattern {pattern!r}", source=path)
    return files


def documents(files: list[Path], folder: bool, json_keys: tuple[str, ...]) -> Iterator[str]:
    """Documents: one per file (folder input), per JSON line (.jsonl/.json), or per non-empty line."""
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise InputError(f"cannot read ({exc.strerror})", source=str(f)) from exc
        if folder:
            if text.strip():
                yield text
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            if f.suffix in (".jsonl", ".json"):
                yield _json_text(line, json_keys, f"{f}:{n}")
            else:
                yield line + "\n"


def _json_text(line: str, keys: tuple[str, ...], where: str) -> str:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON ({exc.msg})", source=where) from exc
    if not isinstance(obj, dict) or not all(isinstance(obj.get(k), str) for k in keys):
        raise InputError(f"no string field {'/'.join(keys)}", source=where)
    return "".join(obj[k] for k in keys)


def build_indexed_dataset(docs: Iterator[str], output_prefix: str, tokenizer: Tokenizer,
                          append_eod: bool = False) -> tuple[int, int]:
    """Write ``output_prefix``.bin/.idx (via temporary files: an error leaves an older pair untouched);
    returns (documents, tokens)."""
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    if append_eod and tokenizer.eod_id is None:
        raise InputError(f"--append-eod: tokenizer {tokenizer.name} has no end-of-document token")
    Path(output_prefix).parent.mkdir(parents=True, exist_ok=True)
    dtype = np.uint16 if tokenizer.vocab_size <= 65535 else np.int32
    bin_path, idx_path = Path(output_prefix + ".tmp.bin"), Path(output_prefix + ".tmp.idx")
    builder = IndexedDatasetBuilder(str(bin_path), dtype=dtype)
    n_docs = n_tokens = 0
    try:
        for text in docs:
            ids = tokenizer.encode(text) + ([tokenizer.eod_id] if append_eod else [])
            if not ids:
                continue
            builder.add_item(torch.tensor(ids, dtype=torch.int64))
            builder.end_document()
            n_docs, n_tokens = n_docs + 1, n_tokens + len(ids)
        if n_docs == 0:
            raise InputError("no non-empty document to tokenize", source="--input")
        builder.finalize(str(idx_path))
    except BaseException:
        bin_path.unlink(missing_ok=True)
        idx_path.unlink(missing_ok=True)
        raise
    bin_path.replace(output_prefix + ".bin")      # written completely: only now replace an older pair
    idx_path.replace(output_prefix + ".idx")
    return n_docs, n_tokens


def _parser() -> argparse.ArgumentParser:
    from planner.errors import OneLineParser
    p = OneLineParser(prog="sailor-preprocess", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, help=".txt (a document per line), .jsonl, or a folder (a document per file)")
    p.add_argument("--output-prefix", required=True, help="writes PREFIX.bin and PREFIX.idx")
    p.add_argument("--pattern", default="*.txt", help="folder input: file name pattern (default *.txt)")
    p.add_argument("--max-files", type=int, default=None, help="folder input: at most this many files")
    p.add_argument("--max-bytes", type=int, default=None, help="folder input: stop before this many bytes")
    p.add_argument("--exclude-dir", action="append", default=[], metavar="NAME",
                   help="folder input: skip folders with this name (repeatable, e.g. site-packages)")
    p.add_argument("--json-keys", nargs="+", default=["text"], help=".jsonl input: field(s) holding the text")
    p.add_argument("--tokenizer-type", choices=TOKENIZER_TYPES, default=None,
                   help="default ByteLevel (GPT2BPETokenizer when --vocab-file/--merge-file or --train-bpe)")
    p.add_argument("--vocab-file", default=None, help="GPT2BPETokenizer: vocab.json")
    p.add_argument("--merge-file", default=None, help="GPT2BPETokenizer: merges.txt")
    p.add_argument("--tokenizer-model", default=None, help="HuggingFaceTokenizer: folder with tokenizer.json")
    p.add_argument("--vocab-size", type=int, default=128, help="ByteLevel: ids are bytes clipped to this - 1")
    p.add_argument("--train-bpe", type=int, default=None, metavar="N",
                   help="train a GPT-2-style BPE of N tokens on the input (tokenizers library) and use it")
    p.add_argument("--append-eod", action="store_true", help="end every document with <|endoftext|>")
    p.add_argument("--write-sample-text", action="store_true",
                   help="first (re)generate --input as a deterministic sample corpus")
    return p


def _tokenizer(args: argparse.Namespace, files: list[Path]) -> tuple[Tokenizer, list[str]]:
    """The tokenizer and the training job's arguments that name it."""
    if args.train_bpe is not None:
        if args.tokenizer_type not in (None, "GPT2BPETokenizer") or args.vocab_file or args.merge_file:
            raise InputError("--train-bpe writes its own GPT2BPETokenizer files: drop --tokenizer-type/--vocab-file")
        args.vocab_file, args.merge_file = train_bpe([str(f) for f in files], args.train_bpe,
                                                     args.output_prefix + "-bpe")
        args.tokenizer_type = "GPT2BPETokenizer"
    if args.tokenizer_type is None:
        args.tokenizer_type = "GPT2BPETokenizer" if args.vocab_file or args.merge_file else "ByteLevel"
    tok = build_tokenizer(TokenizerArgs(args.tokenizer_type, args.vocab_file, args.merge_file,
                                        args.tokenizer_model, args.vocab_size))
    if tok.name == "GPT2BPETokenizer":
        flags = ["--tokenizer-type", tok.name, "--vocab-file", args.vocab_file, "--merge-file", args.merge_file]
    elif tok.name == "HuggingFaceTokenizer":
        flags = ["--tokenizer-type", tok.name, "--tokenizer-model", args.tokenizer_model]
    else:
        flags = ["--vocab-size", str(tok.vocab_size)]
    return tok, flags


def run(args: argparse.Namespace) -> None:
    from megatron_sailor.train.progress import progress_iter
    if args.write_sample_text:
        write_sample_text(args.input)
    for name in ("max_files", "max_bytes", "train_bpe"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    files = input_files(args.input, args.pattern, args.max_files, args.max_bytes, tuple(args.exclude_dir))
    tok, flags = _tokenizer(args, files)
    docs = documents(progress_iter(files, "tokenizing", len(files)), Path(args.input).is_dir(),
                     tuple(args.json_keys))
    n_docs, n_tokens = build_indexed_dataset(docs, args.output_prefix, tok, args.append_eod)
    print(f"wrote {args.output_prefix}.bin and {args.output_prefix}.idx: {n_docs} documents, {n_tokens} tokens "
          f"from {len(files)} file(s), tokenizer {tok.name} (vocabulary {tok.vocab_size})")
    print("train with: " + shlex.join(["--data-path", args.output_prefix, *flags]))


def main(argv: list[str] | None = None) -> int:
    try:
        require_runtime("sailor-preprocess")
        run(_parser().parse_args(argv))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
