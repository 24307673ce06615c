"""Whole-process time of `sailor-plan` / `sailor-sim` outside the search: start-up, imports and data loading.

Runs each command ``--runs`` times as a fresh process (``python -m planner.cli_plan ...``) and reports the
median and minimum wall and CPU (user + sys of the child, ``resource.getrusage``) seconds; with ``--before
DIR`` (another checkout of the repository, e.g. ``git worktree add /tmp/before <commit>``) the same commands
run from that tree too, alternating run by run, so both sides see the same load. Also in-process: the
``load_data`` of OPT-350 with ``--sailor-data`` (best of 15) in each tree.

    python benchmarks/startup.py --sailor-data ../shared/data/sailor [--runs 10] [--before DIR]

The table and one last summary line go to stdout.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN_ARGS = ["--model", "OPT-350", "--gbs", "1024", "--no-comparator", "--json"]


def commands(sailor: str, plan_file: str) -> list[tuple[str, list[str]]]:
    data = ["--sailor-data", sailor]
    return [
        ("sailor-plan --help", ["-m", "planner.cli_plan", "--help"]),
        ("sailor-plan 128 A100", ["-m", "planner.cli_plan", *data, *PLAN_ARGS, "--gpus", "A100-40@us-central1-a=128"]),
        ("sailor-plan 32 A100 + 96 V100", ["-m", "planner.cli_plan", *data, *PLAN_ARGS, "--gpus",
                                           "A100-40@us-central1-a=32,V100-16@us-central1-a=96"]),
        ("sailor-sim PLAN --json", ["-m", "planner.cli_sim", plan_file, *data, "--model", "OPT-350", "--json"]),
    ]


def run_once(tree: Path, args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh process run from ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, *args], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"error: {' '.join(args)} in {tree} exited {out.returncode}: {out.stderr.strip()[-300:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def load_data_s(tree: Path, sailor: str) -> float:
    code = ("import time\nfrom planner.inputs import DataSource, load_data\nbest = 1e9\n"
            "for _ in range(15):\n    t = time.perf_counter()\n"
            f"    load_data(DataSource(model='OPT-350', sailor_data={sailor!r}), 'fp32')\n"
            "    best = min(best, time.perf_counter() - t)\nprint(best)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def _fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--before", type=Path, default=None, help="another checkout to compare against")
    args = ap.parse_args(argv)
    sailor = str(Path(args.sailor_data).resolve())
    trees = [("now", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    with tempfile.TemporaryDirectory() as tmp:
        plan_file = str(Path(tmp) / "plan.json")
        subprocess.run([sys.executable, "-m", "planner.cli_plan", "--sailor-data", sailor, *PLAN_ARGS, "--gpus",
                        "A100-40@us-central1-a=128", "-o", plan_file], cwd=ROOT, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
        res = {(name, tag): ([], []) for name, _ in commands(sailor, plan_file) for tag, _ in trees}
        for _ in range(args.runs):
            for name, cmd in commands(sailor, plan_file):
                for tag, tree in trees:
                    w, c = run_once(tree, cmd)
                    res[(name, tag)][0].append(w)
                    res[(name, tag)][1].append(c)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}; {args.runs} runs per command and tree; "
          "median (min) seconds")
    print(f"{'command':32} " + "  ".join(f"{tag + ' wall / cpu':>27}" for tag, _ in trees))
    for name, _ in commands(sailor, "PLAN"):
        print(f"{name:32} " + "  ".join(f"{_fmt(res[(name, t)][0]) + ' / ' + _fmt(res[(name, t)][1]):>27}"
                                         for t, _ in trees))
    loads = {tag: load_data_s(tree, sailor) for tag, tree in trees}
    print(f"{'load_data OPT-350 (in-process)':32} " + "  ".join(f"{loads[t]:>27.3f}" for t, _ in trees))
    last = "summary: median CPU s " + ", ".join(
        f"{name}: " + " vs ".join(f"{statistics.median(res[(name, t)][1]):.2f} {t}" for t, _ in trees)
        for name, _ in commands(sailor, "PLAN"))
    print(last)
    return 0


if __name__ == "__main__":
    sys.exit(main())
