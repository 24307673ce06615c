"""How long every README command takes, as ``tests/test_readme.py`` runs them (the same parser, sandboxes,
``# README test: ARGS`` sizes and block concurrency).

    python benchmarks/readme_commands.py [--jobs N] [--work-dir DIR]

Each ```bash block of README.md runs in its own fresh copy of the repository, ``--jobs`` blocks at a time
(default: the test's, 2 on a machine with 2 or more cores). Prints one row per command (block, seconds, exit
status, wall and CPU seconds, command), the load average before and after, and one summary line: commands
run, failures, wall time, the sum of the commands' wall times and of their CPU seconds (user + system of
each command and every process it waited for: unlike wall times, nearly independent of other load; a quiet
machine with C cores needs at least CPU / C wall seconds). Wall times are on this machine under whatever else
runs on it.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from planner.progress import status  # noqa: E402
from tests.test_readme import RUN_BLOCKS, default_jobs, run_readme  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=None, help="README blocks run side by side (default: the test's)")
    p.add_argument("--work-dir", default=None, help="where the sandboxes go (default: a new temporary folder)")
    args = p.parse_args(argv)
    jobs = args.jobs or default_jobs()
    if jobs < 1:
        print("error: --jobs must be >= 1", file=sys.stderr)
        return 2
    root = Path(args.work_dir or tempfile.mkdtemp(prefix="readme_commands_"))
    root.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    with status(f"running {len(RUN_BLOCKS)} README commands, {jobs} block(s) at a time"):
        outcomes = run_readme(root, jobs)
    wall_s = time.perf_counter() - start
    load_after = os.getloadavg()[0]
    print(f"{'block':>5} {'wall s':>7} {'CPU s':>7} {'exit':>4}  command")
    for (block, _), o in zip(RUN_BLOCKS, outcomes):
        print(f"{block:>5} {o.wall_s:>7.1f} {o.cpu_s:>7.1f} {o.returncode:>4}  {o.command[:95]}")
    failed = sum(o.returncode != 0 for o in outcomes)
    print(f"load average (1 min) before {load_before:.1f}, after {load_after:.1f}; {os.cpu_count()} CPUs; "
          f"sandboxes in {root}")
    print(f"README commands: {len(outcomes)} run, {failed} failed; wall {wall_s:.0f} s with {jobs} block(s) at a "
          f"time; sum of command wall times {sum(o.wall_s for o in outcomes):.0f} s, of CPU times "
          f"{sum(o.cpu_s for o in outcomes):.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
