"""Closed loop on this machine: profile -> plan -> simulate -> run -> compare.

    python benchmarks/closed_loop.py [--out runs/closed_loop] [--iters 8] [--warmup 2] [--profile-rounds 3]
                                     [--reuse-profile]

1. ``sailor-profile`` profiles a CPU-size GPT (``MODEL`` below: compute, not Python, dominates) on 2 local
   ranks (micro-batch 1 and 2, TP 1 and 2, one OpenMP thread per rank) and the loopback network; it writes
   the profile, the network file and a GPU-catalog entry for ``cpu-<cpu model>`` (gpus_per_node = 2).
   The model profile is taken in ``--profile-rounds`` rounds (default 3; ``sailor-profile --rounds``): every
   (TP, micro-batch) configuration is measured once per round, round-robin, and the profile holds the
   median over rounds, so one burst of load from other processes during one configuration's measurement
   is outvoted (with one round it was the whole measurement of that configuration). The per-round values
   are in ``profile.json.rounds.json`` and printed at the end.
2. ``sailor-plan`` plans the model for a 2-rank cluster of that type. Its plan and fixed plans are each
   simulated with the ``megatron-sailor`` preset from that up-front profile (nothing fitted to these runs):
   data parallel, tensor parallel, an even and an uneven 2-stage pipeline, the even pipeline across an
   emulated slow link (``SLOW_LINK``: its two stages in two zones, every cross-zone message delayed as the
   runtime's emulation hook does), and on 3 ranks a mixed-TP pipeline (TP 2 then TP 1) and a 3-stage one.
   Slow GPU types: an emulated type ``<type>-slow2`` (``SLOW_TYPE_SLOWDOWN``; its ranks sleep once more each
   measured forward/backward, as the launcher's ``emulate: {slowdown: 2}`` does; its profile is the
   up-front one with forward/backward x 2, ``emulated_costs``) in a 2-stage pipeline (fast then slow) and,
   on 4 ranks, a 4-stage pipeline (fast, slow, slow, slow) and the planner's plan for 1 fast + 3 slow.
3. The plans of one world size run in ONE torchrun launch with the runtime (``RankRuntime.train_step``),
   built up front and run interleaved (round r runs iteration r of every plan), so that load from other
   processes hits every plan alike: ``warmup`` rounds, then ``iters`` timed iterations per plan (a barrier
   before each; the time is the slowest rank's).
4. Core sharing: more ranks than cores (3 ranks on 2 cores) compute slower than profiled, but only while
   they compute at the same moments. Each prediction multiplies compute by the simulator's core-sharing
   term for that plan (``planner.simulator.core_sharing``): the ranks busy at once on the plan's own
   simulated timeline, and the slowdown table ``sailor-profile --runtime-constants-out`` measured in step 1
   with the profile (the preset's other constants come from that same file). Other processes on a shared
   machine are not modelled: the load is printed.
5. Tables of measured vs predicted seconds per iteration (from the profile re-taken interleaved with the
   runs, median and min), then the summary line: the error of the predictions made from the profile taken
   before planning, ``up-front prediction error: mean X% max Y%``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.errors import InputError, OneLineParser, run_cli  # noqa: E402
from planner.ports import free_port  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from emulated_types import (SLOW_TYPE_SLOWDOWN, core_demand_by_type, emulated_type_files,  # noqa: E402,F401
                            gpu_type_of, rank_emulation, slow_type_of)

MODEL = {"name": "cpu-gpt-8l", "num_layers": 8, "hidden_size": 512, "num_heads": 8, "ffn_hidden_size": 2048,
         "seq_length": 128, "vocab_size": 8192, "max_position_embeddings": 128}
ZONE = "local"
GBS = 8
SLOW_LINK = {"cross_zone_latency_s": 2e-3, "cross_zone_gbps": 0.2}   # emulated link of the slow-link plan
PROFILED_RANKS = 2


# ---- orchestration (no torch) ----------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_CPP_LOG_LEVEL="FATAL")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_profile(out: Path, model_path: Path, mbs: list[int], tp: list[int], nproc: int = 2,
                stat: str = "median", rounds: int = 1) -> dict[str, Path]:
    files = {"profile": out / "profile.json", "network": out / "network.json", "catalog": out / "catalog.json",
             "constants": out / "runtime_constants.json"}
    cmd = [sys.executable, "-m", "megatron_sailor.profiler.cli", "--model", str(model_path),
           "--mbs", *map(str, mbs), "--tp", *map(str, tp), "--nproc", str(nproc), "--repeats", "5", "--stat", stat,
           "--rounds", str(rounds),
           "-o", str(files["profile"]), "--network-out", str(files["network"]), "--catalog-out", str(files["catalog"]),
           "--runtime-constants-out", str(files["constants"])]
    subprocess.run(cmd, check=True, env=_env(), cwd=ROOT)
    return files


def sim_context(model_path: Path, files: dict[str, Path], extra_profiles: list[Path] = (), gpus_per_node=None):
    from planner import api
    source = api.DataSource(model=str(model_path), profiles=tuple(str(p) for p in [files["profile"], *extra_profiles]),
                            gpu_catalog=str(files["catalog"]), network=str(files["network"]), allow_estimates=False)
    return api.make_context(api.load_data(source), "megatron-sailor", gpus_per_node=dict(gpus_per_node or {}))


def predict(plan_path: Path, ctx) -> float:  # noqa: ANN001
    from planner.api import simulate
    from planner.plan import Plan
    return simulate(Plan.load(plan_path), ctx).iteration_time_s


def plan_dict(stages: list[tuple[int, list[tuple[str, int]]]], mbs: int, counts=None,  # noqa: ANN001
              zones: list[str] | None = None) -> dict:
    first, out = 0, []
    for s, (n, reps) in enumerate(stages):
        zone = zones[s] if zones else ZONE
        out.append({"first_layer": first, "num_layers": n,
                    "replicas": [{"gpu_type": g, "tp": t, "zone": zone} for g, t in reps]})
        first += n
    return {"schema_version": 1, "model": MODEL["name"], "num_layers": first, "micro_batch_size": mbs,
            "global_batch_size": GBS, "microbatches_per_pipeline": counts, "stages": out}


def run_planner(out: Path, model_path: Path, files: dict[str, Path], gpus: str, name: str = "planner") -> Path:
    path = out / f"plan_{name}.json"
    cmd = [sys.executable, "-m", "planner.cli_plan", "--model", str(model_path), "--gpus", gpus,
           "--profiles", *[str(p) for p in files.get("profiles", [files["profile"]])],
           "--gpu-catalog", str(files["catalog"]), "--network", str(files["network"]), "--gbs", str(GBS),
           "--no-estimates", "--no-comparator", "-o", str(path)]
    env = _env()
    if files.get("constants") is not None and Path(files["constants"]).is_file():
        env["SAILOR_RUNTIME_CONSTANTS"] = str(files["constants"])   # the planner reads this machine's constants
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    return path


def describe(plan_path: Path) -> str:
    from planner.plan import Plan
    p = Plan.load(plan_path)
    stages = " | ".join(f"{s.num_layers}L:" + ",".join(f"tp{r.tp}" for r in s.replicas) for s in p.stages)
    counts = "" if len(set(p.microbatch_counts)) == 1 else f" m={list(p.microbatch_counts)}"
    return f"mbs{p.micro_batch_size} [{stages}]{counts}"


def run_plans(out: Path, model_path: Path, plans: list[Path], iters: int, warmup: int, nproc: int,
              reprofile: dict | None = None, emulation: dict | None = None,
              slowdown_by_type: dict[str, float] | None = None) -> list[dict]:
    """Run the plans interleaved in one launch; with ``reprofile`` ({"mbs", "tp", "gpu_type", "out"}) every
    round also re-profiles the model once (1 warm-up + 1 timed repeat), and the median over the rounds is
    written to ``reprofile["out"]``: a profile measured in the same time window as the runs. ``emulation``:
    plan path -> emulated links of every rank of that plan; ``slowdown_by_type``: GPU type -> the emulated
    slowdown of every rank the plan puts on that type (an emulated GPU type, like the launcher's ``emulate:``)."""
    job = out / f"job_{nproc}.json"
    results = out / f"measured_{nproc}.json"
    job.write_text(json.dumps({"model": str(model_path), "plans": [str(p) for p in plans], "iters": iters,
                               "warmup": warmup, "results": str(results), "reprofile": reprofile,
                               "emulation": {str(k): v for k, v in (emulation or {}).items()},
                               "slowdown_by_type": dict(slowdown_by_type or {})}))
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", str(Path(__file__).resolve().with_name("closed_loop_worker.py")), str(job)]
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
                  {"description": f"re-profiled interleaved with the runs, {stat} of {len(runs)} rounds"})


def print_profile_rounds(profile: Path) -> None:
    """The up-front profile's per-round layer times (``sailor-profile --rounds``), if it has more than one."""
    side = Path(str(profile) + ".rounds.json")
    if not side.is_file() or side.stat().st_mtime < profile.stat().st_mtime:     # none, or an older profile's
        return
    doc = json.loads(side.read_text())
    print(f"\nup-front profile, layer forward/backward ms in each of its {doc['rounds']} rounds "
          f"({doc['per_round_statistic']} of the repeats; the profile holds the median over rounds):")
    for c in doc["configurations"]:
        v = c["values"]
        rounds = "  ".join(f"{f * 1e3:6.2f}/{b * 1e3:6.2f}" for f, b in zip(v["layer_fwd_s"], v["layer_bwd_s"]))
        print(f"  tp {c['tp']} mbs {c['mbs']}: {rounds}   spread {c['spread']['layer_fwd_s'] * 100:.0f}%/"
              f"{c['spread']['layer_bwd_s'] * 100:.0f}%")


def print_table(rows: list[tuple[str, str, float, dict]]) -> tuple[float, float]:
    print(f"\n{'plan':<14} {'layout':<34} {'predicted s':>11} {'measured s':>10} {'p10-p90 s':>13} {'error':>7}")
    errors = []
    for name, desc, pred, meas in rows:
        err = (pred - meas["median_s"]) / meas["median_s"] * 100
        errors.append(abs(err))
        print(f"{name:<14} {desc:<34} {pred:11.3f} {meas['median_s']:10.3f} "
              f"{meas['p10_s']:6.3f}-{meas['p90_s']:<6.3f} {err:+6.1f}%")
    return statistics.mean(errors), max(errors)


def fixed_plans(gpu: str) -> dict[str, tuple[dict, int]]:
    """name -> (plan, world size): the comparison plans of step 2."""
    L = MODEL["num_layers"]
    h = L // 2
    slow = slow_type_of(gpu)
    q = L // 4
    return {"data-parallel": (plan_dict([(L, [(gpu, 1), (gpu, 1)])], 1), 2),
            "tensor-par": (plan_dict([(L, [(gpu, 2)])], 1), 2),
            "pipe-even": (plan_dict([(h, [(gpu, 1)]), (L - h, [(gpu, 1)])], 1), 2),
            "pipe-uneven": (plan_dict([(h + 1, [(gpu, 1)]), (L - h - 1, [(gpu, 1)])], 1), 2),
            "slow-link": (plan_dict([(h, [(gpu, 1)]), (L - h, [(gpu, 1)])], 1, zones=["local-a", "local-b"]), 2),
            "mixed-tp": (plan_dict([(h, [(gpu, 2)]), (L - h, [(gpu, 1)])], 1), 3),
            "pipe-3": (plan_dict([(3, [(gpu, 1)]), (3, [(gpu, 1)]), (L - 6, [(gpu, 1)])], 1), 3),
            "slow-type-2": (plan_dict([(h + 1, [(gpu, 1)]), (L - h - 1, [(slow, 1)])], 1), 2),
            "slow-type-4": (plan_dict([(L - 3 * q, [(gpu, 1)])] + [(q, [(slow, 1)])] * 3, 1), 4)}


def contexts(model_path: Path, files: dict[str, Path], gpu: str, plan_path: Path | None = None):
    """Simulation context for ``plan_path``: the emulated slow link and slow GPU type (its files are written
    from ``files["profile"]`` unless ``files`` already holds them: :func:`with_slow_type`), and the simulator's
    core-sharing term for that plan (:mod:`planner.simulator.core_sharing`: ranks busy at once on the plan's
    own timeline, slowdown from the table measured with the profile; no plan: no sharing)."""
    from planner.network import Link
    from planner.plan import Plan
    from planner.simulator.constants import load_runtime_constants
    from planner.simulator.core_sharing import core_sharing
    from planner.simulator.settings import ours
    both = with_slow_type(files, gpu)
    ctx = sim_context(model_path, both, [both["slow_profile"]], gpus_per_node={gpu: 3, slow_type_of(gpu): 3})
    consts = load_runtime_constants(files["constants"])        # measured with the profile, before planning
    ctx.settings = ours(files["constants"]).with_(hidden_dropout=0.0, attention_dropout=0.0)   # RunConfig: 0
    ctx.network = ctx.network.with_class_links({"cross_zone": Link(SLOW_LINK["cross_zone_gbps"] * 1e9 / 8,
                                                                   SLOW_LINK["cross_zone_latency_s"])})
    if plan_path is not None:
        share = core_sharing(Plan.load(plan_path), ctx, consts.cores or os.cpu_count() or 1, PROFILED_RANKS,
                             consts.core_share_table, demand_by_type=core_demand_by_type(gpu))
        ctx.settings = ctx.settings.with_(compute_scale=share.compute_scale, update_scale=share.update_scale)
    return ctx


def with_slow_type(files: dict, gpu: str) -> dict:
    """``files`` with the emulated slow type's profile and a catalog of both types (3 GPUs per node), written
    once from ``files["profile"]`` (kept when ``files`` already has them)."""
    if "slow_profile" in files:
        return files
    return emulated_type_files(files, SLOW_TYPE_SLOWDOWN, {gpu: 3, slow_type_of(gpu): 3})


def predict_all(model_path: Path, files: dict[str, Path], gpu: str, paths: dict[str, Path]) -> dict[str, float]:
    files = with_slow_type(files, gpu)          # one write for every plan's context
    return {n: predict(p, contexts(model_path, files, gpu, p)) for n, p in paths.items()}


def print_sharing(model_path: Path, files: dict[str, Path], gpu: str, paths: dict[str, Path]) -> None:
    """One line per plan: ranks busy at once (the plan's own timeline) and the compute multiplier."""
    from planner.simulator.constants import load_runtime_constants
    consts = load_runtime_constants(files["constants"])
    cores = consts.cores or os.cpu_count() or 1
    print(f"\ncore sharing ({cores} cores, profile taken with {PROFILED_RANKS} ranks; busy ranks from each plan's "
          "simulated timeline, slowdown from the table measured before planning):")
    from planner.plan import Plan
    from planner.simulator.core_sharing import core_sharing
    base = contexts(model_path, with_slow_type(files, gpu), gpu)       # no plan: no sharing in it yet
    for n, p in paths.items():
        share = core_sharing(Plan.load(p), base, cores, PROFILED_RANKS,
                             consts.core_share_table, demand_by_type=core_demand_by_type(gpu))
        print(f"  {n:<14} {share.busy_ranks:5.2f} ranks busy at once -> compute x{share.compute_scale:.3f}; "
              f"optimizer step {share.update_busy_ranks:4.2f} -> x{share.update_scale:.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "runs" / "closed_loop"))
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reuse-profile", action="store_true", help="keep an existing profile in --out")
    ap.add_argument("--profile-rounds", type=int, default=3,
                    help="rounds of the up-front model profile (sailor-profile --rounds; default 3: the median "
                         "of 3 outvotes one round slowed by a burst of load)")
    ap.add_argument("--stat", choices=sorted(STATS), default="median",
                    help="statistic over the timed iterations and the interleaved profile rounds (default median; "
                         "min is more robust under heavy load from other processes; both are printed)")
    ap.add_argument("--reanalyse", action="store_true",
                    help="re-print the tables from the files of the last run in --out (e.g. with another --stat)")
    args = ap.parse_args(argv)
    for flag, value, least in (("--profile-rounds", args.profile_rounds, 1), ("--iters", args.iters, 1),
                               ("--warmup", args.warmup, 0)):
        if value < least:
            raise InputError(f"{flag} must be >= {least}, got {value}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_path = out / "model.json"
    model_path.write_text(json.dumps(MODEL))
    files = {"profile": out / "profile.json", "network": out / "network.json", "catalog": out / "catalog.json",
             "constants": out / "runtime_constants.json"}
    if not ((args.reuse_profile or args.reanalyse) and all(p.is_file() for p in files.values())):
        t0 = time.perf_counter()
        files = run_profile(out, model_path, mbs=[1, 2], tp=[1, 2], stat=args.stat, rounds=args.profile_rounds)
        print(f"up-front profile (model in {args.profile_rounds} round(s), network, constants): "
              f"{time.perf_counter() - t0:.0f} s wall")
    gpu = gpu_type_of(files)
    planned = out / "plan_planner.json"
    if not (args.reanalyse and planned.is_file()):
        planned = run_planner(out, model_path, files, f"{gpu}@{ZONE}=2")
    slow = slow_type_of(gpu)
    het = out / "plan_planner-het.json"
    if not (args.reanalyse and het.is_file()):
        het = run_planner(out, model_path, emulated_type_files(files, SLOW_TYPE_SLOWDOWN, {gpu: 1, slow: 3}),
                          f"{gpu}@{ZONE}=1,{slow}@{ZONE}=3", name="planner-het")
    from planner.plan import Plan
    paths = {"planner": planned, "planner-het": het}
    worlds = {n: Plan.load(p).world_size for n, p in paths.items()}    # a plan may leave GPUs unused
    for name, (d, world) in fixed_plans(gpu).items():
        paths[name], worlds[name] = out / f"plan_{name}.json", world
        paths[name].write_text(json.dumps(d, indent=1))
    reprofile = {"mbs": sorted({Plan.load(p).micro_batch_size for p in paths.values()}), "tp": [1, 2],
                 "gpu_type": gpu, "out": str(out / "profile_rounds.json")}
    measured: dict[str, dict] = {}
    for world in sorted(set(worlds.values())):
        names = [n for n in paths if worlds[n] == world]
        if args.reanalyse:
            got = json.loads((out / f"measured_{world}.json").read_text())
        else:
            emu = {paths["slow-link"]: SLOW_LINK} if "slow-link" in names else None
            got = run_plans(out, model_path, [paths[n] for n in names], args.iters, args.warmup, nproc=world,
                            reprofile=reprofile if world == 2 else None, emulation=emu,
                            slowdown_by_type={slow: SLOW_TYPE_SLOWDOWN})
        measured.update(zip(names, got))
    upfront = predict_all(model_path, files, gpu, paths)
    summary, table = {}, []
    for stat in sorted(STATS, key=lambda x: x == args.stat):       # the chosen statistic last
        prof = out / f"profile_interleaved_{stat}.json"
        summarise_rounds(out / "profile_rounds.json", prof, stat)
        again = predict_all(model_path, dict(files, profile=prof), gpu, paths)
        rows = [(n, describe(p) + f" w{worlds[n]}", again[n],
                 dict(measured[n], median_s=STATS[stat](measured[n]["times_s"]))) for n, p in paths.items()]
        print(f"\n[{stat}] measured = {stat} of {args.iters} iterations; predicted from the {stat} of the profile "
              "rounds interleaved with the runs:")
        summary[stat] = print_table(rows)
        table += [{"stat": stat, "plan": n, "layout": d, "predicted_s": pr, "measured_s": m["median_s"],
                   "predicted_upfront_s": upfront[n], "times_s": m["times_s"]} for n, d, pr, m in rows]
    (out / "table.json").write_text(json.dumps(table, indent=1))
    print_sharing(model_path, files, gpu, paths)
    print_profile_rounds(files["profile"])
    print("\nup-front predictions (profile taken before planning) vs median of the timed iterations:")
    up_rows = [(n, describe(p) + f" w{worlds[n]}", upfront[n],
                dict(measured[n], median_s=statistics.median(measured[n]["times_s"]))) for n, p in paths.items()]
    up_mean, up_max = print_table(up_rows)
    print(f"\nmodel {MODEL['name']} ({MODEL['num_layers']} layers, hidden {MODEL['hidden_size']}, seq "
          f"{MODEL['seq_length']}, vocab {MODEL['vocab_size']}), gbs {GBS}, CPU ranks of type {gpu}, "
          f"{os.cpu_count()} cores, runtime preset megatron-sailor, 1-min load average {os.getloadavg()[0]:.1f} "
          "(other processes share these cores: the measurements are noisy)")
    for stat in sorted(summary, key=lambda x: x == args.stat):
        print(f"[{stat}] interleaved-profile prediction error mean {summary[stat][0]:.1f}% max {summary[stat][1]:.1f}%")
    print(f"up-front prediction error: mean {up_mean:.1f}% max {up_max:.1f}% (n={len(paths)} plans)")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
