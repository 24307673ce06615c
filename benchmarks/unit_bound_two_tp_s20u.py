"""The unit bound with two TP degrees per type (``SearchSpace.two_tp == 2``, docs/PLANNER.md 10.8) on the benchmark
setups: its CPU time against today's (one TP per type) and how much weaker it is.

For every setup of ``planner_vs_sailor.py`` (loaded as ``two_tp_rows_s19p.py`` does: the default space, the setup's
objective is not used: throughput), :func:`planner.search.unitbound.unit_bounds` is run with one TP per type and
with two (the knapsack per pool over the ``pair_hull`` vertices), best of ``--runs`` CPU times each. Columns: the
units, the units with a finite bound, the CPU seconds of each, the ratio two / one of the smallest unit bound
(the first unit the search expands) and the smallest ratio over the units with a finite bound. Last line: a summary.

    python benchmarks/unit_bound_two_tp_s20u.py [--sailor-data DIR] [--only NAME] [--skip NAME] [--runs 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_vs_sailor import setups  # noqa: E402
from planner import api  # noqa: E402
from planner.baselines.spaces import baseline_space  # noqa: E402
from planner.cli_plan import build_parser, _clusters  # noqa: E402
from planner.options import data_source  # noqa: E402
from planner.search import Objective, SearchSpace  # noqa: E402
from planner.search.tasks import Tables, cluster_options  # noqa: E402
from planner.search.unitbound import unit_bounds  # noqa: E402


def two_tp_space(space: SearchSpace) -> SearchSpace:
    return replace(space, two_tp=2)


def timed(fn, runs: int):
    best, out = np.inf, None
    for _ in range(runs):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def run_setup(st, data: str, runs: int) -> dict:
    argv = ["--gbs", str(st.builtin_gbs)] if st.builtin_gbs else ["--sailor-data", data]
    args = build_parser().parse_args(argv + ["--model", st.model, "--gpus", st.gpus])
    bundle = api.load_data(data_source(args), args.precision)
    ctx = api.context_for(api.make_context(bundle, args.runtime), _clusters(args, bundle.catalog)[0])
    cluster = _clusters(args, bundle.catalog)[0]
    gbs = args.gbs if args.gbs is not None else (bundle.default_gbs or 1024)
    one = baseline_space("ours", args.precision, None)
    two = two_tp_space(one)
    options = cluster_options(ctx, cluster, one)
    tables = Tables(ctx, one, options, cluster)
    obj = Objective("throughput")
    unit_bounds(ctx, cluster, tables, options, gbs, obj, one)       # warm the type tables
    t1, u1 = timed(lambda: unit_bounds(ctx, cluster, tables, options, gbs, obj, one), runs)
    t2, u2 = timed(lambda: unit_bounds(ctx, cluster, tables, options, gbs, obj, two), runs)
    b1, b2 = np.array([u.bound for u in u1]), np.array([u.bound for u in u2])
    assert (b2 <= b1).all()             # the knapsack holds every single option: never above today's bound
    fin = np.isfinite(b1)
    return {"gbs": gbs, "units": len(b1), "finite": int(fin.sum()), "t1": t1, "t2": t2,
            "first": float(b2[fin].min() / b1[fin].min()), "least": float((b2[fin] / b1[fin]).min())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sailor-data", default=os.path.join(ROOT, "..", "shared", "data", "sailor"))
    p.add_argument("--only", default=None, help="setups whose name contains this")
    p.add_argument("--skip", default=None, help="setups whose name contains this are left out")
    p.add_argument("--runs", type=int, default=3, help="CPU time: best of this many runs")
    a = p.parse_args()
    print(f"{'setup':28} {'GBS':>5} {'units':>6} {'finite':>6} {'1 TP s':>8} {'2 TP s':>8} {'x':>6} "
          f"{'first 2/1':>10} {'least 2/1':>10}")
    worst_x, worst_first, worst_least, n = 0.0, 1.0, 1.0, 0
    for st in setups():
        if (a.only and a.only not in st.name) or (a.skip and a.skip in st.name):
            continue
        r = run_setup(st, a.sailor_data, a.runs)
        x = r["t2"] / max(r["t1"], 1e-9)
        worst_x, n = max(worst_x, x), n + 1
        worst_first, worst_least = min(worst_first, r["first"]), min(worst_least, r["least"])
        print(f"{st.name:28} {r['gbs']:>5} {r['units']:>6} {r['finite']:>6} {r['t1']:>8.4f} {r['t2']:>8.4f} "
              f"{x:>6.2f} {r['first']:>10.4f} {r['least']:>10.4f}", flush=True)
    print(f"summary: {n} setups; unit_bounds with two TP degrees per type costs at most {worst_x:.2f}x today's CPU "
          f"time; the smallest unit bound falls to >= {worst_first:.4f}x, any unit's to >= {worst_least:.4f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
