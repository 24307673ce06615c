"""AdamW with global-norm gradient clipping across all ranks of a heterogeneous plan.

The global norm counts every parameter once: pipeline 0 (replica 0 of every stage) contributes its
TP-sharded gradients from every TP rank and its replicated gradients from TP-rank 0 only; the other
replicas hold identical copies after gradient sync and contribute nothing. One all-reduce over the world
carries both the squared norm and the loss shares of the last stages.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from megatron_sailor.runtime.init_weights import is_sharded
from planner.layout import RankInfo


@dataclass(frozen=True)
class OptimizerConfig:
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    clip_grad: float = 1.0


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Megatron's rule: no weight decay on biases and norm weights (1-D parameters)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_adamw(model: torch.nn.Module, cfg: OptimizerConfig) -> torch.optim.AdamW:
    return torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas,
                             eps=cfg.eps, foreach=False)


def local_sq_norm(model: torch.nn.Module, me: RankInfo) -> float:
    """This rank's share of the squared global gradient norm (see the module docstring)."""
    if me.replica != 0:
        return 0.0
    total = 0.0
    for p in model.parameters():
        if p.grad is None or getattr(p, "sailor_tied_copy", False):   # the first stage counts a tied weight
            continue
        if is_sharded(p) or me.tp_rank == 0:
            total += float(p.grad.double().pow(2).sum())
    return total


def reduce_sq_norm_and_loss(sq_norm: float, me: RankInfo, loss_share: float, world_group: Any,
                            device: torch.device) -> tuple[float, float]:
    """(global grad norm, global-batch mean loss) from this rank's squared-norm share (:func:`local_sq_norm`,
    or the distributed optimizer's), one world all-reduce (on ``device``: nccl reduces CUDA tensors only)."""
    loss_part = loss_share if me.tp_rank == 0 else 0.0
    buf = torch.tensor([sq_norm, loss_part], dtype=torch.float64, device=device)
    dist.all_reduce(buf, group=world_group)
    return math.sqrt(float(buf[0])), float(buf[1])


def clip_and_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_norm: float,
                  clip_grad: float) -> None:
    """Scale gradients by ``clip / (norm + 1e-6)`` when that is below 1 (megatron's rule), then step."""
    if clip_grad > 0:
        coeff = clip_grad / (grad_norm + 1.0e-6)
        if coeff < 1.0:
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.mul_(coeff)
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)
