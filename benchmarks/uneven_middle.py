"""Uneven middle stages: every contiguous layer split of small pool plans, scored by ``simulate``.

For random small cases (5-8 layers, S = 4 or 5 stages, GPU memory near what an even pipeline needs, both
runtime presets, recomputation and the distributed optimizer on or off) every pool-plan *structure* (S, the
pipelines of every (type, zone) pool, recomputation, distributed optimizer; micro-batch counts as even as
possible) is scored by :func:`planner.simulator.simulate` on every composition of the layers into S stages.
Written independently of the search (it reads only ``simulate``, the split lists
``planner.search.tables.split_family`` and ``Tables.splits`` and the candidate rule ``planner.search.splits``).
Per structure:

- ``old``: the best split of the family declared before the staircases (first and last free, middle stages
  even with the larger ones last) over the best of all splits;
- ``now``: the same for the declared family (``split_family``: the old one plus the staircases);
- ``search``: the same for the splits the search visits for the case's tasks
  (:meth:`planner.search.tasks.Tables.splits`: the family plus the cap-bound middles of
  :mod:`planner.search.midcaps`, whose caps the search computes itself, not read off these simulations);
- ``rule``: the worst over (first, last) of the best split whose middle is one of
  ``planner.search.splits.middle_candidates`` at the per-stage memory caps read off the same simulations, over
  the best split with that first and last (docs/PLANNER.md 2.1, "Uneven middle stages").

Ratios are of iteration time (1.0: no loss). Prints one line per case with a plan that fits (its worst
structure) and a summary line. ``tests/planner/test_uneven_middle.py`` runs the same code on fewer cases.

    python benchmarks/uneven_middle.py --cases 300 --seed 1000
    python benchmarks/uneven_middle.py --cases 300 --seed 1000 --slow-links    # slow links, declared memory
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass, replace
from itertools import product
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.cluster import parse_gpus  # noqa: E402
from planner.hardware import GPUCatalog  # noqa: E402
from planner.model import ModelSpec  # noqa: E402
from planner.network import Link, NetworkModel  # noqa: E402
from planner.plan import Plan, Replica, Stage  # noqa: E402
from planner.profiles import ProfileStore  # noqa: E402
from planner.search.splits import middle_candidates  # noqa: E402
from planner.search.space import SearchSpace  # noqa: E402
from planner.search.tables import split_family  # noqa: E402
from planner.search.tasks import Tables, cluster_options  # noqa: E402
from planner.simulator import simulate  # noqa: E402
from planner.simulator.settings import OURS, SAILOR_DEEPSPEED, SimContext  # noqa: E402

GIB = 1024 ** 3
TYPES = ("V100-16", "A100-40")
REL = 1e-9


@dataclass(frozen=True)
class Case:
    ctx: SimContext
    pools: tuple[tuple[str, str, int], ...]     # (type, zone, GPUs)
    gbs: int
    recompute: bool
    dist: bool
    label: str


def compositions(n: int, k: int):
    if k == 1:
        yield (n,)
        return
    for first in range(1, n - k + 2):
        for rest in compositions(n - first, k - 1):
            yield (first,) + rest


def in_old_family(split: tuple[int, ...]) -> bool:
    """The family declared before the staircases (written again): middle stages differ by at most one, the
    larger ones last."""
    mid = split[1:-1]
    return len(mid) < 2 or (max(mid) - min(mid) <= 1 and list(mid) == sorted(mid))


def _plan(split, replicas, gbs, counts, recompute, dist) -> Plan:
    stages, first = [], 0
    for n in split:
        stages.append(Stage(first, n, tuple(replicas)))
        first += n
    return Plan(num_layers=sum(split), stages=tuple(stages), micro_batch_size=1, global_batch_size=gbs,
                microbatches_per_pipeline=tuple(counts), recompute_activations=recompute, distributed_optimizer=dist)


def random_case(seed: int) -> Case:
    """Few layers, one or two GPU types in one or two zones, memory scaled to an even 4- or 5-stage pipeline."""
    rng = random.Random(seed)
    L = rng.randint(5, 8)
    seq = rng.choice([1024, 2048, 4096])
    vocab = rng.choice([1024, 16384, 51200])
    model = ModelSpec("um", num_layers=L, hidden_size=512, num_heads=8, ffn_hidden_size=2048, seq_length=seq,
                      vocab_size=vocab, max_position_embeddings=seq)
    big = GPUCatalog().with_entries({g: {"memory_bytes": 64 * GIB} for g in TYPES})
    probe_ctx = SimContext(model, ProfileStore(model, big), NetworkModel(big), big, OURS)
    s_probe = rng.choice([4, 5])
    q, r = divmod(L, s_probe)
    even = [q] * (s_probe - r) + [q + 1] * r
    mem = {g: simulate(_plan(even, [Replica(g, 1, "z")], 8, [8], False, False), probe_ctx).peak_memory_bytes
           * rng.uniform(0.55, 1.0) for g in TYPES}
    catalog = GPUCatalog().with_entries({g: {"memory_bytes": int(v)} for g, v in mem.items()})
    settings = rng.choice([OURS, SAILOR_DEEPSPEED])
    ctx = SimContext(model, ProfileStore(model, catalog), NetworkModel(catalog), catalog, settings)
    pools = []
    for g in rng.sample(TYPES, rng.randint(1, 2)):
        for z in rng.sample(["us-a", "us-b"], rng.randint(1, 2)):
            pools.append((g, z, rng.randint(4, 10)))
    rc, dist = rng.random() < 0.3, rng.random() < 0.3
    label = (f"L={L} seq={seq} V={vocab} {settings.name} " + ",".join(f"{g}@{z}={n}" for g, z, n in pools)
             + f" mem={'/'.join(f'{v / GIB:.2f}' for v in mem.values())}GiB rc={int(rc)} dist={int(dist)}")
    return Case(ctx, tuple(pools), 8, rc, dist, label)


def rows(case: Case, s_num: int, max_rows: int = 4):
    """Replica lists (sorted by zone, type: the planner's order) of up to ``max_rows`` pipeline-count choices."""
    per_pool = [range(0, min(n // s_num, 2) + 1) for _, _, n in case.pools]
    out = []
    for ds in product(*per_pool):
        if 0 < sum(ds) <= case.gbs:
            pipes = sorted(((z, g) for (g, z, _), d in zip(case.pools, ds) for _ in range(d)))
            out.append([Replica(g, 1, z) for z, g in pipes])
    return out[-max_rows:]


@dataclass
class StructureResult:
    s_num: int
    replicas: int
    old_ratio: float           # best split of the earlier family / best split (inf: none of them fits)
    family_ratio: float        # best split of the family (split_family) / best split (inf: none fits, some split does)
    rule_ratio: float          # worst over (first, last) of best front-loaded / best (1.0: the rule holds)
    best_split: tuple[int, ...]
    family_split: tuple[int, ...] | None
    monotone: bool             # memory fits are monotone in a middle stage's size and position
    groups: int                # (first, last) pairs with a fitting split
    search_ratio: float = 1.0  # best split the search visits (Tables.splits) / best split
    search_split: tuple[int, ...] | None = None


def structure(case: Case, s_num: int, replicas, key: str = "time", declared_fit: bool = False
              ) -> StructureResult | None:
    """Every composition of the layers into ``s_num`` stages on one row; None if none fits. ``declared_fit``:
    memory checked at S micro-batches per pipeline (the declared space, docs/PLANNER.md 1 item 10), not at the
    row's own counts."""
    L = case.ctx.model.num_layers
    d = len(replicas)
    counts = [case.gbs // d + (1 if j < case.gbs % d else 0) for j in range(d)]
    scored, fit_at = {}, {}
    for split in compositions(L, s_num):
        est = simulate(_plan(split, replicas, case.gbs, counts, case.recompute, case.dist), case.ctx)
        fit = est
        if declared_fit and min(counts) < s_num:
            fit = simulate(_plan(split, replicas, s_num * d, [s_num] * d, case.recompute, case.dist), case.ctx)
        for s in range(1, s_num - 1):
            fit_at[(s, split[s])] = fit_at.get((s, split[s]), True) and fit.stages[s].fits_in_memory
        if fit.fits_in_memory:
            scored[split] = est.iteration_time_s if key == "time" else est.cost_per_iteration_usd
    if not scored:
        return None
    mids = range(1, s_num - 1)
    monotone = all(not ok or c == 1 or fit_at.get((s, c - 1), True) for (s, c), ok in fit_at.items()) and \
        all(not ok or s + 1 not in mids or fit_at.get((s + 1, c), True) for (s, c), ok in fit_at.items())
    caps = [max([c for (t, c), ok in fit_at.items() if t == s and ok], default=0) for s in mids]
    best = min(scored, key=scored.get)
    declared = {tuple(int(x) for x in row) for row in split_family(L, s_num)}
    old = [scored[sp] for sp in scored if in_old_family(sp)]
    fam = [sp for sp in scored if sp in declared]
    fam_best = min(fam, key=scored.get) if fam else None
    visited = search_splits(case, s_num)
    srch = [sp for sp in scored if sp in visited]
    srch_best = min(srch, key=scored.get) if srch else None
    rule, groups = 1.0, 0
    for a, c in {(sp[0], sp[-1]) for sp in scored}:
        groups += 1
        top = min(v for sp, v in scored.items() if sp[0] == a and sp[-1] == c)
        cands = [(a,) + m + (c,) for m in middle_candidates(L - a - c, caps)]
        got = min((scored[sp] for sp in cands if sp in scored), default=float("inf"))
        rule = max(rule, got / top)
    inf = float("inf")
    return StructureResult(s_num, d, min(old) / scored[best] if old else inf,
                           scored[fam_best] / scored[best] if fam else inf, rule, best, fam_best, monotone, groups,
                           scored[srch_best] / scored[best] if srch else inf, srch_best)


def search_splits(case: Case, s_num: int) -> set[tuple[int, ...]]:
    """The splits of depth ``s_num`` the search visits for the case (its cluster, micro-batch 1, TP 1, the case's
    recomputation and distributed optimizer)."""
    space = SearchSpace(max_stages=5, mbs_options=(1,), tp_options=(1,), recompute=(case.recompute,),
                        distributed_optimizer=(case.dist,), chain_segments=1)
    cluster = parse_gpus(",".join(f"{g}@{z}={n}" for g, z, n in case.pools), case.ctx.catalog)
    tables = Tables(case.ctx, space, cluster_options(case.ctx, cluster, space), cluster)
    return {tuple(int(x) for x in row) for row in tables.splits(s_num)}


def _cap_free(split: tuple[int, ...]) -> bool:
    """The middle is a front-loaded candidate without memory caps (a staircase at some level)."""
    mid = split[1:-1]
    return mid in middle_candidates(sum(mid), [sum(mid)] * len(mid))


def slow_links(case: Case, seed: int) -> Case:
    """The case with a slow inter-node link (0.3-10 GB/s; its own random stream, so the case is otherwise the
    same): transfers comparable to a layer's compute, where middles above the lowest level can win."""
    bw = random.Random(seed * 7919 + 13).choice([3e8, 1e9, 3e9, 1e10])
    net = case.ctx.network.with_class_links({"inter_node": Link(bw, 1e-5)})
    ctx = SimContext(case.ctx.model, case.ctx.profiles, net, case.ctx.catalog, case.ctx.settings)
    return replace(case, ctx=ctx, label=case.label + f" inter-node={bw / 1e9:g}GB/s")


def run_case(case: Case, key: str = "time", declared_fit: bool = False) -> list[StructureResult]:
    out = []
    for s_num in (4, 5):
        if s_num > case.ctx.model.num_layers:
            continue
        for reps in rows(case, s_num):
            r = structure(case, s_num, reps, key, declared_fit)
            if r is not None:
                out.append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--slow-links", action="store_true",
                    help="a slow inter-node link per case and memory checked at S micro-batches per pipeline "
                         "(the middles above the lowest level, docs/PLANNER.md 2.1)")
    args = ap.parse_args(argv)
    t0 = time.process_time()
    res_all: list[StructureResult] = []
    n_cases = 0
    print(f"{'case':>5} {'structs':>7} {'old loses':>9} {'worst old':>9} {'fam loses':>9} {'worst fam':>9} "
          f"{'srch lose':>9} {'rule':>8}  best split vs best family split (worst structure); case")
    for i in range(args.cases):
        case = random_case(args.seed + i)
        if args.slow_links:
            case = slow_links(case, args.seed + i)
        res = run_case(case, declared_fit=args.slow_links)
        if not res:
            continue
        n_cases += 1
        res_all += res
        w = max(res, key=lambda r: (r.family_ratio, r.old_ratio))
        print(f"{args.seed + i:>5} {len(res):>7} {sum(r.old_ratio > 1 + REL for r in res):>9} "
              f"{max(r.old_ratio for r in res):>9.4f} {sum(r.family_ratio > 1 + REL for r in res):>9} "
              f"{w.family_ratio:>9.4f} {sum(r.search_ratio > 1 + REL for r in res):>9} "
              f"{max(r.rule_ratio for r in res):>8.6f}  S={w.s_num} D={w.replicas} "
              f"{w.best_split} vs {w.family_split}; {case.label}", flush=True)

    def loss(attr: str) -> str:
        vals = [getattr(r, attr) for r in res_all]
        return f"{sum(v > 1 + REL for v in vals)} (worst x{max(vals, default=1.0):.4f})"
    fixed = [r.old_ratio for r in res_all if r.old_ratio > 1 + REL and r.family_ratio <= 1 + REL]
    left = [r for r in res_all if r.family_ratio > 1 + REL]
    free = sum(_cap_free(r.best_split) for r in left)
    lo, hi = min((r.family_ratio for r in left), default=1.0), max((r.family_ratio for r in left), default=1.0)
    print(f"recovered by the staircase: {len(fixed)} structures, earlier family's loss "
          f"{min(fixed, default=1.0):.4f}-{max(fixed, default=1.0):.4f}x; the family still loses {len(left)} (x"
          f"{lo:.4f}-{hi:.4f}), {free} of them a cap-free front-loaded middle (a higher staircase), "
          f"{len(left) - free} needing memory caps")
    lost = [r for r in res_all if r.search_ratio > 1 + REL]
    print(f"the search's splits (family + cap-bound middles + higher levels): still lost {len(lost)} (x"
          f"{max((r.search_ratio for r in lost), default=1.0):.4f}), {sum(_cap_free(r.best_split) for r in lost)} "
          f"of them a cap-free front-loaded middle; "
          + "; ".join(f"S={r.s_num} D={r.replicas} {r.best_split} vs {r.search_split}" for r in lost[:8]))
    print(f"summary: {n_cases} cases, {len(res_all)} structures (S = 4-5): best contiguous split beats the earlier "
          f"family on {loss('old_ratio')}, the family on {loss('family_ratio')}, the search's splits on "
          f"{loss('search_ratio')} (iteration time); "
          f"the front-loaded candidates miss it on {loss('rule_ratio')}; memory not monotone in a middle stage's "
          f"size and position on {sum(not r.monotone for r in res_all)}; {time.process_time() - t0:.0f} CPU s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
