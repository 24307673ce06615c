"""Megatron-LM's learning-rate schedule as a pure function of consumed samples.

Contract (re-derived from megatron-core's documented ``OptimizerParamScheduler``; checked against it in
``tests/runtime/test_train_args.py``): the schedule counts *samples*. ``--lr-warmup-iters`` /
``--lr-decay-iters`` are converted to samples with the global batch size; ``--lr-warmup-fraction`` is a
fraction of the decay samples. Iteration ``i`` trains with ``lr_at(consumed samples before i)``, so the
first iteration of a warm-up trains at ``--lr-warmup-init`` (0 by default), as in Megatron-LM.

    warm-up (warmup > 0, n <= warmup):  init + (max - init) * n / warmup
    constant:                            max
    n > decay:                           min
    linear / cosine:                     min + c * (max - min), r = (n - warmup) / (decay - warmup),
                                         c = 1 - r (linear) or (1 + cos(pi r)) / 2 (cosine)
    inverse-square-root:                 max(min, max * sqrt(max(warmup, 1)) / sqrt(max(n, 1)))

Because the rate depends on consumed samples only, a run resumed from a checkpoint (even under another
plan and global batch size) continues the schedule where it stopped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from planner.errors import InputError

DECAY_STYLES = ("constant", "linear", "cosine", "inverse-square-root")


@dataclass(frozen=True)
class LRSchedule:
    max_lr: float
    min_lr: float
    style: str
    warmup_samples: int
    decay_samples: int
    init_lr: float = 0.0

    def lr_at(self, consumed_samples: int) -> float:
        n = consumed_samples
        if self.warmup_samples > 0 and n <= self.warmup_samples:
            return self.init_lr + (self.max_lr - self.init_lr) * n / self.warmup_samples
        if self.style == "constant":
            return self.max_lr
        if n > self.decay_samples:
            return self.min_lr
        if self.style == "inverse-square-root":
            return max(self.min_lr, self.max_lr * math.sqrt(max(self.warmup_samples, 1)) / math.sqrt(max(n, 1)))
        ratio = (n - self.warmup_samples) / (self.decay_samples - self.warmup_samples)
        coeff = 1.0 - ratio if self.style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
        return self.min_lr + coeff * (self.max_lr - self.min_lr)


def schedule_from_args(lr: float, min_lr: float, style: str, train_iters: int, global_batch_size: int,
                       warmup_iters: int, warmup_fraction: float | None, decay_iters: int | None,
                       init_lr: float = 0.0) -> LRSchedule:
    """Megatron's iteration-based arguments -> a sample-based schedule (one-line errors on bad values)."""
    if style not in DECAY_STYLES:
        raise InputError(f"--lr-decay-style {style!r} is not one of {', '.join(DECAY_STYLES)}")
    if lr <= 0 or min_lr < 0 or min_lr > lr:
        raise InputError(f"need --lr > 0 and 0 <= --min-lr <= --lr, got --lr {lr} --min-lr {min_lr}")
    if warmup_fraction is not None and warmup_iters:
        raise InputError("give --lr-warmup-iters or --lr-warmup-fraction, not both")
    if warmup_iters < 0 or (warmup_fraction is not None and not 0.0 <= warmup_fraction <= 1.0):
        raise InputError(f"--lr-warmup-iters must be >= 0 and --lr-warmup-fraction in [0, 1], got "
                         f"{warmup_iters} and {warmup_fraction}")
    decay_iters = train_iters if decay_iters is None else decay_iters
    if decay_iters < 1:
        raise InputError(f"--lr-decay-iters must be >= 1, got {decay_iters}")
    decay_samples = decay_iters * global_batch_size
    if warmup_fraction is not None:
        warmup_samples = int(warmup_fraction * decay_samples)
    else:
        warmup_samples = warmup_iters * global_batch_size
    if style in ("linear", "cosine") and warmup_samples >= decay_samples:
        raise InputError(f"the warm-up ({warmup_samples} samples) must end before the decay does "
                         f"({decay_samples} samples): lower --lr-warmup-iters or raise --lr-decay-iters")
    return LRSchedule(max_lr=lr, min_lr=min_lr, style=style, warmup_samples=warmup_samples,
                      decay_samples=decay_samples, init_lr=init_lr)


def set_lr(optimizer: Any, lr: float) -> None:
    """Give every parameter group of ``optimizer`` the learning rate ``lr``."""
    for group in optimizer.param_groups:
        group["lr"] = lr
