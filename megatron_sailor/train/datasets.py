"""Train / validation / test token sources from ``--split`` (Megatron-LM's meaning) or mock data.

Contract: ``--split "969, 30, 1"`` (commas or slashes) gives weights, padded with zeros to three and
normalised; the documents of the ``--data-path`` dataset are cut at ``round(cumulative fraction * n)``,
as megatron-core's dataset builder does, so split ``k`` owns the documents ``[begin_k, end_k)``. Each split
is read like :class:`~megatron_sailor.runtime.data.IndexedTokens`: consecutive windows of ``seq_length + 1``
tokens over its concatenated documents, wrapping around. Mock data (``--mock-data``) uses
:class:`~megatron_sailor.runtime.data.MockTokens` with a different seed per split. A split of zero
documents (or too few tokens for one sample) has no source: validation is then skipped.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from planner.errors import InputError

SPLIT_NAMES = ("train", "validation", "test")


def parse_split(text: str) -> tuple[float, float, float]:
    """``"969, 30, 1"`` -> normalised weights (one-line error on a bad value)."""
    parts = [p.strip() for p in text.replace("/", ",").split(",") if p.strip()]
    try:
        weights = [float(p) for p in parts]
    except ValueError as exc:
        raise InputError(f"--split {text!r}: weights must be numbers like '969,30,1'") from exc
    if not 1 <= len(weights) <= 3 or any(w < 0 for w in weights) or sum(weights) <= 0 or weights[0] <= 0:
        raise InputError(f"--split {text!r}: give 1 to 3 non-negative weights with a positive training weight")
    weights += [0.0] * (3 - len(weights))
    total = sum(weights)
    return tuple(w / total for w in weights)  # type: ignore[return-value]


def split_bounds(weights: tuple[float, float, float], num_docs: int) -> list[tuple[int, int]]:
    """Document ranges ``[begin, end)`` of the three splits."""
    cumulative, bounds, acc = [0.0], [], 0.0
    for w in weights:
        acc += w
        cumulative.append(acc)
    for k in range(3):
        bounds.append((int(round(cumulative[k] * num_docs)), int(round(cumulative[k + 1] * num_docs))))
    return bounds


@dataclass(frozen=True)
class StreamTokens:
    """Windows of ``seq_length + 1`` tokens over one token stream (wrapping around)."""

    stream: torch.Tensor
    seq_length: int

    @property
    def windows(self) -> int:
        return (self.stream.numel() - 1) // self.seq_length

    def sample(self, index: int) -> torch.Tensor:
        start = (index % self.windows) * self.seq_length
        return self.stream[start:start + self.seq_length + 1].clone()


def indexed_splits(path_prefix: str, split: str, seq_length: int, vocab_size: int) -> list[StreamTokens | None]:
    """The three split sources of a megatron .bin/.idx pair (None for a split without one sample)."""
    for ext in (".bin", ".idx"):
        if not Path(path_prefix + ext).is_file():
            raise InputError(f"data file not found: {path_prefix + ext} (build it with sailor-preprocess)",
                             source="--data-path")
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    try:
        dataset = IndexedDataset(path_prefix)
    except Exception as exc:  # noqa: BLE001 - a corrupt index is one line
        raise InputError(f"{path_prefix}: not a megatron .bin/.idx dataset ({exc})", source="--data-path") from exc
    out: list[StreamTokens | None] = []
    for k, (begin, end) in enumerate(split_bounds(parse_split(split), len(dataset))):
        docs = [np.asarray(dataset[i], dtype=np.int64) for i in range(begin, end)]
        stream = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
        if stream.size and int(stream.max()) >= vocab_size:
            raise InputError(f"{path_prefix}: token id {int(stream.max())} >= vocabulary size {vocab_size} "
                             "(give the tokenizer the data was built with)", source="--data-path")
        if stream.size < seq_length + 1:
            if k == 0:
                raise InputError(f"{path_prefix}: the training split has {stream.size} tokens, need at least "
                                 f"{seq_length + 1}", source="--data-path")
            out.append(None)
            continue
        out.append(StreamTokens(torch.from_numpy(stream), seq_length))
    return out


def mock_splits(seed: int, seq_length: int, vocab_size: int) -> list:
    from megatron_sailor.runtime.data import MockTokens
    return [MockTokens(seed=seed + 7 * k, seq_length=seq_length, vocab_size=vocab_size) for k in range(3)]
