"""Whole-process CPU time of `sailor-plan` with ``--chain-splits refine`` against the default (even split), per
setup of benchmarks/planner_vs_sailor.py with two or more GPU types (docs/PLANNER.md 2.7; session 17, s17r).

Each setup runs as fresh processes (:func:`search_time.run_once`: ``python -m planner.cli_plan ... --json
--no-comparator --planner ours --time-limit-s none``, a bytecode cache per tree, warmed): this tree without the
flag ("even") and with ``--chain-splits refine``, and with ``--before DIR`` the other tree both ways,
``--runs`` times each, alternating run by run so all see the same load. The table gives the median CPU seconds
of each, what the refinement adds in each tree (refine - even), the time goal, whether this tree's refine
meets it, whether refine returns another plan than even, and with ``--before`` whether both trees' refine
return the same JSON (plan, estimate, alternatives, search outcome).

    python benchmarks/refine_cost_s17r.py --sailor-data ../shared/data/sailor [--runs 3] [--before DIR]
                                          [--only NAME] [--skip NAME]

The 4,096-GPU setup is left out by default (``--skip "4 types"``, as benchmarks/search_time.py). A last summary
line. Exit 1 when the two trees' refined plans differ.
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

REFINE = ["--chain-splits", "refine"]


def _types(st) -> int:
    return len({p.split("@")[0] for p in st.gpus.split(",")})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, default=None, help="another checkout, run both ways too")
    ap.add_argument("--sailor-data", required=True)
    for flag, default, what in (("--runs", 3, "processes per setup and arm"),
                                ("--only", None, "run setups whose name contains this"),
                                ("--skip", "4 types", "leave out setups whose name contains this")):
        ap.add_argument(flag, default=default, type=type(default) if default is not None else str, help=what)
    args = ap.parse_args(argv)
    sailor = str(Path(args.sailor_data).resolve())
    chosen = [st for st in setups() if _types(st) >= 2 and (not args.only or args.only in st.name)
              and not (args.skip and args.skip in st.name)]
    arms = [("even", ROOT, []), ("refine", ROOT, REFINE)]
    if args.before:
        arms += [("before even", args.before.resolve(), []), ("before refine", args.before.resolve(), REFINE)]
    with tempfile.TemporaryDirectory(prefix="refine-cost-") as tmp:
        caches = {tree: Path(tmp) / str(i) for i, tree in enumerate({t for _, t, _ in arms})}
        if chosen:                          # one uncounted process per tree fills its bytecode cache
            for tree, cache in caches.items():
                run_once(tree, _command(chosen[0], sailor), cache)
        load0 = os.getloadavg()[0]
        print(f"{'setup':26} " + " ".join(f"{tag + ' cpu s':>18}" for tag, _, _ in arms)
              + f" {'added s':>8}" + (f" {'before added s':>14}" if args.before else "")
              + f" {'goal s':>6} {'met':>3} {'refined plan':>12}" + ("  same as before" if args.before else ""))
        added, before_added, differ, missed = [], [], [], []
        for st in chosen:
            cpu: dict[str, list[float]] = {tag: [] for tag, _, _ in arms}
            reps = {}
            for _ in range(args.runs):
                for tag, tree, extra in arms:
                    c, reps[tag] = run_once(tree, _command(st, sailor) + extra, caches[tree])
                    cpu[tag].append(c)
            med = {tag: statistics.median(v) for tag, v in cpu.items()}
            added.append(med["refine"] - med["even"])
            met = st.budget_s is None or med["refine"] <= st.budget_s
            if not met:
                missed.append(st.name)
            changed = "yes" if reps["refine"]["plan"] != reps["even"]["plan"] else "no"
            row = f"{st.name:26} " + " ".join(f"{med[tag]:>18.2f}" for tag, _, _ in arms) + f" {added[-1]:>+8.2f}"
            if args.before:
                before_added.append(med["before refine"] - med["before even"])
                same = reps["refine"] == reps["before refine"]
                if not same:
                    differ.append(st.name)
                row += f" {before_added[-1]:>+14.2f}"
            row += f" {'-' if st.budget_s is None else f'{st.budget_s:.0f}':>6} {'yes' if met else 'NO':>3} {changed:>12}"
            print(row + (("  yes" if same else "  NO") if args.before else ""), flush=True)
    print(f"load average (1 min) {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} cores; "
          f"{args.runs} runs per setup and arm, median CPU s (user + sys) of whole processes")
    if not chosen:
        print("summary: no setup matched")
        return 1
    summary = (f"summary: {len(chosen)} setups; refine adds {min(added):+.2f} to {max(added):+.2f} CPU s "
               f"(median {statistics.median(added):+.2f}); {len(chosen) - len(missed)} meet the time goal with refine")
    if args.before:
        summary += (f"; before's refine adds {min(before_added):+.2f} to {max(before_added):+.2f} "
                    f"(median {statistics.median(before_added):+.2f}); "
                    + ("the same refined plans on every setup" if not differ else f"plans DIFFER on {', '.join(differ)}"))
    print(summary)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
