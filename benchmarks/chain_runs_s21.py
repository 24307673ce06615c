"""Chains of up to five runs (session 21): `sailor-plan` with 3-run chains (the limit before) against the
default limit (3, or the number of zones up to 5 under throughput), side by side, on the multi-zone setups of
benchmarks/planner_vs_sailor.py.

Per setup and limit: the plan's it/s, whether the search finished, the whole-process CPU seconds (median of
``--runs`` alternating runs, ``resource.getrusage`` of the child) and the plan's chain. The last columns put the
default's plan against two reference points measured in session 20 (docs/PLANNER.md 7.4-7.5): the best
5-run witness plan of Sailor's space (``benchmarks/sailor_zone_witness_s20b.py``) and the proven upper bound on
the best plan of Sailor's whole space (``benchmarks/sailor_space_bound.py``), so ``def/ub`` is a proven lower
bound on ours / (b). Both references are constants copied from those runs (2026-12-07), not recomputed here.

    python benchmarks/chain_runs_s21.py --sailor-data ../shared/data/sailor [--runs 3] [--only NAME]

A table and one last summary line go to stdout.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_vs_sailor import setups  # noqa: E402
from search_time import _command, run_once  # noqa: E402

# session 20's references (docs/PLANNER.md 7.4-7.5): the best 5-run witness of Sailor's space and the proven
# upper bound on (b), it/s
WITNESS = {"Fig10 5x32 A100": 0.5155, "Fig10 5x80 A100": 0.9922, "Fig10 5x128 A100": 1.3050,
           "5 zones x 256 A100": 1.7254}
UPPER_B = {"Fig10 5x32 A100": 0.5203, "Fig10 5x80 A100": 1.0124, "Fig10 5x128 A100": 1.3556,
           "5 zones x 256 A100": 1.9287}


def _chain(rep: dict) -> str:
    stages = rep["plan"]["stages"]
    zones = [sorted({r["zone"] for r in st["replicas"]}) for st in stages]
    runs = []
    for z in zones:
        label = "+".join(x.replace("us-", "") for x in z)
        if not runs or runs[-1][0] != label:
            runs.append([label, 0])
        runs[-1][1] += 1
    return " ".join(f"{lab}x{n}" for lab, n in runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args(argv)
    chosen = [st for st in setups() if st.name in WITNESS and args.only in st.name]
    with tempfile.TemporaryDirectory() as cache:         # one bytecode cache, warmed (as search_time.py does)
        return _run(args, chosen, Path(cache))


def _run(args: argparse.Namespace, chosen: list, cache: Path) -> int:
    if chosen:
        run_once(ROOT, _command(chosen[0], args.sailor_data), cache)
    load0 = os.getloadavg()[0]
    print("setup                 limit  it/s     exact  cpu s (median)  chain (zones x stages)")
    gains, wit, lows = [], [], []
    for st in chosen:
        base = _command(st, args.sailor_data)
        res = {"3": {"cpu": []}, "def": {"cpu": []}}
        for _ in range(max(1, args.runs)):               # the two limits alternate run by run
            for label, extra in (("3", ["--chain-segments", "3"]), ("def", [])):
                cpu, rep = run_once(ROOT, base + extra, cache)
                res[label]["cpu"].append(cpu)
                res[label]["rep"] = rep
        for label in ("3", "def"):
            rep = res[label]["rep"]
            its = rep["estimate"]["throughput_iters_per_s"]
            res[label]["its"] = its
            print(f"{st.name:21s} {label:>5s}  {its:.4f}  {str(rep['search']['complete']):5s}  "
                  f"{statistics.median(res[label]['cpu']):6.2f}          {_chain(rep)}")
        d3, dd = res["3"]["its"], res["def"]["its"]
        gains.append(dd / d3)
        wit.append(dd / WITNESS[st.name])
        lows.append(dd / UPPER_B[st.name])
        print(f"{'':21s} def/3 {dd / d3:.3f}  def/witness {dd / WITNESS[st.name]:.3f}  "
              f"def/ub(b) {dd / UPPER_B[st.name]:.3f} (ours >= that x (b))")
    print(f"load average (1 min) {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} cores; "
          f"{args.runs} runs per setup and limit")
    if not chosen:
        print("summary: no setup matched")
        return 1
    print(f"summary: {len(chosen)} setups; default / 3-run chains {min(gains):.3f}-{max(gains):.3f}x it/s; "
          f"default / best 5-run witness {min(wit):.3f}-{max(wit):.3f}x; ours >= {min(lows):.3f}-{max(lows):.3f}x (b)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
