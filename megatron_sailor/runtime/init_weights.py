"""Plan-independent weight initialisation: full (TP=1) tensors per global name, then sliced to the shard.

Every parameter gets a tensor generated from ``(seed, global parameter name)`` alone, in megatron's own
TP=1 layout; a TP rank copies its slice along the parameter's ``partition_dim``. A 1-rank reference and
any plan therefore start from identical full weights. With tied embeddings the last stage's copy of the
LM head (``output_layer.weight``) starts from the word embedding's value (:func:`init_name`).
"""
from __future__ import annotations

import re
import zlib

import torch

INIT_STD = 0.02
WORD_EMBEDDING = "embedding.word_embeddings.weight"
LM_HEAD = "output_layer.weight"
_LAYER_RE = re.compile(r"^decoder\.layers\.(\d+)\.")


def global_name(local_name: str, first_layer: int) -> str:
    """``decoder.layers.<i>.x`` of a stage -> ``layers.<first_layer+i>.x``; other names unchanged."""
    m = _LAYER_RE.match(local_name)
    if not m:
        return local_name
    return f"layers.{first_layer + int(m.group(1))}.{local_name[m.end():]}"


def init_name(local_name: str, first_layer: int, tied: bool) -> str:
    """The global name whose value initialises a parameter (a tied head copy takes the word embedding's)."""
    name = global_name(local_name, first_layer)
    return WORD_EMBEDDING if tied and name == LM_HEAD else name


def is_sharded(param: torch.nn.Parameter) -> bool:
    return bool(getattr(param, "tensor_model_parallel", False))


def full_shape(param: torch.nn.Parameter, tp: int) -> tuple[int, ...]:
    shape = list(param.shape)
    if is_sharded(param):
        shape[param.partition_dim] *= tp
    return tuple(shape)


def full_tensor(name: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """The full TP=1 value of parameter ``name``: a pure function of (seed, name, shape)."""
    gen = torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63))
    noise = torch.randn(shape, generator=gen, dtype=torch.float32) * INIT_STD
    if "layernorm" in name and name.endswith("weight"):
        return 1.0 + noise
    return noise


def shard_of(full: torch.Tensor, param: torch.nn.Parameter, tp: int, tp_rank: int) -> torch.Tensor:
    if not is_sharded(param) or tp == 1:
        return full
    return full.chunk(tp, dim=param.partition_dim)[tp_rank]


@torch.no_grad()
def init_stage_weights(model: torch.nn.Module, first_layer: int, tp: int, tp_rank: int, seed: int,
                       tied: bool = False) -> None:
    """Overwrite every parameter of a stage with its deterministic, plan-independent value."""
    for name, param in model.named_parameters():
        gname = init_name(name, first_layer, tied)
        full = full_tensor(gname, full_shape(param, tp), seed)
        param.copy_(shard_of(full, param, tp, tp_rank))
