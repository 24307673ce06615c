"""Process-group start-up with timeouts, and the one-line error for an unreachable rendezvous."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)


class RendezvousError(RuntimeError):
    """This rank could not join the job's rendezvous in time."""


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    backend: str


def env_from_torchrun() -> DistEnv:
    """This process's plan rank, world size and local rank.

    torchrun sets RANK / WORLD_SIZE / LOCAL_RANK; a multi-node launch by ``python -m launch`` also sets
    ``SAILOR_RANK_MAP`` and the plan rank is ``SAILOR_RANK_MAP[LOCAL_RANK]`` (docs/LAUNCH.md); RANK is then
    rewritten to the plan rank. A plain ``python`` run is rank 0 of 1.
    """
    if "WORLD_SIZE" in os.environ:
        from planner.rank_env import rank_and_world_from_env
        try:
            rank, world = rank_and_world_from_env(os.environ)
        except ValueError as exc:
            raise RendezvousError(str(exc)) from None
        os.environ["RANK"] = str(rank)
    else:
        rank, world = 0, 1
    local = int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    return DistEnv(rank=rank, world_size=world, local_rank=local, backend=backend)


def init_distributed(env: DistEnv, timeout_s: float = 120.0) -> None:
    """Join the process group (env:// rendezvous); collectives then time out after ``timeout_s``."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if env.backend == "nccl":
        torch.cuda.set_device(env.local_rank)
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    try:
        dist.init_process_group(env.backend, rank=env.rank, world_size=env.world_size,
                                timeout=timedelta(seconds=timeout_s))
    except Exception as exc:  # noqa: BLE001 - torch raises several types (DistStoreError, RuntimeError)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RendezvousError(f"rank {env.rank}: cannot reach the rendezvous at {where} within "
                              f"{timeout_s:.0f} s ({first})") from None
    logger.debug("rank %d/%d joined %s (%s)", env.rank, env.world_size, where, env.backend)
