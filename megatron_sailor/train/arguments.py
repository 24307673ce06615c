"""Megatron-style command-line arguments for ``examples/gpt/pretrain_gpt.py`` and their validation
against the plan (pure: no torch.distributed; every problem is one-line :class:`InputError`)."""
from __future__ import annotations

import argparse
from pathlib import Path
from dataclasses import dataclass, replace

from planner.errors import InputError
from planner.model import ModelSpec, get_model
from planner.plan import Plan
from planner.sailor_plan import load_any_plan

from megatron_sailor.runtime.capabilities import check_runtime_supports
from megatron_sailor.runtime.groups import SYNC_FLAT, SYNC_HIERARCHICAL
from megatron_sailor.runtime.optimizer import OptimizerConfig
from megatron_sailor.runtime.stage_model import check_model_fits_plan


@dataclass(frozen=True)
class TrainConfig:
    plan: Plan
    model: ModelSpec
    optimizer: OptimizerConfig
    train_iters: int
    seed: int
    data_path: str | None          # None = mock data
    metrics_file: str | None
    sync_mode: str
    log_interval: int
    timeout_s: float
    cross_zone_latency_s: float = 0.0      # emulation only (see megatron_sailor.runtime.emulation)
    cross_zone_gbps: float = 0.0
    save: str | None = None                # checkpoint folder to write (docs/ELASTIC.md)
    load: str | None = None                # checkpoint folder to resume from (newest verified checkpoint)
    save_interval: int = 0                 # save every N iterations (0: only at the end / on a stop request)
    keep_last: int = 2
    async_save: bool = False               # periodic saves write in a background thread
    control_file: str | None = None        # "stop" written here: checkpoint and exit 0 (sailor-elastic)
    events_file: str | None = None         # JSON lines with wall-clock start-up / load / save timings
    wait_file: str | None = None           # start up, then wait for this file before loading the checkpoint
    hidden_dropout: float = 0.0            # Megatron's --hidden-dropout (plan-independent masks)
    attention_dropout: float = 0.0         # Megatron's --attention-dropout


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Train a GPT model on a megatron-sailor plan (run under torchrun).")
    p.add_argument("--sailor-plan", required=True, help="our plan JSON or a Sailor plan_config JSON")
    g = p.add_argument_group("model (default: the plan's named model, if built in)")
    for name in ("num-layers", "hidden-size", "num-attention-heads", "ffn-hidden-size", "seq-length",
                 "max-position-embeddings", "vocab-size", "num-query-groups"):
        g.add_argument(f"--{name}", type=int, default=None)
    g.add_argument("--make-vocab-size-divisible-by", type=int, default=None)
    g.add_argument("--model", default=None, help="built-in model name to start from (e.g. tiny, opt-350m)")
    b = p.add_argument_group("batch / parallelism (must agree with the plan when given)")
    for name in ("micro-batch-size", "global-batch-size", "tensor-model-parallel-size",
                 "pipeline-model-parallel-size"):
        b.add_argument(f"--{name}", type=int, default=None)
    t = p.add_argument_group("training")
    t.add_argument("--train-iters", type=int, required=True)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--clip-grad", type=float, default=1.0)
    t.add_argument("--adam-beta1", type=float, default=0.9)
    t.add_argument("--adam-beta2", type=float, default=0.95)
    t.add_argument("--adam-eps", type=float, default=1e-8)
    t.add_argument("--seed", type=int, default=1234)
    d = t.add_mutually_exclusive_group(required=True)
    d.add_argument("--mock-data", action="store_true")
    d.add_argument("--data-path", default=None, help="prefix of a megatron .bin/.idx pair")
    t.add_argument("--metrics-file", default=None)
    t.add_argument("--grad-sync", choices=(SYNC_HIERARCHICAL, SYNC_FLAT), default=SYNC_HIERARCHICAL)
    t.add_argument("--log-interval", type=int, default=1)
    t.add_argument("--distributed-timeout-s", type=float, default=120.0)
    c = p.add_argument_group("checkpoints and elasticity (docs/ELASTIC.md)")
    c.add_argument("--save", default=None, help="checkpoint folder (plan-independent format, atomic commits)")
    c.add_argument("--load", default=None, help="resume from the newest verified checkpoint in this folder "
                   "(none there: start at iteration 0; corrupt ones are refused, another model's stops the run)")
    c.add_argument("--save-interval", type=int, default=0, help="save every N iterations (0: at the end only)")
    c.add_argument("--async-save", action="store_true", help="periodic saves: snapshot, write in a background "
                   "thread, commit after the next iteration (end-of-run and stop saves stay synchronous)")
    c.add_argument("--keep-last", type=int, default=2, help="keep the newest K checkpoints (0: keep all)")
    c.add_argument("--elastic-control", default=None, help="file polled every iteration; 'stop' in it = "
                   "save a checkpoint and exit 0 (written by sailor-elastic)")
    c.add_argument("--elastic-events", default=None, help="append JSON lines with start-up/load/save timings")
    c.add_argument("--elastic-wait", default=None, help="after building the model, wait until this file exists "
                   "before loading (sailor-elastic starts the next job while the previous one checkpoints)")
    r = p.add_argument_group("regularisation and embeddings (Megatron's names and defaults)")
    r.add_argument("--hidden-dropout", type=float, default=0.1)
    r.add_argument("--attention-dropout", type=float, default=0.1)
    r.add_argument("--untie-embeddings-and-output-weights", action="store_true",
                   help="separate LM head (a Sailor plan_config ties by default; our plan's tie_embeddings decides)")
    e = p.add_argument_group("emulation (one machine standing in for several zones; demos and tests)")
    e.add_argument("--emulate-cross-zone-latency-s", type=float, default=0.0,
                   help="extra seconds per message between ranks of different zones")
    e.add_argument("--emulate-cross-zone-gbps", type=float, default=0.0,
                   help="bandwidth of the emulated cross-zone link in Gbit/s (0 = unlimited)")
    return p


_MODEL_FIELDS = {"num_layers": "num_layers", "hidden_size": "hidden_size", "num_attention_heads": "num_heads",
                 "ffn_hidden_size": "ffn_hidden_size", "seq_length": "seq_length",
                 "max_position_embeddings": "max_position_embeddings", "vocab_size": "vocab_size",
                 "num_query_groups": "num_kv_heads",
                 "make_vocab_size_divisible_by": "make_vocab_size_divisible_by"}


def model_from_args(args: argparse.Namespace, plan: Plan) -> ModelSpec:
    """Model dimensions from the arguments, defaulting to ``--model`` or the plan's named built-in model."""
    base_name = args.model or plan.model
    values: dict = {}
    if base_name:
        try:
            values = get_model(base_name).to_dict()
        except InputError:
            if args.model:
                raise
    given = {spec: getattr(args, arg) for arg, spec in _MODEL_FIELDS.items() if getattr(args, arg) is not None}
    values.update(given)
    if "ffn_hidden_size" not in values and "hidden_size" in values:
        values["ffn_hidden_size"] = 4 * values["hidden_size"]
    if "max_position_embeddings" not in values and "seq_length" in values:
        values["max_position_embeddings"] = values["seq_length"]
    values.setdefault("make_vocab_size_divisible_by", 128)
    missing = [a for a, s in _MODEL_FIELDS.items() if s not in values and s != "num_kv_heads"]
    if missing:
        raise InputError("model dimensions missing: give --" + ", --".join(m.replace("_", "-") for m in missing))
    values.update(name=values.get("name", "args"), tied_embeddings=plan.tie_embeddings)
    if values["seq_length"] > values["max_position_embeddings"]:
        raise InputError(f"--seq-length {values['seq_length']} exceeds --max-position-embeddings "
                         f"{values['max_position_embeddings']}")
    return ModelSpec(**values)


def check_against_plan(args: argparse.Namespace, plan: Plan) -> None:
    pairs = (("micro-batch-size", args.micro_batch_size, plan.micro_batch_size),
             ("global-batch-size", args.global_batch_size, plan.global_batch_size),
             ("pipeline-model-parallel-size", args.pipeline_model_parallel_size, plan.num_stages))
    for name, given, planned in pairs:
        if given is not None and given != planned:
            raise InputError(f"--{name} {given} contradicts the plan ({planned})")
    tps = sorted({rep.tp for _, _, rep in plan.replicas()})
    tp = args.tensor_model_parallel_size
    if tp is not None and tps != [tp]:
        raise InputError(f"--tensor-model-parallel-size {tp} contradicts the plan (TP degrees {tps})")


def resolve_plan_options(args: argparse.Namespace, plan: Plan, sailor_format: bool) -> Plan:
    """Our plan format decides every option that changes time or memory (a contradicting flag is an error);
    a Sailor plan_config carries none of them, so there the flags decide (Megatron's defaults)."""
    if sailor_format:
        return replace(plan, tie_embeddings=not args.untie_embeddings_and_output_weights)
    if args.untie_embeddings_and_output_weights and plan.tie_embeddings:
        raise InputError("--untie-embeddings-and-output-weights contradicts the plan (tie_embeddings true)",
                         source=args.sailor_plan)
    return plan


def _check_dropout(args: argparse.Namespace) -> None:
    for name in ("hidden_dropout", "attention_dropout"):
        p = getattr(args, name)
        if not 0.0 <= p < 1.0:
            raise InputError(f"--{name.replace('_', '-')} must be in [0, 1), got {p}")


def parse_config(argv: list[str] | None, world_size: int) -> TrainConfig:
    """Parse and validate everything that can be checked before joining the process group."""
    args = build_parser().parse_args(argv)
    plan, sailor_info = load_any_plan(args.sailor_plan, model=args.model)
    plan = resolve_plan_options(args, plan, sailor_info is not None)
    check_runtime_supports(plan, source=args.sailor_plan)
    _check_dropout(args)
    model = model_from_args(args, plan)
    check_against_plan(args, plan)
    check_model_fits_plan(model, plan)
    if world_size != plan.world_size:
        raise InputError(f"world size {world_size} does not match the plan's {plan.world_size} GPUs "
                         f"(run torchrun with --nproc-per-node/--nnodes giving {plan.world_size} ranks)",
                         source=args.sailor_plan)
    if args.data_path is not None:
        for ext in (".bin", ".idx"):
            if not Path(args.data_path + ext).is_file():
                raise InputError(f"data file not found: {args.data_path + ext}", source="--data-path")
    if args.save_interval < 0 or args.keep_last < 0:
        raise InputError(f"--save-interval and --keep-last must be >= 0, got {args.save_interval}, {args.keep_last}")
    if args.save_interval and not args.save:
        raise InputError("--save-interval needs --save DIR")
    if args.train_iters < 1:
        raise InputError(f"--train-iters must be >= 1, got {args.train_iters}")
    opt = OptimizerConfig(lr=args.lr, weight_decay=args.weight_decay, betas=(args.adam_beta1, args.adam_beta2),
                          eps=args.adam_eps, clip_grad=args.clip_grad)
    return TrainConfig(plan=plan, model=model, optimizer=opt, train_iters=args.train_iters, seed=args.seed,
                       data_path=args.data_path, metrics_file=args.metrics_file, sync_mode=args.grad_sync,
                       log_interval=max(1, args.log_interval), timeout_s=args.distributed_timeout_s,
                       cross_zone_latency_s=args.emulate_cross_zone_latency_s,
                       cross_zone_gbps=args.emulate_cross_zone_gbps, save=args.save, load=args.load,
                       save_interval=args.save_interval, keep_last=args.keep_last,
                       async_save=args.async_save,
                       control_file=args.elastic_control, events_file=args.elastic_events,
                       wait_file=args.elastic_wait, hidden_dropout=args.hidden_dropout,
                       attention_dropout=args.attention_dropout)
