"""Vocabulary-parallel cross entropy with fp32 gradients and an explicit TP group.

megatron-core 0.16.1's fused "native" cross entropy (``fused_vocab_parallel_cross_entropy``, the one
that takes the TP group as an argument) casts the logits gradient to bfloat16 in its backward
(``calculate_gradients``), which costs ~2e-3 relative gradient error even in an fp32 run; its unfused
version reads the global TP group. This is megatron's algorithm (max all-reduce, predicted-logit and
sum-of-exponentials all-reduce, softmax minus one-hot in backward) in fp32 over the group passed in.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class _VocabParallelCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, group: Any) -> torch.Tensor:
        x = logits.float()
        v_local = x.shape[-1]
        tp, tp_rank = (dist.get_world_size(group), dist.get_rank(group)) if group is not None else (1, 0)
        x_max = x.max(dim=-1).values
        if tp > 1:
            dist.all_reduce(x_max, op=dist.ReduceOp.MAX, group=group)
        shifted = x - x_max.unsqueeze(-1)
        start = tp_rank * v_local
        outside = (target < start) | (target >= start + v_local)
        local_target = (target - start).masked_fill(outside, 0)
        predicted = shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        exp = shifted.exp()
        both = torch.stack((predicted, exp.sum(dim=-1)))
        if tp > 1:
            dist.all_reduce(both, group=group)
        predicted, sum_exp = both[0], both[1]
        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, outside, local_target)
        ctx.in_dtype = logits.dtype
        return torch.log(sum_exp) - predicted

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        softmax, outside, local_target = ctx.saved_tensors
        grad = softmax.clone()
        grad.scatter_add_(-1, local_target.unsqueeze(-1), -(~outside).to(grad.dtype).unsqueeze(-1))
        grad.mul_(grad_loss.unsqueeze(-1))
        return grad.to(ctx.in_dtype), None, None


def vocab_parallel_cross_entropy(logits: torch.Tensor, target: torch.Tensor, group: Any) -> torch.Tensor:
    """Per-token loss (fp32) of ``logits [..., vocab/tp]`` against ``target [...]`` over TP ``group``
    (``None``: the whole vocabulary is local)."""
    return _VocabParallelCE.apply(logits, target, group)
