"""The launch contract (torch-free): how the launcher starts each worker and tells it its plan rank.

Entry: every launcher (``python -m launch``, ``launch.slurm``, ``sailor-elastic``) starts the training job as
``torchrun ... --module megatron_sailor.train --sailor-plan PLAN ARGS`` (:data:`TRAIN_MODULE`,
:func:`train_entry`); ``examples/gpt/pretrain_gpt.py`` is the same job as a script, for people.

torchrun does not give us the plan's rank order (:mod:`planner.layout`): with the c10d rendezvous the
node (group) ranks follow the sorted node descriptors, not ``--node-rank``, and a node's workers get a
contiguous torchrun rank range. So every node's command carries ``SAILOR_RANK_MAP``: the plan ranks of its
local ranks ``0..nproc-1``, comma separated. A worker's plan rank is ``SAILOR_RANK_MAP[LOCAL_RANK]``.
The launcher writes it (``launch.torchrun_cmds``, :func:`format_rank_map`); the runtime decodes it once
per start (``megatron_sailor.runtime.distributed.env_from_torchrun``, :func:`rank_and_world_from_env`).
"""
from __future__ import annotations

from typing import Mapping

RANK_MAP_ENV = "SAILOR_RANK_MAP"
NODE_NAME_ENV = "SAILOR_NODE_NAME"
WORLD_SIZE_ENV = "SAILOR_WORLD_SIZE"
TRAIN_MODULE = "megatron_sailor.train"


def train_entry(script: str | None = None) -> tuple[str, ...]:
    """torchrun's words that name the worker program: ``--module megatron_sailor.train``, or ``script``."""
    return ("--module", TRAIN_MODULE) if script is None else (script,)


def format_rank_map(plan_ranks: tuple[int, ...]) -> str:
    """``(5, 6, 2)`` -> ``"5,6,2"`` (the value of ``SAILOR_RANK_MAP``)."""
    return ",".join(str(r) for r in plan_ranks)


def parse_rank_map(text: str) -> tuple[int, ...]:
    """Inverse of :func:`format_rank_map`; raises ``ValueError`` naming the bad value."""
    try:
        ranks = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"{RANK_MAP_ENV} must be comma-separated integers, got {text!r}") from None
    if any(r < 0 for r in ranks) or len(set(ranks)) != len(ranks):
        raise ValueError(f"{RANK_MAP_ENV} must list distinct non-negative ranks, got {text!r}")
    return ranks


def plan_rank_from_env(environ: Mapping[str, str]) -> int | None:
    """This worker's plan rank from torchrun's ``LOCAL_RANK`` and the launcher's ``SAILOR_RANK_MAP``.

    Returns ``None`` when ``SAILOR_RANK_MAP`` is absent (plain torchrun: plan rank = ``RANK``).
    Checks the map length against ``LOCAL_WORLD_SIZE`` and the ranks against ``WORLD_SIZE`` when set.
    """
    text = environ.get(RANK_MAP_ENV)
    if text is None:
        return None
    ranks = parse_rank_map(text)
    local_rank = int(environ.get("LOCAL_RANK", "0"))
    local_world = environ.get("LOCAL_WORLD_SIZE")
    if local_world is not None and int(local_world) != len(ranks):
        raise ValueError(f"{RANK_MAP_ENV} lists {len(ranks)} ranks but LOCAL_WORLD_SIZE is {local_world}")
    if not 0 <= local_rank < len(ranks):
        raise ValueError(f"LOCAL_RANK {local_rank} out of range for {RANK_MAP_ENV}={text!r}")
    world = environ.get("WORLD_SIZE")
    if world is not None and max(ranks) >= int(world):
        raise ValueError(f"{RANK_MAP_ENV}={text!r} names rank {max(ranks)} but WORLD_SIZE is {world}")
    return ranks[local_rank]


def rank_and_world_from_env(environ: Mapping[str, str]) -> tuple[int, int]:
    """``(plan_rank, world_size)`` to pass to ``torch.distributed.init_process_group(rank=, world_size=)``.

    Without ``SAILOR_RANK_MAP`` this is torchrun's ``(RANK, WORLD_SIZE)``. With it, the plan rank may differ
    from torchrun's rank; that is safe only while the torchrun agent hosts the store
    (``TORCHELASTIC_USE_AGENT_STORE=True``, torchrun's default), else worker rank 0 would have to serve the
    store on ``MASTER_ADDR`` -- so a remap without it raises ``ValueError``.
    """
    world = int(environ["WORLD_SIZE"])
    declared = environ.get(WORLD_SIZE_ENV)
    if declared is not None and int(declared) != world:
        raise ValueError(f"{WORLD_SIZE_ENV}={declared} (from the plan) but torchrun's WORLD_SIZE is {world}: "
                         "the nodes that joined do not match the plan")
    torchrun_rank = int(environ.get("RANK", "0"))
    plan_rank = plan_rank_from_env(environ)
    if plan_rank is None or plan_rank == torchrun_rank:
        return torchrun_rank, world
    if environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        raise ValueError(f"{RANK_MAP_ENV} maps torchrun rank {torchrun_rank} to plan rank {plan_rank}, which "
                         "needs torchrun's agent store (unset TORCH_DISABLE_SHARE_RDZV_TCP_STORE)")
    return plan_rank, world
