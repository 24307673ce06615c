"""Whole-process CPU time of `sailor-plan` on every setup of benchmarks/planner_vs_sailor.py, this tree vs another.

Each setup runs as a fresh ``python -m planner.cli_plan ... --planner ours --json --no-comparator --time-limit-s
none`` process (interpreter start, imports, data loading, the search and the final simulation), ``--runs``
times from each tree, the trees alternating run by run so both see the same load; the table gives the median
and the minimum CPU seconds (user + sys of the child, ``resource.getrusage``). With ``--before DIR`` (another
checkout, e.g. ``git worktree add /tmp/before <commit>``) it also checks that both trees return the same plan,
estimate and alternatives (the JSON, less the path of the runtime-constants file) and says where they differ.

    python benchmarks/search_time.py --sailor-data ../shared/data/sailor [--runs 3] [--before DIR] [--skip NAME]
                                     [--no-bytecode-cache]

Imports: by default every tree gets its own bytecode cache (``PYTHONPYCACHEPREFIX`` in a temporary folder,
``PYTHONDONTWRITEBYTECODE`` unset for the child) and one uncounted warm-up process, so the figures are those of
an installed package, whose modules pip compiles once at install time. ``--no-bytecode-cache`` keeps the
caller's environment instead (on a machine with ``PYTHONDONTWRITEBYTECODE=1`` every process then compiles
every planner module from source, about 0.1 CPU s more).

The 4,096-GPU setup is left out by default (``--skip "4 types"``): it takes 14-17 s, and trees from before its
task bounds (2026-12-02) do not finish it. The table and one last summary line go to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_vs_sailor import GOALS_NOTE, setups  # noqa: E402


def _command(st, sailor: str) -> list[str]:
    source = ["--gbs", str(st.builtin_gbs)] if st.builtin_gbs else ["--sailor-data", sailor]
    return [sys.executable, "-m", "planner.cli_plan", *source, "--model", st.model, "--gpus", st.gpus,
            "--objective", st.objective, "--json", "--no-comparator", "--planner", "ours", "--time-limit-s", "none",
            *st.extra]


def child_env(tree: Path, pycache: Path | None) -> dict[str, str]:
    """The child's environment: the tree first on the path; with ``pycache``, a bytecode cache there."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def run_once(tree: Path, cmd: list[str], pycache: Path | None = None) -> tuple[float, dict]:
    """(CPU s, the report less machine-specific paths) of one fresh process run from ``tree``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, cwd=tree, env=child_env(tree, pycache), capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"error: {tree}: sailor-plan exited {out.returncode}: {out.stderr.strip()[-300:]}")
    rep = json.loads(out.stdout)
    rep["estimate"].pop("runtime_constants_file", None)
    same = {k: rep.get(k) for k in ("plan", "estimate", "alternatives", "search")}
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), same


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", type=Path, default=None, help="another checkout to compare against")
    ap.add_argument("--only", help="run setups whose name contains this")
    ap.add_argument("--skip", default="4 types", help="leave out setups whose name contains this")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="keep the caller's environment (no bytecode cache where PYTHONDONTWRITEBYTECODE is set)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="search-time-") as tmp:
        return _run(args, None if args.no_bytecode_cache else Path(tmp))


def _run(args: argparse.Namespace, cache_root: Path | None) -> int:
    sailor = str(Path(args.sailor_data).resolve())
    trees = [("now", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    chosen = [st for st in setups() if (not args.only or args.only in st.name)
              and not (args.skip and args.skip in st.name)]
    if not chosen:
        sys.stderr.write(f"search_time.py: --only {args.only!r} / --skip {args.skip!r} leave no setup "
                         "(the 4,096-GPU setup is skipped by default: add --skip '' to run it)\n")
        return 2
    caches = {tag: None if cache_root is None else cache_root / tag for tag, _ in trees}
    if cache_root is not None and chosen:               # one uncounted process per tree fills its cache
        for tag, tree in trees:
            run_once(tree, _command(chosen[0], sailor), caches[tag])
    load0 = os.getloadavg()[0]
    print(f"{'setup':26} " + "  ".join(f"{tag + ' cpu s median (min)':>26}" for tag, _ in trees)
          + f"  {'goal s':>6}  {'met':>3}" + ("  same plan" if args.before else ""))
    differ, ratios, missed = [], [], []
    for st in chosen:
        cpu = {tag: [] for tag, _ in trees}
        reps = {}
        for _ in range(args.runs):
            for tag, tree in trees:
                c, rep = run_once(tree, _command(st, sailor), caches[tag])
                cpu[tag].append(c)
                reps[tag] = rep
        same = "" if not args.before else ("  yes" if reps["now"] == reps["before"] else "  NO")
        if same == "  NO":
            differ.append(st.name)
        if args.before:
            ratios.append(statistics.median(cpu["now"]) / statistics.median(cpu["before"]))
        now = statistics.median(cpu["now"])
        met = st.budget_s is None or now <= st.budget_s
        if not met:
            missed.append(st.name)
        print(f"{st.name:26} " + "  ".join(f"{statistics.median(v):>17.2f} ({min(v):.2f})" for v in cpu.values())
              + f"  {'-' if st.budget_s is None else f'{st.budget_s:.0f}':>6}  {'yes' if met else 'NO':>3}" + same,
              flush=True)
    print(f"load average (1 min) {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} cores; "
          f"{args.runs} runs per setup and tree; "
          + ("bytecode cache per tree, warmed" if cache_root is not None else "the caller's environment (bytecode)"))
    print(GOALS_NOTE + " (met: the median CPU s of 'now', which counts the same process as the wall time the goal "
          "names on a quiet machine)")
    summary = f"summary: {len(chosen)} setups; {len(chosen) - len(missed)} meet the time goal by median CPU s"
    if args.before:
        summary += (f"; now / before median CPU {min(ratios):.2f}-{max(ratios):.2f}; "
                    + ("the same plans on every setup" if not differ else f"plans DIFFER on {', '.join(differ)}"))
    print(summary)
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
