"""Which restricted two-TP row sets keep the gain of two TP degrees per type (issue 13, docs/PLANNER.md 10.6).

s19t's random small clusters (``benchmarks/two_tp_pools_s19t.py``'s ``random_cluster``, the same seeds), throughput
(cost never won there). Per cluster: the search's plan (``plan_search``, chain plans on, its ``search_key``), and
:func:`planner.search.twotp.two_tp_search` (exhaustive, exact scores) over one TP per type, two TP degrees with
every count vector (``full``), at most one pipeline of a type's minority TP per pool (``r1``: ``minority=1``) and at
most one in all the type's zones (``r1t``: ``minority_total=1``), each TP's vector water-filled as the search's
rows are and the pairs that overfill a pool dropped (``wf``: ``water_filled=True``), and ``wf`` with ``r1``
(``wf1``). Ratios are the search's key / the variant's.
Prints a table and a last summary line.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from two_tp_pools_s19t import MAX_STAGES, MBS, TPS, model_contexts, random_cluster, search_key  # noqa: E402
from planner.cluster import parse_gpus  # noqa: E402
from planner.search import Objective, SearchSpace  # noqa: E402
from planner.search.twotp import two_tp_search  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", type=int, default=40, help="random clusters per model context")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    contexts = model_contexts()
    objective = Objective("throughput")
    print(f"{'model':<7} {'cluster':<62} {'GBS':>4} {'1-TP':>9} {'full':>9} {'r1':>9} {'r1t':>9} {'wf':>9} "
          f"{'wf1':>9} {'rows full':>9} {'rows r1':>8} {'rows r1t':>8} {'rows wf':>8} {'rows wf1':>8} {'CPU s':>6}")
    won = {"full": 0, "r1": 0, "r1t": 0, "wf": 0, "wf1": 0}
    lost = {"r1": 0, "r1t": 0, "wf": 0, "wf1": 0}
    worst = {"r1": 1.0, "r1t": 1.0, "wf": 1.0, "wf1": 1.0}
    best_full, n = 1.0, 0
    t_all = time.process_time()
    for name, ctx, types, zones in contexts:
        space = SearchSpace(max_stages=MAX_STAGES[name], mbs_options=MBS, tp_options=TPS, recompute=(False,),
                            distributed_optimizer=(False,))
        for _ in range(args.clusters):
            gpus, gbs = random_cluster(rng, types, zones)
            cluster = parse_gpus(gpus, ctx.catalog)
            t0 = time.process_time()
            ours, _ = search_key(ctx, cluster, gbs, objective, MAX_STAGES[name])
            res = {"1": two_tp_search(ctx, cluster, gbs, objective, space, max_tps=1),
                   "full": two_tp_search(ctx, cluster, gbs, objective, space),
                   "r1": two_tp_search(ctx, cluster, gbs, objective, space, minority=1),
                   "r1t": two_tp_search(ctx, cluster, gbs, objective, space, minority_total=1),
                   "wf": two_tp_search(ctx, cluster, gbs, objective, space, water_filled=True),
                   "wf1": two_tp_search(ctx, cluster, gbs, objective, space, minority=1, water_filled=True)}
            key = {k: (r.best.key if r.best else float("inf")) for k, r in res.items()}
            ratio = {k: ours / v for k, v in key.items()}
            n += 1
            best_full = max(best_full, ratio["full"])
            for k in won:
                won[k] += ratio[k] > 1 + 1e-9
            for k in lost:      # the variant misses part of the full gain
                if key[k] > key["full"] * (1 + 1e-9):
                    lost[k] += 1
                    worst[k] = max(worst[k], key[k] / key["full"])
            print(f"{name:<7} {gpus:<62} {gbs:>4} {ratio['1']:>9.5f} {ratio['full']:>9.5f} {ratio['r1']:>9.5f} "
                  f"{ratio['r1t']:>9.5f} {ratio['wf']:>9.5f} {ratio['wf1']:>9.5f} {res['full'].rows:>9} "
                  f"{res['r1'].rows:>8} {res['r1t'].rows:>8} {res['wf'].rows:>8} {res['wf1'].rows:>8} "
                  f"{time.process_time() - t0:>6.2f}", flush=True)
    print(f"{n} clusters (seed {args.seed}), throughput: two TP degrees beat the search on {won['full']} (largest "
          f"{best_full:.6f}x); the full optimum kept by " + ", ".join(
              f"{k} on {n - lost[k]} (worst {worst[k]:.6f})" for k in lost) +
          f"; {time.process_time() - t_all:.1f} CPU s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
