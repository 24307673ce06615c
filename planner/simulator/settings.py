"""Runtime behaviours the simulator makes explicit, and the inputs it reads.

Different training runtimes execute the same plan differently (blocking or overlapped p2p, a barrier before
the gradient reduction, allocator behaviour). :class:`RuntimeSettings` names each such behaviour so one
model predicts any of them; presets cover our runtime and the Sailor/DeepSpeed runtime of the published
measurements.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.network import NetworkModel
from planner.profiles import ProfileStore

GIB = 1024 ** 3


@dataclass(frozen=True)
class RuntimeSettings:
    """How the runtime executes a plan (all times in seconds, sizes in bytes)."""

    name: str = "megatron-sailor"
    p2p_blocking: bool = False           # True: a stage's sends/receives sit on its critical path
    p2p_all_tp_ranks: bool = True        # True (ours): TP rank 0 sends the whole activation to every TP rank
                                         # of the next stage; False (DeepSpeed): each TP rank sends 1/TP of it
    p2p_from_plan: bool = False          # True (ours): the plan's p2p_pattern decides (p2p_all_tp_ranks is
                                         # then what the default pattern does, for the search)
    grad_sync: str = "auto"              # "flat" ring, "hierarchical" (zone-aware) or "auto" (the faster)
    dp_sync_waits_for_all: bool = True   # a global barrier before the gradient reduction (no overlap)
    per_microbatch_overhead_s: float = 0.0   # schedule/launch overhead per micro-batch per stage
    compute_scale: float = 1.0           # multiplies profiled compute
    update_scale: float = 1.0            # multiplies the profiled optimizer step (core sharing of the step)
    profile_offset_s: float = 0.0        # per-call overhead in the profiled per-layer times that a full
                                         # schedule hides (each layer fwd/bwd t -> max(t - o, o))
    memory_overhead_bytes: float = 1.0 * GIB  # CUDA context, communicator buffers
    activation_reserve_factor: float = 1.0    # caching-allocator reserve over live activations
    grad_bucket_elems: int = 0           # extra flat gradient buffer (DeepSpeed buckets), elements
    memory_headroom_fraction: float = 0.0    # keep this fraction of GPU memory free when judging fit
    activation_model: str = "megatron-core"  # unprofiled activations: "megatron-core" (what megatron-core
                                             # 0.16.1 saves, simulator/activations.py) or "korthikanti"
    constants_file: str = ""             # the data file the constants above came from ("" = code defaults)
    constants_error: str = ""            # why that file could not be read: simulate() refuses to run with it
    sharded_collective_scale: float = 1.0    # the distributed optimizer's reduce-scatter + all-gather over the
                                             # ring model (1: NCCL's ring collectives; gloo on CPU is slower)
    hidden_dropout: float = 0.0          # the run's --hidden-dropout / --attention-dropout: only p > 0 matters
    attention_dropout: float = 0.0       # (dropout masks are kept for backward)

    def __post_init__(self) -> None:
        if self.grad_sync not in ("flat", "hierarchical", "auto"):
            raise InputError(f"grad_sync must be flat, hierarchical or auto, got {self.grad_sync!r}")
        if self.activation_model not in ("megatron-core", "korthikanti"):
            raise InputError(f"activation_model must be megatron-core or korthikanti, got {self.activation_model!r}")
        for name in ("compute_scale", "update_scale"):
            if not 0.0 <= getattr(self, name) < float("inf"):
                raise InputError(f"runtime setting '{name}' must be a finite number >= 0, got {getattr(self, name)!r}")
        for name in ("per_microbatch_overhead_s", "profile_offset_s", "memory_overhead_bytes",
                     "activation_reserve_factor", "grad_bucket_elems", "memory_headroom_fraction",
                     "hidden_dropout", "attention_dropout"):
            if getattr(self, name) < 0:
                raise InputError(f"runtime setting '{name}' must be >= 0, got {getattr(self, name)!r}")
        if not 1.0 <= self.sharded_collective_scale < float("inf"):
            raise InputError("runtime setting 'sharded_collective_scale' must be >= 1 (the ring model is the "
                             f"fastest these collectives run), got {self.sharded_collective_scale!r}")

    def with_(self, **changes: Any) -> "RuntimeSettings":
        return replace(self, **changes)


CALIBRATION_FILE = Path(__file__).resolve().parents[1] / "data" / "calibration_sailor_deepspeed.json"
_CALIBRATED_KEYS = ("profile_offset_s", "per_microbatch_overhead_s", "memory_overhead_bytes",
                    "activation_reserve_factor")


def calibration() -> dict[str, Any]:
    """The fitted constants of the ``sailor-deepspeed`` preset and the profile-smoothing choice, with the
    runs they were fitted on (written by ``benchmarks/validate_simulator.py --write``)."""
    try:
        data = json.loads(CALIBRATION_FILE.read_text())
        for k in _CALIBRATED_KEYS:
            if not (isinstance(data[k], (int, float)) and data[k] >= 0):
                raise ValueError(k)
        w = data["profile_smoothing_window"]
        if w is not None and not (isinstance(w, (int, float)) and w >= 1):
            raise ValueError("profile_smoothing_window")
        if not data["fitted_on"]:
            raise ValueError("fitted_on")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"field {exc} missing or invalid", source=str(CALIBRATION_FILE)) from None
    return data


# The Sailor artifact's runtime: DeepSpeed pipeline engine (blocking p2p, activations partitioned over the TP
# ranks, barrier before the reduction, 5e8-element gradient buckets). Its four constants come from the
# calibration file, which names the real runs they were fitted on; docs/SIMULATOR.md gives the procedure and
# its leave-one-out errors.
_CALIBRATION = calibration()        # read once: the preset's four constants come from one reading of the file
SAILOR_DEEPSPEED = RuntimeSettings(name="sailor-deepspeed", p2p_blocking=True, dp_sync_waits_for_all=True,
                                   p2p_all_tp_ranks=False,   # DeepSpeed's pipe engine partitions activations
                                   grad_sync="flat", grad_bucket_elems=500_000_000, activation_model="korthikanti",
                                   **{k: float(_CALIBRATION[k]) for k in _CALIBRATED_KEYS})
# megatron-sailor: the plan's p2p_pattern; its one pattern ("tp0-to-all", megatron_sailor/runtime/p2p.py) sends
# the whole activation from TP rank 0 of the sender to each TP rank of the receiver: k = the receiver's TP
# messages leave one rank. Dropout: the runtime's defaults (Megatron's --hidden-dropout / --attention-dropout
# 0.1); their masks are kept for backward.
# Its per-micro-batch overhead, memory overhead and allocator reserve come from the machine's constants file
# (planner/data/runtime_megatron_sailor.json, written by ``sailor-profile --runtime-constants-out``).


def ours(constants_file: str | Path | None = None) -> RuntimeSettings:
    """The megatron-sailor preset with the constants of ``constants_file`` (default: the planner's data file,
    or the file ``SAILOR_RUNTIME_CONSTANTS`` names)."""
    from planner.simulator.constants import load_runtime_constants
    c = load_runtime_constants(constants_file)
    return RuntimeSettings(p2p_all_tp_ranks=True, p2p_from_plan=True, hidden_dropout=0.1, attention_dropout=0.1,
                           per_microbatch_overhead_s=c.per_microbatch_overhead_s,
                           memory_overhead_bytes=c.memory_overhead_bytes,
                           activation_reserve_factor=c.activation_reserve_factor,
                           sharded_collective_scale=c.sharded_collective_scale, constants_file=c.source)


def _ours_or_refusal() -> RuntimeSettings:
    """:func:`ours`, or, when the constants file is bad, a preset that every simulation refuses with the file's
    one-line error (so a CLI reports it the house way instead of failing at import)."""
    try:
        return ours()
    except InputError as exc:
        return RuntimeSettings(p2p_all_tp_ranks=True, p2p_from_plan=True, constants_error=str(exc))


OURS = _ours_or_refusal()
PRESETS = {"megatron-sailor": OURS, "sailor-deepspeed": SAILOR_DEEPSPEED}


@dataclass
class SimContext:
    """Inputs of the cost model: model, profiles, network, GPU catalog, node sizes, runtime behaviour."""

    model: ModelSpec
    profiles: ProfileStore
    network: NetworkModel
    catalog: GPUCatalog
    settings: RuntimeSettings = field(default_factory=RuntimeSettings)
    gpus_per_node: dict[str, int] = field(default_factory=dict)
    replica_node_gpus: tuple[tuple[int, ...], ...] = ()   # [stage][replica] node sizes (Sailor plans), optional
    # figures the simulator computed, each under a key holding every input it read, by value (so replacing the
    # settings, model or profiles above never reuses a stale one): planner.simulator.stage.replica_costs
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def node_size(self, gpu_type: str) -> int:
        return self.gpus_per_node.get(gpu_type) or self.catalog.get(gpu_type).gpus_per_node

    def replica_node_size(self, s: int, j: int, gpu_type: str) -> int:
        """GPUs per node of replica j of stage s: as the plan declared it, else the type's node size."""
        if s < len(self.replica_node_gpus) and j < len(self.replica_node_gpus[s]):
            return self.replica_node_gpus[s][j]
        return self.node_size(gpu_type)
