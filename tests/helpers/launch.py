"""Shared test helpers for multi-process tests: a free port (planner.ports), a torchrun runner (its own port,
one OpenMP thread per rank, a hard timeout), a python runner, the sample corpus preprocessed, and the tiny
model's arguments."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from planner.ports import free_port

__all__ = ["REPO", "free_port", "preprocess_sample_corpus", "python", "tiny_model_args", "torchrun"]

REPO = Path(__file__).resolve().parents[2]


# tiny GPT of every multi-process test (= planner's built-in "tiny": 4 layers, hidden 64, 4 heads, seq 32)
def tiny_model_args(num_layers: int = 4, hidden_size: int = 64, seq_length: int = 32,
                    vocab_size: int | None = 128) -> list[str]:
    """Megatron-style model flags of a tiny GPT (4 attention heads; ``vocab_size=None``: no --vocab-size, for
    tests where the tokenizer sets it)."""
    return ["--num-layers", str(num_layers), "--hidden-size", str(hidden_size), "--num-attention-heads", "4",
            "--seq-length", str(seq_length), "--max-position-embeddings", str(seq_length),
            *(["--vocab-size", str(vocab_size)] if vocab_size is not None else []),
            "--make-vocab-size-divisible-by", "8"]


def torchrun(nproc: int, script: str, args: list[str], timeout_s: float,
             extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), **(extra_env or {}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), script, *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)


def python(args: list[str], timeout_s: float, extra_env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), **(extra_env or {}))
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout_s)


def preprocess_sample_corpus(prefix: str, *flags: str, timeout_s: float = 300) -> None:
    """``megatron_sailor.train.preprocess`` on the example corpus into ``prefix`` (extra ``flags``: e.g.
    ``--vocab-size 128`` or ``--train-bpe 512 --append-eod``); fails the test with its stderr."""
    proc = python(["-m", "megatron_sailor.train.preprocess", "--input", "examples/gpt/data/sample_corpus.txt",
                   "--output-prefix", prefix, *flags], timeout_s=timeout_s)
    assert proc.returncode == 0, proc.stderr
