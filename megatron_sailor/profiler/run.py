"""The distributed part of ``sailor-profile`` (one process per rank): join the group, profile, and write
the outputs from rank 0 (profile, network file, GPU catalog entry)."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

logger = logging.getLogger(__name__)


def _init() -> tuple[int, int]:
    import torch
    import torch.distributed as dist

    from megatron_sailor.runtime.distributed import env_from_torchrun, init_distributed
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if "WORLD_SIZE" in os.environ:
        env = env_from_torchrun()
        init_distributed(env, timeout_s=600.0)
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist.get_rank(), dist.get_world_size()


def measure_peak_flops(torch: Any, n: int = 1024, repeats: int = 5) -> float:
    """fp32 matmul FLOP/s of this rank (one thread per rank on CPU)."""
    dev = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    best = float("inf")
    for _ in range(repeats + 1):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        a @ b
        if dev.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return 2.0 * n ** 3 / best


def measure_mem_bw(torch: Any, nbytes: int = 64 * 2 ** 20) -> float:
    dev = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    src = torch.ones(nbytes // 4, device=dev)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(4):
        t = time.perf_counter()
        dst.copy_(src)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return 2.0 * nbytes / best


def device_catalog_fields(torch: Any, local_ranks: int, usd_per_hour: float) -> dict[str, float]:
    if torch.cuda.is_available():
        memory = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    else:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // max(1, local_ranks)
    flops = measure_peak_flops(torch)
    return {"memory_bytes": int(memory), "peak_flops": flops, "peak_fp32_flops": flops,
            "mem_bw_bytes_per_s": measure_mem_bw(torch), "usd_per_hour": usd_per_hour,
            "gpus_per_node": local_ranks}


def _print_profile(result: Any) -> None:
    print(f"{'tp':>3} {'mbs':>4} {'emb f/b ms':>14} {'layer f/b ms':>16} {'head f/b ms':>14} "
          f"{'upd ns/param':>12} {'act MB/layer':>12}")
    for c in result.costs:
        print(f"{c.tp:>3} {c.mbs:>4} {c.embedding_fwd_s * 1e3:6.2f}/{c.embedding_bwd_s * 1e3:6.2f} "
              f"{c.layer_fwd_s[0] * 1e3:7.2f}/{c.layer_bwd_s[0] * 1e3:7.2f} "
              f"{c.head_fwd_s * 1e3:6.2f}/{c.head_bwd_s * 1e3:6.2f} {c.update_s_per_param * 1e9:12.3f} "
              f"{(c.layer_act_bytes or 0) / 1e6:12.2f}")


def _write_model(args: argparse.Namespace, model: Any, result: Any, gpu_type: str, world: int) -> None:
    from dataclasses import asdict

    from megatron_sailor.profiler.io import write_profile
    extras = {"device": gpu_type, "timer": result.timer, "ranks": world,
              "settings": {"warmup": args.warmup, "repeats": args.repeats, "layers_per_probe": args.layers_per_probe,
                           "concurrent": not args.no_concurrent, "stat": args.stat, "rounds": args.rounds},
              "param_bytes": {str(tp): asdict(pb) for tp, pb in result.param_bytes.items()},
              "model_spec": model.to_dict()}
    write_profile(args.output, model.name, gpu_type, result.costs, extras)
    _print_profile(result)
    print(f"profile written: {args.output} (gpu_type {gpu_type})")
    if args.rounds > 1:
        import json
        from pathlib import Path

        from megatron_sailor.profiler.rounds import rounds_document
        from planner.textio import atomic_write_text
        side = Path(args.output + ".rounds.json")
        atomic_write_text(side, json.dumps(rounds_document(result.rounds, args.rounds, args.stat), indent=1) + "\n")
        print(f"per-round values written: {side}")


def _write_network(args: argparse.Namespace, net: Any, gpu_type: str) -> dict[str, float]:
    import json

    from megatron_sailor.profiler.netprofile import network_document
    from planner.textio import atomic_write_text
    from pathlib import Path
    doc = network_document(Path(args.network_out).stem, net.intra, net.inter, net.hosts, net.allreduce)
    atomic_write_text(Path(args.network_out), json.dumps(doc, indent=1) + "\n")
    raw = {"hosts": net.hosts, "sizes": net.sizes, "p2p_one_way_s": {str(k): v for k, v in net.p2p_s.items()},
           "allreduce_s": net.allreduce_s}
    if net.sharded_s is not None:
        raw["sharded_collectives"] = {"bytes": max(net.sizes), "reduce_scatter_plus_all_gather_s": net.sharded_s,
                                      "all_reduce_s": net.sharded_allreduce_s}
    if args.rounds > 1:
        raw["rounds"] = {"rounds": args.rounds, "per_round_statistic": "median", "value": "median over rounds",
                         "p2p_one_way_s": [{str(k): v for k, v in r.items()} for r in net.p2p_rounds],
                         "allreduce_s": net.allreduce_rounds}
    atomic_write_text(Path(args.network_out + ".measurements.json"), json.dumps(raw, indent=1) + "\n")
    print(f"network written: {args.network_out}: {doc['description']}")
    from megatron_sailor.profiler.netprofile import planner_intra_link
    link = planner_intra_link(net.intra, net.allreduce, net.hosts)
    if link is None:
        return {}
    return {"intra_node_bw_bytes_per_s": link.bw_bytes_per_s, "intra_node_latency_s": link.latency_s}


def _write_constants(args: argparse.Namespace, torch: Any, baseline_bytes: int,
                     sharded_scale: float | None = None) -> None:
    from megatron_sailor.profiler.constants import (constants_document, measure_core_sharing, reserve_factor,
                                                    write_constants)
    import json

    from megatron_sailor.profiler.cli import ARGV_ENV
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    argv = json.loads(os.environ[ARGV_ENV]) if ARGV_ENV in os.environ else sys.argv[1:]
    doc = constants_document(baseline_bytes, reserve_factor(torch), measure_core_sharing(cores), cores,
                             "sailor-profile " + " ".join(argv), sharded_scale)
    write_constants(args.runtime_constants_out, doc)
    share = ", ".join(f"{r:g}/core x{s:.2f}" for r, s in doc["core_share"]["ranks_per_core_slowdown"])
    print(f"runtime constants written: {args.runtime_constants_out} (memory overhead "
          f"{doc['memory_overhead_bytes'] / 2**20:.0f} MiB, reserve x{doc['activation_reserve_factor']}, "
          f"core sharing {share}"
          + (f", sharded collectives x{sharded_scale:.2f}" if sharded_scale is not None else "") + ")")


def run_profiles(args: argparse.Namespace, model: Any) -> int:
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist

    from megatron_sailor.profiler.timing import local_gpu_type
    from patches import apply_cpu_patches
    rank, world = _init()
    apply_cpu_patches()
    from megatron_sailor.profiler.constants import baseline_memory_bytes
    baseline_bytes = baseline_memory_bytes(torch)     # before any model exists
    gpu_type = args.gpu_type or local_gpu_type(torch)
    catalog: dict[str, float] = {}
    if model is not None:
        from megatron_sailor.profiler.probe import ProfileConfig, profile_model
        cfg = ProfileConfig(tuple(args.mbs), tuple(args.tp), args.warmup, args.repeats, args.layers_per_probe,
                            args.seed, concurrent=not args.no_concurrent, stat=args.stat, rounds=args.rounds)
        result = profile_model(model, cfg, gpu_type)
        if rank == 0:
            _write_model(args, model, result, gpu_type, world)
            local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            catalog.update(device_catalog_fields(torch, local, args.usd_per_hour))
    sharded_scale = None
    if args.network_out:
        from megatron_sailor.profiler.netprofile import DEFAULT_SIZES, profile_network, sharded_collective_scale
        net = profile_network(tuple(args.sizes or DEFAULT_SIZES), warmup=args.warmup, repeats=args.repeats,
                              rounds=args.rounds)
        if rank == 0:
            catalog.update(_write_network(args, net, gpu_type))
            if net.sharded_s is not None and net.sharded_allreduce_s is not None:
                sharded_scale = sharded_collective_scale(net.sharded_s, net.sharded_allreduce_s)
    if rank == 0 and args.runtime_constants_out:
        _write_constants(args, torch, baseline_bytes, sharded_scale)
    if rank == 0 and args.catalog_out and catalog:
        from megatron_sailor.profiler.io import merge_catalog_entry
        merge_catalog_entry(args.catalog_out, gpu_type, catalog)
        print(f"GPU catalog entry '{gpu_type}' written: {args.catalog_out}")
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    return 0
