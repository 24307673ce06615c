"""Single-process reference training written in plain torch (no megatron-core, no stage model).

A GPT in megatron-core's TP-1 parameter layout (learned positions, pre-LayerNorm, biased linears, QKV rows
grouped per query group, exact GELU, -10000 causal mask fill, untied or tied LM head), trained on the whole
global batch per step with torch's own ``clip_grad_norm_`` and ``AdamW``. It shares with the runtime only
the rules that define the job: the initial value of each global parameter name (``full_tensor``), the
data order (``microbatch``) and the dropout-mask rule (``keep_mask``); so a runtime bug in sharding,
pipelining, gradient sync or masking shows up as a difference.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from megatron_sailor.runtime.data import TokenSource, microbatch
from megatron_sailor.runtime.dropout import (EMBEDDING_LAYER, SITE_ATTENTION_OUT, SITE_EMBEDDING, SITE_MLP_OUT,
                                             DropoutConfig, apply_mask, head_keep, hidden_keep)
from megatron_sailor.runtime.init_weights import LM_HEAD, WORD_EMBEDDING, full_tensor
from megatron_sailor.runtime.optimizer import OptimizerConfig
from planner.model import ModelSpec


def parameter_shapes(m: ModelSpec, tied: bool) -> dict[str, tuple[int, ...]]:
    """Global name -> full (TP 1) shape, megatron-core's names."""
    h, f, v = m.hidden_size, m.ffn_hidden_size, m.padded_vocab_size
    qkv = h + 2 * m.kv_heads * m.head_dim
    shapes: dict[str, tuple[int, ...]] = {WORD_EMBEDDING: (v, h),
                                          "embedding.position_embeddings.weight": (m.max_position_embeddings, h)}
    for i in range(m.num_layers):
        p = f"layers.{i}."
        shapes.update({p + "input_layernorm.weight": (h,), p + "input_layernorm.bias": (h,),
                       p + "self_attention.linear_qkv.weight": (qkv, h), p + "self_attention.linear_qkv.bias": (qkv,),
                       p + "self_attention.linear_proj.weight": (h, h), p + "self_attention.linear_proj.bias": (h,),
                       p + "pre_mlp_layernorm.weight": (h,), p + "pre_mlp_layernorm.bias": (h,),
                       p + "mlp.linear_fc1.weight": (f, h), p + "mlp.linear_fc1.bias": (f,),
                       p + "mlp.linear_fc2.weight": (h, f), p + "mlp.linear_fc2.bias": (h,)})
    shapes.update({"decoder.final_layernorm.weight": (h,), "decoder.final_layernorm.bias": (h,)})
    if not tied:
        shapes[LM_HEAD] = (v, h)
    return shapes


class ReferenceGPT(torch.nn.Module):
    def __init__(self, m: ModelSpec, seed: int, tied: bool, dropout: DropoutConfig) -> None:
        super().__init__()
        if m.gated_mlp or not m.bias or not m.learned_position_embeddings:
            raise ValueError("the reference covers biased, learned-position, non-gated GPT/OPT shapes")
        self.m, self.tied, self.dropout = m, tied, dropout
        self.params = torch.nn.ParameterDict()
        self.names = list(parameter_shapes(m, tied).items())
        for name, shape in self.names:
            self.params[name.replace(".", "__")] = torch.nn.Parameter(full_tensor(name, shape, seed))

    def p(self, name: str) -> torch.Tensor:
        return self.params[name.replace(".", "__")]

    def named_full(self) -> dict[str, torch.Tensor]:
        return {name: self.p(name).detach().clone() for name, _ in self.names}

    def _drop(self, x: torch.Tensor, it: int, samples: range, layer: int, site: int) -> torch.Tensor:
        if not self.training or self.dropout.hidden == 0.0:
            return x
        keep = hidden_keep(self.dropout, it, samples, layer, site, x.shape[0], x.shape[2], x.device)
        return apply_mask(x, keep, self.dropout.hidden)

    def _attention(self, y: torch.Tensor, i: int, it: int, samples: range) -> torch.Tensor:
        m, pre = self.m, f"layers.{i}.self_attention."
        s, b, _ = y.shape
        nq, ng, hd = m.num_heads, m.kv_heads, m.head_dim
        qkv = (y @ self.p(pre + "linear_qkv.weight").t() + self.p(pre + "linear_qkv.bias")).view(
            s, b, ng, (nq // ng + 2) * hd)
        q, k, v = torch.split(qkv, [nq // ng * hd, hd, hd], dim=3)
        q = q.reshape(s, b, nq, hd)
        k, v = k.repeat_interleave(nq // ng, dim=2), v.repeat_interleave(nq // ng, dim=2)
        scores = torch.einsum("sbnd,tbnd->bnst", q, k) / math.sqrt(hd)
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
        probs = torch.softmax(scores.masked_fill(causal, -10000.0), dim=-1)
        if self.training and self.dropout.attention > 0.0:
            keep = head_keep(self.dropout, it, samples, i, range(nq), s, s, probs.device)
            probs = apply_mask(probs, keep, self.dropout.attention)
        ctx = torch.einsum("bnst,tbnd->sbnd", probs, v).reshape(s, b, nq * hd)
        return ctx @ self.p(pre + "linear_proj.weight").t() + self.p(pre + "linear_proj.bias")

    def _norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.p(name + ".weight"), self.p(name + ".bias"), eps=1e-5)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor, it: int, first_sample: int) -> torch.Tensor:
        """Per-token losses ``[b, s]``."""
        b, s = tokens.shape
        samples = range(first_sample, first_sample + b)
        x = F.embedding(tokens, self.p(WORD_EMBEDDING)) + self.p("embedding.position_embeddings.weight")[:s]
        x = self._drop(x.transpose(0, 1), it, samples, EMBEDDING_LAYER, SITE_EMBEDDING)
        for i in range(self.m.num_layers):
            pre = f"layers.{i}."
            x = x + self._drop(self._attention(self._norm(x, pre + "input_layernorm"), i, it, samples),
                               it, samples, i, SITE_ATTENTION_OUT)
            y = self._norm(x, pre + "pre_mlp_layernorm")
            y = F.gelu(y @ self.p(pre + "mlp.linear_fc1.weight").t() + self.p(pre + "mlp.linear_fc1.bias"))
            y = y @ self.p(pre + "mlp.linear_fc2.weight").t() + self.p(pre + "mlp.linear_fc2.bias")
            x = x + self._drop(y, it, samples, i, SITE_MLP_OUT)
        x = self._norm(x, "decoder.final_layernorm")
        logits = x @ self.p(WORD_EMBEDDING if self.tied else LM_HEAD).t()        # [s, b, v]
        loss = F.cross_entropy(logits.float().reshape(s * b, -1), labels.t().reshape(-1), reduction="none")
        return loss.view(s, b).t()


def param_groups(net: ReferenceGPT, weight_decay: float) -> list[dict]:
    decay = [p for p in net.parameters() if p.dim() >= 2]
    no_decay = [p for p in net.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def reference_run(model: ModelSpec, data: TokenSource, global_batch_size: int, iterations: int, seed: int,
                  opt: OptimizerConfig, tied: bool = False, dropout: DropoutConfig | None = None,
                  ) -> tuple[list[float], list[float], dict[str, torch.Tensor]]:
    """(losses, grad norms before clipping, final full parameters by global name)."""
    torch.manual_seed(seed)
    net = ReferenceGPT(model, seed, tied, dropout or DropoutConfig(seed=seed))
    net.train()
    optim = torch.optim.AdamW(param_groups(net, opt.weight_decay), lr=opt.lr, betas=opt.betas, eps=opt.eps)
    losses, norms = [], []
    for it in range(iterations):
        batch = microbatch(data, it, global_batch_size, global_batch_size, 0)
        optim.zero_grad()
        loss = net(batch.tokens, batch.labels, it, batch.first_sample).mean()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(net.parameters()), opt.clip_grad)))
        optim.step()
        losses.append(float(loss))
    return losses, norms, net.named_full()
