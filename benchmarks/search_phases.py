"""Where one `sailor-plan` process spends its CPU: start-up and imports, then the search's phases, per setup.

Each setup of benchmarks/planner_vs_sailor.py chosen runs in a fresh process (this script with ``--child``),
which times (``time.process_time``) the imports of ``planner.cli_plan``, the whole ``main`` of
``sailor-plan ... --planner ours --json --no-comparator --time-limit-s none`` (benchmarks/search_time.py's
command), and inside it the engine's phases: the lazily built task list (``unit_bounds``, ``unit_tasks`` and
``task_floors`` as ``planner.search.taskqueue`` calls them), the refined task bounds (``task_bound``), the
tasks' pool rows (``run_task``), the chain plans (``search_chains``) and the production check
(``check_candidates``), the last four as ``planner.search.engine`` calls them. Phases are wrapped by name in
the module that calls them, so a phase nested in another (none today) would be counted twice. The table and one last summary line go to stdout.

    python benchmarks/search_phases.py --sailor-data ../shared/data/sailor [--only NAME ...]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

# (column, calling module, the functions wrapped there)
PHASE_FUNCS = (("task list", "planner.search.taskqueue", ("unit_bounds", "unit_tasks", "task_floors")),
               ("task_bound", "planner.search.engine", ("task_bound",)),
               ("run_task", "planner.search.engine", ("run_task",)),
               ("search_chains", "planner.search.engine", ("search_chains",)),
               ("check_candidates", "planner.search.engine", ("check_candidates",)))
PHASES = tuple(p for p, _, _ in PHASE_FUNCS)
DEFAULT = ("GPT-Neo 128+384", "Fig11 min$ >=0.2it/s", "Fig8b 32+96")


def child(argv: list[str]) -> None:
    """Run sailor-plan's main in this process with the engine's phases timed; print one JSON line."""
    t0 = time.process_time()
    import importlib
    import planner.cli_plan as cli
    t_imp = time.process_time() - t0
    spent = dict.fromkeys(PHASES, 0.0)
    for phase, module, names in PHASE_FUNCS:
        mod = importlib.import_module(module)
        for name in names:
            fn = getattr(mod, name)

            def timed(*a, _fn=fn, _phase=phase, **k):
                t = time.process_time()
                try:
                    return _fn(*a, **k)
                finally:
                    spent[_phase] += time.process_time() - t
            setattr(mod, name, timed)
    t1 = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(argv)
    if rc:
        raise SystemExit(f"error: sailor-plan exited {rc}")
    print(json.dumps({"imports": t_imp, "main": time.process_time() - t1, **spent}))


def main(argv: list[str] | None = None) -> int:
    from planner_vs_sailor import setups
    from search_time import _command
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--only", nargs="*", default=list(DEFAULT), help="setup names (default: three slow ones)")
    args = ap.parse_args(argv)
    sailor = str(Path(args.sailor_data).resolve())
    chosen = [st for st in setups() if st.name in args.only]
    load0 = os.getloadavg()[0]
    print(f"{'setup':24} {'imports':>8} {'main':>6} " + " ".join(f"{p:>16}" for p in PHASES))
    for st in chosen:
        cmd = _command(st, sailor)
        out = subprocess.run([sys.executable, __file__, "--child", *cmd[3:]], cwd=ROOT, capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if out.returncode:
            raise SystemExit(f"error: {st.name}: {out.stderr.strip()[-300:]}")
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{st.name:24} {r['imports']:8.2f} {r['main']:6.2f} " + " ".join(f"{r[p]:16.2f}" for p in PHASES),
              flush=True)
    print(f"summary: {len(chosen)} setups, CPU seconds in one process each; load average (1 min) {load0:.1f} at "
          f"start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        sys.exit(main())
