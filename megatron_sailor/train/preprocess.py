"""Build a megatron-core indexed dataset (.bin/.idx) from a text file, with a byte-level tokenizer.

Token id = byte value, clipped to ``vocab_size - 1`` (so ASCII text fits a 128-token vocabulary); one
document per non-empty line. ``--write-sample-text PATH`` writes a deterministic English-like corpus
first (no downloads needed).

    python -m megatron_sailor.train.preprocess --input corpus.txt --output-prefix data/corpus --vocab-size 128
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from planner.errors import InputError


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
    return [min(b, vocab_size - 1) for b in text.encode("utf-8")]


def build_indexed_dataset(input_path: str, output_prefix: str, vocab_size: int) -> int:
    """Write ``output_prefix``.bin/.idx; returns the number of documents."""
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    if not Path(input_path).is_file():
        raise InputError("input text file not found", source=input_path)
    Path(output_prefix).parent.mkdir(parents=True, exist_ok=True)
    builder = IndexedDatasetBuilder(output_prefix + ".bin", dtype=np.int32)
    docs = 0
    with open(input_path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            builder.add_item(torch.tensor(tokenize(line, vocab_size), dtype=torch.int64))
            builder.end_document()
            docs += 1
    builder.finalize(output_prefix + ".idx")
    if docs == 0:
        raise InputError("no non-empty line to tokenize", source=input_path)
    return docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m megatron_sailor.train.preprocess", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="text file, one document per line")
    parser.add_argument("--output-prefix", required=True, help="writes PREFIX.bin and PREFIX.idx")
    parser.add_argument("--vocab-size", type=int, default=128)
    parser.add_argument("--write-sample-text", action="store_true",
                        help="first (re)generate --input as a deterministic sample corpus")
    args = parser.parse_args(argv)
    try:
        require_runtime("sailor-preprocess")
        if args.vocab_size < 2:
            raise InputError(f"--vocab-size must be >= 2, got {args.vocab_size}")
        if args.write_sample_text:
            write_sample_text(args.input)
        docs = build_indexed_dataset(args.input, args.output_prefix, args.vocab_size)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output_prefix}.bin/.idx: {docs} documents")
    return 0


if __name__ == "__main__":
    sys.exit(main())
