"""Megatron-LM's command-line arguments for ``examples/gpt/pretrain_gpt.py`` and their validation
against the plan (pure: no torch.distributed; every problem is one-line :class:`InputError`).

Names, defaults and meanings are Megatron-LM's (``docs/MEGATRON_ARGS.md``); a Megatron-LM argument we do
not implement is refused with ``not implemented by megatron-sailor: --X`` (``megatron_args.NOT_IMPLEMENTED``).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from dataclasses import dataclass, replace

from planner.errors import InputError, OneLineParser
from planner.model import ModelSpec, get_model
from planner.plan import Plan
from planner.sailor_plan import load_any_plan

from megatron_sailor.runtime.capabilities import check_runtime_supports
from megatron_sailor.runtime.mixed_precision import LossScaleConfig
from megatron_sailor.runtime.groups import SYNC_FLAT, SYNC_HIERARCHICAL
from megatron_sailor.runtime.optimizer import OptimizerConfig
from megatron_sailor.runtime.stage_model import check_model_fits_plan
from megatron_sailor.train.loggers import LoggerConfig, check_logger_packages
from megatron_sailor.train.lr_schedule import DECAY_STYLES, LRSchedule, schedule_from_args
from megatron_sailor.train.megatron_args import check_unknown
from megatron_sailor.train.tokenizer import TOKENIZER_TYPES, TokenizerArgs, build_tokenizer


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
    loss_scale: LossScaleConfig = LossScaleConfig()   # fp16 only (Megatron's loss-scale flags)
    # Megatron-LM habits (issue 16): schedule, evaluation, loggers
    lr_schedule: LRSchedule | None = None  # None: constant --lr
    eval_interval: int = 1000
    eval_iters: int = 100
    split: str = "969, 30, 1"
    loggers: LoggerConfig = LoggerConfig()


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(description="Train a GPT model on a megatron-sailor plan (run under torchrun). Arguments "
                      "keep Megatron-LM's names, defaults and meaning; see docs/MEGATRON_ARGS.md.",
                      allow_abbrev=False)
    p.add_argument("--sailor-plan", required=True, help="our plan JSON or a Sailor plan_config JSON")
    g = p.add_argument_group("model (default: the plan's named model, if built in)")
    for name in ("num-layers", "hidden-size", "num-attention-heads", "ffn-hidden-size", "seq-length",
                 "max-position-embeddings", "vocab-size", "num-query-groups"):
        g.add_argument(f"--{name}", type=int, default=None)
    g.add_argument("--make-vocab-size-divisible-by", type=int, default=None)
    g.add_argument("--openai-gelu", action="store_true", help="tanh-form GELU (GPT-2's), as Megatron-LM's flag")
    g.add_argument("--activation", choices=("gelu", "gelu_tanh", "relu"), default=None,
                   help="MLP activation (megatron-sailor's; default gelu; relu for OPT checkpoints)")
    g.add_argument("--model", default=None, help="built-in model name to start from (e.g. tiny, opt-350m)")
    b = p.add_argument_group("batch / parallelism (must agree with the plan when given)")
    for name in ("micro-batch-size", "global-batch-size", "tensor-model-parallel-size",
                 "pipeline-model-parallel-size"):
        b.add_argument(f"--{name}", type=int, default=None)
    t = p.add_argument_group("training")
    t.add_argument("--train-iters", type=int, required=True, help="total iterations to train")
    _add_optimizer_args(p)
    t.add_argument("--seed", type=int, default=1234, help="random seed (weights, mock data)")
    d = t.add_mutually_exclusive_group(required=True)
    d.add_argument("--mock-data", action="store_true", help="synthetic learnable sequences instead of a dataset")
    d.add_argument("--data-path", nargs="+", default=None, help="prefix of a megatron .bin/.idx pair "
                   "(one prefix; blends of several are not implemented)")
    t.add_argument("--data-impl", choices=("mmap",), default="mmap", help="accepted for old scripts (mmap only)")
    t.add_argument("--metrics-file", default=None)
    t.add_argument("--grad-sync", choices=(SYNC_HIERARCHICAL, SYNC_FLAT), default=None,
                   help="gradient sync across replicas (default hierarchical); a stage whose plan entry names "
                   "its grad_sync uses that one, and a contradicting flag is an error")
    t.add_argument("--log-interval", type=int, default=100, help="print a training line every N iterations")
    _add_eval_tokenizer_logger_args(p)
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
    m = p.add_argument_group("mixed precision (Megatron's names; our plan's 'precision' decides, a Sailor plan_config takes them)")
    pm = m.add_mutually_exclusive_group()
    pm.add_argument("--bf16", action="store_true")
    pm.add_argument("--fp16", action="store_true")
    m.add_argument("--use-distributed-optimizer", action="store_true",
                   help="shard fp32 main weights and AdamW states over each stage's replicas (our plan's "
                   "'distributed_optimizer' decides; a Sailor plan_config takes the flag)")
    m.add_argument("--loss-scale", type=float, default=None, help="static fp16 loss scale (default: dynamic)")
    m.add_argument("--initial-loss-scale", type=float, default=2.0 ** 32)
    m.add_argument("--min-loss-scale", type=float, default=1.0)
    m.add_argument("--loss-scale-window", type=int, default=1000)
    m.add_argument("--hysteresis", type=int, default=2)
    rc = p.add_argument_group("activation recomputation (Megatron's names; our plan decides, a Sailor plan_config takes them)")
    rc.add_argument("--recompute-granularity", choices=("full", "selective"), default=None)
    rc.add_argument("--recompute-method", choices=("uniform", "block"), default=None)
    rc.add_argument("--recompute-num-layers", type=int, default=None)
    rc.add_argument("--recompute-activations", action="store_true", help="= --recompute-granularity selective")
    e = p.add_argument_group("emulation (one machine standing in for several zones; demos and tests)")
    e.add_argument("--emulate-cross-zone-latency-s", type=float, default=0.0,
                   help="extra seconds per message between ranks of different zones")
    e.add_argument("--emulate-cross-zone-gbps", type=float, default=0.0,
                   help="bandwidth of the emulated cross-zone link in Gbit/s (0 = unlimited)")
    return p


def _add_optimizer_args(p: argparse.ArgumentParser) -> None:
    o = p.add_argument_group("learning rate and optimizer (Megatron-LM's defaults; AdamW)")
    o.add_argument("--lr", type=float, default=None, help="peak learning rate (required, as in Megatron-LM)")
    o.add_argument("--min-lr", type=float, default=0.0, help="learning rate at and after the end of the decay")
    o.add_argument("--lr-decay-style", choices=DECAY_STYLES, default="linear", help="decay after the warm-up")
    o.add_argument("--lr-decay-iters", type=int, default=None, help="iterations to decay over "
                   "(default --train-iters)")
    o.add_argument("--lr-warmup-iters", type=int, default=0, help="linear warm-up iterations")
    o.add_argument("--lr-warmup-fraction", type=float, default=None, help="warm-up as a fraction of the decay")
    o.add_argument("--lr-warmup-init", type=float, default=0.0, help="learning rate at the start of the warm-up")
    o.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (not on biases/norms)")
    o.add_argument("--clip-grad", type=float, default=1.0, help="global gradient-norm clip (0: off)")
    o.add_argument("--adam-beta1", type=float, default=0.9)
    o.add_argument("--adam-beta2", type=float, default=0.999)
    o.add_argument("--adam-eps", type=float, default=1e-8)


def _add_eval_tokenizer_logger_args(p: argparse.ArgumentParser) -> None:
    v = p.add_argument_group("validation")
    v.add_argument("--eval-interval", type=int, default=1000, help="validation loss every N iterations "
                   "(and after the last one)")
    v.add_argument("--eval-iters", type=int, default=100, help="global batches per validation (0: none)")
    v.add_argument("--split", default="969, 30, 1", help="train,validation,test weights over the documents")
    k = p.add_argument_group("tokenizer (gives --vocab-size when that is not set)")
    k.add_argument("--tokenizer-type", choices=TOKENIZER_TYPES, default=None)
    k.add_argument("--vocab-file", default=None, help="GPT2BPETokenizer: vocab.json")
    k.add_argument("--merge-file", default=None, help="GPT2BPETokenizer: merges.txt")
    k.add_argument("--tokenizer-model", default=None, help="HuggingFaceTokenizer: folder with tokenizer.json")
    g = p.add_argument_group("logging")
    g.add_argument("--tensorboard-dir", default=None, help="write TensorBoard scalars here (extra 'tensorboard')")
    g.add_argument("--wandb-project", default=None, help="W&B project (extra 'wandb'; offline without an API key)")
    g.add_argument("--wandb-exp-name", default=None, help="W&B run name (required with --wandb-project)")
    g.add_argument("--wandb-save-dir", default=None, help="W&B files (default SAVE/wandb)")


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
    if args.openai_gelu or args.activation:
        if args.openai_gelu and args.activation not in (None, "gelu_tanh"):
            raise InputError(f"--openai-gelu contradicts --activation {args.activation}")
        values["activation"] = "gelu_tanh" if args.openai_gelu else args.activation
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
    flag_precision = "bf16" if args.bf16 else "fp16" if args.fp16 else None
    recompute = _flag_recompute(args)
    if sailor_format:
        g, m, n = recompute or (None, None, None)
        try:
            return replace(plan, tie_embeddings=not args.untie_embeddings_and_output_weights,
                           precision=flag_precision or "fp32", recompute_granularity=g, recompute_method=m,
                           recompute_num_layers=n, distributed_optimizer=args.use_distributed_optimizer)
        except InputError as exc:
            raise InputError(f"recompute flags: {exc}", source=args.sailor_plan) from None
    if recompute is not None and recompute != plan.recompute:
        raise InputError(f"--recompute-* flags {recompute} contradict the plan's recompute {plan.recompute}",
                         source=args.sailor_plan)
    if args.untie_embeddings_and_output_weights and plan.tie_embeddings:
        raise InputError("--untie-embeddings-and-output-weights contradicts the plan (tie_embeddings true)",
                         source=args.sailor_plan)
    for s, st in enumerate(plan.stages):
        if args.grad_sync and st.grad_sync is not None and st.grad_sync != args.grad_sync:
            raise InputError(f"--grad-sync {args.grad_sync} contradicts the plan (stages[{s}].grad_sync "
                             f"'{st.grad_sync}')", source=args.sailor_plan)
    if args.use_distributed_optimizer and not plan.distributed_optimizer:
        raise InputError("--use-distributed-optimizer contradicts the plan (distributed_optimizer false)",
                         source=args.sailor_plan)
    if flag_precision and flag_precision != plan.precision:
        raise InputError(f"--{flag_precision} contradicts the plan (precision '{plan.precision}')",
                         source=args.sailor_plan)
    return plan


def _flag_recompute(args: argparse.Namespace) -> tuple[str | None, str | None, int | None] | None:
    """(granularity, method, layers) the recompute flags ask for; None when none is given."""
    g = args.recompute_granularity or ("selective" if args.recompute_activations else None)
    if g is None and args.recompute_method is None and args.recompute_num_layers is None:
        return None
    if g == "full":
        return g, args.recompute_method, args.recompute_num_layers if args.recompute_num_layers is not None else 1
    return g, args.recompute_method, args.recompute_num_layers


def _loss_scale(args: argparse.Namespace, plan: Plan) -> LossScaleConfig:
    cfg = LossScaleConfig(static=args.loss_scale, initial=args.initial_loss_scale, minimum=args.min_loss_scale,
                          window=args.loss_scale_window, hysteresis=args.hysteresis)
    if plan.precision == "fp16" and cfg.problems():
        raise InputError(cfg.problems()[0])
    return cfg


def _check_dropout(args: argparse.Namespace) -> None:
    for name in ("hidden_dropout", "attention_dropout"):
        p = getattr(args, name)
        if not 0.0 <= p < 1.0:
            raise InputError(f"--{name.replace('_', '-')} must be in [0, 1), got {p}")


def parse_config(argv: list[str] | None, world_size: int) -> TrainConfig:
    """Parse and validate everything that can be checked before joining the process group."""
    args, unknown = build_parser().parse_known_args(argv)
    check_unknown(unknown)
    _apply_tokenizer(args)
    plan, sailor_info = load_any_plan(args.sailor_plan, model=args.model)
    plan = resolve_plan_options(args, plan, sailor_info is not None)
    check_runtime_supports(plan, source=args.sailor_plan)
    _check_dropout(args)
    loss_scale = _loss_scale(args, plan)
    model = model_from_args(args, plan)
    check_against_plan(args, plan)
    check_model_fits_plan(model, plan)
    if world_size != plan.world_size:
        raise InputError(f"world size {world_size} does not match the plan's {plan.world_size} GPUs "
                         f"(run torchrun with --nproc-per-node/--nnodes giving {plan.world_size} ranks)",
                         source=args.sailor_plan)
    if args.data_path is not None:
        if len(args.data_path) != 1:
            raise InputError("not implemented by megatron-sailor: --data-path with several prefixes (blending)")
        args.data_path = args.data_path[0]
        for ext in (".bin", ".idx"):
            if not Path(args.data_path + ext).is_file():
                raise InputError(f"data file not found: {args.data_path + ext}", source="--data-path")
    if args.save_interval < 0 or args.keep_last < 0:
        raise InputError(f"--save-interval and --keep-last must be >= 0, got {args.save_interval}, {args.keep_last}")
    if args.save_interval and not args.save:
        raise InputError("--save-interval needs --save DIR")
    if args.train_iters < 1:
        raise InputError(f"--train-iters must be >= 1, got {args.train_iters}")
    extras = _megatron_extras(args, plan)
    opt = OptimizerConfig(lr=args.lr, weight_decay=args.weight_decay, betas=(args.adam_beta1, args.adam_beta2),
                          eps=args.adam_eps, clip_grad=args.clip_grad)
    return TrainConfig(plan=plan, model=model, optimizer=opt, train_iters=args.train_iters, seed=args.seed,
                       data_path=args.data_path, metrics_file=args.metrics_file,
                       sync_mode=args.grad_sync or SYNC_HIERARCHICAL,
                       log_interval=max(1, args.log_interval), timeout_s=args.distributed_timeout_s,
                       cross_zone_latency_s=args.emulate_cross_zone_latency_s,
                       cross_zone_gbps=args.emulate_cross_zone_gbps, save=args.save, load=args.load,
                       save_interval=args.save_interval, keep_last=args.keep_last,
                       async_save=args.async_save,
                       control_file=args.elastic_control, events_file=args.elastic_events,
                       wait_file=args.elastic_wait, hidden_dropout=args.hidden_dropout,
                       attention_dropout=args.attention_dropout, loss_scale=loss_scale, **extras)


def _apply_tokenizer(args: argparse.Namespace) -> None:
    """A named tokenizer sets --vocab-size (when not given) and must cover a given one."""
    if args.tokenizer_type is None and not (args.vocab_file or args.merge_file or args.tokenizer_model):
        return
    kind = args.tokenizer_type or ("HuggingFaceTokenizer" if args.tokenizer_model else None)
    tok = build_tokenizer(TokenizerArgs(kind, args.vocab_file, args.merge_file, args.tokenizer_model,
                                        args.vocab_size))
    if args.vocab_size is None:
        args.vocab_size = tok.vocab_size
    elif args.vocab_size < tok.vocab_size:
        raise InputError(f"--vocab-size {args.vocab_size} is smaller than the tokenizer's {tok.vocab_size}")


def _megatron_extras(args: argparse.Namespace, plan: Plan) -> dict:
    """Schedule, validation and logger settings (TrainConfig fields), validated."""
    if args.lr is None:
        raise InputError("--lr is required (Megatron-LM has no default learning rate)")
    for name in ("eval_interval", "eval_iters", "log_interval"):
        if getattr(args, name) < (1 if name != "eval_iters" else 0):
            raise InputError(f"--{name.replace('_', '-')} must be >= {1 if name != 'eval_iters' else 0}, "
                             f"got {getattr(args, name)}")
    from megatron_sailor.train.datasets import parse_split
    parse_split(args.split)
    loggers = LoggerConfig(args.tensorboard_dir, args.wandb_project, args.wandb_exp_name, args.wandb_save_dir)
    check_logger_packages(loggers)
    schedule = schedule_from_args(args.lr, args.min_lr, args.lr_decay_style, args.train_iters,
                                  plan.global_batch_size, args.lr_warmup_iters, args.lr_warmup_fraction,
                                  args.lr_decay_iters, args.lr_warmup_init)
    return dict(lr_schedule=schedule, eval_interval=args.eval_interval, eval_iters=args.eval_iters,
                split=args.split, loggers=loggers)
