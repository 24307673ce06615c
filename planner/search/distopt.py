"""The distributed optimizer's dominance rules in the search (docs/PLANNER.md 2.1, *distributed-optimizer
dominance*): which tasks and rows without it need no search when it is searched too, and the fine shards
per rank that set its optimizer memory in a pool plan."""
from __future__ import annotations

import math

from planner.search.space import SearchSpace


def shards_of(combo) -> dict[tuple[str, int], int]:
    """Fine shards per (type, TP) of the task under the distributed optimizer: every stage of a pool plan holds
    every (type, TP) of the task, so a TP-t rank holds lcm(TPs) / t shards
    (``planner.simulator.memory.optimizer_params``)."""
    lcm = math.lcm(*(t for _, t in combo))
    return {(g, t): lcm // t for g, t in combo}


def _both_fp32_ring(space: SearchSpace, collective_scale: float) -> bool:
    """The gate of every rule below: both settings searched, fp32 (the parameter all-gather moves as many bytes
    as the gradient half it replaces) and the backend's sharded collectives as fast as the ring model."""
    return (True in space.distributed_optimizer and False in space.distributed_optimizer
            and space.precision == "fp32" and collective_scale == 1.0)


def plain_rows_cap(space: SearchSpace, combo, collective_scale: float) -> int:
    """The largest total pipeline count D searched by a task without the distributed optimizer (0: any).
    When both settings are searched in fp32, a row with D >= the largest fine-shard count k_max of the task
    is dominated by the same row with the distributed optimizer: each GPU's optimizer bytes
    o / D x (params + (k - 1) replicated) <= o x params (k <= D, replicated <= params), the sync, mode and
    egress are equal (fp32, :func:`dist_dominated`) and the step shrinks; so only D < k_max is searched
    (docs/PLANNER.md 2.1, *distributed-optimizer dominance*). ``collective_scale``
    (``RuntimeSettings.sharded_collective_scale``): above 1 the reduce-scatter + all-gather is slower than the
    all-reduce it replaces, the sync is no longer equal and no row is dominated."""
    if not _both_fp32_ring(space, collective_scale):
        return 0
    if len({g for g, _ in combo}) < len(combo):
        # a type at two TP degrees (SearchSpace.two_tp): its tasks with the distributed optimizer are not
        # searched (tasks.unit_tasks), so no row of it is dominated by a searched one
        return 0
    return max(shards_of(combo).values()) - 1


def dist_dominated(space: SearchSpace, combo, collective_scale: float) -> bool:
    """The no-distributed-optimizer plans of a task are never better than the same plans with it when the
    distributed optimizer is searched, the precision is fp32 (its parameter all-gather moves as many bytes as the
    gradient half it replaces, so the sync time, mode and egress are equal) and every type has the same TP
    (one fine shard: the optimizer bytes o / D <= o). The optimizer step shrinks (/ D), nothing else changes
    (docs/PLANNER.md 2.1, *distributed-optimizer dominance*); only while ``collective_scale`` is 1 (the
    backend's reduce-scatter + all-gather as fast as its all-reduce: :func:`plain_rows_cap`)."""
    return _both_fp32_ring(space, collective_scale) and len({t for _, t in combo}) == 1


def chain_dist_options(space: SearchSpace, collective_scale: float) -> tuple[bool, ...]:
    """The distributed-optimizer settings chain plans are searched with: a chain stage's replicas are one
    group (one fine shard per rank), so in fp32 the distributed optimizer never loses (its memory o / D <= o,
    its step / D, its sync and egress equal: :func:`dist_dominated`) and the plain
    setting is left out when both are searched (only while ``collective_scale`` is 1)."""
    opts = space.distributed_optimizer
    if _both_fp32_ring(space, collective_scale):
        return (True,)
    return opts
