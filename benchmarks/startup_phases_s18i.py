"""Where the fixed CPU time of one `sailor-plan` process goes, phase by phase, this tree vs another (session 18, s18i).

Each run is a fresh process from the tree (its own bytecode cache, warmed by one uncounted run) that does what
``python -m planner.cli_plan ... --json --no-comparator --planner ours --time-limit-s none`` does, with CPU
clocks (``time.process_time``: every thread of the process) around: the interpreter's start (up to the first
line of the probe), ``import numpy`` (after ``planner.blasthreads.one_blas_thread()`` where the tree has it, as
``sailor-plan``'s ``main`` calls it), the planner's imports (of them the dataclass creation, timed around
``dataclasses._process_class``), then in ``main``: ``load_data``, the search (``plan_search``), the check and
re-simulation of the returned plans (``checked_plans``) and the report (``report_json`` and the JSON text).
The trees alternate run by run; the table gives the median and the minimum per phase (milliseconds).

    python benchmarks/startup_phases_s18i.py --sailor-data ../shared/data/sailor [--runs 7] [--before DIR]
                                             [--gpus A100-40@us-central1-a=32] [--model OPT-350]

The table and one last summary line go to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE = r'''
import time, sys, io, json, dataclasses
T = {"start": time.process_time()}
try:
    from planner.blasthreads import one_blas_thread
    one_blas_thread()
except ImportError:                       # a tree from before session 18
    pass
t = time.process_time()
import numpy  # noqa: F401
T["numpy"] = time.process_time() - t
dc = [0.0]
_orig = dataclasses._process_class
def _timed(*a, **k):
    t0 = time.process_time()
    try:
        return _orig(*a, **k)
    finally:
        dc[0] += time.process_time() - t0
dataclasses._process_class = _timed
t = time.process_time()
import planner.cli_plan as cp
from planner import api
import planner.search.engine, planner.search.verify, planner.sailor_data, planner.progress  # noqa: F401,E401
T["imports"] = time.process_time() - t
dataclasses._process_class = _orig
T["of it dataclasses"] = dc[0]
acc = {}
def wrap(mod, name, label):
    f = getattr(mod, name)
    def g(*a, **k):
        t0 = time.process_time()
        try:
            return f(*a, **k)
        finally:
            acc[label] = acc.get(label, 0.0) + time.process_time() - t0
    setattr(mod, name, g)
wrap(api, "load_data", "load_data")
wrap(api, "plan_search", "search")
wrap(api, "checked_plans", "check + simulate")
wrap(cp, "report_json", "report")
out, real = io.StringIO(), sys.stdout
sys.stdout = out
t = time.process_time()
rc = cp.main(sys.argv[1:])
main = time.process_time() - t
sys.stdout = real
t = time.process_time()
json.loads(out.getvalue())
T.update(acc)
T["main, rest"] = main - sum(acc.values())
print(json.dumps({"rc": rc, **T}))
'''

PHASES = ("start", "numpy", "imports", "of it dataclasses", "load_data", "search", "check + simulate", "report",
          "main, rest")


def child_env(tree: Path, pycache: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONPYCACHEPREFIX": str(pycache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("OPENBLAS_NUM_THREADS", None)          # each tree does what its sailor-plan does
    return env


def run_once(tree: Path, args: list[str], pycache: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=tree, env=child_env(tree, pycache),
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"error: {tree}: {out.stderr.strip()[-300:]}")
    rep = json.loads(out.stdout.strip().splitlines()[-1])
    if rep.pop("rc") != 0:
        raise SystemExit(f"error: {tree}: sailor-plan returned non-zero")
    return rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--before", type=Path, default=None, help="another checkout to compare against")
    ap.add_argument("--model", default="OPT-350")
    ap.add_argument("--gpus", default="A100-40@us-central1-a=32")
    a = ap.parse_args(argv)
    args = ["--sailor-data", str(Path(a.sailor_data).resolve()), "--model", a.model, "--gpus", a.gpus,
            "--objective", "throughput", "--json", "--no-comparator", "--planner", "ours", "--time-limit-s", "none"]
    trees = [("now", ROOT)] + ([("before", a.before.resolve())] if a.before else [])
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="startup-phases-") as tmp:
        caches = {tag: Path(tmp) / tag for tag, _ in trees}
        for tag, tree in trees:
            run_once(tree, args, caches[tag])       # fills the tree's bytecode cache, not counted
        res: dict[str, dict[str, list[float]]] = {tag: {p: [] for p in PHASES} for tag, _ in trees}
        for _ in range(a.runs):
            for tag, tree in trees:
                rep = run_once(tree, args, caches[tag])
                for p in PHASES:
                    res[tag][p].append(rep.get(p, 0.0) * 1000)
    print(f"sailor-plan --model {a.model} --gpus {a.gpus}: CPU ms per phase, median (min) of {a.runs} runs")
    print(f"{'phase':20} " + "  ".join(f"{tag:>16}" for tag, _ in trees))
    totals = {tag: 0.0 for tag, _ in trees}
    for p in PHASES:
        print(f"{p:20} " + "  ".join(f"{statistics.median(res[t][p]):>8.0f} ({min(res[t][p]):>5.0f})"
                                     for t, _ in trees))
        if p != "of it dataclasses":
            for t, _ in trees:
                totals[t] += statistics.median(res[t][p])
    print(f"{'sum of medians':20} " + "  ".join(f"{totals[t]:>16.0f}" for t, _ in trees))
    print(f"load average (1 min) {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} cores")
    fixed = {t: totals[t] - statistics.median(res[t]["search"]) for t, _ in trees}
    print("summary: fixed CPU ms (all but the search), sum of medians: "
          + ", ".join(f"{t} {fixed[t]:.0f}" for t, _ in trees)
          + (f"; now / before {fixed['now'] / fixed['before']:.2f}" if a.before else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
