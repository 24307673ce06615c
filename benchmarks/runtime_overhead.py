"""Runtime overhead: our runtime vs plain megatron-core on the same homogeneous plan (PP 2 x DP 2, tiny GPT).

    python benchmarks/runtime_overhead.py            # launches itself under torchrun on 4 CPU ranks

Both run in one launch (same processes, same machine state), in alternating blocks of iterations after a
warm-up. The baseline is megatron-core's own pieces: ``parallel_state`` groups, its non-interleaved 1F1B
schedule (``forward_backward_pipelining_without_interleaving``), its ``DistributedDataParallel`` gradient
all-reduce, then a global-norm clip and torch AdamW (megatron's fused optimizers need apex/TE). It also
prints the bytes that cross zones per iteration for a 2-zone plan (DP 4 over zones a,a,b,b) with flat vs
hierarchical sync (ring model, see ``megatron_sailor.runtime.grad_sync.ring_cross_zone_bytes``).
The last line is ``ratio ours/megatron median iteration time: X``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

NPROC = 4
WARMUP_ITERS = 5
BLOCKS = 6
ITERS_PER_BLOCK = 10


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
    """Plain megatron-core PP x DP training step on the same model and data."""

    def __init__(self, spec, plan, data, seed: int) -> None:  # noqa: ANN001
        import torch
        from megatron.core import parallel_state as ps
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.models.gpt.gpt_model import GPTModel
        from megatron.core.pipeline_parallel import get_forward_backward_func

        from megatron_sailor.runtime.stage_model import _transformer_config, padded_vocab_size
        ps.initialize_model_parallel(tensor_model_parallel_size=1,
                                     pipeline_model_parallel_size=plan.num_stages)
        config = _transformer_config(spec, spec.num_layers, 1)
        config.pipeline_model_parallel_size = plan.num_stages
        config.pipeline_dtype = torch.float32
        model = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=padded_vocab_size(spec),
                         max_sequence_length=spec.max_position_embeddings,
                         pre_process=ps.is_pipeline_first_stage(), post_process=ps.is_pipeline_last_stage(),
                         share_embeddings_and_output_weights=False)
        self.ddp = DistributedDataParallel(config, DistributedDataParallelConfig(
            overlap_grad_reduce=False, use_distributed_optimizer=False), model)
        self.optimizer = torch.optim.AdamW(self.ddp.parameters(), lr=1e-3, foreach=False)
        self.fb = get_forward_backward_func()
        self.spec, self.plan, self.data = spec, plan, data
        self.dp_rank = ps.get_data_parallel_rank()
        self.world_group = None

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
        import torch
        import torch.distributed as dist

        from megatron_sailor.runtime.data import microbatch
        start = time.perf_counter()
        m = self.plan.microbatch_counts[self.dp_rank]
        first = self.dp_rank * m
        batches = iter([microbatch(self.data, iteration, self.plan.global_batch_size,
                                   self.plan.micro_batch_size, first + k) for k in range(m)])
        self.ddp.zero_grad_buffer()
        self.fb(forward_step_func=self._forward_step, data_iterator=batches, model=[self.ddp],
                num_microbatches=m, seq_length=self.spec.seq_length,
                micro_batch_size=self.plan.micro_batch_size)
        self.ddp.finish_grad_sync()
        params = list(self.ddp.parameters())
        for p in params:
            p.grad = p.main_grad
        sq = torch.tensor([sum(float(p.grad.double().pow(2).sum()) for p in params) if self.dp_rank == 0
                           else 0.0], dtype=torch.float64)
        dist.all_reduce(sq)
        norm = float(sq[0]) ** 0.5
        if norm > 1.0:
            for p in params:
                p.grad.mul_(1.0 / (norm + 1e-6))
        self.optimizer.step()
        return time.perf_counter() - start


def _measure(step, iters: int) -> list[float]:  # noqa: ANN001
    return [step() for _ in range(iters)]


def worker() -> None:
    import torch
    import torch.distributed as dist

    from megatron_sailor.runtime.data import MockTokens
    from megatron_sailor.runtime.distributed import env_from_torchrun, init_distributed
    from megatron_sailor.runtime.rank_runtime import RankRuntime, RunConfig
    from patches import apply_cpu_patches
    from patches.megatron_cpu import apply_baseline_patches, cuda_calls_on_cpu
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
    with cuda_calls_on_cpu():  # first: parallel_state.initialize_model_parallel sets megatron's globals
        theirs = MegatronBaseline(spec, plan, data, seed=1)
    ours = RankRuntime(plan, spec, env.rank, data, RunConfig(seed=1, sync_mode="flat"))
    it = {"ours": 0, "theirs": 0}

    def step_ours() -> float:
        it["ours"] += 1
        return ours.train_step(it["ours"]).iteration_time_s

    def step_theirs() -> float:
        it["theirs"] += 1
        with cuda_calls_on_cpu():
            return theirs.train_step(it["theirs"])
    _measure(step_ours, WARMUP_ITERS)
    _measure(step_theirs, WARMUP_ITERS)
    times = {"ours": [], "theirs": []}
    for _ in range(BLOCKS):
        dist.barrier()
        times["ours"] += _measure(step_ours, ITERS_PER_BLOCK)
        dist.barrier()
        times["theirs"] += _measure(step_theirs, ITERS_PER_BLOCK)
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


def report(result: dict) -> None:
    ours, theirs = result["times"]["ours"], result["times"]["theirs"]
    print(f"{'runtime':<22}{'median ms':>10}{'p10 ms':>9}{'p90 ms':>9}{'iters':>7}")
    for name, ts in (("megatron-sailor", ours), ("megatron-core plain", theirs)):
        q = statistics.quantiles(ts, n=10)
        print(f"{name:<22}{statistics.median(ts) * 1e3:>10.2f}{q[0] * 1e3:>9.2f}{q[-1] * 1e3:>9.2f}{len(ts):>7}")
    zb = result["zone_bytes"]
    print(f"cross-zone bytes per iteration, 2-zone plan (DP 4 over zones a,a,b,b, tiny GPT): "
          f"flat ring {zb['flat']:,} B, hierarchical {zb['hierarchical']:,} B")
    print(f"ratio ours/megatron median iteration time: {statistics.median(ours) / statistics.median(theirs):.3f}")


def main() -> int:
    if "WORLD_SIZE" in os.environ:
        worker()
        return 0
    from planner.ports import free_port
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="FATAL")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(NPROC), "--master-addr",
           "127.0.0.1", "--master-port", str(port), os.path.abspath(__file__)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        print(proc.stdout[-3000:] + proc.stderr[-5000:], file=sys.stderr)
        print("error: benchmark launch failed", file=sys.stderr)
        return 1
    report(json.loads(lines[-1][len("RESULT "):]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
