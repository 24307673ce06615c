"""Plan-independent data order: samples of a global batch, micro-batches, and their pipelines.

Sample ``k`` of iteration ``i`` is global sample ``i * global_batch_size + k``; the global batch is cut
into ``global_batch_size / micro_batch_size`` consecutive micro-batches and pipeline ``j`` takes the
consecutive block ``[sum(counts[:j]), sum(counts[:j+1]))`` of them. Sources return ``seq_length + 1``
tokens per sample (inputs = ``[:-1]``, labels = ``[1:]``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from planner.errors import InputError


class TokenSource(Protocol):
    def sample(self, index: int) -> torch.Tensor: ...


@dataclass(frozen=True)
class MockTokens:
    """Deterministic synthetic sequences ``(a + b*t) mod vocab`` with per-sample ``a``, ``b``: learnable."""

    seed: int
    seq_length: int
    vocab_size: int

    def sample(self, index: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed * 7919 + index)
        start, step = torch.randint(0, self.vocab_size, (2,), generator=gen).tolist()
        step = 1 + step % 7
        t = torch.arange(self.seq_length + 1, dtype=torch.int64)
        return (start + step * t) % self.vocab_size


class IndexedTokens:
    """Windows of ``seq_length + 1`` tokens over the concatenated documents of a megatron .bin/.idx pair."""

    def __init__(self, path_prefix: str, seq_length: int, vocab_size: int) -> None:
        for ext in (".bin", ".idx"):
            if not Path(path_prefix + ext).is_file():
                raise InputError(f"data file not found: {path_prefix + ext} (build it with "
                                 "python -m megatron_sailor.train.preprocess)", source="--data-path")
        from megatron.core.datasets.indexed_dataset import IndexedDataset
        dataset = IndexedDataset(path_prefix)
        stream = np.concatenate([np.asarray(dataset[i], dtype=np.int64) for i in range(len(dataset))])
        if stream.size < seq_length + 1:
            raise InputError(f"{path_prefix}: only {stream.size} tokens, need at least {seq_length + 1}",
                             source="--data-path")
        if int(stream.max()) >= vocab_size:
            raise InputError(f"{path_prefix}: token id {int(stream.max())} >= --vocab-size {vocab_size}",
                             source="--data-path")
        self._stream = torch.from_numpy(stream)
        self._seq = seq_length
        self._windows = (stream.size - 1) // seq_length

    def sample(self, index: int) -> torch.Tensor:
        start = (index % self._windows) * self._seq
        return self._stream[start:start + self._seq + 1].clone()


@dataclass(frozen=True)
class MicroBatch:
    tokens: torch.Tensor        # [b, s]
    labels: torch.Tensor        # [b, s]
    iteration: int = 0
    first_sample: int = 0       # global index of row 0 (rows are consecutive samples); keys dropout masks


def microbatch(source: TokenSource, iteration: int, global_batch_size: int, micro_batch_size: int,
               index: int) -> MicroBatch:
    """Micro-batch ``index`` (0-based within the global batch) of ``iteration``."""
    first = iteration * global_batch_size + index * micro_batch_size
    rows = torch.stack([source.sample(first + k) for k in range(micro_batch_size)])
    return MicroBatch(tokens=rows[:, :-1].contiguous(), labels=rows[:, 1:].contiguous(), iteration=iteration,
                      first_sample=first)


def pipeline_microbatch_ids(counts: tuple[int, ...], pipeline: int) -> range:
    """Global-batch micro-batch indices assigned to ``pipeline`` (fixed rule: consecutive blocks)."""
    start = sum(counts[:pipeline])
    return range(start, start + counts[pipeline])
