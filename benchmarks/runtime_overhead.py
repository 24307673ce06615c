"""Runtime overhead: our runtime vs plain megatron-core on the same homogeneous plan (PP 2 x DP 2, tiny GPT),
in four variants: fp32 / bf16 x replicated optimizer / distributed optimizer.

    python benchmarks/runtime_overhead.py [--blocks 100]   # launches itself under torchrun on 4 CPU ranks

All eight runtimes live in one launch (same processes, same machine state) and run side by side in blocks
after a warm-up: block ``b`` runs, for each variant, ``ITERS_PER_BLOCK`` iterations of ours and of
megatron-core's, ours first in even blocks and megatron-core first in odd ones (so neither side always
follows the other). Iteration times are rank 0's. The table gives each side's median / p10 / p90, the ratio
of the medians (the goal: <= 1.05) and its 95% block-bootstrap confidence interval: whole blocks are
resampled with replacement, ours and megatron-core's iterations of a block together (they ran next to each
other, under the same machine load), and the interval is the 2.5-97.5 percentile range of the resampled
ratio of medians (:func:`ratio_ci`; none below ``MIN_CI_BLOCKS`` blocks, e.g. the README test's
``--blocks 2``). The goal is shown for a variant when the interval's upper end is <= 1.05.
The baseline is megatron-core's own pieces: ``parallel_state`` groups, its
non-interleaved 1F1B schedule (``forward_backward_pipelining_without_interleaving``), its
``DistributedDataParallel`` (gradients reduced in fp32) and its optimizer from ``get_megatron_optimizer``:
``FP32Optimizer`` / ``Float16OptimizerWithFloat16Params`` (bf16, ``Float16Module``) or ``DistributedOptimizer``
(gradient reduce-scatter, parameter all-gather), each wrapping torch AdamW (megatron's fused Adam needs
apex / TE, absent on CPU) with megatron's global-norm clipping. megatron-core 0.16.1's optimizers do not run
on a CPU-only torch as shipped: they create tensors with ``device='cuda'`` (``found_inf``, ``_scale_one``,
the grad-norm buffers in ``clip_grads`` and ``utils.local_multi_tensor_l2_norm``), call
``torch.cuda.current_device()``, and the DistributedOptimizer refuses parameters whose ``Tensor.type()`` is
not ``torch.cuda.FloatTensor`` / ``HalfTensor`` / ``BFloat16Tensor``. :func:`_megatron_optimizer_on_cpu`
routes those factories to the CPU (in the six megatron modules that create them) and reports CUDA type
names to those checks, only around the baseline's own calls; no arithmetic changes.
It also prints the bytes that cross zones per iteration for a 2-zone plan (DP 4 over zones a,a,b,b) with
flat vs hierarchical sync (ring model, ``megatron_sailor.runtime.grad_sync.ring_cross_zone_bytes``).
The last line is ``ratio ours/megatron median iteration time (95% CI): fp32 X (LO-HI), bf16 ..., fp32+distopt ...,
bf16+distopt ...``; the one before it says for which variants the goal is shown.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import statistics
import types
import subprocess
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

NPROC = 4
WARMUP_ITERS = 5
BLOCKS = 100
ITERS_PER_BLOCK = 5
GOAL_RATIO = 1.05
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 4000
MIN_CI_BLOCKS = 10            # fewer blocks: no interval (a bootstrap over a handful of blocks means nothing)
VARIANTS = (("fp32", False), ("bf16", False), ("fp32", True), ("bf16", True))   # (precision, distributed optimizer)
_CUDA_FACTORY_MODULES = ("megatron.core.optimizer", "megatron.core.optimizer.optimizer",
                         "megatron.core.optimizer.distrib_optimizer", "megatron.core.optimizer.clip_grads",
                         "megatron.core.optimizer.grad_scaler", "megatron.core.utils")
_FACTORIES = ("zeros", "tensor", "empty", "ones", "full", "arange")


def _variant_name(precision: str, dist_opt: bool) -> str:
    return precision + ("+distopt" if dist_opt else "")


class _TorchFactoriesOnCpu(types.ModuleType):
    """``torch`` for one megatron module: tensor factories asked for a CUDA device get the CPU."""

    def __init__(self) -> None:
        super().__init__("torch")

    def __getattr__(self, name: str):  # noqa: ANN204
        import torch
        fn = getattr(torch, name)
        if name not in _FACTORIES:
            return fn

        def on_cpu(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            dev = kwargs.get("device")
            if dev is not None and (isinstance(dev, int) or str(dev).startswith("cuda")):
                kwargs["device"] = "cpu"
            return fn(*args, **kwargs)
        return on_cpu


@contextlib.contextmanager
def _megatron_optimizer_on_cpu():  # noqa: ANN202
    """Benchmark-only shims that let megatron-core's optimizers run on a CPU-only torch (module docstring)."""
    import torch

    from patches.megatron_cpu import cuda_calls_on_cpu
    saved_type = torch.Tensor.type
    saved_torch = {m: importlib.import_module(m).torch for m in _CUDA_FACTORY_MODULES}

    def cuda_type(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        name = saved_type(self, *args, **kwargs)
        if args or kwargs or not isinstance(name, str) or name.startswith("torch.cuda."):
            return name
        return name.replace("torch.", "torch.cuda.", 1)
    torch.Tensor.type = cuda_type
    for m in _CUDA_FACTORY_MODULES:
        importlib.import_module(m).torch = _TorchFactoriesOnCpu()
    try:
        with cuda_calls_on_cpu():
            yield
    finally:
        torch.Tensor.type = saved_type
        for m, t in saved_torch.items():
            importlib.import_module(m).torch = t


def homogeneous_plan_dict(zones: tuple[str, ...] = ("z-a", "z-a")) -> dict:
    reps = [{"gpu_type": "cpu", "tp": 1, "zone": z} for z in zones]
    return {"schema_version": 1, "num_layers": 4, "micro_batch_size": 2, "global_batch_size": 16,
            "stages": [{"first_layer": 0, "num_layers": 2, "replicas": reps},
                       {"first_layer": 2, "num_layers": 2, "replicas": reps}]}


def two_zone_plan_dict() -> dict:
    reps = [{"gpu_type": "cpu", "tp": 1, "zone": z} for z in ("us-a", "us-a", "us-b", "us-b")]
    return {"schema_version": 1, "num_layers": 4, "micro_batch_size": 2, "global_batch_size": 16,
            "stages": [{"first_layer": 0, "num_layers": 4, "replicas": reps}]}


class MegatronBaseline:
    """Plain megatron-core PP x DP training step on the same model and data (one precision / optimizer)."""

    def __init__(self, spec, plan, data, seed: int, precision: str = "fp32", dist_opt: bool = False) -> None:  # noqa: ANN001
        import torch
        from megatron.core import parallel_state as ps
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.models.gpt.gpt_model import GPTModel
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.transformer.module import Float16Module

        from megatron_sailor.runtime.stage_model import _transformer_config, padded_vocab_size
        if not ps.model_parallel_is_initialized():
            ps.initialize_model_parallel(tensor_model_parallel_size=1,
                                         pipeline_model_parallel_size=plan.num_stages)
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        config = _transformer_config(spec, spec.num_layers, 1, dtype=dtype)
        config.pipeline_model_parallel_size = plan.num_stages
        config.pipeline_dtype = dtype
        model = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=padded_vocab_size(spec),
                         max_sequence_length=spec.max_position_embeddings,
                         pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
                         share_embeddings_and_output_weights=False)
        torch.manual_seed(seed)
        with torch.no_grad():                       # the config's init is zeros (ours overwrites it too)
            for p in model.parameters():
                p.normal_(0.0, 0.02)
        if precision == "bf16":
            model = Float16Module(config, model)
        self.ddp = DistributedDataParallel(config, DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=dist_opt), model)
        self.optimizer = get_megatron_optimizer(OptimizerConfig(
            optimizer="adam", lr=1e-3, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8,
            clip_grad=1.0, bf16=precision == "bf16", use_distributed_optimizer=dist_opt), [self.ddp])
        self.fb = get_forward_backward_func()
        self.spec, self.plan, self.data = spec, plan, data
        self.dp_rank = ps.get_data_parallel_rank()

    def _forward_step(self, data_iterator, model):  # noqa: ANN001, ANN202
        from megatron_sailor.runtime.schedule import causal_mask
        batch = next(data_iterator)
        pos = __import__("torch").arange(self.spec.seq_length).unsqueeze(0).expand(batch.tokens.shape[0], -1)
        out = model(batch.tokens, pos, causal_mask(self.spec.seq_length), labels=batch.labels)

        def loss_func(output):  # noqa: ANN001, ANN202
            loss = output.float().mean()
            return loss, {"lm loss": loss.detach()}
        return out, loss_func

    def train_step(self, iteration: int) -> float:
        from megatron_sailor.runtime.data import microbatch
        start = time.perf_counter()
        m = self.plan.microbatch_counts[self.dp_rank]
        first = self.dp_rank * m
        batches = iter([microbatch(self.data, iteration, self.plan.global_batch_size,
                                   self.plan.micro_batch_size, first + k) for k in range(m)])
        self.ddp.zero_grad_buffer()
        self.optimizer.zero_grad()
        self.fb(forward_step_func=self._forward_step, data_iterator=batches, model=[self.ddp],
                num_microbatches=m, seq_length=self.spec.seq_length,
                micro_batch_size=self.plan.micro_batch_size)
        self.ddp.finish_grad_sync()
        self.optimizer.step()          # megatron's: grad norm, clip, AdamW (+ param all-gather when sharded)
        return time.perf_counter() - start


def _measure(step, iters: int) -> list[float]:  # noqa: ANN001
    return [step() for _ in range(iters)]


def worker() -> None:
    import dataclasses

    import torch
    import torch.distributed as dist

    from megatron_sailor.runtime.data import MockTokens
    from megatron_sailor.runtime.distributed import env_from_torchrun, init_distributed
    from megatron_sailor.runtime.rank_runtime import RankRuntime, RunConfig
    from patches import apply_cpu_patches
    from patches.megatron_cpu import apply_baseline_patches
    from planner.model import get_model
    from planner.plan import Plan

    torch.set_num_threads(1)
    apply_cpu_patches()
    apply_baseline_patches()
    env = env_from_torchrun()
    init_distributed(env, timeout_s=120)
    spec = get_model("tiny")
    data = MockTokens(seed=1, seq_length=spec.seq_length, vocab_size=spec.vocab_size)
    plan = Plan.from_dict(homogeneous_plan_dict())
    steps = {}
    for precision, dist_opt in VARIANTS:
        name = _variant_name(precision, dist_opt)
        with _megatron_optimizer_on_cpu():   # the first one sets megatron's parallel_state globals
            theirs = MegatronBaseline(spec, plan, data, seed=1, precision=precision, dist_opt=dist_opt)
        ours = RankRuntime(dataclasses.replace(plan, precision=precision, distributed_optimizer=dist_opt), spec,
                           env.rank, data, RunConfig(seed=1, sync_mode="flat"))
        steps[name] = _steppers(ours, theirs)
    for name in steps:
        for side in ("ours", "theirs"):
            _measure(steps[name][side], WARMUP_ITERS)
    times = {name: {"ours": [], "theirs": []} for name in steps}     # one list of iteration times per block
    for block in range(int(os.environ.get("SAILOR_OVERHEAD_BLOCKS", BLOCKS))):
        for name in steps:
            for side in ("ours", "theirs") if block % 2 == 0 else ("theirs", "ours"):
                dist.barrier()
                times[name][side].append(_measure(steps[name][side], ITERS_PER_BLOCK))
    zone_bytes = {}
    for mode in ("flat", "hierarchical"):
        rt = RankRuntime(Plan.from_dict(two_zone_plan_dict()), spec, env.rank, data,
                         RunConfig(seed=1, sync_mode=mode))
        total = torch.tensor([rt.grad_sync.cross_zone_bytes()], dtype=torch.float64)
        dist.all_reduce(total)
        zone_bytes[mode] = int(total[0])
    if env.rank == 0:
        print("RESULT " + json.dumps({"times": times, "zone_bytes": zone_bytes}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def _steppers(ours, theirs) -> dict:  # noqa: ANN001
    it = {"ours": 0, "theirs": 0}

    def step_ours() -> float:
        it["ours"] += 1
        return ours.train_step(it["ours"]).iteration_time_s

    def step_theirs() -> float:
        it["theirs"] += 1
        with _megatron_optimizer_on_cpu():
            return theirs.train_step(it["theirs"])
    return {"ours": step_ours, "theirs": step_theirs}


def ratio_of_medians(ours_blocks: list[list[float]], theirs_blocks: list[list[float]]) -> float:
    """Median of all of ours' iteration times over the median of all of megatron-core's."""
    return statistics.median(t for b in ours_blocks for t in b) / statistics.median(t for b in theirs_blocks for t in b)


def ratio_ci(ours_blocks: list[list[float]], theirs_blocks: list[list[float]], confidence: float = CONFIDENCE,
             resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Block-bootstrap ``confidence`` interval of :func:`ratio_of_medians`: draw as many blocks as were run,
    with replacement, the same block indices for both sides (a block's two halves ran side by side), and take
    the percentile interval of the resampled ratios. Blocks must hold equal numbers of iterations."""
    import numpy as np
    ours, theirs = np.asarray(ours_blocks, dtype=float), np.asarray(theirs_blocks, dtype=float)
    if ours.ndim != 2 or ours.shape[0] != theirs.shape[0] or ours.shape[0] < 1:
        raise ValueError(f"need the same number (>= 1) of equal-size blocks per side, got {ours.shape} {theirs.shape}")
    pick = np.random.default_rng(seed).integers(0, ours.shape[0], size=(resamples, ours.shape[0]))
    ratios = np.median(ours[pick].reshape(resamples, -1), axis=1) / np.median(theirs[pick].reshape(resamples, -1),
                                                                              axis=1)
    tail = (1.0 - confidence) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)


def report(result: dict) -> None:
    print(f"{'variant':<14}{'runtime':<22}{'median ms':>10}{'p10 ms':>9}{'p90 ms':>9}{'iters':>7}{'ours/megatron':>15}"
          f"{'95% CI':>16}")
    blocks = len(next(iter(result["times"].values()))["ours"])
    ratios, cis = {}, {}
    for variant, sides in result["times"].items():
        ours, theirs = sides["ours"], sides["theirs"]
        ratios[variant] = ratio_of_medians(ours, theirs)
        cis[variant] = ratio_ci(ours, theirs) if blocks >= MIN_CI_BLOCKS else None
        ci = f"{cis[variant][0]:>9.3f}-{cis[variant][1]:.3f}" if cis[variant] else f"{'-':>15}"
        for name, blocks_of in (("megatron-sailor", ours), ("megatron-core plain", theirs)):
            ts = [t for b in blocks_of for t in b]
            q = statistics.quantiles(ts, n=10)
            ratio = f"{ratios[variant]:>15.3f}{ci}" if name == "megatron-sailor" else ""
            print(f"{variant:<14}{name:<22}{statistics.median(ts) * 1e3:>10.2f}{q[0] * 1e3:>9.2f}"
                  f"{q[-1] * 1e3:>9.2f}{len(ts):>7}{ratio}")
    zb = result["zone_bytes"]
    print(f"cross-zone bytes per iteration, 2-zone plan (DP 4 over zones a,a,b,b, tiny GPT): "
          f"flat ring {zb['flat']:,} B, hierarchical {zb['hierarchical']:,} B")
    if blocks < MIN_CI_BLOCKS:
        print(f"goal ours/megatron <= {GOAL_RATIO}: {blocks} blocks are too few for a confidence interval "
              f"(at least {MIN_CI_BLOCKS}); nothing shown")
    else:
        shown = [v for v, ci in cis.items() if ci[1] <= GOAL_RATIO]
        print(f"goal ours/megatron <= {GOAL_RATIO} shown (95% CI upper end <= {GOAL_RATIO}, {blocks} blocks of "
              f"{ITERS_PER_BLOCK} iterations a side) for: {', '.join(shown) or 'none'}; not shown for: "
              f"{', '.join(v for v in cis if v not in shown) or 'none'}")
    print("ratio ours/megatron median iteration time (95% CI): "
          + ", ".join(f"{v} {r:.3f}" + (f" ({cis[v][0]:.3f}-{cis[v][1]:.3f})" if cis[v] else " (-)")
                      for v, r in ratios.items()))


def main() -> int:
    if "WORLD_SIZE" in os.environ:
        worker()
        return 0
    import argparse
    ap = argparse.ArgumentParser(description="ours vs plain megatron-core, 4 CPU ranks, median iteration times")
    ap.add_argument("--blocks", type=int, default=BLOCKS,
                    help=f"timed blocks of {ITERS_PER_BLOCK} iterations per runtime and variant (default {BLOCKS})")
    args = ap.parse_args()
    if args.blocks < 2:
        ap.error(f"--blocks must be at least 2, got {args.blocks}")
    from planner.ports import free_port
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="FATAL", SAILOR_OVERHEAD_BLOCKS=str(args.blocks))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(NPROC), "--master-addr",
           "127.0.0.1", "--master-port", str(port), os.path.abspath(__file__)]
    from planner.progress import status
    with status(f"ours and megatron-core, {len(VARIANTS)} variants x {args.blocks} blocks on {NPROC} CPU ranks"):
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600 + 30 * args.blocks)
        except subprocess.TimeoutExpired:
            print(f"error: benchmark launch did not finish in {600 + 30 * args.blocks} s", file=sys.stderr)
            return 1
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        print(proc.stdout[-3000:] + proc.stderr[-5000:], file=sys.stderr)
        print("error: benchmark launch failed", file=sys.stderr)
        return 1
    report(json.loads(lines[-1][len("RESULT "):]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
