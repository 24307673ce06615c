"""Pure rank layout of a plan: which global rank plays which role (no torch.distributed here).

Rank order (documented contract, used by launchers): stage-major, then replica (= pipeline index), then
tensor-parallel rank. For stage ``s`` and replica ``j``::

    rank(s, j, t) = sum_{s' < s} gpus(stage s') + sum_{j' < j} tp(s, j') + t

so one replica's TP ranks are consecutive (TP stays inside a node) and a stage's ranks are contiguous.

Gradient reduction across replicas of different TP uses *fine shards*: with ``L = lcm`` of the TP
degrees of a stage, every TP-sharded parameter is cut into ``L`` slices along its partition dimension; a
rank of a TP-``t`` replica holds ``L / t`` consecutive fine shards. The ranks holding fine shard ``f``
(one per replica) form reduce group ``f`` of that stage.

``python -m megatron_sailor.runtime.topology PLAN`` prints who is who.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from functools import reduce

from planner.errors import InputError
from planner.plan import Plan


@dataclass(frozen=True)
class RankInfo:
    """The role of one global rank."""

    rank: int
    stage: int
    replica: int          # = pipeline index
    tp_rank: int
    tp: int
    gpu_type: str
    zone: str


@dataclass(frozen=True)
class RankLayout:
    """Every rank's role plus the derived peer sets; built by :func:`build_layout`."""

    num_stages: int
    dp_degree: int
    ranks: tuple[RankInfo, ...]
    microbatch_counts: tuple[int, ...]

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    def info(self, rank: int) -> RankInfo:
        return self.ranks[rank]

    def replica_ranks(self, stage: int, replica: int) -> tuple[int, ...]:
        return tuple(r.rank for r in self.ranks if r.stage == stage and r.replica == replica)

    def stage_ranks(self, stage: int) -> tuple[int, ...]:
        return tuple(r.rank for r in self.ranks if r.stage == stage)

    def num_fine_shards(self, stage: int) -> int:
        tps = {self.info(r).tp for r in self.stage_ranks(stage)}
        return reduce(lambda a, b: a * b // math.gcd(a, b), tps, 1)

    def fine_shards_of(self, rank: int) -> tuple[int, ...]:
        """Fine-shard indices (within its stage) that ``rank`` holds, ascending."""
        me = self.info(rank)
        per_rank = self.num_fine_shards(me.stage) // me.tp
        return tuple(range(me.tp_rank * per_rank, (me.tp_rank + 1) * per_rank))

    def fine_shard_group(self, stage: int, shard: int) -> tuple[int, ...]:
        """Ranks (one per replica, ascending) holding fine shard ``shard`` of ``stage``."""
        return tuple(r for r in self.stage_ranks(stage) if shard in self.fine_shards_of(r))

    # ---- pipeline peers (activations go from TP-rank 0 of the sender to every TP rank of the receiver)
    def forward_source(self, rank: int) -> int | None:
        me = self.info(rank)
        return None if me.stage == 0 else self.replica_ranks(me.stage - 1, me.replica)[0]

    def forward_targets(self, rank: int) -> tuple[int, ...]:
        me = self.info(rank)
        if me.stage == self.num_stages - 1 or me.tp_rank != 0:
            return ()
        return self.replica_ranks(me.stage + 1, me.replica)

    def backward_source(self, rank: int) -> int | None:
        me = self.info(rank)
        return None if me.stage == self.num_stages - 1 else self.replica_ranks(me.stage + 1, me.replica)[0]

    def backward_targets(self, rank: int) -> tuple[int, ...]:
        me = self.info(rank)
        if me.stage == 0 or me.tp_rank != 0:
            return ()
        return self.replica_ranks(me.stage - 1, me.replica)


def build_layout(plan: Plan) -> RankLayout:
    """The rank layout of ``plan`` (see the module docstring for the order)."""
    ranks: list[RankInfo] = []
    for s, j, rep in plan.replicas():
        for t in range(rep.tp):
            ranks.append(RankInfo(rank=len(ranks), stage=s, replica=j, tp_rank=t, tp=rep.tp,
                                  gpu_type=rep.gpu_type, zone=rep.zone))
    return RankLayout(num_stages=plan.num_stages, dp_degree=plan.dp_degree, ranks=tuple(ranks),
                      microbatch_counts=plan.microbatch_counts)


def describe(plan: Plan, layout: RankLayout) -> str:
    """A human-readable table: one line per rank."""
    lines = [f"plan: {plan.num_stages} stage(s) x {plan.dp_degree} pipeline(s), world size {layout.world_size}, "
             f"micro-batch {plan.micro_batch_size}, global batch {plan.global_batch_size}, "
             f"micro-batches per pipeline {list(plan.microbatch_counts)}",
             f"{'rank':>4}  {'stage':>5}  {'layers':>9}  {'pipeline':>8}  {'tp':>5}  {'gpu':<10} {'zone':<16} "
             "grad fine shards"]
    for r in layout.ranks:
        st = plan.stages[r.stage]
        extra = ("E" if r.stage == 0 else "") + ("H" if r.stage == plan.num_stages - 1 else "")
        layers = f"[{st.first_layer},{st.layer_end}){extra}"
        shards = f"{list(layout.fine_shards_of(r.rank))}/{layout.num_fine_shards(r.stage)}"
        lines.append(f"{r.rank:>4}  {r.stage:>5}  {layers:>9}  {r.replica:>8}  {r.tp_rank}/{r.tp:<3}  "
                     f"{r.gpu_type:<10} {r.zone:<16} {shards}")
    lines.append("E = embedding, H = final norm + LM head + loss")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m megatron_sailor.runtime.topology",
                                     description="Print the rank layout of a plan (our JSON or Sailor's).")
    parser.add_argument("plan", help="plan JSON (ours or a Sailor plan_config)")
    args = parser.parse_args(argv)
    try:
        from planner.sailor_plan import load_any_plan
        plan, _ = load_any_plan(args.plan)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(describe(plan, build_layout(plan)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
