"""Single-process reference training: the full model (TP 1, one stage), whole global batch per step,
torch's own clip_grad_norm_ and AdamW. Shares only the model builder and the initialiser with the runtime."""
from __future__ import annotations

import torch

from megatron_sailor.runtime.data import TokenSource, microbatch
from megatron_sailor.runtime.groups import RankGroups
from megatron_sailor.runtime.init_weights import init_stage_weights
from megatron_sailor.runtime.optimizer import OptimizerConfig, param_groups
from megatron_sailor.runtime.rank_runtime import seed_megatron_rng
from megatron_sailor.runtime.schedule import causal_mask
from megatron_sailor.runtime.stage_model import StageSpec, build_stage_model
from planner.model import ModelSpec


def reference_run(model: ModelSpec, data: TokenSource, global_batch_size: int, iterations: int, seed: int,
                  opt: OptimizerConfig, single_group: object) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Losses per iteration and final full parameters (global names)."""
    groups = RankGroups(rank=0, tp=single_group, single=single_group, p2p=None, world=None, grad_sync=(),
                        sync_mode="flat")
    seed_megatron_rng(seed)
    spec = StageSpec(0, model.num_layers, True, True, 1, 0)
    net = build_stage_model(model, spec, groups)
    init_stage_weights(net, 0, 1, 0, seed)
    optim = torch.optim.AdamW(param_groups(net, opt.weight_decay), lr=opt.lr, betas=opt.betas, eps=opt.eps)
    mask = causal_mask(model.seq_length)
    pos = torch.arange(model.seq_length).unsqueeze(0).expand(global_batch_size, -1)
    losses = []
    for it in range(iterations):
        batch = microbatch(data, it, global_batch_size, global_batch_size, 0)
        optim.zero_grad()
        loss = net(batch.tokens, pos, mask, labels=batch.labels).float().mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(net.parameters()), opt.clip_grad)
        optim.step()
        losses.append(float(loss))
    from megatron_sailor.runtime.init_weights import global_name
    return losses, {global_name(n, 0): p.detach().clone() for n, p in net.named_parameters()}
