"""In-process A/B of search functions, this tree vs another (session 19, s19f): CPU seconds and bit-identity.

One ``sailor-plan`` run of this tree (``python -m planner.cli_plan ... --json --no-comparator --planner ours
--time-limit-s none``, benchmarks/search_time.py's command for the setup named). At every call the search makes
of each ``--target`` (``module:function``, e.g. ``planner.search.pools:_sync_batch``), this tree's function and
the other tree's (that module's file loaded as a module of its own, on this tree's other modules) run on the
same arguments, ``--repeats`` times each, alternating which goes first; the results are compared bit for bit
(arrays by dtype, shape and bytes; a difference stops the run). The CPU seconds (``time.process_time``) are summed
over every call: a measure without a tracing profiler's per-call cost and without the whole-process noise.
Memoised state the functions share (the link cache's tables) is filled by whichever runs first, alternately.

    python benchmarks/speed_ab_s19f.py --sailor-data ../shared/data/sailor --before /tmp/before19
        --setup "Fig10 5x80 A100" --target planner.search.pools:_sync_batch [--target ...] [--repeats 3]

One table line per target and one last summary line go to stdout.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import runpy
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from abload import load_module  # noqa: E402


def same(a, b) -> bool:
    """Bit-identical: arrays by dtype, shape and bytes; sequences, dicts and dataclasses element by element;
    floats by their bits (nan equal to nan of the same bits)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, float) and isinstance(b, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if hasattr(a, "__dataclass_fields__") and type(a).__name__ == type(b).__name__:
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return a == b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--before", required=True, help="the other tree")
    ap.add_argument("--setup", required=True, help="a setup name of benchmarks/planner_vs_sailor.py")
    ap.add_argument("--target", action="append", required=True, help="module:function (repeatable)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import planner
    if not planner.__file__.startswith(str(ROOT)):
        sys.exit(f"planner loaded from {planner.__file__}, not from {ROOT}")
    import planner.search.engine  # noqa: F401  (every search module loaded before patching)
    from planner_vs_sailor import setups
    from search_time import _command
    st = next((s for s in setups() if s.name == args.setup), None)
    if st is None:
        sys.exit(f"no setup named {args.setup!r}")
    totals: dict[str, list] = {}
    for target in args.target:
        mod_name, fn_name = target.split(":")
        mod = importlib.import_module(mod_name)
        old = load_module(Path(args.before) / (mod_name.replace(".", "/") + ".py"), "before_" + mod_name.replace(".", "_"))
        now_fn, old_fn = getattr(mod, fn_name), getattr(old, fn_name)
        tot = totals[target] = [0.0, 0.0, 0]

        def both(*a, _now=now_fn, _old=old_fn, _tot=tot, _name=target, **k):
            out = {}
            for _ in range(args.repeats):
                order = (("now", _now), ("before", _old)) if _tot[2] % 2 else (("before", _old), ("now", _now))
                for name, fn in order:
                    t0 = time.process_time()
                    out[name] = fn(*a, **k)
                    dt = time.process_time() - t0
                    _tot[0 if name == "now" else 1] += dt
            _tot[2] += 1
            if not same(out["now"], out["before"]):
                sys.exit(f"{_name}: call {_tot[2]} differs between the trees")
            return out["now"]

        for name, m in list(sys.modules.items()):      # the function and every module that imported it by name
            if name.startswith("planner") and getattr(m, fn_name, None) is now_fn:
                setattr(m, fn_name, both)
    cmd = _command(st, args.sailor_data)
    sys.argv = ["sailor-plan"] + cmd[3:]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_module("planner.cli_plan", run_name="__main__")
        except SystemExit as e:
            if e.code not in (0, None):
                raise
    print(f"{'target':45s} {'calls':>6s} {'now cpu s':>10s} {'before cpu s':>13s} {'ratio':>6s}")
    for target, (now, before, calls) in totals.items():
        print(f"{target:45s} {calls:6d} {now:10.3f} {before:13.3f} {now / max(before, 1e-12):6.2f}")
    print(f"summary: {args.setup}, {args.repeats} repeats per call, every call bit-identical; now / before CPU "
          + ", ".join(f"{t.split(':')[1]} {v[0] / max(v[1], 1e-12):.2f}" for t, v in totals.items()))


if __name__ == "__main__":
    main()
