"""Closed loop on this machine: profile -> plan -> simulate -> run -> compare.

    python benchmarks/closed_loop.py [--out runs/closed_loop] [--iters 8] [--warmup 2] [--reuse-profile]

1. ``sailor-profile`` profiles a CPU-size GPT (``MODEL`` below: compute, not Python, dominates) on 2 local
   ranks (micro-batch 1 and 2, TP 1 and 2, one OpenMP thread per rank) and the loopback network; it writes
   the profile, the network file and a GPU-catalog entry for ``cpu-<cpu model>`` (gpus_per_node = 2).
2. ``sailor-plan`` plans the model for a 2-rank cluster of that type; the planner's plan and fixed
   comparison plans (data parallel, tensor parallel, an even and an uneven 2-stage pipeline) are each
   simulated with the ``megatron-sailor`` runtime preset (nothing fitted to these runs).
3. All plans run in ONE torchrun launch (2 ranks) with the runtime (``RankRuntime.train_step``), built
   up front and run interleaved (round r runs iteration r of every plan), so that load from other
   processes on the machine hits every plan alike: ``warmup`` rounds, then the median of ``iters`` timed
   iterations per plan (a barrier before each; the time is the slowest rank's).
4. A table of measured vs predicted seconds per iteration, ending with ``prediction error: mean X% max Y%``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.ports import free_port  # noqa: E402

MODEL = {"name": "cpu-gpt-8l", "num_layers": 8, "hidden_size": 512, "num_heads": 8, "ffn_hidden_size": 2048,
         "seq_length": 128, "vocab_size": 8192, "max_position_embeddings": 128}
ZONE = "local"
GBS = 8


# ---- orchestration (no torch) ----------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="FATAL")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_profile(out: Path, model_path: Path, mbs: list[int], tp: list[int], nproc: int = 2,
                stat: str = "median") -> dict[str, Path]:
    files = {"profile": out / "profile.json", "network": out / "network.json", "catalog": out / "catalog.json"}
    cmd = [sys.executable, "-m", "megatron_sailor.profiler.cli", "--model", str(model_path),
           "--mbs", *map(str, mbs), "--tp", *map(str, tp), "--nproc", str(nproc), "--repeats", "5", "--stat", stat,
           "-o", str(files["profile"]), "--network-out", str(files["network"]), "--catalog-out", str(files["catalog"])]
    subprocess.run(cmd, check=True, env=_env(), cwd=ROOT)
    return files


def gpu_type_of(files: dict[str, Path]) -> str:
    return json.loads(files["profile"].read_text())["gpu_type"]


def sim_context(model_path: Path, files: dict[str, Path], extra_profiles: list[Path] = (), gpus_per_node=None):
    from planner import api
    source = api.DataSource(model=str(model_path), profiles=tuple(str(p) for p in [files["profile"], *extra_profiles]),
                            gpu_catalog=str(files["catalog"]), network=str(files["network"]), allow_estimates=False)
    return api.make_context(api.load_data(source), "megatron-sailor", gpus_per_node=dict(gpus_per_node or {}))


def predict(plan_path: Path, ctx) -> float:  # noqa: ANN001
    from planner.api import simulate
    from planner.plan import Plan
    return simulate(Plan.load(plan_path), ctx).iteration_time_s


def plan_dict(stages: list[tuple[int, list[tuple[str, int]]]], mbs: int, counts=None) -> dict:  # noqa: ANN001
    first, out = 0, []
    for n, reps in stages:
        out.append({"first_layer": first, "num_layers": n,
                    "replicas": [{"gpu_type": g, "tp": t, "zone": ZONE} for g, t in reps]})
        first += n
    return {"schema_version": 1, "model": MODEL["name"], "num_layers": first, "micro_batch_size": mbs,
            "global_batch_size": GBS, "microbatches_per_pipeline": counts, "stages": out}


def run_planner(out: Path, model_path: Path, files: dict[str, Path], gpus: str, name: str = "planner") -> Path:
    path = out / f"plan_{name}.json"
    cmd = [sys.executable, "-m", "planner.cli_plan", "--model", str(model_path), "--gpus", gpus,
           "--profiles", *[str(p) for p in files.get("profiles", [files["profile"]])],
           "--gpu-catalog", str(files["catalog"]), "--network", str(files["network"]), "--gbs", str(GBS),
           "--no-estimates", "--no-comparator", "-o", str(path)]
    subprocess.run(cmd, check=True, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL)
    return path


def describe(plan_path: Path) -> str:
    from planner.plan import Plan
    p = Plan.load(plan_path)
    stages = " | ".join(f"{s.num_layers}L:" + ",".join(f"tp{r.tp}" for r in s.replicas) for s in p.stages)
    counts = "" if len(set(p.microbatch_counts)) == 1 else f" m={list(p.microbatch_counts)}"
    return f"mbs{p.micro_batch_size} [{stages}]{counts}"


def run_plans(out: Path, model_path: Path, plans: list[Path], iters: int, warmup: int, nproc: int,
              reprofile: dict | None = None) -> list[dict]:
    """Run the plans interleaved in one launch; with ``reprofile`` ({"mbs", "tp", "gpu_type", "out"}) every
    round also re-profiles the model once (1 warm-up + 1 timed repeat), and the median over the rounds is
    written to ``reprofile["out"]``: a profile measured in the same time window as the runs."""
    job = out / "job.json"
    results = out / "measured.json"
    job.write_text(json.dumps({"model": str(model_path), "plans": [str(p) for p in plans], "iters": iters,
                               "warmup": warmup, "results": str(results), "reprofile": reprofile}))
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", str(Path(__file__).resolve()), "--worker", str(job)]
    subprocess.run(cmd, check=True, env=_env(), cwd=ROOT)
    return json.loads(results.read_text())


STATS = {"median": statistics.median, "min": min}


def summarise_rounds(rounds_path: Path, out_path: Path, stat: str) -> None:
    """The interleaved profile: per entry, ``stat`` over the rounds (the same statistic as the runs)."""
    from megatron_sailor.profiler.io import median_of_runs, write_profile
    from planner.profiles import _entry_to_costs
    runs = [[_entry_to_costs({k: v for k, v in e.items() if k != "gpu_type"}, e["gpu_type"], i, "interleaved")
             for i, e in enumerate(run)] for run in json.loads(rounds_path.read_text())]
    costs = median_of_runs(runs, STATS[stat])
    write_profile(out_path, MODEL["name"], costs[0].gpu_type, costs,
                  {"note": f"re-profiled interleaved with the runs, {stat} of {len(runs)} rounds"})


def print_table(rows: list[tuple[str, str, float, dict]]) -> tuple[float, float]:
    print(f"\n{'plan':<14} {'layout':<34} {'predicted s':>11} {'measured s':>10} {'p10-p90 s':>13} {'error':>7}")
    errors = []
    for name, desc, pred, meas in rows:
        err = (pred - meas["median_s"]) / meas["median_s"] * 100
        errors.append(abs(err))
        print(f"{name:<14} {desc:<34} {pred:11.3f} {meas['median_s']:10.3f} "
              f"{meas['p10_s']:6.3f}-{meas['p90_s']:<6.3f} {err:+6.1f}%")
    return statistics.mean(errors), max(errors)


# ---- worker (under torchrun): run every plan of the job with the runtime ------------------------------------
def worker(job_path: str) -> int:
    import time
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist

    from megatron_sailor.runtime.data import MockTokens
    from megatron_sailor.runtime.distributed import env_from_torchrun, init_distributed
    from megatron_sailor.runtime.emulation import emulation_from
    from megatron_sailor.runtime.groups import create_groups
    from megatron_sailor.runtime.rank_runtime import RankRuntime, RunConfig
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
    runtimes = []
    for path in job["plans"]:   # every plan is built first, then they run interleaved (see the docstring)
        plan = Plan.load(path)
        layout = build_layout(plan)
        groups = create_groups(layout, rank)
        runtimes.append((RankRuntime(plan, model, rank, data, RunConfig(emulation=emulation_from()),
                                     layout=layout, groups=groups), groups))
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
    results = []
    for path, ts in zip(job["plans"], times):
        ts = sorted(ts)
        q = lambda f: ts[min(len(ts) - 1, int(f * len(ts)))]  # noqa: E731
        results.append({"plan": path, "median_s": statistics.median(ts), "p10_s": q(0.1), "p90_s": q(0.9),
                        "times_s": ts})
    if rank == 0:
        Path(job["results"]).write_text(json.dumps(results, indent=1))
        if rp:
            from planner.profiles import costs_to_entry
            Path(rp["out"]).write_text(json.dumps([[{"gpu_type": c.gpu_type, **costs_to_entry(c)} for c in run]
                                                   for run in profiles]))
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "runs" / "closed_loop"))
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reuse-profile", action="store_true", help="keep an existing profile in --out")
    ap.add_argument("--stat", choices=sorted(STATS), default="median",
                    help="statistic of the summary line, over the timed iterations and the interleaved profile "
                         "rounds alike (default median; min is more robust under heavy load from other "
                         "processes; both are printed)")
    ap.add_argument("--reanalyse", action="store_true",
                    help="re-print the tables from the files of the last run in --out (e.g. with another --stat)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_path = out / "model.json"
    model_path.write_text(json.dumps(MODEL))
    files = {"profile": out / "profile.json", "network": out / "network.json", "catalog": out / "catalog.json"}
    if not ((args.reuse_profile or args.reanalyse) and all(p.is_file() for p in files.values())):
        files = run_profile(out, model_path, mbs=[1, 2], tp=[1, 2], stat=args.stat)
    gpu = gpu_type_of(files)
    planned = out / "plan_planner.json"
    if not (args.reanalyse and planned.is_file()):
        planned = run_planner(out, model_path, files, f"{gpu}@{ZONE}=2")
    L = MODEL["num_layers"]
    fixed = {"data-parallel": plan_dict([(L, [(gpu, 1), (gpu, 1)])], 1),
             "tensor-par": plan_dict([(L, [(gpu, 2)])], 1),
             "pipe-even": plan_dict([(L // 2, [(gpu, 1)]), (L - L // 2, [(gpu, 1)])], 1),
             "pipe-uneven": plan_dict([(L // 2 + 1, [(gpu, 1)]), (L - L // 2 - 1, [(gpu, 1)])], 1)}
    paths = {"planner": planned}
    for name, d in fixed.items():
        paths[name] = out / f"plan_{name}.json"
        paths[name].write_text(json.dumps(d, indent=1))
    ctx = sim_context(model_path, files, gpus_per_node={gpu: 2})
    from planner.plan import Plan
    reprofile = {"mbs": sorted({Plan.load(p).micro_batch_size for p in paths.values()}), "tp": [1, 2],
                 "gpu_type": gpu, "out": str(out / "profile_rounds.json")}
    if args.reanalyse:
        measured = json.loads((out / "measured.json").read_text())
    else:
        measured = run_plans(out, model_path, list(paths.values()), args.iters, args.warmup, nproc=2,
                             reprofile=reprofile)
    times = [m["times_s"] for m in measured]
    names = list(paths)
    upfront = [predict(p, ctx) for p in paths.values()]
    summary, table = {}, []
    for stat in sorted(STATS, key=lambda x: x == args.stat):       # the chosen statistic last
        prof = out / f"profile_interleaved_{stat}.json"
        summarise_rounds(out / "profile_rounds.json", prof, stat)
        ctx2 = sim_context(model_path, dict(files, profile=prof), gpus_per_node={gpu: 2})
        rows = []
        for name, p, ts, m in zip(names, paths.values(), times, measured):
            rows.append((name, describe(p), predict(p, ctx2), dict(m, median_s=STATS[stat](ts))))
        print(f"\n[{stat}] measured = {stat} of {len(times[0])} iterations; predicted from the {stat} of the profile "
              "rounds interleaved with the runs:")
        summary[stat] = print_table(rows)
        table += [{"stat": stat, "plan": n, "layout": d, "predicted_s": pr, "measured_s": m["median_s"],
                   "predicted_upfront_s": u, "times_s": m["times_s"]} for (n, d, pr, m), u in zip(rows, upfront)]
    (out / "table.json").write_text(json.dumps(table, indent=1))
    up_err = [abs(u - statistics.median(ts)) / statistics.median(ts) * 100 for u, ts in zip(upfront, times)]
    print(f"\nmodel {MODEL['name']} ({L} layers, hidden {MODEL['hidden_size']}, seq {MODEL['seq_length']}, "
          f"vocab {MODEL['vocab_size']}), gbs {GBS}, 2 CPU ranks of type {gpu}, runtime preset megatron-sailor, "
          f"1-min load average {os.getloadavg()[0]:.1f} (other processes share these 2 cores)")
    print(f"up-front profile (used by the planner) vs median times: error mean {statistics.mean(up_err):.1f}% "
          f"max {max(up_err):.1f}%")
    for stat in sorted(summary, key=lambda x: x == args.stat):
        print(f"[{stat}] error mean {summary[stat][0]:.1f}% max {summary[stat][1]:.1f}%")
    mean_err, max_err = summary[args.stat]
    print(f"prediction error: mean {mean_err:.1f}% max {max_err:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
