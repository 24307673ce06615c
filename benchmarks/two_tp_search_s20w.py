"""The search with one vs up to two TP degrees per GPU type (``sailor-plan`` without / with ``--two-tp``,
``SearchSpace.two_tp`` 1 / 2; docs/PLANNER.md 10.7) on every setup of benchmarks/search_time.py, under a time limit.

Each setup runs as search_time.py runs it (its command, :func:`search_time._command`: a fresh ``python -m
planner.cli_plan ... --planner ours --json --no-comparator``), with ``--time-limit-s T`` instead of ``none``, once
without and once with ``--two-tp``. A child still running ``--kill-after`` seconds after it started is killed
(the search honours the time limit only once it holds a plan). Per setup and mode: wall and CPU seconds (user +
sys of the child), whether the search finished (``done``), stopped at the limit with its best plan so far
(``STOP``) or was killed (``kill``), and the objective key of its plan (s/iteration for throughput, $/iteration for
cost; ``value``: their product); ``1/2`` = key with one TP / key with two (> 1: two TP degrees per type found a
better plan), and whether the two-TP plan gives a type two TP degrees. Then one summary line.

``--small N``: instead, s19t's random small clusters (``benchmarks/two_tp_pools_s19t.py``'s ``random_cluster`` and
model contexts, N per context, ``--seed``), in process: ``plan_search`` over s19t's options (S <= 3, OPT-350 S <= 2,
micro-batch 1 or 2, TP 1/2/4, chain plans, recomputation and the distributed optimizer searched) with ``two_tp`` 1
and 2, no time limit, throughput, cost and value; per case both keys, ``1/2`` and the CPU seconds of both modes
(``time.process_time``), then one summary line.

    python benchmarks/two_tp_search_s20w.py --sailor-data ../shared/data/sailor [--time-limit-s 60]
                                            [--kill-after S] [--max-gb 6] [--only NAME] [--skip NAME]
    python benchmarks/two_tp_search_s20w.py --sailor-data ../shared/data/sailor --small 40 [--seed 0]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_vs_sailor import setups  # noqa: E402
from search_time import _command, child_env  # noqa: E402


def objective_key(kind: str, est: dict) -> float:
    """The objective key of an estimate (``planner.search.Objective.key``)."""
    it, usd = est["iteration_time_s"], est["cost_per_iteration_usd"]
    return it if kind == "throughput" else usd if kind == "cost" else it * usd


def run(cmd: list[str], kill_after: float, max_gb: float) -> dict:
    """wall s, CPU s, status (done / STOP / kill / error: e.g. past ``max_gb`` of address space), the report of
    one child run."""
    def limit() -> None:        # in the child: a runaway row product fails there, not on the shared machine
        resource.setrlimit(resource.RLIMIT_AS, (int(max_gb * 2 ** 30), int(max_gb * 2 ** 30)))

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, cwd=ROOT, env=child_env(ROOT, None), capture_output=True, text=True,
                             timeout=kill_after, preexec_fn=limit)
        status, rep = None, None
        if out.returncode != 0:
            status = "error"
            sys.stderr.write(f"exit {out.returncode}: {out.stderr.strip()[-300:]}\n")
        else:
            rep = json.loads(out.stdout)
            status = "done" if rep["search"]["complete"] else "STOP"
    except subprocess.TimeoutExpired:
        status, rep = "kill", None
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "status": status, "rep": rep}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--time-limit-s", type=float, default=60.0)
    ap.add_argument("--kill-after", type=float, default=None, help="seconds (default: 2 x the limit + 60)")
    ap.add_argument("--max-gb", type=float, default=6.0, help="each child's address-space limit (GiB)")
    ap.add_argument("--small", type=int, default=0, help="N random small clusters per context instead (s19t's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", help="run setups whose name contains this")
    ap.add_argument("--skip", default="4 types", help="leave out setups whose name contains this")
    args = ap.parse_args(argv)
    if args.small:
        return small(args)
    sailor = str(Path(args.sailor_data).resolve())
    kill_after = args.kill_after or 2 * args.time_limit_s + 60
    chosen = [st for st in setups() if (not args.only or args.only in st.name)
              and not (args.skip and args.skip in st.name)]
    load0 = os.getloadavg()[0]
    t_start = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    head = "  ".join(f"{f'{m} wall':>9} {f'{m} cpu':>8} {m:>5} {f'key {m}':>12}" for m in ("1tp", "2tp"))
    print(f"{'setup':26} {'obj':10} {head}  {'1/2':>9}  2-TP plan", flush=True)
    wins, best, n_done, n_stop, n_kill, slower = [], 1.0, 0, 0, 0, []
    for st in chosen:
        res = {}
        for mode, extra in (("1tp", []), ("2tp", ["--two-tp"])):
            res[mode] = run(_command(st, sailor) + ["--time-limit-s", f"{args.time_limit_s:g}"] + extra, kill_after,
                            args.max_gb)
        keys = {m: objective_key(st.objective, r["rep"]["estimate"]) if r["rep"] else float("nan")
                for m, r in res.items()}
        two = res["2tp"]
        n_done += two["status"] == "done"
        n_stop += two["status"] == "STOP"
        n_kill += two["status"] in ("kill", "error")
        ratio = keys["1tp"] / keys["2tp"] if two["rep"] and res["1tp"]["rep"] else float("nan")
        plan2 = bool(two["rep"] and two["rep"]["search"].get("two_tp_plan"))
        if ratio == ratio and ratio > 1 + 1e-12:
            wins.append(st.name)
            best = max(best, ratio)
        if ratio == ratio and ratio < 1 - 1e-12:
            slower.append(st.name)
        cells = "  ".join(f"{r['wall']:>9.1f} {r['cpu']:>8.1f} {r['status']:>5} {keys[m]:>12.6g}"
                          for m, r in res.items())
        print(f"{st.name:26} {st.objective:10} {cells}  {ratio:>9.6f}  {'yes' if plan2 else 'no'}", flush=True)
    print(f"started {t_start}, ended {time.strftime('%H:%M:%S UTC', time.gmtime())}; load average (1 min) "
          f"{load0:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} cores; time limit "
          f"{args.time_limit_s:g} s, killed after {kill_after:g} s")
    print(f"summary: {len(chosen)} setups; with --two-tp the search finished on {n_done}, stopped at the limit on "
          f"{n_stop}, was killed or failed on {n_kill}; two TP degrees per type gave a better plan on {len(wins)}"
          + (f" ({', '.join(wins)}; largest 1/2 {best:.6f})" if wins else "")
          + (f"; a worse plan (stopped earlier in its larger space) on {len(slower)} ({', '.join(slower)})"
             if slower else ""))
    return 0


def small(args: argparse.Namespace) -> int:
    """``--small``: the search with two_tp 1 and 2 on s19t's random small clusters (module docstring)."""
    import random
    from dataclasses import replace

    os.environ.setdefault("SAILOR_DATA", str(Path(args.sailor_data).resolve()))
    from planner.cluster import parse_gpus
    from planner.search import Objective, SearchSpace, plan_search
    from two_tp_pools_s19t import MAX_STAGES, MBS, TPS, model_contexts, random_cluster

    rng = random.Random(args.seed)
    load0, t_start = os.getloadavg()[0], time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    kinds = ("throughput", "cost", "value")
    stats = {k: {"n": 0, "wins": 0, "best": 1.0, "cpu1": 0.0, "cpu2": 0.0, "where": ""} for k in kinds}
    worst_cpu = 1.0
    print(f"{'model':7} {'cluster':62} {'GBS':>4} {'objective':10} {'key 1tp':>12} {'key 2tp':>12} {'1/2':>9} "
          f"{'cpu 1':>6} {'cpu 2':>6}", flush=True)
    for name, ctx, types, zones in model_contexts():
        space = SearchSpace(max_stages=MAX_STAGES[name], mbs_options=MBS, tp_options=TPS)
        for _ in range(args.small):
            gpus, gbs = random_cluster(rng, types, zones)
            cluster = parse_gpus(gpus, ctx.catalog)
            for kind in kinds:
                keys, cpus = [], []
                for k in (1, 2):
                    t0 = time.process_time()
                    keys.append(plan_search(ctx, cluster, gbs, Objective(kind), replace(space, two_tp=k)).best.key)
                    cpus.append(time.process_time() - t0)
                st, ratio = stats[kind], keys[0] / keys[1]
                st["n"] += 1
                st["cpu1"] += cpus[0]
                st["cpu2"] += cpus[1]
                worst_cpu = max(worst_cpu, cpus[1] / max(cpus[0], 1e-9))
                if ratio > 1 + 1e-12:
                    st["wins"] += 1
                    if ratio > st["best"]:
                        st["best"], st["where"] = ratio, f"{name} {gpus} GBS {gbs}"
                print(f"{name:7} {gpus:62} {gbs:>4} {kind:10} {keys[0]:>12.6g} {keys[1]:>12.6g} {ratio:>9.6f} "
                      f"{cpus[0]:>6.2f} {cpus[1]:>6.2f}", flush=True)
    print(f"started {t_start}, ended {time.strftime('%H:%M:%S UTC', time.gmtime())}; load average (1 min) "
          f"{load0:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} cores; seed {args.seed}")
    parts = [f"{k}: two TP degrees win {st['wins']} of {st['n']}"
             + (f" (largest 1/2 {st['best']:.6f}, {st['where']})" if st["wins"] else "")
             + f", CPU s {st['cpu1']:.1f} (two_tp=1) vs {st['cpu2']:.1f} (two_tp=2)" for k, st in stats.items()]
    print("summary (small clusters): " + "; ".join(parts) + f"; largest per-case CPU ratio 2/1 {worst_cpu:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
