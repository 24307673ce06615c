"""Our planner vs the comparators of issue 13 on the Sailor paper's planner setups, all scored by our simulator.

For every setup three whole ``sailor-plan`` processes run (``python -m planner.cli_plan ... --json
--no-comparator --planner P``; wall time includes interpreter start, data loading, the search and the final
simulation), each under ``--time-limit`` seconds:
- (a) ``grid``: the best homogeneous Megatron grid (one GPU type in one zone, S divides L with equal stages,
  one TP, D identical pipelines with D dividing the micro-batch count);
- (b') ``sailor-space``: the exact optimum over Sailor's plan space (L layers split evenly, extra layers on
  the last stages; the same replica count on every stage; one micro-batch size; free micro-batch counts per
  pipeline) *restricted to* pipelines that keep one GPU type, TP and zone on every stage, plus *chain plans*:
  D identical pipelines whose stages change GPU type, TP and zone with at most 3 runs of equal stages (Sailor's
  stated plans, V100 -> A100 x4 -> V100 x2 and two stages in two zones, are such chains). Stages mixing
  chains of different compositions are not in it, so (b') is still a LOWER bound on the issue's comparator
  (b), the optimum of Sailor's full space; ours / (b') is an UPPER bound on ours / (b) (docs/PLANNER.md 4);
- (c) ``ours``: the planner's full declared space, under sailor-plan's default ``--time-limit-s``; the
  ``(c) search`` column says whether its search finished (exact) or stopped with the best plan so far and a
  gap to the bound on every plan it did not search; ``(c) RSS MiB`` is the process's peak resident memory.
The comparators run with ``--time-limit-s none``: a comparator that does not finish within ``--time-limit``
shows ``timeout>N s`` and no ratio.
Sailor's published numbers (its own simulator) are printed for reference only.

Usage: python benchmarks/planner_vs_sailor.py --sailor-data ../shared/data/sailor [--only NAME] [--skip NAME]
       [--time-limit S] [--strict] [--chain-splits even|segment|refine]
``--chain-splits`` is passed to (c)'s sailor-plan only (default: not passed, the CLI's default, Sailor's even
split); with it the table gains a ``(c) splits`` column (the comparators keep Sailor's even split).
Exit status: 0 when every process ran (the summary line says which setups miss a goal; wall-time goals depend
on the machine's load); with ``--strict``, 1 when any setup misses its quality or time goal.
Progress goes to stderr, one line per process; the table and one summary line to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

A, V, GH = "A100-40", "V100-16", "GH-96"
Z = ["us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f", "us-west1-b"]


GOALS_NOTE = ("goal s: issue 13's time goals: <= 1 s per setup, <= 2 s for the 512-GPU ones (128 A100 + 384 V100, "
              "2 types x 2 zones x 128), 10 s for 3 types x 256, 60 s for 4 types x 4 zones x 256; the 5 zones x 128 "
              "setup (640 GPUs) is held to the 1 s of the issue's table; setups the issue does not name: 1 s below "
              "512 GPUs, 2 s from 512 up")


@dataclass(frozen=True)
class Setup:
    name: str
    model: str
    gpus: str
    sailor_its: float | None
    sailor_usd: float | None
    sailor_search_s: str
    budget_s: float | None           # the wall-time goal (see GOALS_NOTE)
    hetero: bool = False             # the >= 10 % quality goal applies
    extra: tuple[str, ...] = ()
    objective: str = "throughput"
    stated: tuple[int, int] | None = None   # (stages, replicas per stage) of the plan the issue says Sailor returns
    builtin_gbs: int | None = None   # run on the built-in catalog, network and analytic profiles with this batch
                                     # (Sailor's files hold no H100-80 and no GH-96 link in every zone)


def _g(*pools: tuple[str, str, int]) -> str:
    return ",".join(f"{t}@{z}={n}" for t, z, n in pools)


def setups() -> list[Setup]:
    out = []
    for n, its, usd, s in [(32, .1251, .261, "0.07"), (80, .2722, .300, "0.15"), (128, .4175, .313, "0.20")]:
        out.append(Setup(f"Fig7 {n} A100", "OPT-350", _g((A, Z[0], n)), its, usd, s, 1.0))
    for (a, v), its, usd, s in [((32, 96), .1700, .629, "1.4"), ((80, 240), .3609, .754, "3.9"),
                                ((128, 384), .5229, .833, "7.6")]:
        out.append(Setup(f"Fig8b {a}+{v}", "OPT-350", _g((A, Z[0], a), (V, Z[0], v)), its, usd, s,
                         2.0 if a == 128 else 1.0, hetero=True, stated=(7, 32) if a == 128 else None))
    for n, its, usd, s in [(32, .4149, .441, "0.20"), (80, .7278, .668, "0.35"), (128, 1.0198, .764, "0.60")]:
        out.append(Setup(f"Fig10 5x{n} A100", "OPT-350", _g(*[(A, z, n) for z in Z]), its, usd, s, 1.0))
    two = _g((A, Z[0], 128), (A, Z[1], 128), (V, Z[0], 128), (V, Z[1], 128))
    out.append(Setup("Fig11 min$ >=0.2it/s", "OPT-350", two, .2350, .2779, "0.65", 2.0,
                     extra=("--min-throughput", "0.2"), objective="cost"))
    out.append(Setup("Fig12 max it/s <=$1.2", "OPT-350", two, .6629, .4582, "14.0", 2.0,
                     extra=("--max-cost-per-iter", "1.2")))
    for (a, v), its, usd, s in [((32, 96), .0263, 4.07, "1.5"), ((80, 240), .0583, 4.64, "9.1"),
                                ((128, 384), .0892, 4.85, "19.4")]:
        out.append(Setup(f"GPT-Neo {a}+{v}", "GPT-Neo-2.7", _g((A, Z[0], a), (V, Z[0], v)), its, usd, s,
                         2.0 if a == 128 else 1.0, hetero=True))
    out.append(Setup("256 A100", "OPT-350", _g((A, Z[0], 256)), .665, None, "0.12", 1.0))
    out.append(Setup("256 A100+256 V100", "OPT-350", _g((A, Z[0], 256), (V, Z[0], 256)), .669, None, "3.3", 2.0))
    out.append(Setup("256 A100+V100+GH-96", "OPT-350", _g((A, Z[0], 256), (V, Z[0], 256), (GH, Z[0], 256)),
                     None, None, ">600", 10.0))
    out.append(Setup("5 zones x 256 A100", "OPT-350", _g(*[(A, z, 256) for z in Z]), 1.36, 1.02, "0.66", 2.0))
    out.append(Setup("4 types x 4 zones x 256", "gpt-neo-2.7b",
                     _g(*[(g, z, 256) for g in (A, V, GH, "H100-80") for z in Z[:4]]), None, None, "-", 60.0,
                     hetero=True, builtin_gbs=2048))
    return out


# runs sailor-plan as ``python -m planner.cli_plan`` does and reports the process's peak RSS on stderr at exit
_RSS_WRAPPER = ("import atexit, resource, runpy, sys; atexit.register(lambda: sys.stderr.write("
                "'peak_rss_kib=%d\\n' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)); "
                "sys.argv = ['sailor-plan'] + sys.argv[1:]; runpy.run_module('planner.cli_plan', run_name='__main__')")


def _peak_rss_mib(stderr: str) -> float | None:
    for line in reversed(stderr.splitlines()):
        if line.startswith("peak_rss_kib="):
            return int(line.split("=", 1)[1]) / 1024
    return None


def run_plan(st: Setup, data: str, planner: str, limit_s: float, search_limit: str | None = None,
             chain_splits: str | None = None) -> tuple[dict | None, float, float, str]:
    """(report or None, wall seconds, CPU seconds, status) of one whole sailor-plan process; the report gains
    ``peak_rss_mib``. ``search_limit``: its ``--time-limit-s`` (None: the CLI's default); ``chain_splits``: its
    ``--chain-splits`` (None: not passed)."""
    source = ["--gbs", str(st.builtin_gbs)] if st.builtin_gbs else ["--sailor-data", data]
    limit = [] if search_limit is None else ["--time-limit-s", search_limit]
    limit += [] if chain_splits is None else ["--chain-splits", chain_splits]
    cmd = [sys.executable, "-c", _RSS_WRAPPER, *source, "--model", st.model, "--gpus", st.gpus,
           "--objective", st.objective, "--json", "--no-comparator", "--planner", planner, *limit, *st.extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit_s)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - t0, float("nan"), f"timeout>{limit_s:.0f}s"
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        lines = [x for x in proc.stderr.strip().splitlines() if not x.startswith("peak_rss_kib=")]
        msg = lines[-1] if lines else f"exit {proc.returncode}"     # the error, not the RSS wrapper's line
        sys.stderr.write(f"{st.name}: {planner}: {msg}\n")
        return None, wall, cpu, "error"
    rep = json.loads(proc.stdout)
    rep["peak_rss_mib"] = _peak_rss_mib(proc.stderr)
    return rep, wall, cpu, "ok"


def stated_plan_its(st: Setup, ctx) -> float | None:
    """It/s (our simulator) of the plan the issue states Sailor returns for 128 A100 + 384 V100: 7 stages x 32
    pipelines at micro-batch 1, each pipeline V100 (TP 4) -> four A100 stages (TP 1) -> two V100 stages (TP 4),
    the layers split evenly with the extra layers on the last stages, 32 micro-batches per pipeline."""
    if st.stated is None:
        return None
    from planner.api import simulate
    from planner.plan import Plan, Replica, Stage
    s_num, reps = st.stated
    chain = [Replica(V, 4, Z[0])] + [Replica(A, 1, Z[0])] * 4 + [Replica(V, 4, Z[0])] * 2
    q, r = divmod(ctx.model.num_layers, s_num)
    stages, first = [], 0
    for n, rep in zip([q] * (s_num - r) + [q + 1] * r, chain):
        stages.append(Stage(first, n, (rep,) * reps))
        first += n
    est = simulate(Plan(num_layers=ctx.model.num_layers, stages=tuple(stages), micro_batch_size=1,
                        global_batch_size=1024), ctx)
    return est.throughput_iters_per_s if est.fits_in_memory else None


def stated_for(st: Setup, data: str) -> float | None:
    if st.stated is None:
        return None
    from planner import api
    bundle = api.load_data(api.DataSource(model=st.model, sailor_data=data))
    return stated_plan_its(st, api.make_context(bundle, None))


def _fmt(x, spec=".4f"):
    return "-" if x is None else format(x, spec)


def _score(rep: dict | None, objective: str) -> float | None:
    """Higher is better: it/s, or 1 / ($/iteration) for the cost objective."""
    if rep is None:
        return None
    e = rep["estimate"]
    return 1.0 / e["cost_per_iteration_usd"] if objective == "cost" else e["throughput_iters_per_s"]


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def run_setup(st: Setup, args, idx: str) -> dict:
    out = {}
    # the comparators run without a search time limit (they either finish or hit the process timeout and
    # say so); ours runs with the CLI's default --time-limit-s and reports whether its search finished
    for planner, reps, lim in (("grid", 1, "none"), ("sailor-space", 1, "none"), ("ours", max(1, args.repeat), None)):
        splits = args.chain_splits if planner == "ours" else None
        runs = [run_plan(st, args.sailor_data, planner, args.time_limit, lim, splits) for _ in range(reps)]
        rep, wall, cpu, status = min(runs, key=lambda r: r[1])
        out[planner] = (rep, wall, cpu, status)
        sys.stderr.write(f"[{idx}] {st.name}: {planner} {status} in {wall:.1f} s\n")
        sys.stderr.flush()
    return out


def _chain_mark(plan: dict) -> str:
    """" c" when the plan's pipelines change GPU type, TP or zone between stages (a chain plan)."""
    firsts = {tuple(sorted(r.items())) for st in plan["stages"] for r in st["replicas"][:1]}
    return " c" if len(firsts) > 1 else ""


def _row(st: Setup, res: dict) -> tuple[list[str], dict]:
    (g, gw, _, gs), (b, bw, _, bs), (c, cw, ccpu, cs) = res["grid"], res["sailor-space"], res["ours"]
    sg, sb, sc = (_score(x, st.objective) for x in (g, b, c))
    r_a, r_b = _ratio(sc, sg), _ratio(sc, sb)
    e = c["estimate"] if c else None
    ok_t = c is not None and (st.budget_s is None or cw <= st.budget_s)
    ok_q = r_b is not None and r_b >= 1 - 1e-9 and (not st.hetero or r_b >= 1.10)
    plan = c["plan"] if c else None
    bp = b["plan"] if b else None
    srch = (c or {}).get("search") or {}
    done = "-" if not c else ("exact" if srch.get("complete", True) else
                              "stopped" + (f" gap {srch['gap']:.2f}x" if srch.get("gap") else ""))
    cells = [st.name, _fmt(st.sailor_its), _fmt(g and g["estimate"]["throughput_iters_per_s"]),
             _fmt(b and b["estimate"]["throughput_iters_per_s"]),
             "-" if not bp else f"{len(bp['stages'])}x{len(bp['stages'][0]['replicas'])}" + _chain_mark(bp),
             _fmt(e and e["throughput_iters_per_s"]), _fmt(e and e["cost_per_iteration_usd"], ".3f"),
             "-" if not plan else f"{len(plan['stages'])}/{plan['micro_batch_size']}/{e['num_gpus']}" + _chain_mark(plan),
             "-" if not e else f"{e['mfu']:.1%}", _fmt(r_a, ".3f"), _fmt(r_b, ".3f"),
             gs if gs != "ok" else f"{gw:.2f}", bs if bs != "ok" else f"{bw:.2f}",
             cs if cs != "ok" else f"{cw:.2f}", _fmt(ccpu, ".2f"), _fmt(c and c.get("peak_rss_mib"), ".0f"), done,
             _fmt(st.budget_s, ".0f"), "yes" if ok_q and ok_t else "NO"]
    return cells, {"r_b": r_b, "ok_q": ok_q, "ok_t": ok_t}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--only", help="run setups whose name contains this")
    ap.add_argument("--skip", help="leave out setups whose name contains this")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs of ours per setup; the fastest wall time counts (other processes share the cores)")
    ap.add_argument("--time-limit", type=float, default=600.0, help="seconds per sailor-plan process")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a setup misses its quality or time goal")
    from planner.search.space import CHAIN_SPLITS
    ap.add_argument("--chain-splits", choices=CHAIN_SPLITS, default=None,
                    help="passed to (c)'s sailor-plan (default: not passed; docs/PLANNER.md 2.7)")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table
    chosen = [st for st in setups() if (not args.only or args.only in st.name)
              and not (args.skip and args.skip in st.name)]
    load0 = os.getloadavg()[0]
    t = Table(title="planner vs comparators, all scored by our simulator: (a) grid, (b') Sailor's space with "
                    "homogeneous pipelines or chain plans (a lower bound on (b)), (c) ours (' c': a chain plan); Sailor it/s: its paper (its simulator)")
    for col in ("setup", "Sailor it/s", "(a) it/s", "(b') it/s", "(b') SxD", "(c) it/s", "(c) $/it",
                "(c) S/mbs/GPUs", "(c) MFU", "c/a", "c/b'", "(a) s", "(b') s", "(c) s", "(c) cpu s", "(c) RSS MiB",
                "(c) search", "goal s", "ok") + (("(c) splits",) if args.chain_splits else ()):
        t.add_column(col, justify="right")
    fails, het = [], []
    for i, st in enumerate(chosen):
        res = run_setup(st, args, f"{i + 1}/{len(chosen)}")
        cells, info = _row(st, res)
        t.add_row(*cells, *([args.chain_splits] if args.chain_splits else []))
        if not (info["ok_q"] and info["ok_t"]):
            fails.append(st.name)
        if st.hetero and info["r_b"] is not None:
            het.append(info["r_b"])
        stated = stated_for(st, args.sailor_data)
        if stated is not None:
            sys.stderr.write(f"{st.name}: the plan the issue states for Sailor ({st.stated[0]} stages x "
                             f"{st.stated[1]} pipelines V100 TP 4 -> 4 x A100 TP 1 -> 2 x V100 TP 4, micro-batch 1) "
                             f"scores {stated:.4f} it/s under our simulator\n")
    Console(width=240).print(t)
    print("ratios: c/a and c/b' are it/s ratios ($/iteration of the comparator over ours for the cost objective); "
          "goal: c/b' >= 1.10 on heterogeneous setups, >= 1.00 everywhere, (c) wall <= goal s. c/b' is an upper "
          "bound on c/b (b' is a lower bound on b), so meeting it does not establish the issue's goal.")
    print("(c) search: 'exact' = finished (the best plan of the declared space); 'stopped gap G' = stopped at "
          "sailor-plan's default --time-limit-s with the best plan so far, no plan of the space better than 1/G of "
          "its objective key; a comparator shown as timeout>N s did not finish within the process limit (no ratio)")
    print(GOALS_NOTE)
    print(f"load average (1 min) at start {load0:.1f}, at end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"(c) wall = fastest of {max(1, args.repeat)} runs, cpu = user + sys of that run")
    print(f"summary: {len(chosen) - len(fails)}/{len(chosen)} setups meet the c/b' quality and (c) time goals"
          + (f"; heterogeneous c/b' min {min(het):.3f}" if het else "")
          + (f"; failing: {', '.join(fails)}" if fails else ""))
    return 1 if fails and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
