"""Plans of Sailor's space that visit every zone: witnesses that raise the lower end of (b)'s bracket (s20b).

For the one-type multi-zone setups of ``benchmarks/planner_vs_sailor.py`` (Fig10, 5 zones x 256), this scores by
``simulate`` the chain plans of Sailor's space (Sailor's split, the same D on every stage, one micro-batch size,
TP 1) whose D identical pipelines visit the zones in runs: ``k = floor(GPUs per zone / D)`` consecutive stages
per zone (the pools' capacity), a few stages in the last zone of ``--first`` (us-west1-b by default: the
zone of another region, whose slow link is cheapest at the pipeline's start) first, then the others in
order, for D = floor(GPUs per zone / k), k = 1..6, micro-batch 1, 2, 4. Every plan printed is checked to fit
(``simulate``) and to hold at most each pool's GPUs, so its throughput is a lower bound on (b), the optimum of
Sailor's whole space. Such chains have up to 5 runs of equal groups; the search's chain plans have at most
``chain_segments`` (3) runs (docs/PLANNER.md 1.1), so neither (b') nor ours (c) contains them.

    python benchmarks/sailor_zone_witness_s20b.py --sailor-data ../shared/data/sailor [--only "Fig10 5x32"]

Columns: (b') and (c) it/s (``planner.api.plan``), the best witness (it/s, S x D b, its zones as runs) and
witness / (b'), witness / (c). The table and one summary line go to stdout.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from planner_bound import _context, _objective, _plan  # noqa: E402
from planner_vs_sailor import setups  # noqa: E402
from sailor_full_space import even_last_split, sailor_plan_of  # noqa: E402

SETUPS = ("Fig10 5x32 A100", "Fig10 5x80 A100", "Fig10 5x128 A100", "5 zones x 256 A100")


def witnesses(ctx, cluster, gbs: int, first: str):
    """(iteration s, S, D, b, zone per stage) of every fitting chain plan of the family in the docstring."""
    pools = list(cluster.pools)
    gtype = pools[0].gpu_type
    head = [p for p in pools if p.zone == first]
    order = head + [p for p in pools if p.zone != first]
    cap = min(p.count for p in pools)
    for k in range(1, 7):
        d = cap // k
        if d < 1:
            continue
        for mbs in (1, 2, 4):
            n_mb = gbs // mbs
            if d > n_mb or gbs % mbs:
                continue
            for w in range(0, k + 1) if head else (0,):
                zones = [order[0].zone] * w + [p.zone for p in order[len(head):] for _ in range(k)]
                for s_num in range(max(2, w + 1), min(len(zones), ctx.model.num_layers) + 1):
                    seq = zones[:s_num]
                    use = Counter(seq)
                    if any(use[p.zone] * d > p.count for p in pools):
                        continue
                    chain = tuple((gtype, z, 1) for z in seq)
                    counts = [n_mb // d + (1 if j < n_mb % d else 0) for j in range(d)]
                    plan = sailor_plan_of(even_last_split(ctx.model.num_layers, s_num), (chain,) * d, mbs, gbs,
                                          counts)
                    yield plan, seq


def best_witness(ctx, cluster, gbs: int, first: str):
    from planner.simulator import simulate
    best = None
    for plan, seq in witnesses(ctx, cluster, gbs, first):
        est = simulate(plan, ctx)
        if est.fits_in_memory and (best is None or est.iteration_time_s < best[0]):
            best = (est.iteration_time_s, plan, seq, est)
    return best


def _runs(seq) -> str:
    out: list[list] = []
    for z in seq:
        if out and out[-1][0] == z:
            out[-1][1] += 1
        else:
            out.append([z, 1])
    return " ".join(f"{z.split('-', 1)[1]}x{n}" for z, n in out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sailor-data", required=True)
    ap.add_argument("--only", help="run setups whose name contains this")
    ap.add_argument("--first", default="us-west1-b", help="the zone whose stages come first (default us-west1-b)")
    args = ap.parse_args()
    chosen = [st for st in setups() if st.name in SETUPS and (not args.only or args.only in st.name)]
    load0 = os.getloadavg()[0]
    print(f"{'setup':20} {'(b) it/s':>9} {'(c) it/s':>9} {'witness':>9} {'S x D b':>10} {'sync s':>7} "
          f"{'w/(b)':>6} {'w/(c)':>6}  zones (runs)".replace("(b)", "(b')"), flush=True)
    gains = []
    for st in chosen:
        ctx, cluster, gbs = _context(st, args.sailor_data)
        (b, _), (c, _) = (_plan(ctx, cluster, gbs, _objective(st), p) for p in ("sailor-space", "ours"))
        bi, ci = b.estimate.throughput_iters_per_s, c.estimate.throughput_iters_per_s
        found = best_witness(ctx, cluster, gbs, args.first)
        if found is None:
            print(f"{st.name:20} {bi:9.4f} {ci:9.4f} {'-':>9}")
            continue
        t, plan, seq, est = found
        wi = 1.0 / t
        gains.append((st.name, wi / bi, wi / ci))
        print(f"{st.name:20} {bi:9.4f} {ci:9.4f} {wi:9.4f} {f'{plan.num_stages}x{plan.dp_degree} b{plan.micro_batch_size}':>10} "
              f"{est.sync_s:7.4f} {wi / bi:6.3f} {wi / ci:6.3f}  {_runs(seq)}", flush=True)
    load1 = os.getloadavg()[0]
    if not gains:
        print("summary: no witness")
        return 1
    print(f"summary: on {len(gains)} setups a plan of Sailor's space visiting every zone reaches "
          f"{min(g for _, g, _ in gains):.3f}-{max(g for _, g, _ in gains):.3f} x (b') and "
          f"{min(g for _, _, g in gains):.3f}-{max(g for _, _, g in gains):.3f} x ours (c); load {load0:.1f} -> {load1:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
