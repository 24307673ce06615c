"""How often an uneven per-zone spread beats water-filling (docs/PLANNER.md section 9), by brute force.

For random small clusters (2-3 zones, unequal capacities, two GPU types sharing zones, class links) it finds
the best pool plan over EVERY per-zone distribution and over the water-filled ones only (scored by
``simulate``, S = 1, micro-batch 1, TP 1; ``tests/planner/test_zone_spreads_s13z.py``'s brute force), under
the hierarchical and auto rules, throughput (with and without a GPU cap) and cost objectives. Two families:
``random`` (both types anywhere) and ``fast+shared`` (a fast type in one zone, a second type there and in
another zone, a GPU cap: the shape of the pinned case). A table, then one summary line.

    python benchmarks/zone_spreads.py [--clusters 20] [--seed 0] [--gbs 256]
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from planner.cluster import parse_gpus  # noqa: E402
from planner.search import Objective  # noqa: E402
from tests.planner.test_zone_spreads_s13z import (ctx_for, every_spread, pool_best, random_cluster,  # noqa: E402
                                                  water_filled)


def fast_shared(rng: random.Random) -> tuple[str, int]:
    fast, slow = rng.choice([("GH-96", "A100-80"), ("H100-80", "A100-40"), ("A100-80", "V100-16")])
    a, b, c = rng.randint(2, 4), rng.randint(2, 4), rng.randint(2, 4)
    return f"{fast}@us-a={a},{slow}@us-a={b},{slow}@us-b={c}", a + b + c - rng.randint(1, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", type=int, default=20, help="random clusters per family")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gbs", type=int, default=256)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows, wins, best_gain = [], 0, (1.0, "")
    for family in ("random", "fast+shared"):
        for _ in range(args.clusters):
            if family == "random":
                gpus = random_cluster(rng, shared=True)
                objective = rng.choice([Objective("throughput"), Objective("cost", min_throughput_iters_per_s=2.0),
                                        Objective("throughput", max_gpus=rng.randint(3, 9))])
            else:
                gpus, cap = fast_shared(rng)
                objective = Objective("throughput", max_gpus=cap)
            sync = rng.choice(["hierarchical", "auto"])
            ctx = ctx_for(sync)
            cluster = parse_gpus(gpus, ctx.catalog)
            every, arg = pool_best(ctx, cluster, args.gbs, objective, 1, every_spread)
            filled, _ = pool_best(ctx, cluster, args.gbs, objective, 1, water_filled)
            gain = filled / every if every < float("inf") else 1.0
            win = gain > 1 + 1e-9
            wins += win
            if gain > best_gain[0]:
                best_gain = (gain, gpus)
            spread = ",".join(f"{g}@{z}x{n}" for g, z, _, n in arg[2]) if arg else "-"
            rows.append((family, gpus, sync, objective.kind + (f"<={objective.max_gpus}" if objective.max_gpus
                                                                else ""), filled, every, gain, spread if win else ""))
    print(f"{'family':<12} {'cluster':<58} {'rule':<12} {'objective':<14} {'water-filled':>12} {'every':>12}"
          f" {'gain':>8}  uneven winner")
    for fam, gpus, sync, obj, f, e, g, s in rows:
        print(f"{fam:<12} {gpus:<58} {sync:<12} {obj:<14} {f:>12.6g} {e:>12.6g} {g:>8.5f}  {s}")
    print(f"uneven spreads win on {wins} of {len(rows)} random clusters; largest gain {best_gain[0]:.5f}x"
          f" ({best_gain[1] or 'none'}); GBS {args.gbs}, S = 1, class links")


if __name__ == "__main__":
    main()
