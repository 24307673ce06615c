"""CPU seconds of building every depth's split list (``Tables.splits``) on one setup, and a digest of what it
builds, to compare trees (docs/PLANNER.md 2.3, "Session 14").

Runs ``sailor-plan`` once in-process with the given arguments to capture the search's ``Tables`` arguments
(context, space, GPU options, cluster), then builds the split lists of every depth ``--repeat`` times on fresh
``Tables`` and prints the least CPU time and a SHA-1 over: every depth's splits, the higher levels' needs
(``level-need``), the cap probe tables (``midcap``) and ``midlevels.task_keep`` of every single-type task.
Run it from each tree (``PYTHONPATH=TREE``) with the same arguments and compare the digests:

    PYTHONPATH=. python benchmarks/split_lists.py [--repeat 5] -- --sailor-data ../shared/data/sailor \\
        --model GPT-Neo-2.7 --gpus A100-40@us-central1-a=80,V100-16@us-central1-a=240 --json --no-comparator
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import sys
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("plan_args", nargs=argparse.REMAINDER, help="sailor-plan's arguments, after --")
    args = ap.parse_args(argv)
    plan_args = args.plan_args[1:] if args.plan_args[:1] == ["--"] else args.plan_args

    import planner.cli_plan as cli
    import planner.search.engine as engine
    from planner.search import midlevels

    captured = []
    real = engine.Tables

    class Capture(real):        # the search's own arguments
        def __init__(self, *a):
            captured.append(a)
            super().__init__(*a)

    engine.Tables = Capture
    argv_before = sys.argv
    sys.argv = ["sailor-plan", *plan_args]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            with contextlib.suppress(SystemExit):
                cli.main()
    finally:
        engine.Tables, sys.argv = real, argv_before
    if not captured:
        raise SystemExit("error: the search built no Tables (infeasible input?)")
    ctx, space, options, cluster = captured[0]
    num_layers = ctx.model.num_layers
    best, tables = float("inf"), None
    for _ in range(args.repeat):
        tables = real(ctx, space, options, cluster)
        t0 = time.process_time()
        for s_num in range(1, num_layers + 1):
            tables.splits(s_num)
        best = min(best, time.process_time() - t0)
    digest = hashlib.sha1()
    rows = 0
    for s_num in range(1, num_layers + 1):
        sp = tables.splits(s_num)
        rows += 0 if sp is None else len(sp)
        digest.update(b"none" if sp is None else np.ascontiguousarray(sp).tobytes() + str(sp.shape).encode())
        need = tables.memo.get(("level-need", s_num))
        if need is not None:
            digest.update(str(need[0]).encode() + np.ascontiguousarray(need[1]).tobytes())
        for g in sorted(options):
            for mbs, tp in options[g]:
                keep = midlevels.task_keep(tables, ((g, tp),), mbs, s_num) if s_num >= 4 else True
                digest.update(b"all" if keep is True else np.asarray(keep).tobytes())
    for key in sorted((k for k in tables.memo if isinstance(k, tuple) and k[0] == "midcap"), key=repr):
        for arr in tables.memo[key]:
            digest.update(repr(key).encode() + np.ascontiguousarray(arr).tobytes())
    print(f"split lists of every depth: {rows} splits; least CPU {best:.3f} s of {args.repeat}; "
          f"digest {digest.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
