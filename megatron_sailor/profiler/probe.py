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

With ``rounds`` > 1 (``sailor-profile --rounds R``) all of that is done once per round, every (TP,
micro-batch) configuration in turn (round-robin, :mod:`megatron_sailor.profiler.rounds`), each round with its
own warm-up; the profile's value of each time is the median over the rounds of the per-round statistic, so
a burst of load from other processes hits one round of a configuration, not all its repeats. Probes are
built once per TP degree and kept until its last round. Activation bytes are measured in the first round.

With ``concurrent`` (default) every block measures at the same time, so ranks that share a machine's
memory system (or cores) while training also share it while profiled; rank 0's block is reported.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist

from megatron_sailor.runtime.data import MicroBatch
from megatron_sailor.runtime.init_weights import init_stage_weights
from megatron_sailor.runtime.groups import new_group
from megatron_sailor.runtime.optimizer import OptimizerConfig, make_adamw
from megatron_sailor.profiler.rounds import (RoundValues, aggregate, collect_rounds, disagreements, last_use,
                                            schedule)
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
    rounds: int = 1               # round-robin rounds; the profile's value is the median over them

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
        if self.rounds < 1:
            raise InputError(f"--rounds must be >= 1, got {self.rounds}")
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
    rounds: RoundValues = field(default_factory=dict)   # every round's value, per (tp, mbs) and quantity


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


class _TpProbes:
    """The three probes of one TP degree on this rank, built once and measured in every round."""

    def __init__(self, model: ModelSpec, cfg: ProfileConfig, tp: int, tp_rank: int, groups: Any,
                 device: torch.device) -> None:
        self.model, self.cfg, self.groups, self.device = model, cfg, groups, device
        n = cfg.layers_per_probe
        self.emb = _probe(model, 0, True, False, tp, tp_rank, groups, cfg.seed, device)
        self.lay = _probe(model, n, False, False, tp, tp_rank, groups, cfg.seed, device)
        self.head = _probe(model, 0, False, True, tp, tp_rank, groups, cfg.seed, device)
        self.parts = PartBytes(_param_bytes(self.emb), _param_bytes(self.lay) // n, _param_bytes(self.head))

    def measure(self, mbs: int, timer: Any, with_update: bool,
                with_acts: bool) -> tuple[dict[str, float], dict[str, float]]:
        """One round of one micro-batch size: ``--stat`` of the timed repeats of each probe's forward and
        backward (per layer for the layer probe), the optimizer rate if asked, activation bytes if asked."""
        cfg, n = self.cfg, self.cfg.layers_per_probe
        values: dict[str, float] = {}
        acts: dict[str, float] = {}
        for name, module, role in (("embedding", self.emb, StageRole(0, 2)), ("layer", self.lay, StageRole(1, 3)),
                                   ("head", self.head, StageRole(1, 2))):
            per = n if name == "layer" else 1
            st = _StageTiming(module, role, self.model, mbs, cfg.seed + mbs, self.device, tp_group=self.groups.tp)
            fwd_s, bwd_s = st.measure(timer, cfg.warmup, cfg.repeats, cfg.stat_fn)
            values[f"{name}_fwd_s"], values[f"{name}_bwd_s"] = fwd_s / per, bwd_s / per
            if with_acts:
                acts[name] = st.activation_bytes() / per
        if with_update:
            values["update_s_per_param"] = _update_seconds_per_param(
                [self.emb, self.lay, self.head], timer, cfg.warmup, cfg.repeats, cfg.stat_fn)
        return values, acts


def _costs(model: ModelSpec, cfg: ProfileConfig, gpu_type: str, timer_name: str,
           med: dict[tuple[int, int], dict[str, float]],
           acts: dict[tuple[int, int], dict[str, float]]) -> list[LayerCosts]:
    """The profile entries (TP-major, then micro-batch) from the medians over rounds; the optimizer rate of
    a TP degree is the one measured with its first micro-batch size."""
    out = []
    for tp in cfg.tp_list:
        update_s = med[(tp, cfg.mbs_list[0])]["update_s_per_param"]
        for mbs in cfg.mbs_list:
            v, a = med[(tp, mbs)], acts[(tp, mbs)]
            out.append(LayerCosts(
                gpu_type=gpu_type, mbs=mbs, tp=tp, embedding_fwd_s=v["embedding_fwd_s"],
                embedding_bwd_s=v["embedding_bwd_s"], layer_fwd_s=(v["layer_fwd_s"],) * model.num_layers,
                layer_bwd_s=(v["layer_bwd_s"],) * model.num_layers, head_fwd_s=v["head_fwd_s"],
                head_bwd_s=v["head_bwd_s"], update_s_per_param=update_s, layer_act_bytes=a["layer"],
                embedding_act_bytes=a["embedding"], head_act_bytes=a["head"],
                source=f"sailor-profile ({timer_name})"))
            logger.info("tp %d mbs %d: layer %.2f/%.2f ms", tp, mbs, v["layer_fwd_s"] * 1e3, v["layer_bwd_s"] * 1e3)
    return out


def _warn_disagreements(values: RoundValues) -> None:
    for (tp, mbs), name, frac in disagreements(values, ("layer_fwd_s", "layer_bwd_s")):
        ms = "/".join(f"{x * 1e3:.2f}" for x in values[(tp, mbs)][name])
        logger.warning("tp %d mbs %d: the rounds of %s disagree by %.0f%% (%s ms); the profile takes their "
                       "median (load from other processes?)", tp, mbs, name, frac * 100, ms)


def profile_model(model: ModelSpec, cfg: ProfileConfig, gpu_type: str, timeout_s: float = 600.0) -> ProfileResult:
    """Run on every rank of an initialised process group; rank 0's result is the one to write. The
    configurations are measured round-robin over ``cfg.rounds`` rounds (:mod:`.rounds`); a barrier after
    each keeps the blocks of one TP degree measuring together."""
    rank, world = dist.get_rank(), dist.get_world_size()
    timeout = timedelta(seconds=timeout_s)
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    singles = [new_group([r], timeout) for r in range(world)]
    from megatron_sailor.runtime.rank_runtime import seed_megatron_rng
    seed_megatron_rng(cfg.seed)
    blocks = {tp: _tp_groups(world, tp, rank, timeout) for tp in cfg.tp_list}
    entries = schedule(cfg.tp_list, cfg.mbs_list, cfg.rounds)
    last = last_use(entries)
    timer = make_timer(torch)
    probes: dict[int, _TpProbes] = {}
    param_bytes: dict[int, PartBytes] = {}
    acts: dict[tuple[int, int], dict[str, float]] = {}

    def measure(r: int, tp: int, mbs: int) -> dict[str, float]:
        tp_group, members = blocks[tp]
        values: dict[str, float] = {}
        if members is not None and (cfg.concurrent or members[0] == 0):
            if tp not in probes:
                groups = SimpleNamespace(tp=tp_group, single=singles[rank])
                probes[tp] = _TpProbes(model, cfg, tp, members.index(rank), groups, device)
                param_bytes[tp] = probes[tp].parts
            values, a = probes[tp].measure(mbs, timer, with_update=mbs == cfg.mbs_list[0], with_acts=r == 0)
            acts.setdefault((tp, mbs), a)
        if last[tp] == (r, tp, mbs):
            probes.pop(tp, None)                 # free this TP's probes after its last measurement
        dist.barrier()
        return values

    from megatron_sailor.train.progress import progress_iter
    values = collect_rounds(progress_iter(entries, "profiling", total=len(entries)) if rank == 0 else entries,
                            measure)
    if rank != 0:
        return ProfileResult(costs=[], param_bytes={}, timer=timer.name)
    if cfg.rounds > 1:
        _warn_disagreements(values)
    return ProfileResult(costs=_costs(model, cfg, gpu_type, timer.name, aggregate(values), acts),
                         param_bytes=param_bytes, timer=timer.name, rounds=values)
