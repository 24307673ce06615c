"""Model profiler: per-layer forward/backward seconds, optimizer seconds per parameter, activation and
parameter bytes, measured on this machine with the runtime's own code paths.

For each TP degree the ranks are cut into blocks of ``tp`` consecutive ranks (real process groups); each
block builds three probe stages with :func:`megatron_sailor.runtime.stage_model.build_stage_model` exactly as the
runtime does: the embedding alone (``pre_process``, 0 layers), ``layers_per_probe`` transformer layers
(neither pre nor post), and final norm + head + loss alone (``post_process``, 0 layers). Each probe's
forward and backward run through the runtime's :class:`~megatron_sailor.runtime.schedule.StageStep` for every
micro-batch size: ``warmup`` untimed repeats, then the median (or ``stat="min"``) of ``repeats`` timed ones (CUDA events on a
GPU, wall clock on CPU). A layer's time is the layer probe's time / ``layers_per_probe``. The optimizer
step (norm, clip, AdamW, zero-grad as the runtime does it) is timed on the parameters of all three probes
together and divided by their count. Activation bytes: saved-tensor sizes on CPU, the allocator's growth on CUDA.

With ``concurrent`` (default) every block measures at the same time, so ranks that share a machine's
memory system (or cores) while training also share it while profiled; rank 0's block is reported.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist

from megatron_sailor.runtime.data import MicroBatch
from megatron_sailor.runtime.init_weights import init_stage_weights
from megatron_sailor.runtime.groups import new_group
from megatron_sailor.runtime.optimizer import OptimizerConfig, make_adamw
from megatron_sailor.profiler.timing import (AllocatorMeter, make_timer, median_s,
                                            timed_repeats)
from megatron_sailor.runtime.schedule import StageRole, StageStep
from megatron_sailor.runtime.stage_model import StageSpec, build_stage_model
from planner.errors import InputError
from planner.model import ModelSpec
from planner.profiles import LayerCosts

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProfileConfig:
    mbs_list: tuple[int, ...]
    tp_list: tuple[int, ...]
    warmup: int = 2
    repeats: int = 5
    layers_per_probe: int = 2
    seed: int = 1234
    concurrent: bool = True
    stat: str = "median"          # or "min": the statistic over the timed repeats

    @property
    def stat_fn(self):  # noqa: ANN201
        return min if self.stat == "min" else median_s

    def check(self, model: ModelSpec, world_size: int) -> None:
        """Raise :class:`InputError` for anything the run cannot do (before any process group exists)."""
        if not self.mbs_list or any(m < 1 for m in self.mbs_list):
            raise InputError(f"--mbs must be positive integers, got {list(self.mbs_list)}")
        if not self.tp_list or any(t < 1 for t in self.tp_list):
            raise InputError(f"--tp must be positive integers, got {list(self.tp_list)}")
        if self.stat not in ("median", "min"):
            raise InputError(f"--stat must be median or min, got {self.stat!r}")
        if self.repeats < 1 or self.warmup < 0 or self.layers_per_probe < 1:
            raise InputError("--repeats and --layers-per-probe must be >= 1 and --warmup >= 0")
        for tp in self.tp_list:
            model.check_tp(tp)
            if model.padded_vocab_size % tp:
                raise InputError(f"TP {tp} does not divide the padded vocabulary {model.padded_vocab_size}")
            if tp > world_size:
                raise InputError(f"TP {tp} needs {tp} ranks but the profiler runs on {world_size}")


@dataclass(frozen=True)
class PartBytes:
    """Parameter bytes on one rank at a TP degree (per transformer layer for ``layer``)."""

    embedding: int
    layer: int
    head: int


@dataclass
class ProfileResult:
    costs: list[LayerCosts]
    param_bytes: dict[int, PartBytes]      # by TP degree
    timer: str


def _tp_groups(world: int, tp: int, rank: int, timeout: timedelta) -> tuple[Any, list[int] | None]:
    """Create (collectively) one group per block of ``tp`` consecutive ranks; returns this rank's."""
    mine, members = None, None
    for start in range(0, world - world % tp, tp):
        ranks = list(range(start, start + tp))
        g = new_group(ranks, timeout)
        if rank in ranks:
            mine, members = g, ranks
    return mine, members


def _probe(model: ModelSpec, layers: int, pre: bool, post: bool, tp: int, tp_rank: int, groups: Any,
           seed: int, device: torch.device) -> torch.nn.Module:
    stage = StageSpec(first_layer=0, num_layers=layers, pre_process=pre, post_process=post, tp=tp,
                      tp_rank=tp_rank)
    m = build_stage_model(model, stage, groups)
    init_stage_weights(m, 0, tp, tp_rank, seed)
    m.to(device)
    m.train()
    return m


def _param_bytes(m: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in m.parameters())


def _batch(model: ModelSpec, mbs: int, seed: int) -> MicroBatch:
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, model.vocab_size, (mbs, model.seq_length + 1), generator=gen)
    return MicroBatch(tokens=rows[:, :-1].contiguous(), labels=rows[:, 1:].contiguous())


class _StageTiming:
    """Forward/backward timing and activation bytes of one probe at one micro-batch size."""

    def __init__(self, module: torch.nn.Module, role: StageRole, model: ModelSpec, mbs: int, seed: int,
                 device: torch.device, tp_group: Any | None = None) -> None:
        self.module, self.device, self.model, self.mbs = module, device, model, mbs
        self.step = StageStep(module, role, model.seq_length, mbs, mbs * model.seq_length, device=device,
                              tp_group=tp_group)
        self.batch = _batch(model, mbs, seed)
        self.has_input = not role.is_first
        self.is_last = role.is_last
        self.gen = torch.Generator().manual_seed(seed + 1)

    def _input(self) -> torch.Tensor | None:
        if not self.has_input:
            return None
        shape = (self.model.seq_length, self.mbs, self.model.hidden_size)
        return torch.randn(shape, generator=self.gen).to(self.device)

    def _grad_for(self, out: torch.Tensor) -> torch.Tensor | None:
        return None if self.is_last else torch.randn(out.shape, generator=self.gen).to(self.device)

    def measure(self, timer: Any, warmup: int, repeats: int, stat: Any = median_s) -> tuple[float, float]:
        fwd, bwd = [], []
        for i in range(warmup + repeats):
            inp = self._input()
            (out, _), f_s = timer.time(lambda: self.step.forward(inp, self.batch))
            grad = self._grad_for(out)
            _, b_s = timer.time(lambda: self.step.backward(inp, out, grad))
            if i >= warmup:
                fwd.append(f_s)
                bwd.append(b_s)
        return stat(fwd), stat(bwd)

    def activation_bytes(self) -> float:
        """Bytes kept for backward by one forward (the output included when it is kept, i.e. not a loss)."""
        inp = self._input()
        if self.device.type == "cuda":
            meter = AllocatorMeter(torch.cuda)
            meter.start()
            out, _ = self.step.forward(inp, self.batch)
            nbytes = meter.stop()
        else:
            # the stage step counts what its forward saves (runtime.memory; an outer saved-tensor hook would
            # see nothing inside its inner one); the received input is the sender's output: not counted here
            counter = self.step.saved
            extra = {inp.untyped_storage().data_ptr()} - counter.param_storages if inp is not None else set()
            counter.param_storages |= extra
            try:
                out, _ = self.step.forward(inp, self.batch)
            finally:
                counter.param_storages -= extra
            nbytes = float(self.step.last_saved_bytes)
        self.step.backward(inp, out, self._grad_for(out))
        return nbytes


def _update_seconds_per_param(modules: list[torch.nn.Module], timer: Any, warmup: int, repeats: int,
                              stat: Any = median_s) -> float:
    """The runtime's optimizer work (squared norm, clip scaling, AdamW step, zero-grad) per parameter, over
    the parameters of all probes together (embedding, layers, head: a stage-sized working set)."""
    opt = make_adamw(torch.nn.ModuleList(modules), OptimizerConfig())
    params = [p for m in modules for p in m.parameters() if p.grad is not None]
    if not params:
        raise RuntimeError("the layer probe has no gradients to step on")

    def update() -> None:
        sq = sum(float(p.grad.double().pow(2).sum()) for p in params)
        for p in params:
            p.grad.mul_(0.5 if sq >= 0 else 1.0)
        opt.step()
        opt.zero_grad(set_to_none=False)

    samples = timed_repeats(update, timer, warmup + 1, repeats)
    return stat(samples) / sum(p.numel() for p in params)


def _profile_tp(model: ModelSpec, cfg: ProfileConfig, tp: int, tp_rank: int, groups: Any, gpu_type: str,
                device: torch.device) -> tuple[list[LayerCosts], PartBytes]:
    timer = make_timer(torch)
    n = cfg.layers_per_probe
    emb = _probe(model, 0, True, False, tp, tp_rank, groups, cfg.seed, device)
    lay = _probe(model, n, False, False, tp, tp_rank, groups, cfg.seed, device)
    head = _probe(model, 0, False, True, tp, tp_rank, groups, cfg.seed, device)
    parts = PartBytes(_param_bytes(emb), _param_bytes(lay) // n, _param_bytes(head))
    out, update_s = [], None
    for mbs in cfg.mbs_list:
        times, acts = {}, {}
        for name, module, role in (("emb", emb, StageRole(0, 2)), ("lay", lay, StageRole(1, 3)),
                                   ("head", head, StageRole(1, 2))):
            st = _StageTiming(module, role, model, mbs, cfg.seed + mbs, device, tp_group=groups.tp)
            times[name] = st.measure(timer, cfg.warmup, cfg.repeats, cfg.stat_fn)
            acts[name] = st.activation_bytes()
        if update_s is None:
            update_s = _update_seconds_per_param([emb, lay, head], timer, cfg.warmup, cfg.repeats, cfg.stat_fn)
        lf, lb = times["lay"][0] / n, times["lay"][1] / n
        out.append(LayerCosts(
            gpu_type=gpu_type, mbs=mbs, tp=tp, embedding_fwd_s=times["emb"][0], embedding_bwd_s=times["emb"][1],
            layer_fwd_s=(lf,) * model.num_layers, layer_bwd_s=(lb,) * model.num_layers,
            head_fwd_s=times["head"][0], head_bwd_s=times["head"][1], update_s_per_param=update_s,
            layer_act_bytes=acts["lay"] / n, embedding_act_bytes=acts["emb"], head_act_bytes=acts["head"],
            source=f"sailor-profile ({timer.name})"))
        logger.info("tp %d mbs %d: layer %.2f/%.2f ms", tp, mbs, lf * 1e3, lb * 1e3)
    return out, parts


def profile_model(model: ModelSpec, cfg: ProfileConfig, gpu_type: str, timeout_s: float = 600.0) -> ProfileResult:
    """Run on every rank of an initialised process group; rank 0's result is the one to write."""
    rank, world = dist.get_rank(), dist.get_world_size()
    timeout = timedelta(seconds=timeout_s)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    singles = [new_group([r], timeout) for r in range(world)]
    from megatron_sailor.runtime.rank_runtime import seed_megatron_rng
    seed_megatron_rng(cfg.seed)
    costs: list[LayerCosts] = []
    param_bytes: dict[int, PartBytes] = {}
    from megatron_sailor.train.progress import progress_iter
    tps = progress_iter(cfg.tp_list, "profiling", total=len(cfg.tp_list)) if rank == 0 else cfg.tp_list
    for tp in tps:
        tp_group, members = _tp_groups(world, tp, rank, timeout)
        active = members is not None and (cfg.concurrent or members[0] == 0)
        if active:
            groups = SimpleNamespace(tp=tp_group, single=singles[rank])
            c, parts = _profile_tp(model, cfg, tp, members.index(rank), groups, gpu_type, device)
            if rank == 0:
                costs.extend(c)
                param_bytes[tp] = parts
        dist.barrier()
    return ProfileResult(costs=costs, param_bytes=param_bytes, timer=make_timer(torch).name)
