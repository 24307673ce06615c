"""Our planner vs Sailor's on the paper's planner setups (OPT-350 GBS 1024, GPT-Neo-2.7 GBS 2048).

For every setup this runs the whole ``sailor-plan`` process (``python -m planner.cli_plan ... --json``; wall
time includes interpreter start, data loading, the search, the grid comparator and the final simulation),
and scores two comparators with the same simulator:
- ``sailor-shape``: the best plan of the shape Sailor's planner produces (micro-batch 1, even split of the
  layer ids, smallest TP that fits, same D on every stage, equal micro-batch counts; see
  planner/baselines/spaces.py). We do not have Sailor's actual plans, only its published numbers, which are
  printed for reference (they come from Sailor's own simulator, not ours);
- ``grid``: the best homogeneous Megatron-style grid (one GPU type, one zone, equal stages).

Usage: python benchmarks/planner_vs_sailor.py --sailor-data ../shared/data/sailor [--only NAME]
Ends with one summary line.
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


@dataclass(frozen=True)
class Setup:
    name: str
    model: str
    gpus: str
    sailor_its: float | None
    sailor_usd: float | None
    sailor_search_s: str
    budget_s: float | None           # our wall-time goal
    hetero: bool = False             # the >= 10 % quality goal applies
    extra: tuple[str, ...] = ()
    objective: str = "throughput"
    stated: tuple[int, int] | None = None   # (stages, replicas per stage) of the plan the issue says Sailor returns


def _g(*pools: tuple[str, str, int]) -> str:
    return ",".join(f"{t}@{z}={n}" for t, z, n in pools)


def setups() -> list[Setup]:
    out = []
    for n, its, usd, s in [(32, .1251, .261, "0.07"), (80, .2722, .300, "0.15"), (128, .4175, .313, "0.20")]:
        out.append(Setup(f"Fig7 {n} A100", "OPT-350", _g((A, Z[0], n)), its, usd, s, 1.0))
    for (a, v), its, usd, s in [((32, 96), .1700, .629, "1.4"), ((80, 240), .3609, .754, "3.9"),
                                ((128, 384), .5229, .833, "7.6")]:
        out.append(Setup(f"Fig8b {a}+{v}", "OPT-350", _g((A, Z[0], a), (V, Z[0], v)), its, usd, s,
                         2.0 if a == 128 else None, hetero=True, stated=(7, 32) if a == 128 else None))
    for n, its, usd, s in [(32, .4149, .441, "0.20"), (80, .7278, .668, "0.35"), (128, 1.0198, .764, "0.60")]:
        out.append(Setup(f"Fig10 5x{n} A100", "OPT-350", _g(*[(A, z, n) for z in Z]), its, usd, s, 1.0))
    two = _g((A, Z[0], 128), (A, Z[1], 128), (V, Z[0], 128), (V, Z[1], 128))
    out.append(Setup("Fig11 min$ >=0.2it/s", "OPT-350", two, .2350, .2779, "0.65", None,
                     extra=("--min-throughput", "0.2"), objective="cost"))
    out.append(Setup("Fig12 max it/s <=$1.2", "OPT-350", two, .6629, .4582, "14.0", None,
                     extra=("--max-cost-per-iter", "1.2")))
    for (a, v), its, usd, s in [((32, 96), .0263, 4.07, "1.5"), ((80, 240), .0583, 4.64, "9.1"),
                                ((128, 384), .0892, 4.85, "19.4")]:
        out.append(Setup(f"GPT-Neo {a}+{v}", "GPT-Neo-2.7", _g((A, Z[0], a), (V, Z[0], v)), its, usd, s,
                         5.0 if a == 128 else None, hetero=True))
    out.append(Setup("256 A100", "OPT-350", _g((A, Z[0], 256)), .665, None, "0.12", None))
    out.append(Setup("256 A100+256 V100", "OPT-350", _g((A, Z[0], 256), (V, Z[0], 256)), .669, None, "3.3", None))
    out.append(Setup("256 A100+V100+GH-96", "OPT-350", _g((A, Z[0], 256), (V, Z[0], 256), (GH, Z[0], 256)),
                     None, None, ">600", 30.0))
    out.append(Setup("5 zones x 256 A100", "OPT-350", _g(*[(A, z, 256) for z in Z]), 1.36, 1.02, "0.66", 2.0))
    return out


def run_ours(st: Setup, data: str) -> tuple[dict, float, float]:
    """(report, wall seconds, CPU seconds) of one whole sailor-plan process."""
    cmd = [sys.executable, "-m", "planner.cli_plan", "--sailor-data", data, "--model", st.model, "--gpus", st.gpus,
           "--objective", st.objective, "--json", *st.extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{st.name}: sailor-plan failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout), wall, cpu


def stated_plan_its(st: Setup, ctx) -> float | None:
    """Best it/s (our simulator) of the plan the issue states Sailor returns: S stages, R replicas per stage
    (the first a of every stage A100 TP 1, the rest V100 at TP t), micro-batch 1, layer ids split evenly."""
    if st.stated is None:
        return None
    import numpy as np
    from planner.api import simulate
    from planner.plan import Plan, Replica, Stage
    s_num, reps = st.stated
    cnt = [len(x) for x in np.array_split(np.arange(ctx.model.num_layers + 2), s_num)]
    cnt[0] -= 1
    cnt[-1] -= 1
    n_a, n_v = (int(x.split("=")[1]) for x in st.gpus.split(","))
    best = None
    for tv in (1, 2, 4):
        for a in range(0, reps + 1):
            if s_num * a > n_a or s_num * (reps - a) * tv > n_v:
                continue
            row = tuple([Replica(A, 1, Z[0])] * a + [Replica(V, tv, Z[0])] * (reps - a))
            stages, first = [], 0
            for n in cnt:
                stages.append(Stage(first, n, row))
                first += n
            est = simulate(Plan(num_layers=ctx.model.num_layers, stages=tuple(stages), micro_batch_size=1,
                                global_batch_size=1024), ctx)
            if est.fits_in_memory and (best is None or est.throughput_iters_per_s > best):
                best = est.throughput_iters_per_s
    return best


def run_shape(st: Setup, data: str) -> dict | None:
    from planner import api
    from planner.cluster import parse_gpus
    from planner.errors import InputError
    from planner.search import Objective
    bundle = api.load_data(api.DataSource(model=st.model, sailor_data=data))
    cluster = parse_gpus(st.gpus, bundle.catalog)
    ctx = api.context_for(api.make_context(bundle, None), cluster)
    ex = dict(zip(st.extra[::2], st.extra[1::2]))
    obj = Objective(st.objective, float(ex["--max-cost-per-iter"]) if "--max-cost-per-iter" in ex else None,
                    float(ex["--min-throughput"]) if "--min-throughput" in ex else None)
    try:
        rep = api.plan(api.PlanRequest(cluster=cluster, global_batch_size=bundle.default_gbs, objective=obj,
                                       planner="sailor", comparator=False), ctx)
    except InputError:
        return None
    est, cand = rep.estimate, rep.candidate
    return {"its": est.throughput_iters_per_s, "usd": est.cost_per_iteration_usd, "S": cand.num_stages,
            "D": sum(p.pipelines for p in cand.pools), "stated_its": stated_plan_its(st, ctx)}


def _fmt(x, spec=".4f"):
    return "-" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--only", help="run setups whose name contains this")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per setup; the fastest wall time counts (other processes share the 2 cores)")
    args = ap.parse_args()
    from rich.console import Console
    from rich.table import Table
    rows, fails = [], []
    load0 = os.getloadavg()[0]
    for st in setups():
        if args.only and args.only not in st.name:
            continue
        runs = [run_ours(st, args.sailor_data) for _ in range(max(1, args.repeat))]
        ours, wall, cpu = min(runs, key=lambda r: r[1])
        shape = run_shape(st, args.sailor_data)
        e, comp = ours["estimate"], ours.get("comparator")
        if st.objective == "cost":
            gain = None if shape is None else shape["usd"] / e["cost_per_iteration_usd"] - 1
        else:
            gain = None if shape is None else e["throughput_iters_per_s"] / shape["its"] - 1
        ok_q = gain is None or gain >= -1e-9
        ok_h = not st.hetero or (gain is not None and gain >= 0.10)
        ok_t = st.budget_s is None or wall <= st.budget_s
        ok_m = e["fits_in_memory"]
        if not (ok_q and ok_h and ok_t and ok_m):
            fails.append(st.name)
        rows.append((st, e, comp, shape, gain, wall, cpu, ok_q and ok_h and ok_m, ok_t, ours))
    t = Table(title="planner vs Sailor (ours and sailor-shape scored by our simulator; Sailor columns: its paper/artifact)")
    for col in ("setup", "Sailor it/s", "Sailor $/it", "Sailor s", "shape it/s", "shape $/it", "shape S x D",
                "ours it/s", "ours $/it", "ours S/mbs/GPUs", "grid it/s", "gain", "ours s", "cpu s", "goal s", "ok"):
        t.add_column(col, justify="right")
    for st, e, comp, shape, gain, wall, cpu, okq, okt, ours in rows:
        plan = ours["plan"]
        t.add_row(st.name, _fmt(st.sailor_its), _fmt(st.sailor_usd, ".3f"), st.sailor_search_s,
                  _fmt(shape and shape["its"]), _fmt(shape and shape["usd"], ".3f"),
                  "-" if not shape else f"{shape['S']}x{shape['D']}", _fmt(e["throughput_iters_per_s"]),
                  _fmt(e["cost_per_iteration_usd"], ".3f"),
                  f"{len(plan['stages'])}/{plan['micro_batch_size']}/{e['num_gpus']}",
                  _fmt(comp and comp["throughput_iters_per_s"]), "-" if gain is None else f"{gain:+.1%}",
                  f"{wall:.2f}", f"{cpu:.2f}", _fmt(st.budget_s, ".0f"), "yes" if okq and okt else "NO")
    Console(width=230).print(t)
    for st, *_r in rows:
        shape = _r[2]
        if shape and shape.get("stated_its"):
            print(f"{st.name}: the plan shape the issue states for Sailor ({st.stated[0]} stages x {st.stated[1]} "
                  f"replicas, micro-batch 1, even layers, best A100/V100 mix and V100 TP) scores "
                  f"{shape['stated_its']:.4f} it/s under our simulator (sailor-shape column: {shape['its']:.4f})")
    het = [r[4] for r in rows if r[0].hetero and r[4] is not None]
    print(f"load average (1 min) at start {load0:.1f}, at end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; "
          f"wall = fastest of {max(1, args.repeat)} runs, cpu = user + sys of that run")
    print(f"summary: {len(rows) - len(fails)}/{len(rows)} setups meet quality+speed goals"
          + (f"; heterogeneous gain vs sailor-shape min {min(het):+.1%}" if het else "")
          + (f"; failing: {', '.join(fails)}" if fails else ""))
    return 0 if not fails else 1


if __name__ == "__main__":
    sys.exit(main())
