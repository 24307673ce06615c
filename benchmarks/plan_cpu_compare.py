"""Search CPU of ``sailor-plan`` on the setups of ``benchmarks/planner_vs_sailor.py``: this tree against another.

For every setup (the 4,096-GPU one left out: its search stops at the time limit, so its CPU measures the
limit) whole ``python -m planner.cli_plan ... --json --no-comparator --planner ours`` processes run
alternately in ``--before`` (another checkout, e.g. ``git worktree add /tmp/before main``) and in this tree,
``--repeat`` times each; the table gives the median CPU seconds (user + sys of the child process) of each and
whether the returned plans are identical (else the iteration times and the ratio before / after). The load
average at the start and the end is printed: figures taken on a shared machine must say so.

    python benchmarks/plan_cpu_compare.py --sailor-data ../shared/data/sailor --before /tmp/before
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.planner_vs_sailor import Setup, setups  # noqa: E402


def run(tree: Path, st: Setup, data: str) -> tuple[dict | None, float]:
    """(the JSON report or None, CPU seconds) of one sailor-plan process run in ``tree``."""
    source = ["--gbs", str(st.builtin_gbs)] if st.builtin_gbs else ["--sailor-data", data]
    cmd = [sys.executable, "-m", "planner.cli_plan", *source, "--model", st.model, "--gpus", st.gpus,
           "--objective", st.objective, "--json", "--no-comparator", "--planner", "ours", *st.extra]
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return (json.loads(proc.stdout) if proc.returncode == 0 else None), cpu


def _compare(rb: dict | None, ra: dict | None) -> str:
    if rb is None or ra is None:
        return "error"
    if rb["plan"] == ra["plan"]:
        return "same plan"
    tb, ta = rb["estimate"]["iteration_time_s"], ra["estimate"]["iteration_time_s"]
    return f"CHANGED: iteration {tb:.6g} s -> {ta:.6g} s (before/after {tb / ta:.4f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--before", required=True, help="the other checkout's root")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", help="run setups whose name contains this")
    args = ap.parse_args()
    data = str(Path(args.sailor_data).resolve())
    trees = {"before": Path(args.before).resolve(), "after": ROOT}
    print(f"load at start: {open('/proc/loadavg').read().split()[:3]} {time.strftime('%H:%M:%S')}", flush=True)
    print(f"{'setup':28} {'before cpu s':>12} {'after cpu s':>11} {'ratio':>6}  plans")
    ratios, changed = [], 0
    for st in setups():
        if "4 types" in st.name or (args.only and args.only not in st.name):
            continue
        cpu: dict[str, list[float]] = {"before": [], "after": []}
        reps: dict[str, dict | None] = {}
        for _ in range(args.repeat):
            for k, tree in trees.items():
                reps[k], c = run(tree, st, data)
                cpu[k].append(c)
        mb, ma = statistics.median(cpu["before"]), statistics.median(cpu["after"])
        verdict = _compare(reps["before"], reps["after"])
        changed += verdict != "same plan"
        ratios.append(ma / mb)
        print(f"{st.name:28} {mb:12.2f} {ma:11.2f} {ma / mb:6.2f}  {verdict}", flush=True)
    print(f"load at end: {open('/proc/loadavg').read().split()[:3]} {time.strftime('%H:%M:%S')}")
    print(f"summary: {len(ratios)} setups, after/before median CPU {min(ratios):.2f}-{max(ratios):.2f}x, "
          f"plans changed on {changed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
