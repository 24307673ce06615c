"""What the search looks for (objective, constraints), where it looks (the declared search space) and what
it returns. See docs/PLANNER.md for the precise definition of the space.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from planner.errors import InputError

OBJECTIVES = ("throughput", "cost", "value")
# chain plans' layer splits (SearchSpace.chain_splits and the request's --chain-splits: one list)
CHAIN_SPLITS = ("even", "segment", "refine")


@dataclass(frozen=True)
class Objective:
    """``throughput``: max it/s; ``cost``: min $/iteration; ``value``: max (it/s) / ($/iteration).

    Constraints: $/iteration <= ``max_cost_per_iter_usd``, it/s >= ``min_throughput_iters_per_s``,
    GPUs used <= ``max_gpus``.
    """

    kind: str = "throughput"
    max_cost_per_iter_usd: float | None = None
    min_throughput_iters_per_s: float | None = None
    max_gpus: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in OBJECTIVES:
            raise InputError(f"--objective must be one of {list(OBJECTIVES)}, got {self.kind!r}")
        for name in ("max_cost_per_iter_usd", "min_throughput_iters_per_s", "max_gpus"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise InputError(f"{name} must be > 0, got {v!r}")

    def key(self, iteration_s, cost_usd):
        """The quantity to minimise (works on floats and numpy arrays)."""
        if self.kind == "throughput":
            return iteration_s
        if self.kind == "cost":
            return cost_usd
        return iteration_s * cost_usd

    def allows(self, iteration_s, cost_usd, gpus):
        ok = iteration_s > 0
        if self.min_throughput_iters_per_s is not None:
            ok = ok & (iteration_s * self.min_throughput_iters_per_s <= 1.0)
        if self.max_cost_per_iter_usd is not None:
            ok = ok & (cost_usd <= self.max_cost_per_iter_usd)
        if self.max_gpus is not None:
            ok = ok & (gpus <= self.max_gpus)
        return ok


def auto_chain_segments(n_zones: int, objective: Objective) -> int:
    """The chain-run limit when the user names none (docs/PLANNER.md 1.1): 3, raised to the number of zones (at
    most ``AUTO_CHAIN_SEGMENTS_MAX``) under the throughput objective, where the chain search prunes partial
    chains (:mod:`planner.search.chainprefix`), so a pipeline may visit every zone once (on 5 zones x 32-128
    A100 such chains beat 3-run chains by 4-9 %)."""
    if objective.kind != "throughput":
        return 3
    return min(AUTO_CHAIN_SEGMENTS_MAX, max(3, n_zones))


AUTO_CHAIN_SEGMENTS_MAX = 5


@dataclass(frozen=True)
class SearchSpace:
    """The declared space. Defaults: the full planner space; baselines restrict it.

    - ``max_stages``: pipeline depth S in 1..min(layers, max_stages);
    - ``mbs_options`` / ``tp_options``: restrict micro-batch sizes and TP degrees (default: every profiled
      (mbs, tp) of each GPU type, or 1, 2, 4, 8 for analytic estimates);
    - ``split``: ``"family"`` (first/last stage sizes free, middle even or a staircase: docs/PLANNER.md 1
      item 4), ``"even_ids"`` (Sailor: the L + 2 layer ids incl. embedding and head split evenly), ``"even"``
      (Megatron: S divides L, equal stages),
      ``"even_last"`` (Sailor's space: L split evenly, the extra layers on the last stages; in the family);
    - ``tp_rule``: ``"any"`` or ``"min_fit"`` (Sailor: the smallest TP whose stages fit memory);
    - ``uniform_microbatches``: every pipeline runs N / D micro-batches (D must divide N);
    - ``max_gpu_types`` / ``single_zone``: at most that many GPU types; all pipelines in one zone;
    - ``recompute``: the full-activation-recomputation settings searched (trades compute for memory);
    - ``distributed_optimizer``: the distributed-optimizer settings searched (optimizer states and step
      sharded over the D replicas of a stage; the gradient sync becomes reduce-scatter + all-gather);
    - ``chain_segments``: also search *chain* plans (D identical pipelines whose stage s runs on its own
      (GPU type, TP, zone), so a pipeline may change type and zone along its stages) whose stage groups form
      at most this many contiguous runs; 1 = no chain plans (a one-run chain is a homogeneous pipeline);
    - ``chain_splits``: the chain plans' layer splits: ``"even"`` (Sailor's: L split evenly, the extra layers
      on the last stages) or ``"segment"`` (each run of equal groups its own layer total, split evenly inside
      the run with the extra layers on its last stages; contains ``"even"``; docs/PLANNER.md 1.1) or
      ``"refine"`` (the even split's space, then a heuristic refinement of two-segment chains' segment totals
      outside it, :mod:`planner.search.chainrefine`, docs/PLANNER.md 2.7; the exact space is the even one's);
    - ``tie_embeddings``: plans tie the input and output embeddings (the model ties them): with one stage
      the head holds no matrix, with several the last stage holds a copy whose gradient is all-reduced
      with the first stage's (:mod:`planner.search.tied`);
    - ``mixed_plans``: after the exact search, a bounded local search for *mixed* plans (stages shared by
      pipelines of different chains, :mod:`planner.search.mixplan`, docs/PLANNER.md 8); heuristic, it only
      adds candidates;
    - ``two_tp``: the most TP degrees one used GPU type may run at in a pool plan (1: the declared space's rule,
      one TP per type; 2: up to two, each used by at least one pipeline, so the tasks partition the plans; the
      pipelines of one (type, zone) at its TP degrees share that pool's GPUs, docs/PLANNER.md 10.7; ``sailor-plan
      --two-tp``). Searched exactly, like the rest of the space; tasks with the distributed optimizer keep one TP
      per type.
    """

    max_stages: int | None = None
    mbs_options: tuple[int, ...] | None = None
    tp_options: tuple[int, ...] | None = None
    split: str = "family"
    tp_rule: str = "any"
    uniform_microbatches: bool = False
    max_gpu_types: int | None = None
    single_zone: bool = False
    precision: str = "fp32"
    optimizer: str = "adamw"
    recompute: tuple[bool, ...] = (False, True)
    distributed_optimizer: tuple[bool, ...] = (False, True)
    chain_segments: int = 3
    chain_splits: str = "even"
    tie_embeddings: bool = False
    mixed_plans: bool = False
    two_tp: int = 1

    def __post_init__(self) -> None:
        if self.two_tp not in (1, 2) or isinstance(self.two_tp, bool):
            raise InputError(f"two_tp must be 1 or 2, got {self.two_tp!r}")
        if not isinstance(self.mixed_plans, bool):
            raise InputError(f"mixed_plans must be true or false, got {self.mixed_plans!r}")
        if not isinstance(self.chain_segments, int) or not 1 <= self.chain_segments <= 8:
            raise InputError(f"chain_segments must be an integer in 1..8, got {self.chain_segments!r}")
        if self.chain_splits not in CHAIN_SPLITS:
            raise InputError(f"chain_splits must be {' or '.join(CHAIN_SPLITS)}, got {self.chain_splits!r}")
        if not self.recompute or any(not isinstance(r, bool) for r in self.recompute):
            raise InputError(f"recompute must be a non-empty tuple of booleans, got {self.recompute!r}")
        if not self.distributed_optimizer or any(not isinstance(r, bool) for r in self.distributed_optimizer):
            raise InputError("distributed_optimizer must be a non-empty tuple of booleans, got "
                             f"{self.distributed_optimizer!r}")
        if self.split not in ("family", "even_ids", "even", "even_last"):
            raise InputError(f"split must be family, even_ids, even or even_last, got {self.split!r}")
        if self.tp_rule not in ("any", "min_fit"):
            raise InputError(f"tp_rule must be any or min_fit, got {self.tp_rule!r}")


@dataclass(frozen=True)
class PoolUse:
    gpu_type: str
    zone: str
    tp: int
    pipelines: int


@dataclass(frozen=True)
class Candidate:
    """One point of the space, as the search scored it (its plan is built by planner.search.build)."""

    key: float
    num_stages: int
    mbs: int
    layers_per_stage: tuple[int, ...]
    pools: tuple[PoolUse, ...]              # in pipeline order: sorted by (zone, gpu type, tp)
    microbatches: tuple[int, ...]           # per pipeline
    iteration_s: float
    cost_usd: float
    gpus: int
    precision: str = "fp32"                 # from the SearchSpace: the one way precision reaches a plan
    optimizer: str = "adamw"
    recompute: bool = False                 # full activation recomputation
    chain: tuple[tuple[str, str, int], ...] = ()   # chain plan: (gpu type, zone, tp) of every stage; pools = ()
    tie_embeddings: bool = False            # from the SearchSpace
    distributed_optimizer: bool = False     # optimizer states and step sharded over the D replicas
    # mixed plan (docs/PLANNER.md 8): (chain, pipelines) runs in pipeline order; pools = () and chain = ()
    mix: tuple[tuple[tuple[tuple[str, str, int], ...], int], ...] = ()

    @property
    def num_pipelines(self) -> int:
        return len(self.microbatches)

    def pipeline_chains(self) -> list[tuple[tuple[str, str, int], ...]]:
        """The (GPU type, zone, TP) of every stage of every pipeline, in pipeline order (pipeline j is replica
        j of every stage): the one layout rule of pool, chain and mixed candidates."""
        if self.mix:
            return [c for c, n in self.mix for _ in range(n)]
        if self.chain:
            return [tuple(self.chain)] * self.num_pipelines
        return [((p.gpu_type, p.zone, p.tp),) * self.num_stages for p in self.pools for _ in range(p.pipelines)]

    def two_tp(self) -> bool:
        """Whether the pools give some GPU type two TP degrees (only in a space with ``SearchSpace.two_tp`` = 2)."""
        return len({(p.gpu_type, p.tp) for p in self.pools}) > len({p.gpu_type for p in self.pools})

    def gpus_by_pool(self) -> dict[tuple[str, str], int]:
        """GPUs the candidate uses per (gpu type, zone)."""
        out: dict[tuple[str, str], int] = {}
        for chain, n in self.mix or ((self.chain, self.num_pipelines),):
            for g, z, tp in chain:
                out[(g, z)] = out.get((g, z), 0) + tp * n
        for p in self.pools:
            out[(p.gpu_type, p.zone)] = out.get((p.gpu_type, p.zone), 0) + p.pipelines * p.tp * self.num_stages
        return out


@dataclass
class SearchStats:
    tasks: int = 0
    tasks_pruned: int = 0
    splits_scored: int = 0
    rows_bounded: int = 0
    rows_sync_bounded: int = 0
    rows_exact: int = 0
    chains_bounded: int = 0
    chains_exact: int = 0
    memory_shortfall_bytes: float | None = None   # smallest overflow seen when nothing fits
    complete: bool = True                  # False: stopped at the time limit with the best plans so far
    lower_bound_key: float | None = None   # stopped: no plan of the space has a smaller objective key
    time_limit_s: float | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class SearchResult:
    candidates: list[Candidate]
    stats: SearchStats
    search_time_s: float

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    @property
    def candidates_evaluated(self) -> int:
        return self.stats.rows_exact + self.stats.chains_exact
