"""How many tasks and rows two TP degrees per GPU type would add to the search's space (counting only, no search).

On every setup of ``benchmarks/planner_vs_sailor.py`` (its data, model, GPUs and batch, the default space), per unit
(S, micro-batch size) and GPU type, the TP degrees a task may give the type (``tasks.cluster_options``, a pool
holding one pipeline of S stages, a split that fits with or without recomputation: ``Tables.arrays``), then:

- ``1tp``: today's tasks (one TP per used type) and rows (``rows.zone_splits`` per type under the pool caps
  ``floor(n / (S t))``, the product over the used types with at most N pipelines in all);
- ``pairs``: tasks with a set of one or two TP degrees per used type; a two-TP type's rows are pairs of
  water-filled vectors (``zone_splits`` of each TP alone) that fit each pool jointly (``t1 u_z + t2 v_z <=
  floor(n_z / S)``), both TPs used. Where a type's pair product exceeds ``--exact-limit`` the joint cap is not
  checked and the count is the plain product (an upper bound, marked ``<=``);
- ``r1``: the same tasks; a two-TP type's rows: one TP water-filled (>= 1 pipeline) under the caps left by at most
  one pipeline of the other TP per pool (>= 1 such pipeline), either TP as the minority (rows counted once);
- ``r1z``: as ``r1`` with the minority TP's single pipeline in one zone of the type.

Rows are summed over every task and unit (recomputation and the distributed optimizer double the tasks alike and
are not counted). Exact integers (Python ints); the rows are the space's, not what the search builds (its bounds
build a small part of them). Prints a table and a last summary line.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from itertools import combinations
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_vs_sailor import setups  # noqa: E402
from planner import api  # noqa: E402
from planner.baselines.spaces import baseline_space  # noqa: E402
from planner.cli_plan import build_parser, _clusters  # noqa: E402
from planner.options import data_source  # noqa: E402
from planner.search.rows import zone_splits  # noqa: E402
from planner.search.tasks import Tables, cluster_options  # noqa: E402
from planner.search.twotp import pool_caps  # noqa: E402


def hist(rows: np.ndarray, n: int) -> list[int]:
    """Rows per total pipeline count 0..n (rows with more are dropped)."""
    tot = rows.sum(axis=1) if rows.size else np.zeros(len(rows), dtype=np.int64)
    return [int(x) for x in np.bincount(tot[tot <= n], minlength=n + 1)[:n + 1]]


def wf(units: tuple[int, ...], t: int, n: int) -> np.ndarray:
    """Water-filled vectors of one TP over zones with ``units`` TP units each (zones without room: 0)."""
    caps = tuple(u // t for u in units)
    keep = [i for i, c in enumerate(caps) if c > 0]
    out = np.zeros((0, len(units)), dtype=np.int64)
    if keep:
        sub = zone_splits(tuple(caps[i] for i in keep), n)
        out = np.zeros((len(sub), len(units)), dtype=np.int64)
        out[:, keep] = sub
    return out


def pair_hist(units, t1, t2, n, limit) -> tuple[list[int], bool]:
    """(rows per total, exact?) of the ``pairs`` rule."""
    u, v = wf(units, t1, n), wf(units, t2, n)
    out = [0] * (n + 1)
    if len(u) * len(v) > limit:
        hu, hv = hist(u, n), hist(v, n)
        for a, x in enumerate(hu):
            for b, y in enumerate(hv[:n - a + 1]):
                out[a + b] += x * y
        return out, False
    cap = np.array(units)
    step = max(1, limit // max(1, 50 * len(v)))
    for lo in range(0, len(u), step):
        uu = u[lo:lo + step]
        ok = (uu[:, None, :] * t1 + v[None, :, :] * t2 <= cap).all(axis=2)
        tot = (uu.sum(axis=1)[:, None] + v.sum(axis=1)[None, :])[ok]
        for d, c in enumerate(np.bincount(tot[tot <= n], minlength=n + 1)[:n + 1]):
            out[d] += int(c)
    return out, True


def r1_hist(units, t1, t2, n, max_zones: int | None = None) -> list[int]:
    """Rows per total of the ``r1`` rule; ``max_zones`` = 1: the ``r1z`` rule (the minority's one pipeline in one
    zone of the type)."""
    z = len(units)
    top = z if max_zones is None else min(z, max_zones)
    out = [0] * (n + 1)
    overlap = [0] * (n + 1)
    for ta, tb in ((t1, t2), (t2, t1)):
        for size in range(1, top + 1):
            for m in combinations(range(z), size):
                if any(units[i] < tb for i in m):
                    continue
                left = tuple(units[i] - (tb if i in m else 0) for i in range(z))
                for d, c in enumerate(hist(wf(left, ta, n), n)):
                    if d >= 1 and d + size <= n:
                        out[d + size] += c
                if ta == t1:        # rows whose majority vector is 0/1 too: counted in both orientations
                    for s2 in range(1, top + 1):
                        for m2 in combinations(range(z), s2):
                            if all(left[i] >= ta for i in m2) and s2 + size <= n:
                                overlap[s2 + size] += 1
    return [a - b for a, b in zip(out, overlap)]


def poly_rows(per_type: list[list[int]], n: int) -> int:
    """Rows summed over every task of every non-empty type subset: prod_g (1 + H_g) - 1, totals 1..n."""
    acc = [1] + [0] * n
    for h in per_type:
        new = acc[:]
        for a, x in enumerate(acc):
            if x:
                for b in range(1, n - a + 1):
                    if h[b]:
                        new[a + b] += x * h[b]
        acc = new
    return sum(acc[1:])


def count_setup(st, data: str, limit: int) -> dict:
    argv = ["--gbs", str(st.builtin_gbs)] if st.builtin_gbs else ["--sailor-data", data]
    args = build_parser().parse_args(argv + ["--model", st.model, "--gpus", st.gpus])
    bundle = api.load_data(data_source(args), args.precision)
    ctx = api.make_context(bundle, args.runtime)
    cluster = _clusters(args, bundle.catalog)[0]
    ctx = api.context_for(ctx, cluster)
    gbs = args.gbs if args.gbs is not None else (bundle.default_gbs or 1024)
    space = baseline_space("ours", args.precision, None)
    options = cluster_options(ctx, cluster, space)
    tables = Tables(ctx, space, options, cluster)
    max_s = min(ctx.model.num_layers, space.max_stages or ctx.model.num_layers)
    res = {"tasks1": 0, "tasks2": 0, "rows1": 0, "rows2": 0, "rowsr1": 0, "rowsr1z": 0, "exact": True, "gbs": gbs}
    for s_num in range(1, max_s + 1):
        for mbs in sorted({m for g in options for m, _ in options[g]}):
            if gbs % mbs:
                continue
            n = gbs // mbs
            h1, h2, hr, hz = [], [], [], []
            c1, c2 = [], []
            for g in sorted(options):
                units = tuple(c for _, c in pool_caps(cluster, g, s_num))
                ts = [t for m, t in options[g] if m == mbs and units and max(units) >= t
                      and any(tables.arrays(g, t, mbs, s_num, rc) is not None for rc in space.recompute)]
                if not ts:
                    continue
                one = [hist(wf(units, t, n), n) for t in ts]
                pairs, r1, r1z = [], [], []
                for t1, t2 in combinations(ts, 2):
                    h, ok = pair_hist(units, t1, t2, n, limit)
                    res["exact"] &= ok
                    pairs.append(h)
                    r1.append(r1_hist(units, t1, t2, n))
                    r1z.append(r1_hist(units, t1, t2, n, 1))
                s1 = [sum(col) for col in zip(*one)]
                h1.append(s1)
                h2.append([a + sum(col) for a, col in zip(s1, zip(*pairs))] if pairs else s1)
                hr.append([a + sum(col) for a, col in zip(s1, zip(*r1))] if r1 else s1)
                hz.append([a + sum(col) for a, col in zip(s1, zip(*r1z))] if r1z else s1)
                c1.append(len(ts))
                c2.append(len(ts) + len(ts) * (len(ts) - 1) // 2)
            res["tasks1"] += int(np.prod([1 + c for c in c1], dtype=object)) - 1
            res["tasks2"] += int(np.prod([1 + c for c in c2], dtype=object)) - 1
            res["rows1"] += poly_rows(h1, n)
            res["rows2"] += poly_rows(h2, n)
            res["rowsr1"] += poly_rows(hr, n)
            res["rowsr1z"] += poly_rows(hz, n)
    return res


def fmt(x: int) -> str:
    return f"{x:,}" if x < 10 ** 12 else f"{x:.3g}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sailor-data", default=os.path.join(ROOT, "..", "shared", "data", "sailor"))
    p.add_argument("--only", default=None, help="setups whose name contains this")
    p.add_argument("--skip", default=None, help="setups whose name contains this are left out")
    p.add_argument("--exact-limit", type=int, default=20_000_000, help="largest pair product checked per pool")
    a = p.parse_args()
    print(f"{'setup':28} {'GBS':>5} {'tasks 1tp':>10} {'tasks 2tp':>10} {'x':>6} {'rows 1tp':>16} {'rows pairs':>18} "
          f"{'x':>9} {'rows r1':>16} {'x':>7} {'rows r1z':>16} {'x':>7} {'s':>6}")
    worst_pairs, worst_r1, worst_r1z, worst_tasks, all_exact = 0.0, 0.0, 0.0, 0.0, True
    for st in setups():
        if (a.only and a.only not in st.name) or (a.skip and a.skip in st.name):
            continue
        t0 = time.process_time()
        r = count_setup(st, a.sailor_data, a.exact_limit)
        dt = time.process_time() - t0
        xt, x2, xr = r["tasks2"] / r["tasks1"], r["rows2"] / r["rows1"], r["rowsr1"] / r["rows1"]
        xz = r["rowsr1z"] / r["rows1"]
        worst_pairs, worst_r1, worst_tasks = max(worst_pairs, x2), max(worst_r1, xr), max(worst_tasks, xt)
        worst_r1z = max(worst_r1z, xz)
        all_exact &= r["exact"]
        mark = "" if r["exact"] else "<="
        print(f"{st.name:28} {r['gbs']:>5} {r['tasks1']:>10,} {r['tasks2']:>10,} {xt:>6.2f} {fmt(r['rows1']):>16} "
              f"{mark + fmt(r['rows2']):>18} {x2:>9.3g} {fmt(r['rowsr1']):>16} {xr:>7.3g} {fmt(r['rowsr1z']):>16} "
              f"{xz:>7.3g} {dt:>6.1f}")
    print(f"two TP degrees per type: tasks x{worst_tasks:.2f} at most; rows x{worst_pairs:.3g} (pairs"
          f"{'' if all_exact else ', some upper bounds'}), x{worst_r1:.3g} (r1) and x{worst_r1z:.3g} (r1z) at most over the "
          "setups")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
