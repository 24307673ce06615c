"""Validation loss under the plan: forward-only pipeline passes over ``--eval-iters`` global batches.

Contract: every rank of the plan calls :func:`evaluate` at the same iteration. Each pipeline runs the
forwards of its own micro-batches of each validation global batch (same micro-batch assignment as
training), stage to stage through the runtime's P2P endpoints, under ``torch.no_grad`` and ``model.eval()``;
the last stages' loss shares (per-token sums over the global batch's tokens) are summed with one world
all-reduce. The result is the mean per-token loss over ``eval_iters`` global batches, identical on every
rank. Validation batches are always the first ``eval_iters * global_batch_size`` samples of the validation
split, so successive evaluations are comparable (Megatron-LM instead moves on through the split).
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist


@torch.no_grad()
def evaluate(rt: Any, source: Any, eval_iters: int) -> float:
    """Mean validation loss of ``eval_iters`` global batches of ``source`` (see the module docstring)."""
    from megatron_sailor.runtime.data import microbatch
    plan, ids = rt.plan, rt.microbatch_ids
    rt.model.eval()
    share_sum = 0.0
    try:
        for k in range(eval_iters):
            for n in range(len(ids)):
                batch = microbatch(source, k, plan.global_batch_size, plan.micro_batch_size, ids[n])
                inp = rt.p2p.recv_forward()
                out, share = rt.step_fn.forward(inp, batch)
                share_sum += share
                rt.p2p.send_forward(out)
            rt.p2p.wait_sends()
    finally:
        rt.model.train()
    part = share_sum if rt.me.tp_rank == 0 else 0.0
    buf = torch.tensor([part], dtype=torch.float64, device=next(rt.model.parameters()).device)
    dist.all_reduce(buf, group=rt.groups.world)
    return float(buf[0]) / eval_iters


def perplexity(loss: float) -> float:
    """``exp(loss)`` capped as Megatron-LM does (``exp(min(20, loss))``)."""
    return math.exp(min(20.0, loss))
