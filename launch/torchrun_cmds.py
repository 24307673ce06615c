"""Assignment -> one torchrun command per node. Pure: builds data, runs nothing.

Every command uses the c10d rendezvous at ``<node 0 host>:<port>`` and carries, as environment:
``SAILOR_RANK_MAP`` (plan ranks of local ranks 0..nproc-1, see :mod:`planner.rank_env`), ``SAILOR_NODE_NAME``,
``SAILOR_WORLD_SIZE``, ``OMP_NUM_THREADS``, ``CUDA_DEVICE_MAX_CONNECTIONS=1`` on nodes that run a replica
with TP > 1, and ``SAILOR_EMULATE_SLOWDOWN`` / ``SAILOR_EMULATE_LINK_DELAY_S`` on emulated nodes.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from launch.assign import Assignment, NodeAssignment
from planner.rank_env import NODE_NAME_ENV, RANK_MAP_ENV, TRAIN_MODULE, WORLD_SIZE_ENV, format_rank_map, train_entry

DEFAULT_ENTRY = f"--module {TRAIN_MODULE}"     # what runs when no --script is given (planner.rank_env)
DEFAULT_PORT = 29500


@dataclass(frozen=True)
class LaunchConfig:
    """What every node's command shares."""

    plan_path: str
    script: str | None = None                  # None: the training module (planner.rank_env.TRAIN_MODULE)
    script_args: tuple[str, ...] = ()
    master_port: int = DEFAULT_PORT
    run_id: str = "sailor"
    torchrun: tuple[str, ...] = ("torchrun",)
    omp_threads: int | None = None
    max_restarts: int = 0
    extra_env: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if not 1 <= self.master_port <= 65535:
            raise ValueError(f"master_port must be in [1, 65535], got {self.master_port}")
        if self.omp_threads is not None and self.omp_threads < 1:
            raise ValueError(f"omp_threads must be >= 1, got {self.omp_threads}")
        if not self.torchrun:
            raise ValueError("torchrun must name a command")


@dataclass(frozen=True)
class NodeCommand:
    """One node's launch: run ``argv`` on ``host`` with ``env`` added to the environment."""

    node_name: str
    host: str
    node_rank: int
    env: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]

    def shell(self) -> str:
        """A POSIX shell line: ``K=V ... torchrun ...`` with every word quoted."""
        words = [f"{k}={shlex.quote(v)}" for k, v in self.env] + [shlex.quote(a) for a in self.argv]
        return " ".join(words)


def omp_threads_for(na: NodeAssignment, config: LaunchConfig) -> int:
    """``config.omp_threads``, else CPUs of the node split over its processes, else 1."""
    if config.omp_threads is not None:
        return config.omp_threads
    if na.node.cpus_per_node is not None:
        return max(1, na.node.cpus_per_node // na.nproc)
    return 1


def node_env(na: NodeAssignment, world_size: int, config: LaunchConfig) -> tuple[tuple[str, str], ...]:
    env: list[tuple[str, str]] = [
        ("OMP_NUM_THREADS", str(omp_threads_for(na, config))),
        (RANK_MAP_ENV, format_rank_map(na.plan_ranks)),
        (NODE_NAME_ENV, na.node.name),
        (WORLD_SIZE_ENV, str(world_size)),
    ]
    if na.max_tp > 1:
        env.append(("CUDA_DEVICE_MAX_CONNECTIONS", "1"))
    if na.node.emulate is not None:
        env.extend(sorted(na.node.emulate.env().items()))
    env.extend(config.extra_env)
    return tuple(env)


def node_argv(na: NodeAssignment, nnodes: int, endpoint: str, config: LaunchConfig) -> tuple[str, ...]:
    return (*config.torchrun,
            f"--nnodes={nnodes}", f"--nproc-per-node={na.nproc}", f"--node-rank={na.node_rank}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={config.run_id}",
            f"--max-restarts={config.max_restarts}",
            *train_entry(config.script), "--sailor-plan", config.plan_path, *config.script_args)


def rendezvous_endpoint(assignment: Assignment, config: LaunchConfig) -> str:
    host = assignment.nodes[0].node.host
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{config.master_port}"


def build_commands(assignment: Assignment, config: LaunchConfig) -> tuple[NodeCommand, ...]:
    """One :class:`NodeCommand` per used node, in ``node_rank`` order."""
    endpoint = rendezvous_endpoint(assignment, config)
    nnodes = len(assignment.nodes)
    return tuple(
        NodeCommand(node_name=na.node.name, host=na.node.host, node_rank=na.node_rank,
                    env=node_env(na, assignment.world_size, config),
                    argv=node_argv(na, nnodes, endpoint, config))
        for na in assignment.nodes)
