"""Wire one rank of a plan together: layout, groups, stage model, P2P, grad sync, optimizer, schedule."""
from __future__ import annotations

import logging
import math
import time
from datetime import timedelta
from dataclasses import dataclass, replace
from typing import Any

import torch

from megatron_sailor.runtime.capabilities import check_runtime_supports
from megatron_sailor.runtime.data import MicroBatch, TokenSource, microbatch, pipeline_microbatch_ids
from megatron_sailor.runtime.dist_optimizer import DistributedOptimizer
from megatron_sailor.runtime.dropout import DropoutConfig, DropoutContext, install_dropout
from megatron_sailor.runtime.grad_sync import GradSync
from megatron_sailor.runtime.groups import SYNC_HIERARCHICAL, RankGroups, create_groups, stage_sync_modes
from megatron_sailor.runtime.init_weights import init_stage_weights
from megatron_sailor.runtime.memory import model_state_bytes
from megatron_sailor.runtime.metrics import StepMetrics
from megatron_sailor.runtime.mixed_precision import DTYPES, DynamicLossScaler, LossScaleConfig, MainParams
from megatron_sailor.runtime.optimizer import (OptimizerConfig, clip_and_step, local_sq_norm, make_adamw,
                                               reduce_sq_norm_and_loss)
from megatron_sailor.runtime.p2p import StageP2P
from megatron_sailor.runtime.schedule import StageRole, StageStep, run_1f1b
from megatron_sailor.runtime.stage_model import StageSpec, build_stage_model
from planner.layout import RankLayout, build_layout
from planner.model import ModelSpec
from planner.plan import Plan

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunConfig:
    seed: int = 1234
    sync_mode: str = SYNC_HIERARCHICAL
    optimizer: OptimizerConfig = OptimizerConfig()
    emulation: Any | None = None     # megatron_sailor.runtime.emulation.Emulation (demos/tests only)
    timeout_s: float = 120.0         # collectives and point-to-point receives
    hidden_dropout: float = 0.0      # Megatron's --hidden-dropout (the CLI defaults to Megatron's 0.1)
    attention_dropout: float = 0.0   # Megatron's --attention-dropout
    loss_scale: LossScaleConfig = LossScaleConfig()   # fp16 plans only


def seed_megatron_rng(seed: int) -> None:
    """Register the model-parallel RNG state megatron's attention forks (our dropout masks do not use it)."""
    from megatron.core.tensor_parallel import random as mrand
    tracker = mrand.get_cuda_rng_tracker()
    tracker.reset()
    tracker.add("model-parallel-rng", seed + 2718)
    torch.manual_seed(seed)


@dataclass(frozen=True)
class _OffsetSource:
    source: TokenSource
    offset: int

    def sample(self, index: int) -> torch.Tensor:
        return self.source.sample(index + self.offset)


def rank_groups(layout: RankLayout, rank: int, cfg: RunConfig, tied_embeddings: bool = False,
                plan_modes: tuple[str | None, ...] | None = None) -> RankGroups:
    """This rank's process groups for ``cfg`` (the one place the sync mode and timeout reach create_groups);
    ``tied_embeddings`` = the plan's ``tie_embeddings`` (adds the embedding groups), ``plan_modes`` = the
    plan's per-stage ``grad_sync`` (:func:`plan_sync_modes`)."""
    return create_groups(layout, rank, cfg.sync_mode, timeout=timedelta(seconds=cfg.timeout_s),
                         tied_embeddings=tied_embeddings, plan_modes=plan_modes)


def plan_sync_modes(plan: Plan) -> tuple[str | None, ...]:
    """The plan's per-stage gradient-sync modes (None: the run's --grad-sync decides)."""
    return tuple(st.grad_sync for st in plan.stages)


class RankRuntime:
    """Everything one rank needs to train its part of the plan.

    ``model`` must fit ``plan`` (:func:`~megatron_sailor.runtime.stage_model.check_model_fits_plan`; the
    training job checks it once, in ``megatron_sailor.train.arguments.parse_config``, before joining the
    process group). ``groups``, when given, must come from :func:`rank_groups` with the same ``cfg``.
    """

    def __init__(self, plan: Plan, model: ModelSpec, rank: int, data: TokenSource, cfg: RunConfig,
                 layout: RankLayout | None = None, groups: RankGroups | None = None) -> None:
        check_runtime_supports(plan)
        self.plan, self.spec, self.data, self.cfg = plan, model, data, cfg
        self.layout = layout or build_layout(plan)
        self.me = self.layout.info(rank)
        timeout = timedelta(seconds=cfg.timeout_s)
        self.groups = groups or rank_groups(self.layout, rank, cfg, tied_embeddings=plan.tie_embeddings,
                                            plan_modes=plan_sync_modes(plan))
        want = stage_sync_modes(plan_sync_modes(plan), cfg.sync_mode)
        if self.groups.sync_mode != cfg.sync_mode or self.groups.stage_modes != want:
            raise ValueError(f"groups were made for sync modes {self.groups.sync_mode!r} {self.groups.stage_modes}, "
                             f"the plan and cfg say {cfg.sync_mode!r} {want}")
        seed_megatron_rng(cfg.seed)
        stage = plan.stages[self.me.stage]
        role = StageRole(self.me.stage, plan.num_stages)
        self.stage = StageSpec(first_layer=stage.first_layer, num_layers=stage.num_layers,
                               pre_process=role.is_first, post_process=role.is_last,
                               tp=self.me.tp, tp_rank=self.me.tp_rank, tied=plan.tie_embeddings,
                               recompute=plan.recompute)
        dtype = DTYPES[plan.precision]
        self.model = build_stage_model(model, self.stage, self.groups, cfg.hidden_dropout, cfg.attention_dropout,
                                       dtype)
        self.dropout_ctx = DropoutContext()
        install_dropout(self.model, DropoutConfig(cfg.hidden_dropout, cfg.attention_dropout, cfg.seed),
                        self.dropout_ctx, stage.first_layer, self.me.tp_rank)
        init_stage_weights(self.model, stage.first_layer, self.me.tp, self.me.tp_rank, cfg.seed,
                           tied=plan.tie_embeddings)
        self.device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device("cpu")
        self.model.to(self.device)
        # what the optimizer trains: the model itself (fp32) or its fp32 main weights (bf16 / fp16); with the
        # distributed optimizer each rank's owned slices of them (runtime.dist_optimizer)
        self.dist_opt = DistributedOptimizer(self.model, self.layout, self.groups, cfg.optimizer, cfg.emulation) \
            if plan.distributed_optimizer else None
        self.master = self.model if dtype == torch.float32 or self.dist_opt else MainParams(self.model)
        self.scaler = DynamicLossScaler(cfg.loss_scale) if plan.precision == "fp16" else None
        self.optimizer = self.dist_opt.optimizer if self.dist_opt else make_adamw(self.master, cfg.optimizer)
        self.grad_sync = GradSync.for_stage(self.master, self.layout, self.groups, cfg.emulation)
        self.tied_sync = GradSync.for_tied_embedding(self.master, self.layout, self.groups, cfg.emulation)
        global_tokens = plan.global_batch_size * model.seq_length
        self.step_fn = StageStep(self.model, role, model.seq_length, plan.micro_batch_size, global_tokens,
                                 cfg.emulation, device=self.device, dropout_ctx=self.dropout_ctx,
                                 tp_group=self.groups.tp)
        shape = (model.seq_length, plan.micro_batch_size, model.hidden_size)
        self.p2p = StageP2P.for_rank(self.layout, rank, self.groups.p2p, shape, dtype=dtype, emulation=cfg.emulation,
                                     timeout=timeout, device=self.device)
        self.microbatch_ids = pipeline_microbatch_ids(plan.microbatch_counts, self.me.replica)
        # first sample of iteration i = i * gbs + sample_offset (non-zero only after resuming a checkpoint
        # written under another global batch size: consumed samples, not iterations, fix the data position)
        self.sample_offset = 0

    def resume_at(self, iteration: int, consumed_samples: int) -> None:
        """Continue so that iteration ``iteration`` starts at global sample ``consumed_samples``."""
        self.sample_offset = consumed_samples - iteration * self.plan.global_batch_size

    def consumed_samples(self, iterations_done: int) -> int:
        """Samples consumed by iterations ``< iterations_done``."""
        return iterations_done * self.plan.global_batch_size + self.sample_offset

    def _batches(self, iteration: int):  # noqa: ANN202 - small closure factory
        ids = self.microbatch_ids
        cache: dict[int, MicroBatch] = {}
        data = self.data if self.sample_offset == 0 else _OffsetSource(self.data, self.sample_offset)

        def get(n: int) -> MicroBatch:
            if n not in cache:
                mb = microbatch(data, iteration, self.plan.global_batch_size, self.plan.micro_batch_size, ids[n])
                cache[n] = replace(mb, first_sample=mb.first_sample + self.sample_offset)
            return cache[n]
        return get

    def train_step(self, iteration: int) -> StepMetrics:
        """One iteration: 1F1B, gradient sync, global-norm clipping, AdamW step (skipped on every rank
        together when an fp16 gradient overflowed)."""
        start_s = time.perf_counter()
        self.model.train()
        scale = self.scaler.scale if self.scaler is not None else 1.0
        self.step_fn.grad_scale = scale
        loss_share = run_1f1b(self.step_fn, self.p2p, self._batches(iteration), len(self.microbatch_ids))
        if self.dist_opt is not None:
            grad_norm, loss, skipped = self._distributed_step(scale, loss_share)
        else:
            grad_norm, loss, skipped = self._replicated_step(scale, loss_share)
        if self.scaler is not None:
            self.scaler.update(skipped)
        elapsed_s = time.perf_counter() - start_s
        tokens = self.plan.global_batch_size * self.spec.seq_length
        return StepMetrics(iteration=iteration, loss=loss, iteration_time_s=elapsed_s,
                           tokens_per_s=tokens / elapsed_s, grad_norm=grad_norm, skipped=skipped,
                           loss_scale=scale, memory=self.memory_bytes())

    def _replicated_step(self, scale: float, loss_share: float) -> tuple[float, float, bool]:
        """All-reduce gradient sync, every replica steps its full optimizer: (norm, loss, skipped)."""
        self.grad_sync.sync()
        self.tied_sync.sync()
        if self.master is not self.model:
            self.master.unscale_(scale)
        grad_norm, loss = reduce_sq_norm_and_loss(local_sq_norm(self.master, self.me), self.me, loss_share,
                                                  self.groups.world, self.device)
        skipped = not math.isfinite(grad_norm)       # the same world all-reduce on every rank
        if skipped:
            self.optimizer.zero_grad(set_to_none=False)
        else:
            clip_and_step(self.master, self.optimizer, grad_norm, self.cfg.optimizer.clip_grad)
            if self.master is not self.model:
                self.master.copy_to_model()
        return grad_norm, loss, skipped

    def _distributed_step(self, scale: float, loss_share: float) -> tuple[float, float, bool]:
        """Reduce-scatter, sharded AdamW, all-gather (runtime.dist_optimizer): (norm, loss, skipped)."""
        self.dist_opt.reduce_scatter_grads(unscale=scale)
        grad_norm, loss = reduce_sq_norm_and_loss(self.dist_opt.local_sq_norm(), self.me, loss_share,
                                                  self.groups.world, self.device)
        skipped = not math.isfinite(grad_norm)       # the same world all-reduce on every rank
        if not skipped:
            self.dist_opt.step(grad_norm, self.cfg.optimizer.clip_grad)
        self.dist_opt.zero_grad()
        return grad_norm, loss, skipped

    def memory_bytes(self) -> dict[str, int]:
        """What this rank holds (megatron_sailor.runtime.memory): model states now, activations at peak."""
        out = self.dist_opt.memory_bytes() if self.dist_opt else \
            model_state_bytes(self.model, self.master, self.optimizer)
        out["peak_saved_activation_bytes"] = self.step_fn.saved.peak_bytes
        if self.device.type == "cuda":
            out["cuda_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(self.device))
        return out

    def trained_state(self) -> list[tuple[str, torch.nn.Parameter, dict[str, Any]]]:
        """``(local name, model parameter, {"param", "exp_avg", "exp_avg_sq": fp32 tensors of the parameter's
        TP-local shape, "step": float})`` per parameter: what the optimizer trains (fp32 main weights of a
        16-bit model) and its AdamW states. Collective under the distributed optimizer (the owned segments
        are all-gathered); AdamW states are zeros with step 0 before the first step."""
        if self.dist_opt is not None:
            local = self.dist_opt.gather_local_state()
            return [(n, p, local[id(p)]) for n, p in self.model.named_parameters()]
        out = []
        for (n, p), m in zip(self.model.named_parameters(), self.master.parameters()):
            st = self.optimizer.state.get(m, {})
            entry: dict[str, Any] = {"param": m.detach().float()}
            for k in ("exp_avg", "exp_avg_sq"):
                entry[k] = st[k] if k in st else torch.zeros(m.shape)
            entry["step"] = float(st["step"]) if "step" in st else 0.0
            out.append((n, p, entry))
        return out

    @torch.no_grad()
    def load_trained_state(self, state: dict[int, dict[str, Any]]) -> None:
        """Inverse of :meth:`trained_state`, keyed by ``id(model parameter)``: sets the model (cast to its
        dtype), the fp32 main weights and the AdamW states (step 0: no state). No communication."""
        for p in self.model.parameters():
            p.copy_(state[id(p)]["param"].to(p.device, p.dtype))
        if self.dist_opt is not None:
            self.dist_opt.load_local_state(state)
            return
        for p, m in zip(self.model.parameters(), self.master.parameters()):
            e = state[id(p)]
            if m is not p:
                m.copy_(e["param"].to(m.device))
            self.optimizer.state.pop(m, None)
            if e["step"] > 0:
                self.optimizer.state[m] = {"step": torch.tensor(float(e["step"]), dtype=torch.float32),
                                           **{k: e[k].to(m.device).clone() for k in ("exp_avg", "exp_avg_sq")}}

    def full_state(self) -> dict[str, torch.Tensor]:
        """This rank's parameters under their global names (for checks against a reference); the fp32
        main weights when the model is 16-bit. Collective under the distributed optimizer."""
        from megatron_sailor.runtime.init_weights import global_name
        return {global_name(n, self.stage.first_layer): e["param"].clone() for n, _, e in self.trained_state()}
