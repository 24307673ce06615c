"""In-process A/B of the search's stage sync (``planner.search.netvec._sync_conc``), this tree vs another (session
18, s18z).

One ``sailor-plan`` run of this tree (``python -m planner.cli_plan ... --json --no-comparator --planner ours
--time-limit-s none``); at every call of ``_sync_conc`` the search makes, this tree's function and the other
tree's (its ``planner/search/netvec.py`` loaded as a module of its own, on this tree's other modules) run on the
same arguments, ``--repeats`` times each, alternating which goes first; the results are compared bit for bit
(dtype and bytes; a difference stops the run). CPU seconds (``time.process_time``) summed over every call: a
measure without the per-call cost of a tracing profiler and without the whole-process noise.

    python benchmarks/sync_conc_ab_s18z.py --sailor-data ../shared/data/sailor --before /work/main [--repeats 3]
        [--gpus A100-40@us-central1-a=80,...] [--model OPT-350]

One table line and one last summary line go to stdout.
"""
from __future__ import annotations

import argparse
import runpy
import sys
import time
from pathlib import Path

from abload import load_module

ROOT = Path(__file__).resolve().parents[1]
FIG10_5X80 = ",".join(f"A100-40@{z}=80" for z in ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f",
                                                   "us-west1-b"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--before", required=True, help="the other tree (its planner/search/netvec.py)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="OPT-350")
    ap.add_argument("--gpus", default=FIG10_5X80)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import planner.search.netvec as nv
    if not nv.__file__.startswith(str(ROOT)):
        sys.exit(f"planner loaded from {nv.__file__}, not from {ROOT}")
    old = load_module(Path(args.before) / "planner" / "search" / "netvec.py", "before_netvec")
    now_fn, tot, calls = nv._sync_conc, {"now": 0.0, "before": 0.0}, [0]

    def both(ctx, ch, pats, inv, D, d, grad, full, param=None):
        rings = {"now": ch, "before": old._Rings(ch.cache, ch.groups, ch.conc)}
        fns = {"now": now_fn, "before": old._sync_conc}
        out = {}
        for _ in range(args.repeats):
            for name in (("now", "before") if calls[0] % 2 else ("before", "now")):
                t0 = time.process_time()
                out[name] = fns[name](ctx, rings[name], pats, inv, D, d, grad, full, param)
                tot[name] += time.process_time() - t0
            for a, b in zip(out["now"], out["before"]):
                if a.dtype != b.dtype or a.tobytes() != b.tobytes():
                    sys.exit(f"call {calls[0]}: the two trees' results differ")
        calls[0] += 1
        return out["now"]

    nv._sync_conc = both
    sys.argv = ["sailor-plan", "--sailor-data", args.sailor_data, "--model", args.model, "--gpus", args.gpus,
                "--objective", "throughput", "--json", "--no-comparator", "--planner", "ours", "--time-limit-s", "none"]
    real_stdout = sys.stdout
    with open("/dev/null", "w") as sink:
        sys.stdout = sink
        try:
            runpy.run_module("planner.cli_plan", run_name="__main__")
        except SystemExit as e:
            if e.code not in (0, None):
                raise
        finally:
            sys.stdout = real_stdout
    print(f"{args.model} {args.gpus}: {calls[0]} calls, {args.repeats} repeats each: now {tot['now']:.3f} CPU s, "
          f"before {tot['before']:.3f} CPU s")
    ratio = tot["now"] / tot["before"] if tot["before"] > 0 else float("nan")
    print(f"summary: _sync_conc now / before {ratio:.2f}; results bit-identical at every call")


if __name__ == "__main__":
    main()
