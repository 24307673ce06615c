"""The distributed optimizer: fp32 main weights and AdamW states sharded over the replicas of each stage.

Megatron's DistributedOptimizer scheme (ZeRO stage 1) on heterogeneous plans. Gradients stay full size on
every rank (fp32, accumulated over micro-batches). Each fine-shard buffer that gradient sync sums
(:mod:`megatron_sailor.runtime.grad_sync`: one rank per replica, replicas of different TP matched by fine
shards; the tied embedding over the embedding group) is reduce-scattered instead of all-reduced
(:class:`~megatron_sailor.runtime.shard_comm.ShardComm`): the member at position ``i`` owns contiguous
segment ``i`` of ``n`` and keeps, for that segment only, the fp32 main weights (16-bit models; an fp32
model trains its own parameters, as Megatron's fp32 main params are views of the model's) and the AdamW
states. AdamW runs as ``torch.optim.AdamW`` (``foreach``: bitwise the same arithmetic as the per-tensor loop
on CPU, fewer dispatches) on one 1-D view per parameter piece inside the segment (weight decay per
original parameter: none on 1-D ones), elementwise the same arithmetic as the replicated optimizer. The
updated segments are all-gathered in the model dtype into the model.

Contiguous buffers (Megatron's ``ParamAndGradBuffer``): a buffer that holds whole parameters (the rank holds
one fine shard of that sync, the usual case) owns them: the parameters become views of one flat buffer in
the model dtype and their fp32 gradients views of one flat gradient buffer, both padded to ``n * c``
(padding not counted in :meth:`DistributedOptimizer.memory_bytes`). Then the reduce-scatter reads the
gradient buffer as it is, an fp32 model's AdamW views are slices of its own parameter buffer, the
all-gather writes the parameter buffer in place and zeroing the gradients is one fill: no per-step
packing or unpacking. A rank holding ``k > 1`` fine shards (a low-TP replica next to high-TP ones) packs
and unpacks instead: it carries the stage's replicated parameters (norms, biases of row-parallel layers,
position embeddings) in each of its ``k`` buffers, as every TP rank does in Megatron; every group computes
the same update for them and the rank writes the copy of its first shard. An fp32 model's segment is then
packed from its parameters each step.

Global gradient norm: every element counted once: each owner adds its segment's squares, the replicated
part only in fine shard 0 of the stage (Megatron's "not a TP duplicate" rule). The tied weight is owned
once in the embedding group. fp16 overflow stays global: the norm is one world all-reduce, so a non-finite
value anywhere makes every rank skip (no all-gather, parameters unchanged).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from megatron_sailor.runtime.grad_sync import GradSync, ShardPlan
from megatron_sailor.runtime.groups import RankGroups
from megatron_sailor.runtime.init_weights import is_sharded
from megatron_sailor.runtime.mixed_precision import Fp32Grads
from megatron_sailor.runtime.optimizer import OptimizerConfig
from megatron_sailor.runtime.shard_comm import ShardComm
from planner.layout import RankLayout

STATE_KEYS = ("exp_avg", "exp_avg_sq")


def _piece(t: torch.Tensor, p: torch.nn.Parameter, shard: ShardPlan) -> torch.Tensor:
    return t.chunk(shard.pieces, dim=p.partition_dim)[shard.piece] if is_sharded(p) else t


@dataclass(frozen=True)
class _Range:
    """Elements ``[src_lo, src_hi)`` of entry ``entry``'s flattened piece = ``[seg_lo, seg_hi)`` of my segment."""

    entry: int
    src_lo: int
    src_hi: int
    seg_lo: int
    seg_hi: int


class _Unit:
    """One fine-shard buffer this rank takes part in: its entries, its comm and the segment it owns."""

    def __init__(self, sync: GradSync, shard: ShardPlan, comm: ShardComm, stage_sync: bool) -> None:
        self.shard, self.comm = shard, comm
        self.entries = list(sync.sharded) + list(sync.replicated)
        self.replicated_from = len(sync.sharded)
        self.count_replicated = stage_sync and shard.groups.shard == 0
        self.sizes = [_piece(p, p, shard).numel() for p in self.entries]
        self.numel = sum(self.sizes)
        self.chunk = comm.chunk_numel(self.numel)
        lo = comm.index * self.chunk
        hi = min(lo + self.chunk, self.numel)
        self.ranges: list[_Range] = []
        off = 0
        for e, size in enumerate(self.sizes):
            a, b = max(off, lo), min(off + size, hi)
            if a < b:
                self.ranges.append(_Range(e, a - off, b - off, a - lo, b - lo))
            off += size
        self.grad_seg: torch.Tensor | None = None
        # the segment's elements counted in the global norm, merged into runs (usually one)
        self.norm_spans: list[tuple[int, int]] = []
        for r in self.ranges:
            if r.entry < self.replicated_from or self.count_replicated:
                if self.norm_spans and self.norm_spans[-1][1] == r.seg_lo:
                    self.norm_spans[-1] = (self.norm_spans[-1][0], r.seg_hi)
                else:
                    self.norm_spans.append((r.seg_lo, r.seg_hi))
        # contiguous parameter / gradient buffers (see the module docstring): whole parameters only
        self.flat = shard.pieces == 1 and bool(self.entries)
        self.param_buf: torch.Tensor | None = None
        self.grad_buf: torch.Tensor | None = None

    @torch.no_grad()
    def flatten(self) -> dict[int, torch.Tensor]:
        """Make the entries views of one parameter buffer; returns their fp32 gradient views (zeros) of
        one gradient buffer, by ``id(param)``."""
        first = self.entries[0]
        total = self.chunk * self.comm.n
        self.param_buf = torch.zeros(total, dtype=first.dtype, device=first.device)
        self.grad_buf = torch.zeros(total, dtype=torch.float32, device=first.device)
        grads: dict[int, torch.Tensor] = {}
        off = 0
        for p, size in zip(self.entries, self.sizes):
            self.param_buf[off:off + size].copy_(p.data.reshape(-1))
            p.data = self.param_buf[off:off + size].view_as(p)
            grads[id(p)] = self.grad_buf[off:off + size].view_as(p)
            off += size
        return grads

    def pack(self, tensor_of: Callable[[torch.nn.Parameter], torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
        """The whole buffer (padded to ``n * chunk``) from one tensor per entry."""
        parts = [_piece(tensor_of(p), p, self.shard).reshape(-1).to(dtype) for p in self.entries]
        pad = self.chunk * self.comm.n - self.numel
        if pad:
            parts.append(torch.zeros(pad, dtype=dtype, device=parts[0].device if parts else None))
        return torch.cat(parts)

    def segment_of(self, full: torch.Tensor) -> torch.Tensor:
        lo = self.comm.index * self.chunk
        return full[lo:lo + self.chunk]

    @torch.no_grad()
    def unpack(self, full: torch.Tensor, tensor_of: Callable[[torch.nn.Parameter], torch.Tensor]) -> None:
        """Write a full buffer into the entries (replicated ones only from the rank's first shard)."""
        off = 0
        for e, (p, size) in enumerate(zip(self.entries, self.sizes)):
            if e < self.replicated_from or self.shard.write_replicated:
                dst = _piece(tensor_of(p), p, self.shard)
                dst.copy_(full[off:off + size].view_as(dst))
            off += size


class DistributedOptimizer:
    """Sharded AdamW over every fine-shard buffer of this rank (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, layout: RankLayout, groups: RankGroups, cfg: OptimizerConfig,
                 emulation: Any | None = None) -> None:
        self.model = model
        self.dtype = next(model.parameters()).dtype
        syncs = ((GradSync.for_stage(model, layout, groups), True),
                 (GradSync.for_tied_embedding(model, layout, groups), False))
        self.units = [_Unit(sync, shard, ShardComm(shard.groups, shard.groups.mode, layout, groups.rank, emulation),
                            stage_sync)
                      for sync, stage_sync in syncs for shard in sync.shards]
        grad_views: dict[int, torch.Tensor] = {}
        for u in self.units:
            if u.flat:
                grad_views.update(u.flatten())
        self.fp32_grads = Fp32Grads(model, grad_views) if self.dtype != torch.float32 else None
        # (param, its gradient view) of an fp32 model's flat buffers: autograd accumulates into the views
        self._flat_grads = [(p, grad_views[id(p)]) for p in model.parameters() if id(p) in grad_views] \
            if self.fp32_grads is None else []
        for p, g in self._flat_grads:
            p.grad = g
        self._loose = [p for p in model.parameters() if id(p) not in grad_views]   # gradients outside the buffers
        # fp32 main weights of the owned segments (16-bit models); fp32 models train their own parameters
        self.main = [u.segment_of(u.pack(self._data, torch.float32)).clone() if self.fp32_grads else None
                     for u in self.units]
        self.views: list[list[torch.nn.Parameter]] = []
        decay, no_decay = [], []
        for u, main in zip(self.units, self.main):
            # fp32 models: slices of the parameter buffer, or placeholders until step() points them into
            # the segment packed from the model
            own = main if main is not None else u.segment_of(u.param_buf) if u.flat else None
            views = [torch.nn.Parameter(own[r.seg_lo:r.seg_hi] if own is not None else torch.empty(0))
                     for r in u.ranges]
            for r, v in zip(u.ranges, views):
                (decay if u.entries[r.entry].dim() >= 2 else no_decay).append(v)
            self.views.append(views)
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, foreach=True)

    # ---- tensors of an entry
    @staticmethod
    def _data(p: torch.nn.Parameter) -> torch.Tensor:
        return p.data

    def _grad(self, p: torch.nn.Parameter) -> torch.Tensor:
        if self.fp32_grads is not None:
            return self.fp32_grads.grad_of[id(p)]
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        return p.grad

    # ---- one step
    def reduce_scatter_grads(self, unscale: float = 1.0) -> None:
        """Sum the gradients over the replicas; each unit keeps only its owned segment (divided by
        ``unscale``, the fp16 loss scale)."""
        for p, g in self._flat_grads:           # autograd accumulates in place; re-point if anything replaced it
            if p.grad is not g:
                g.copy_(p.grad) if p.grad is not None else g.zero_()
                p.grad = g
        # the contiguous gradient buffer as it is (consumed: zero_grad refills it), else pack all before any reduce
        packed = [u.grad_buf if u.flat else u.pack(self._grad, torch.float32) for u in self.units]
        for u, buf in zip(self.units, packed):
            seg = u.comm.reduce_scatter(buf)
            u.grad_seg = seg.mul_(1.0 / unscale) if unscale != 1.0 else seg

    def local_sq_norm(self) -> float:
        """This rank's share of the squared global norm (owned elements; replicated ones in shard 0 only)."""
        total = 0.0
        for u in self.units:
            for lo, hi in u.norm_spans:
                total += float(u.grad_seg[lo:hi].double().pow(2).sum())
        return total

    @torch.no_grad()
    def step(self, grad_norm: float, clip_grad: float) -> None:
        """Clip (Megatron's rule), AdamW on the owned segments, all-gather, write the model."""
        coeff = clip_grad / (grad_norm + 1.0e-6) if clip_grad > 0 else 1.0
        segments = []
        for u, main, views in zip(self.units, self.main, self.views):
            seg = self._segment(u, main)
            if coeff < 1.0:
                u.grad_seg.mul_(coeff)
            for r, v in zip(u.ranges, views):
                if main is None and not u.flat:
                    v.data = seg[r.seg_lo:r.seg_hi]
                v.grad = u.grad_seg[r.seg_lo:r.seg_hi]
            segments.append(seg)
        self.optimizer.step()
        for u, seg in zip(self.units, segments):
            seg = seg.to(self.dtype)
            if not u.flat:
                u.unpack(u.comm.all_gather(seg), self._data)
                continue
            full = u.comm.all_gather(seg, out=u.param_buf)
            if full.data_ptr() != u.param_buf.data_ptr():     # one member: the segment came back
                u.param_buf[:full.numel()].copy_(full)

    def _segment(self, u: _Unit, main: torch.Tensor | None) -> torch.Tensor:
        """The fp32 weights of ``u``'s owned segment: main weights, the parameter buffer's own segment
        (fp32 model, contiguous buffer) or packed from the model."""
        if main is not None:
            return main
        return u.segment_of(u.param_buf) if u.flat else u.segment_of(u.pack(self._data, torch.float32))

    def zero_grad(self) -> None:
        for u, views in zip(self.units, self.views):
            u.grad_seg = None
            for v in views:
                v.grad = None
            if u.grad_buf is not None:
                u.grad_buf.zero_()
        for p in self._loose:
            g = self.fp32_grads.grad_of.get(id(p)) if self.fp32_grads else p.grad
            if g is not None:
                g.zero_()

    # ---- checkpoints: full TP-local tensors <-> owned segments
    @torch.no_grad()
    def gather_local_state(self) -> dict[int, dict[str, Any]]:
        """Collective over every unit's group: ``{id(param): {"param", "exp_avg", "exp_avg_sq": fp32 tensors
        of the rank's TP-local shape, "step": float}}`` rebuilt from every member's segment."""
        out: dict[int, dict[str, Any]] = {}
        for u, main, views in zip(self.units, self.main, self.views):
            seg = self._segment(u, main)
            fulls = {"param": u.comm.all_gather(seg.clone())}
            steps = [float(self.optimizer.state[v]["step"]) for v in views if v in self.optimizer.state]
            for k in STATE_KEYS:
                mine = torch.zeros(u.chunk, device=seg.device)
                for r, v in zip(u.ranges, views):
                    st = self.optimizer.state.get(v)
                    if st:
                        mine[r.seg_lo:r.seg_hi] = st[k]
                fulls[k] = u.comm.all_gather(mine)
            step = torch.tensor([max(steps) if steps else 0.0], device=seg.device)
            if u.comm.n > 1:
                step = u.comm.all_gather(step)
            for p in u.entries:
                entry = out.setdefault(id(p), {"step": 0.0, **{k: torch.zeros(p.shape, device=seg.device)
                                                               for k in fulls}})
                entry["step"] = max(entry["step"], float(step.max()))
            for k, full in fulls.items():
                u.unpack(full, lambda q, k=k: out[id(q)][k])
        return out

    @torch.no_grad()
    def load_local_state(self, state: dict[int, dict[str, Any]]) -> None:
        """Take the owned segments from full TP-local tensors (``gather_local_state``'s layout); no comm."""
        for u, main, views in zip(self.units, self.main, self.views):
            seg = {k: u.segment_of(u.pack(lambda p, k=k: state[id(p)][k], torch.float32))
                   for k in ("param", *STATE_KEYS)}
            if main is not None:
                main.copy_(seg["param"])
            for r, v in zip(u.ranges, views):
                step = float(state[id(u.entries[r.entry])]["step"])
                self.optimizer.state.pop(v, None)
                if step > 0:
                    self.optimizer.state[v] = {"step": torch.tensor(step, dtype=torch.float32),
                                               **{k: seg[k][r.seg_lo:r.seg_hi].clone() for k in STATE_KEYS}}

    def memory_bytes(self) -> dict[str, int]:
        """Parameters, full fp32 gradients, owned fp32 main weights (16-bit) and owned AdamW states."""
        def nbytes(ts: Any) -> int:
            return sum(t.numel() * t.element_size() for t in ts)
        grads = self.fp32_grads.tensors() if self.fp32_grads else \
            [p.grad for p in self.model.parameters() if p.grad is not None]
        states = [t for st in self.optimizer.state.values() for t in st.values()
                  if isinstance(t, torch.Tensor) and t.dim() > 0]
        return {"params_bytes": nbytes(self.model.parameters()), "grads_bytes": nbytes(grads),
                "main_weights_bytes": nbytes(m for m in self.main if m is not None), "optimizer_bytes": nbytes(states)}
