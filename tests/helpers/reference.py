"""Single-process reference training written in plain torch (no megatron-core, no stage model).

A GPT in megatron-core's TP-1 parameter layout (learned positions, pre-LayerNorm, biased linears, QKV rows
grouped per query group, exact GELU, -10000 causal mask fill, untied or tied LM head), trained on the whole
global batch per step with torch's own ``clip_grad_norm_`` and ``AdamW``. 16-bit runs keep the model in
bf16 / fp16 (scores scaled in one rounding and softmax in fp32, as megatron's attention does) and train fp32
main weights whose gradients accumulate in fp32 over micro-batches of ``micro_batch_size``; ``split_k=2``
computes the row-parallel matmuls (attention projection, second MLP matrix) as two rounded halves added
and the column-parallel ones (QKV, first MLP matrix, LM head) in two output blocks (their input gradient
then adds two rounded halves), the summation orders a TP-2 run uses: two runs differing only in such orders measure the 16-bit noise. It shares with the runtime only
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
    def __init__(self, m: ModelSpec, seed: int, tied: bool, dropout: DropoutConfig,
                 dtype: torch.dtype = torch.float32, split_k: int = 1, head_copy: bool = False) -> None:
        super().__init__()
        self.dtype, self.split_k = dtype, split_k
        # tied across stages: the head is a second copy of the word embedding (its own 16-bit gradient,
        # summed into the shared fp32 main gradient), as the last stage of a several-stage plan holds it
        self.head_copy = torch.nn.Parameter(full_tensor(WORD_EMBEDDING, parameter_shapes(m, False)[LM_HEAD], seed)
                                            .to(dtype)) if tied and head_copy else None
        if m.gated_mlp or not m.bias or not m.learned_position_embeddings:
            raise ValueError("the reference covers biased, learned-position, non-gated GPT/OPT shapes")
        self.m, self.tied, self.dropout = m, tied, dropout
        self.params = torch.nn.ParameterDict()
        self.names = list(parameter_shapes(m, tied).items())
        for name, shape in self.names:
            self.params[name.replace(".", "__")] = torch.nn.Parameter(full_tensor(name, shape, seed).to(dtype))

    def p(self, name: str) -> torch.Tensor:
        return self.params[name.replace(".", "__")]

    def named_full(self) -> dict[str, torch.Tensor]:
        return {name: self.p(name).detach().clone() for name, _ in self.names}

    def _column_parallel(self, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``y @ w.t()``; with ``split_k`` the output rows in blocks (forward identical, the input gradient
        summed from rounded halves, as TP column-parallel layers all-reduce it)."""
        if self.split_k == 1:
            return y @ w.t()
        return torch.cat([y @ wk.t() for wk in w.chunk(self.split_k, dim=0)], dim=-1)

    def _row_parallel(self, y: torch.Tensor, name: str) -> torch.Tensor:
        w = self.p(name + ".weight")
        parts = zip(y.chunk(self.split_k, dim=-1), w.chunk(self.split_k, dim=1))
        out = None
        for yk, wk in parts:
            part = yk @ wk.t()
            out = part if out is None else out + part
        return out + self.p(name + ".bias")

    def _drop(self, x: torch.Tensor, it: int, samples: range, layer: int, site: int) -> torch.Tensor:
        if not self.training or self.dropout.hidden == 0.0:
            return x
        keep = hidden_keep(self.dropout, it, samples, layer, site, x.shape[0], x.shape[2], x.device)
        return apply_mask(x, keep, self.dropout.hidden)

    def _attention(self, y: torch.Tensor, i: int, it: int, samples: range) -> torch.Tensor:
        m, pre = self.m, f"layers.{i}.self_attention."
        s, b, _ = y.shape
        nq, ng, hd = m.num_heads, m.kv_heads, m.head_dim
        qkv = (self._column_parallel(y, self.p(pre + "linear_qkv.weight")) + self.p(pre + "linear_qkv.bias")).view(
            s, b, ng, (nq // ng + 2) * hd)
        q, k, v = torch.split(qkv, [nq // ng * hd, hd, hd], dim=3)
        q = q.reshape(s, b, nq, hd)
        k, v = k.repeat_interleave(nq // ng, dim=2), v.repeat_interleave(nq // ng, dim=2)
        scores = (torch.einsum("sbnd,tbnd->bnst", q.float(), k.float()) / math.sqrt(hd)).to(self.dtype)
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
        probs = torch.softmax(scores.float().masked_fill(causal, -10000.0), dim=-1).to(self.dtype)
        if self.training and self.dropout.attention > 0.0:
            keep = head_keep(self.dropout, it, samples, i, range(nq), s, s, probs.device)
            probs = apply_mask(probs, keep, self.dropout.attention)
        ctx = torch.einsum("bnst,tbnd->sbnd", probs, v).reshape(s, b, nq * hd)
        return self._row_parallel(ctx, pre + "linear_proj")

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
            y = F.gelu(self._column_parallel(y, self.p(pre + "mlp.linear_fc1.weight")) + self.p(pre + "mlp.linear_fc1.bias"))
            y = self._row_parallel(y, pre + "mlp.linear_fc2")
            x = x + self._drop(y, it, samples, i, SITE_MLP_OUT)
        x = self._norm(x, "decoder.final_layernorm")
        head = self.head_copy if self.head_copy is not None else self.p(WORD_EMBEDDING if self.tied else LM_HEAD)
        logits = self._column_parallel(x, head)        # [s, b, v]
        loss = F.cross_entropy(logits.float().reshape(s * b, -1), labels.t().reshape(-1), reduction="none")
        return loss.view(s, b).t()


def param_groups(params: list[torch.nn.Parameter], weight_decay: float) -> list[dict]:
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def reference_run(model: ModelSpec, data: TokenSource, global_batch_size: int, iterations: int, seed: int,
                  opt: OptimizerConfig, tied: bool = False, dropout: DropoutConfig | None = None,
                  precision: str = "fp32", micro_batch_size: int | None = None, split_k: int = 1,
                  loss_scale: float = 1.0, head_copy: bool = False) -> tuple[list[float], list[float], dict[str, torch.Tensor]]:
    """(losses, grad norms before clipping, final full fp32 parameters by global name)."""
    torch.manual_seed(seed)
    net = ReferenceGPT(model, seed, tied, dropout or DropoutConfig(seed=seed), DTYPES[precision], split_k, head_copy)
    net.train()
    mbs = micro_batch_size or global_batch_size
    params = [net.p(name) for name, _ in net.names]
    main = [torch.nn.Parameter(p.detach().float().clone()) for p in params]
    embedding = main[[name for name, _ in net.names].index(WORD_EMBEDDING)]
    optim = torch.optim.AdamW(param_groups(main, opt.weight_decay), lr=opt.lr, betas=opt.betas, eps=opt.eps)
    losses, norms = [], []
    for it in range(iterations):
        for m in main:
            m.grad = torch.zeros_like(m)
        total = 0.0
        for k in range(global_batch_size // mbs):
            batch = microbatch(data, it, global_batch_size, mbs, k)
            net.zero_grad(set_to_none=True)
            loss = net(batch.tokens, batch.labels, it, batch.first_sample).sum() / (global_batch_size * model.seq_length)
            (loss * loss_scale).backward()
            total += float(loss)
            for m, p in zip(main, params):
                m.grad.add_(p.grad.float())
            if net.head_copy is not None:
                embedding.grad.add_(net.head_copy.grad.float())
        for m in main:
            m.grad.mul_(1.0 / loss_scale)
        norms.append(float(torch.nn.utils.clip_grad_norm_(main, opt.clip_grad)))
        optim.step()
        with torch.no_grad():
            for m, p in zip(main, params):
                p.copy_(m)
            if net.head_copy is not None:
                net.head_copy.copy_(embedding)
        losses.append(total)
    names = [name for name, _ in net.names]
    return losses, norms, {n: m.detach().clone() for n, m in zip(names, main)}
