"""Megatron-LM arguments that megatron-sailor does not implement, and one-line argument errors.

Contract: :func:`check_unknown` turns every argument the parser did not recognise into ONE
:class:`InputError` line: ``not implemented by megatron-sailor: --X`` for a Megatron-LM argument (the list
below, with a reason where one helps), ``unrecognized argument: --X`` otherwise. :class:`OneLineParser`
(in ``planner.errors``) makes argparse's own errors (missing/invalid values) one line as well. The list is documented in
``docs/MEGATRON_ARGS.md``; arguments megatron-sailor implements never reach it (the parser consumes them).
"""
from __future__ import annotations

from planner.errors import InputError

# Megatron-LM `pretrain_gpt.py` arguments megatron-sailor does not implement: name -> reason ("" = none).
_REASONS = {
    "rampup-batch-size": "the global batch size is the plan's; re-plan (sailor-elastic) to change it",
    "train-samples": "give --train-iters (the schedule counts samples internally)",
    "lr-decay-samples": "give --lr-decay-iters", "lr-warmup-samples": "give --lr-warmup-iters",
    "virtual-pipeline-model-parallel-size": "the plan fixes the pipeline; no interleaved schedule",
    "num-layers-per-virtual-pipeline-stage": "the plan fixes the pipeline; no interleaved schedule",
    "sequence-parallel": "the runtime has no sequence parallelism",
    "context-parallel-size": "the runtime has no context parallelism",
    "expert-model-parallel-size": "dense models only", "num-experts": "dense models only",
    "data-parallel-size": "data parallelism comes from the plan's replicas",
    "optimizer": "AdamW only", "sgd-momentum": "AdamW only",
}
_OTHERS = """
use-mcore-models use-legacy-models transformer-impl spec kv-channels group-query-attention
position-embedding-type rotary-percent rotary-base rotary-interleaved use-rotary-position-embeddings
rotary-seq-len-interpolation-factor no-position-embedding normalization norm-epsilon layernorm-epsilon
apply-layernorm-1p apply-residual-connection-post-layernorm squared-relu swiglu
onnx-safe bert-no-binary-head num-experts-per-tok moe-router-topk moe-grouped-gemm moe-aux-loss-coeff
disable-bias-linear add-qkv-bias qk-layernorm init-method-std init-method-xavier-uniform
weight-decay-incr-style start-weight-decay end-weight-decay decoupled-lr decoupled-min-lr
override-opt_param-scheduler use-checkpoint-opt_param-scheduler lr-wsd-decay-style lr-wsd-decay-samples
lr-wsd-decay-iters loss-scale initial-loss-scale min-loss-scale loss-scale-window hysteresis
fp32-residual-connection apply-query-key-layer-scaling attention-softmax-in-fp32 accumulate-allreduce-grads-in-fp32
fp16-lm-cross-entropy fp8-format fp8 fp8-margin fp8-interval fp8-amax-history-len fp8-amax-compute-algo
check-for-nan-in-loss-and-grad exit-interval exit-duration-in-mins exit-signal-handler
tensorboard-queue-size tensorboard-log-interval log-params-norm log-num-zeros-in-grad log-throughput
log-progress timing-log-level timing-log-option log-timers-to-tensorboard log-batch-size-to-tensorboard
no-log-learnig-rate-to-tensorboard no-log-loss-scale-to-tensorboard log-validation-ppl-to-tensorboard
log-memory-to-tensorboard log-world-size-to-tensorboard log-loss-scale-to-tensorboard
wandb-entity no-save-optim no-save-rng no-load-optim no-load-rng finetune pretrained-checkpoint
ckpt-format dist-ckpt-strictness use-dist-ckpt auto-detect-ckpt-format ckpt-fully-parallel-save
ckpt-fully-parallel-load ckpt-assume-constant-structure non-persistent-save-interval
non-persistent-ckpt-type exit-on-missing-checkpoint ckpt-step use-checkpoint-args
distributed-backend distributed-timeout-minutes overlap-grad-reduce overlap-param-gather
delay-grad-reduce delay-param-gather-after-embedding ddp-bucket-size ddp-average-in-collective
no-gradient-accumulation-fusion no-async-tensor-model-parallel-allreduce use-cpu-initialization
empty-unused-memory-level standalone-embedding-stage encoder-num-layers decoder-num-layers
num-workers dataloader-type train-data-path valid-data-path test-data-path data-cache-path
mmap-warmup reset-position-ids reset-attention-mask eod-mask-loss no-create-attention-mask-in-dataloader
num-dataset-builder-threads s3-cache-path per-split-data-args-path data-args-path
sentencepiece-model tokenizer-prompt-format tiktoken-pattern vocab-extra-ids
no-masked-softmax-fusion no-bias-gelu-fusion no-bias-swiglu-fusion no-bias-dropout-fusion
no-rope-fusion cross-entropy-loss-fusion use-flash-attn attention-backend
manual-gc manual-gc-interval no-persist-layer-norm tp-comm-overlap
profile profile-step-start profile-step-end profile-ranks use-pytorch-profiler record-memory-history
use-tp-pp-dp-mapping rerun-mode inference-batch-times-seqlen-threshold
adlr-autoresume adlr-autoresume-interval biencoder-projection-dim retro-project-dir
fp16 bf16 hidden-dropout attention-dropout recompute-activations recompute-granularity
recompute-method recompute-num-layers use-distributed-optimizer untie-embeddings-and-output-weights
"""
NOT_IMPLEMENTED: dict[str, str] = {**{name: "" for name in _OTHERS.split()}, **_REASONS}


def not_implemented_message(flag: str) -> str | None:
    """The one-line message for a Megatron-LM argument we lack, None if ``flag`` is not one."""
    name = flag.split("=", 1)[0].lstrip("-")
    if name.replace("_", "-") not in NOT_IMPLEMENTED and name not in NOT_IMPLEMENTED:
        return None
    reason = NOT_IMPLEMENTED.get(name, NOT_IMPLEMENTED.get(name.replace("_", "-"), ""))
    return f"not implemented by megatron-sailor: --{name}" + (f" ({reason})" if reason else "")


def check_unknown(unknown: list[str]) -> None:
    """Raise one :class:`InputError` for the first unrecognised option in ``unknown`` (values are skipped)."""
    for item in unknown:
        if not item.startswith("--"):
            continue
        msg = not_implemented_message(item)
        raise InputError(msg or f"unrecognized argument: {item.split('=', 1)[0]}")
    if unknown:
        raise InputError(f"unrecognized argument: {unknown[0]}")


