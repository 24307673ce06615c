"""CPU time of one test (default: a brute-force planner test, ~21,000 ``simulate`` calls) in two source trees,
run alternately, side by side: a table of every run and a last summary line with the medians and their ratio.

    python benchmarks/simulate_speed_s17s.py --before /tmp/before17 --after . --runs 3

Each run is ``python -m pytest -q -p no:cacheprovider NODE`` in the tree's root with ``PYTHONPATH`` set to it;
CPU = user + system seconds of that process and its children (``resource.getrusage``), so other jobs on a
shared machine slow its wall time more than its CPU time. The load average is printed before and after.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

NODE = "tests/planner/test_planner_bruteforce.py::test_search_matches_brute_force_tiny[4]"


def run_once(tree: Path, node: str) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, exit status) of the test in ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node], cwd=tree,
                        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=Path("."))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--node", default=NODE)
    args = ap.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    print(f"node: {args.node}\nload average at start: {os.getloadavg()}")
    print("| run | tree | CPU s | wall s | exit |\n|---|---|---|---|---|")
    cpu: dict[str, list[float]] = {k: [] for k in trees}
    for i in range(args.runs):
        for name, tree in trees.items():
            c, w, rc = run_once(tree, args.node)
            cpu[name].append(c)
            print(f"| {i + 1} | {name} ({tree}) | {c:.1f} | {w:.1f} | {rc} |", flush=True)
            if rc != 0:
                print(f"the test failed in {tree}", file=sys.stderr)
                return 1
    b, a = statistics.median(cpu["before"]), statistics.median(cpu["after"])
    print(f"load average at end: {os.getloadavg()}")
    print(f"SUMMARY: median CPU before {b:.1f} s, after {a:.1f} s over {args.runs} alternating runs: "
          f"{b / a:.2f}x less CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
