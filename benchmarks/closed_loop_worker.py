"""The closed loop's worker, run by ``benchmarks/closed_loop.py`` under torchrun: every plan of one job file.

    python -m torch.distributed.run --nproc-per-node N benchmarks/closed_loop_worker.py JOB.json

The job (written by ``closed_loop.run_plans``) names the model, the plans, the warm-up and timed iterations,
the emulated links and GPU types, and optionally a re-profile per round. Every plan is built first, then they
run interleaved (round r runs iteration r of every plan, a barrier before each; the time is the slowest
rank's). Rank 0 writes the measured times and each rank's emulated slowdown to the job's ``results`` file.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from emulated_types import rank_emulation  # noqa: E402


def worker(job_path: str) -> int:
    import time
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist

    from megatron_sailor.runtime.data import MockTokens
    from megatron_sailor.runtime.distributed import env_from_torchrun, init_distributed
    from megatron_sailor.runtime.rank_runtime import RankRuntime, RunConfig, plan_sync_modes, rank_groups
    from planner.layout import build_layout
    from patches import apply_cpu_patches
    from planner.model import load_model
    from planner.plan import Plan
    job = json.loads(Path(job_path).read_text())
    torch.set_num_threads(1)
    apply_cpu_patches()
    env = env_from_torchrun()
    init_distributed(env, timeout_s=600)
    rank = env.rank
    model = load_model(job["model"])
    data = MockTokens(seed=1, seq_length=model.seq_length, vocab_size=model.vocab_size)
    runtimes, slowdowns = [], []
    for path in job["plans"]:   # every plan is built first, then they run interleaved (see the docstring)
        plan = Plan.load(path)
        layout = build_layout(plan)
        cfg = RunConfig(emulation=rank_emulation(job, path, layout.info(rank).gpu_type))
        slowdowns.append(cfg.emulation.slowdown if cfg.emulation else 1.0)
        groups = rank_groups(layout, rank, cfg, tied_embeddings=plan.tie_embeddings,
                             plan_modes=plan_sync_modes(plan))   # the plan's per-stage sync modes
        runtimes.append((RankRuntime(plan, model, rank, data, cfg, layout=layout, groups=groups), groups))
    times: list[list[float]] = [[] for _ in runtimes]
    rp, profiles = job.get("reprofile"), []
    for it in range(job["warmup"] + job["iters"]):
        if rp and it >= job["warmup"]:
            from megatron_sailor.profiler.probe import ProfileConfig, profile_model
            cfg = ProfileConfig(tuple(rp["mbs"]), tuple(rp["tp"]), warmup=1, repeats=1)   # 1 repeat per round
            profiles.append(profile_model(model, cfg, rp["gpu_type"]).costs)
        for k, (rt, groups) in enumerate(runtimes):
            dist.barrier(group=groups.world)
            start = time.perf_counter()
            rt.train_step(it)
            t = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups.world)
            if it >= job["warmup"]:
                times[k].append(float(t))
        if rank == 0:
            print(f"round {it + 1}/{job['warmup'] + job['iters']}: "
                  + " ".join(f"{ts[-1]:.3f}" if ts else "-" for ts in times), flush=True)
    every = [torch.zeros(len(slowdowns), dtype=torch.float64) for _ in range(dist.get_world_size())]
    dist.all_gather(every, torch.tensor(slowdowns, dtype=torch.float64))   # each rank's emulated slowdown
    results = []
    for k, (path, ts) in enumerate(zip(job["plans"], times)):
        ts = sorted(ts)
        q = lambda f: ts[min(len(ts) - 1, int(f * len(ts)))]  # noqa: E731
        results.append({"plan": path, "median_s": statistics.median(ts), "p10_s": q(0.1), "p90_s": q(0.9),
                        "times_s": ts, "rank_slowdown": [float(x[k]) for x in every]})
    if rank == 0:
        Path(job["results"]).write_text(json.dumps(results, indent=1))
        if rp:
            from planner.profiles import costs_to_entry
            Path(rp["out"]).write_text(json.dumps([[{"gpu_type": c.gpu_type, **costs_to_entry(c)} for c in run]
                                                   for run in profiles]))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(worker(sys.argv[1]))
