"""Dropout whose masks do not depend on the plan: one rule, ``keep_mask``, shared by runtime and reference.

The mask of one dropout site for one sample is a pure function of ``(seed, iteration, global sample index,
global layer, site[, global attention head])``: a fresh ``torch.Generator`` is seeded with a 63-bit hash of
that key and draws ``rand(shape) >= p``. So the same sample gets the same masks whatever the stages, TP
degrees, replicas, micro-batch sizes or the pipeline that processes it, and a resumed run draws exactly the
masks of an uninterrupted one (no generator state has to be checkpointed).

Sites (megatron-core 0.16.1 local layer spec): the embedding output (``embedding.embedding_dropout``,
layer -1), each layer's attention probabilities (``core_attention.attention_dropout``; TP-sharded along
heads, so the key carries the *global* head index and a TP rank draws only its own heads), and each
layer's two bias-dropout-adds (``self_attn_bda``, ``mlp_bda``; replicated over TP: every TP rank draws the
same mask). :func:`install_dropout` replaces megatron's modules on a built stage and refuses a model that
still holds another active ``torch.nn.Dropout``.

This deliberately does not draw from megatron's model-parallel RNG tracker: the tracker gives each TP rank
its own stream, so the attention masks would change with the TP degree.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Callable

import torch

SITE_EMBEDDING = 0
SITE_ATTENTION_PROBS = 1
SITE_ATTENTION_OUT = 2
SITE_MLP_OUT = 3
EMBEDDING_LAYER = -1


@dataclass(frozen=True)
class DropoutConfig:
    """Megatron's ``--hidden-dropout`` / ``--attention-dropout`` and the seed that keys every mask."""

    hidden: float = 0.0
    attention: float = 0.0
    seed: int = 1234

    def __post_init__(self) -> None:
        for name in ("hidden", "attention"):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise ValueError(f"{name} dropout must be in [0, 1), got {p}")


@dataclass
class DropoutContext:
    """What the masks of the micro-batch being computed depend on; set by the schedule before every
    forward (and before a backward that recomputes). Mutable, one per rank, passed explicitly."""

    iteration: int = 0
    first_sample: int = 0
    samples: int = 0
    _cache: dict = field(default_factory=dict, repr=False)

    def set(self, iteration: int, first_sample: int, samples: int) -> None:
        self.iteration, self.first_sample, self.samples = iteration, first_sample, samples


def mask_seed(seed: int, iteration: int, sample: int, layer: int, site: int, head: int = 0) -> int:
    """The 63-bit generator seed of one mask (blake2b of the key; stable across platforms and versions)."""
    key = struct.pack("<6q", seed, iteration, sample, layer, site, head)
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def keep_mask(seed: int, iteration: int, sample: int, layer: int, site: int, shape: tuple[int, ...], p: float,
              head: int = 0, device: torch.device | str = "cpu") -> torch.Tensor:
    """Boolean keep-mask (True = kept) of one sample at one site."""
    gen = torch.Generator(device=device).manual_seed(mask_seed(seed, iteration, sample, layer, site, head))
    return torch.rand(shape, generator=gen, device=device) >= p


def apply_mask(x: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    """Inverted dropout with a given mask: kept elements scaled by ``1 / (1 - p)``."""
    return x * keep.to(x.dtype) * (1.0 / (1.0 - p))


def hidden_keep(cfg: DropoutConfig, iteration: int, samples: range, layer: int, site: int,
                seq: int, hidden: int, device: torch.device) -> torch.Tensor:
    """Keep-mask ``[s, b, h]`` for activations in megatron's sequence-first layout."""
    return torch.stack([keep_mask(cfg.seed, iteration, k, layer, site, (seq, hidden), cfg.hidden, device=device)
                        for k in samples], dim=1)


def head_keep(cfg: DropoutConfig, iteration: int, samples: range, layer: int, heads: range,
              sq: int, sk: int, device: torch.device) -> torch.Tensor:
    """Keep-mask ``[b, heads, sq, sk]`` of attention probabilities for the given global heads."""
    return torch.stack([torch.stack([keep_mask(cfg.seed, iteration, k, layer, SITE_ATTENTION_PROBS, (sq, sk),
                                               cfg.attention, head=a, device=device) for a in heads])
                        for k in samples])


class SampleDropout(torch.nn.Module):
    """Hidden dropout on a ``[s, b, h]`` tensor with per-sample, plan-independent masks."""

    def __init__(self, cfg: DropoutConfig, ctx: DropoutContext, layer: int, site: int) -> None:
        super().__init__()
        self.cfg, self.ctx, self.layer, self.site = cfg, ctx, layer, site

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.cfg.hidden == 0.0:
            return x
        c = self.ctx
        samples = range(c.first_sample, c.first_sample + x.shape[1])
        keep = hidden_keep(self.cfg, c.iteration, samples, self.layer, self.site, x.shape[0], x.shape[2], x.device)
        return apply_mask(x, keep, self.cfg.hidden)


class HeadDropout(torch.nn.Module):
    """Attention-probability dropout on ``[b, heads_local, sq, sk]``; heads from ``first_head`` on."""

    def __init__(self, cfg: DropoutConfig, ctx: DropoutContext, layer: int, first_head: int) -> None:
        super().__init__()
        self.cfg, self.ctx, self.layer, self.first_head = cfg, ctx, layer, first_head

    def forward(self, probs: torch.Tensor) -> torch.Tensor:
        if not self.training or self.cfg.attention == 0.0:
            return probs
        c = self.ctx
        b, heads, sq, sk = probs.shape
        keep = head_keep(self.cfg, c.iteration, range(c.first_sample, c.first_sample + b), self.layer,
                         range(self.first_head, self.first_head + heads), sq, sk, probs.device)
        return apply_mask(probs, keep, self.cfg.attention)


class BiasDropoutAdd:
    """Stands in for megatron's ``get_bias_dropout_add``: ``bda(training, fused)((x, bias), residual, p)``."""

    def __init__(self, dropout: SampleDropout) -> None:
        self.dropout = dropout

    def __call__(self, training: bool, fused: bool) -> Callable:
        def bda(x_with_bias: tuple, residual: torch.Tensor, prob: float) -> torch.Tensor:
            x, bias = x_with_bias
            if bias is not None:
                x = x + bias
            self.dropout.training = training
            return residual + self.dropout(x)
        return bda


def install_dropout(model: torch.nn.Module, cfg: DropoutConfig, ctx: DropoutContext, first_layer: int,
                    tp_rank: int) -> None:
    """Replace every dropout site of a megatron-core GPT stage by its plan-independent version."""
    if getattr(model, "pre_process", False):
        model.embedding.embedding_dropout = SampleDropout(cfg, ctx, EMBEDDING_LAYER, SITE_EMBEDDING)
    for i, layer in enumerate(model.decoder.layers):
        g = first_layer + i
        core = layer.self_attention.core_attention
        core.attention_dropout = HeadDropout(cfg, ctx, g, tp_rank * core.num_attention_heads_per_partition)
        layer.self_attn_bda = BiasDropoutAdd(SampleDropout(cfg, ctx, g, SITE_ATTENTION_OUT))
        layer.mlp_bda = BiasDropoutAdd(SampleDropout(cfg, ctx, g, SITE_MLP_OUT))
    left = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout) and m.p > 0]
    if left:
        raise RuntimeError(f"dropout sites not covered by the plan-independent rule: {left}")
