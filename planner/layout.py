"""The rank layout of a plan: which global rank plays which role. The ONLY implementation of the rank order.

Part of the torch-free contract layer (with :mod:`planner.plan` and :mod:`planner.rank_env`): the launcher
places these ranks on nodes (``launch.assign``), the runtime builds its process groups from them
(``megatron_sailor.runtime.groups``), the profiler and the elastic controller read them from here.

Rank order: stage-major, then replica ``j`` (= pipeline index), then tensor-parallel rank ``t``::

    rank(s, j, t) = sum(GPUs of stages < s) + sum(tp of replicas < j in stage s) + t

so one replica's TP ranks are consecutive (TP stays inside a node) and a stage's ranks are contiguous.

Gradient reduction across replicas of different TP uses *fine shards*: with ``L = lcm`` of the TP
degrees of a stage, every TP-sharded parameter is cut into ``L`` slices along its partition dimension; a
rank of a TP-``t`` replica holds ``L / t`` consecutive fine shards. The ranks holding fine shard ``f``
(one per replica) form reduce group ``f`` of that stage.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce

from planner.plan import Plan


@dataclass(frozen=True)
class RankInfo:
    """The role of one global rank (one GPU slot of the plan)."""

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

    def rank_of(self, stage: int, replica: int, tp_rank: int) -> int:
        """Global rank of ``(stage, replica, tp_rank)``; ``ValueError`` names an index out of range."""
        if not 0 <= stage < self.num_stages:
            raise ValueError(f"stage {stage} out of range [0, {self.num_stages})")
        if not 0 <= replica < self.dp_degree:
            raise ValueError(f"replica {replica} out of range [0, {self.dp_degree})")
        members = self.replica_ranks(stage, replica)
        if not 0 <= tp_rank < len(members):
            raise ValueError(f"tp_rank {tp_rank} out of range [0, {len(members)}) for stage {stage} "
                             f"replica {replica}")
        return members[tp_rank]

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


def plan_slots(plan: Plan) -> tuple[RankInfo, ...]:
    """Every GPU slot of ``plan`` in rank order (``slots[r].rank == r``)."""
    return build_layout(plan).ranks


def global_rank(plan: Plan, stage: int, replica: int, tp_rank: int) -> int:
    """Global rank of ``(stage, replica, tp_rank)`` in ``plan``."""
    return build_layout(plan).rank_of(stage, replica, tp_rank)


def replica_first_rank(plan: Plan, stage: int, replica: int) -> int:
    """Global rank of TP rank 0 of replica ``replica`` of stage ``stage``."""
    return global_rank(plan, stage, replica, 0)


def tied_embedding_sync_mode(stage_modes: tuple[str | None, ...]) -> str | None:
    """The ONE rule for the tied-embedding group's gradient-sync mode (flat or hierarchical): the first stage's
    mode as resolved for it (the runtime: ``stages[0].grad_sync``, else ``--grad-sync``; the simulator: the mode
    it models stage 0 with). None (stage 0 has one replica, so every stage has one): each embedding group is
    then one rank of the first and one of the last stage, where both modes are the same two-member sum."""
    return stage_modes[0] if stage_modes else None
