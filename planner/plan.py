"""The plan: the only contract between planner, simulator, runtime and launcher.

A plan is one pipeline template with S stages. Stage ``s`` owns the contiguous transformer layers
``[first_layer, first_layer + num_layers)``; the embedding goes with stage 0, the final norm + LM head +
loss with stage S-1. Every stage has the same number D of replicas; replica ``j`` of every stage forms
pipeline ``j``. Each replica has its own GPU type, tensor-parallel degree (inside one node) and zone.

Micro-batches: by default every pipeline runs ``global_batch_size / (micro_batch_size * D)`` micro-batches
(must divide). ``microbatches_per_pipeline`` overrides that with one count per pipeline (a faster pipeline
may take more); the counts must add up to ``global_batch_size / micro_batch_size``.

JSON form (``schema_version`` 1)::

    {"schema_version": 1, "model": "opt-350m", "num_layers": 24,
     "micro_batch_size": 8, "global_batch_size": 1024, "precision": "fp32", "optimizer": "adamw",
     "recompute_activations": false, "distributed_optimizer": false, "tie_embeddings": false,
     "microbatches_per_pipeline": null, "p2p_pattern": "tp0-to-all",
     "stages": [{"first_layer": 0, "num_layers": 11, "grad_sync": "hierarchical",
                 "replicas": [{"gpu_type": "A100-40", "tp": 2, "zone": "us-central1-a"}, ...]}, ...]}

``recompute_granularity`` (optional: null, "full" or "selective"), ``recompute_method`` ("uniform" or "block",
full only) and ``recompute_num_layers`` (>= 1, full only): megatron-core's activation recomputation. The older
``recompute_activations: true`` means full / uniform / 1 layer (what the simulator has always modelled).
A stage of ``L`` layers recomputes groups of ``n = min(recompute_num_layers, L)`` layers; with ``uniform``,
``n`` must divide ``L`` (megatron-core 0.16.1's ``_checkpointed_forward`` indexes past the stage's last layer
otherwise), so such a plan is refused (:func:`uniform_recompute_conflict`). ``block`` has no such limit.

``tie_embeddings`` (optional, default false): the LM head reuses the input word embedding; with several
stages the first and last stage each hold a copy and sum its gradient (Megatron's embedding group).

``stages[s].grad_sync`` (optional): how stage ``s`` reduces its gradients across its replicas, ``"flat"`` (one
all-reduce over every replica) or ``"hierarchical"`` (reduce inside each zone, all-reduce among zone leaders,
broadcast back). ``null`` (the default, and every older plan): the runtime's ``--grad-sync`` flag decides
(default ``hierarchical``) and the simulator uses its preset's rule (``auto``: the faster of the two, what
``sailor-plan`` writes into the plans it returns, see :func:`planner.simulator.chosen_sync_modes`). Inside one
zone both modes are the same flat all-reduce.

``p2p_pattern`` (optional, default ``"tp0-to-all"``): who sends a stage boundary's activation (and, backwards,
its gradient). ``"tp0-to-all"``: TP rank 0 of the sending replica sends the whole tensor to every TP rank of
the receiving replica (``megatron_sailor/runtime/p2p.py``); it is the one pattern the runtime implements.

Unknown keys are rejected; every error names the field and the value.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from planner.errors import InputError, check_keys
from planner.textio import atomic_write_text, read_text

SCHEMA_VERSION = 1
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
OPTIMIZERS = ("adamw", "adam", "sgd")
GRAD_SYNC_MODES = ("flat", "hierarchical")     # a stage's gradient reduction; None: the runtime's flag decides
P2P_PATTERNS = ("tp0-to-all",)                 # who sends a boundary's activation (see the module docstring)
DEFAULT_P2P_PATTERN = "tp0-to-all"


def _require_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"field '{name}' must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(f"field '{name}' must be >= {minimum}, got {value}")
    return value


def _require_str(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"field '{name}' must be a non-empty string, got {value!r}")
    return value


@dataclass(frozen=True)
class Replica:
    """One data-parallel replica of one stage: ``tp`` GPUs of one type, inside one node of one zone."""

    gpu_type: str
    tp: int
    zone: str

    def __post_init__(self) -> None:
        _require_str(self.gpu_type, "gpu_type")
        _require_int(self.tp, "tp")
        _require_str(self.zone, "zone")

    @property
    def region(self) -> str:
        return region_of(self.zone)

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_type": self.gpu_type, "tp": self.tp, "zone": self.zone}


@dataclass(frozen=True)
class Stage:
    """A contiguous range of transformer layers served by D replicas."""

    first_layer: int
    num_layers: int
    replicas: tuple[Replica, ...]
    grad_sync: str | None = None      # "flat" | "hierarchical" | None (the runtime's --grad-sync decides)

    def __post_init__(self) -> None:
        _require_int(self.first_layer, "first_layer", 0)
        _require_int(self.num_layers, "num_layers", 0)
        if not isinstance(self.replicas, tuple) or not self.replicas:
            raise InputError(f"field 'replicas' must be a non-empty list, got {self.replicas!r}")
        if self.grad_sync is not None and self.grad_sync not in GRAD_SYNC_MODES:
            raise InputError(f"field 'grad_sync' must be null, 'flat' or 'hierarchical', got {self.grad_sync!r}")

    @property
    def layer_end(self) -> int:
        return self.first_layer + self.num_layers

    @property
    def num_gpus(self) -> int:
        return sum(r.tp for r in self.replicas)

    def to_dict(self) -> dict[str, Any]:
        return {"first_layer": self.first_layer, "num_layers": self.num_layers,
                "replicas": [r.to_dict() for r in self.replicas], "grad_sync": self.grad_sync}


def uniform_recompute_conflict(stage_layers: list[int],
                               recompute: tuple[str | None, str | None, int | None]) -> str | None:
    """The one rule for uniform full recomputation: a message naming the first stage whose layer count
    ``L`` is not a multiple of its group ``n = min(recompute_num_layers, L)`` (megatron-core 0.16.1 then
    raises IndexError in ``_checkpointed_forward``); None when every stage can run. Stages without layers
    recompute nothing; ``block`` and selective recomputation never conflict."""
    granularity, method, group = recompute
    if granularity != "full" or method != "uniform" or not group:
        return None
    for s, layers in enumerate(stage_layers):
        n = min(group, layers)
        if layers and layers % n:
            return (f"field 'recompute_num_layers' {group} does not divide stages[{s}].num_layers {layers}: "
                    f"uniform full recomputation runs groups of {n} layers, so every stage's layer count "
                    f"must be a multiple of {n} (or at most {group}); use recompute_method 'block' or "
                    f"another group size")
    return None


@dataclass(frozen=True)
class Plan:
    """A validated training plan (see the module docstring)."""

    num_layers: int
    stages: tuple[Stage, ...]
    micro_batch_size: int
    global_batch_size: int
    precision: str = "fp32"
    optimizer: str = "adamw"
    recompute_activations: bool = False
    distributed_optimizer: bool = False
    tie_embeddings: bool = False
    recompute_granularity: str | None = None
    recompute_method: str | None = None
    recompute_num_layers: int | None = None
    microbatches_per_pipeline: tuple[int, ...] | None = None
    model: str | None = None
    p2p_pattern: str = DEFAULT_P2P_PATTERN
    schema_version: int = SCHEMA_VERSION
    _counts: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.schema_version != SCHEMA_VERSION:
            raise InputError(f"field 'schema_version' must be {SCHEMA_VERSION}, got {self.schema_version!r}")
        _require_int(self.num_layers, "num_layers")
        _require_int(self.micro_batch_size, "micro_batch_size")
        _require_int(self.global_batch_size, "global_batch_size")
        if self.precision not in PRECISION_BYTES:
            raise InputError(f"field 'precision' must be one of {sorted(PRECISION_BYTES)}, got {self.precision!r}")
        if self.optimizer not in OPTIMIZERS:
            raise InputError(f"field 'optimizer' must be one of {list(OPTIMIZERS)}, got {self.optimizer!r}")
        for flag in ("recompute_activations", "distributed_optimizer", "tie_embeddings"):
            if not isinstance(getattr(self, flag), bool):
                raise InputError(f"field '{flag}' must be true or false, got {getattr(self, flag)!r}")
        self._check_recompute()
        if self.p2p_pattern not in P2P_PATTERNS:
            raise InputError(f"field 'p2p_pattern' must be one of {list(P2P_PATTERNS)}, got {self.p2p_pattern!r}")
        if not isinstance(self.stages, tuple) or not self.stages:
            raise InputError(f"field 'stages' must be a non-empty list, got {self.stages!r}")
        self._check_layers()
        conflict = uniform_recompute_conflict([st.num_layers for st in self.stages], self.recompute)
        if conflict:
            raise InputError(conflict)
        self._check_replicas()
        object.__setattr__(self, "_counts", self._compute_counts())

    def _check_recompute(self) -> None:
        g, m, n = self.recompute_granularity, self.recompute_method, self.recompute_num_layers
        if g not in (None, "full", "selective"):
            raise InputError(f"field 'recompute_granularity' must be null, 'full' or 'selective', got {g!r}")
        if g == "full":
            if m not in ("uniform", "block"):
                raise InputError(f"field 'recompute_method' must be 'uniform' or 'block' with full recompute, got {m!r}")
            _require_int(n, "recompute_num_layers")
        elif m is not None or n is not None:
            raise InputError(f"fields 'recompute_method' / 'recompute_num_layers' need recompute_granularity "
                             f"'full', got {g!r} with {m!r} / {n!r}")
        if self.recompute_activations and g not in (None, "full"):
            raise InputError(f"field 'recompute_activations' true means full recompute but "
                             f"'recompute_granularity' is {g!r}")

    @property
    def recompute(self) -> tuple[str | None, str | None, int | None]:
        """(granularity, method, layers per group) as megatron-core's TransformerConfig takes them."""
        if self.recompute_granularity is not None:
            return self.recompute_granularity, self.recompute_method, self.recompute_num_layers
        if self.recompute_activations:
            return "full", "uniform", 1
        return None, None, None

    def _check_layers(self) -> None:
        expected_start = 0
        last = len(self.stages) - 1
        for s, stage in enumerate(self.stages):
            if stage.first_layer != expected_start:
                raise InputError(
                    f"stages[{s}].first_layer is {stage.first_layer} but layers must be contiguous: "
                    f"expected {expected_start}")
            if stage.num_layers == 0 and 0 < s < last:
                raise InputError(f"stages[{s}].num_layers is 0: only the first or last stage may hold "
                                 "no transformer layer (embedding-only or head-only)")
            expected_start = stage.layer_end
        if expected_start != self.num_layers:
            raise InputError(f"stages cover transformer layers [0, {expected_start}) but 'num_layers' is "
                             f"{self.num_layers}: layer ranges must cover the model exactly")
        if len(self.stages) == 1 and self.stages[0].num_layers == 0:
            raise InputError("stages[0].num_layers is 0: a single stage must hold every layer")

    def _check_replicas(self) -> None:
        d = len(self.stages[0].replicas)
        for s, stage in enumerate(self.stages):
            if len(stage.replicas) != d:
                raise InputError(f"stages[{s}] has {len(stage.replicas)} replicas but stages[0] has {d}: "
                                 "every stage must have the same number of replicas (replica j = pipeline j)")

    def _compute_counts(self) -> tuple[int, ...]:
        d, mbs, gbs = self.dp_degree, self.micro_batch_size, self.global_batch_size
        if gbs % mbs:
            raise InputError(f"global_batch_size {gbs} is not a multiple of micro_batch_size {mbs}")
        if self.microbatches_per_pipeline is None:
            if gbs % (mbs * d):
                raise InputError(
                    f"global_batch_size {gbs} is not divisible by micro_batch_size x replicas = {mbs} x {d}; "
                    "give 'microbatches_per_pipeline' explicitly")
            return (gbs // (mbs * d),) * d
        counts = self.microbatches_per_pipeline
        if not isinstance(counts, tuple) or len(counts) != d:
            raise InputError(f"field 'microbatches_per_pipeline' must list {d} counts (one per pipeline), "
                             f"got {counts!r}")
        for j, c in enumerate(counts):
            _require_int(c, f"microbatches_per_pipeline[{j}]")
        if sum(counts) * mbs != gbs:
            raise InputError(f"microbatches_per_pipeline {list(counts)} sum to {sum(counts)} micro-batches of "
                             f"{mbs} = {sum(counts) * mbs} samples, but global_batch_size is {gbs}")
        return counts

    # ---- derived views -------------------------------------------------------------------------
    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def dp_degree(self) -> int:
        return len(self.stages[0].replicas)

    @property
    def world_size(self) -> int:
        return sum(stage.num_gpus for stage in self.stages)

    @property
    def microbatch_counts(self) -> tuple[int, ...]:
        """Micro-batches per pipeline (length D)."""
        return self._counts

    @property
    def bytes_per_element(self) -> int:
        return PRECISION_BYTES[self.precision]

    def pipeline(self, j: int) -> tuple[Replica, ...]:
        """The replicas of pipeline ``j``, one per stage."""
        return tuple(stage.replicas[j] for stage in self.stages)

    def replicas(self) -> Iterator[tuple[int, int, Replica]]:
        """Yield ``(stage, replica_index, replica)`` in stage-major order."""
        for s, stage in enumerate(self.stages):
            for j, rep in enumerate(stage.replicas):
                yield s, j, rep

    def gpu_counts(self) -> dict[tuple[str, str], int]:
        """GPUs used per (gpu_type, zone)."""
        out: dict[tuple[str, str], int] = {}
        for _, _, rep in self.replicas():
            key = (rep.gpu_type, rep.zone)
            out[key] = out.get(key, 0) + rep.tp
        return out

    # ---- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version, "model": self.model, "num_layers": self.num_layers,
            "micro_batch_size": self.micro_batch_size, "global_batch_size": self.global_batch_size,
            "precision": self.precision, "optimizer": self.optimizer,
            "recompute_activations": self.recompute_activations,
            "distributed_optimizer": self.distributed_optimizer,
            "tie_embeddings": self.tie_embeddings,
            "recompute_granularity": self.recompute_granularity,
            "recompute_method": self.recompute_method,
            "recompute_num_layers": self.recompute_num_layers,
            "p2p_pattern": self.p2p_pattern,
            "microbatches_per_pipeline": (list(self.microbatches_per_pipeline)
                                          if self.microbatches_per_pipeline is not None else None),
            "stages": [s.to_dict() for s in self.stages],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Plan":
        from planner.schema.base import validate
        from planner.schema.files import PlanFile
        validate(PlanFile, data)
        check_keys(data, _PLAN_KEYS, {"schema_version", "num_layers", "stages", "micro_batch_size",
                                       "global_batch_size"}, "plan")
        stages_raw = data["stages"]
        if not isinstance(stages_raw, list):
            raise InputError(f"field 'stages' must be a list, got {stages_raw!r}")
        stages = tuple(_stage_from_dict(s, i) for i, s in enumerate(stages_raw))
        counts = data.get("microbatches_per_pipeline")
        if counts is not None:
            if not isinstance(counts, list):
                raise InputError(f"field 'microbatches_per_pipeline' must be a list or null, got {counts!r}")
            counts = tuple(counts)
        kwargs = {k: data[k] for k in _PLAN_KEYS - {"stages", "microbatches_per_pipeline"} if k in data}
        return cls(stages=stages, microbatches_per_pipeline=counts, **kwargs)

    @classmethod
    def from_json(cls, text: str, source: str | None = None) -> "Plan":
        from planner.schema.base import parse_json
        data = parse_json(text, source)
        try:
            return cls.from_dict(data)
        except InputError as exc:
            raise exc.with_source(source) if source else exc

    @classmethod
    def load(cls, path: str | Path) -> "Plan":
        text = read_text(path)
        return cls.from_json(text, source=str(path))

    def save(self, path: str | Path) -> None:
        atomic_write_text(Path(path), self.to_json() + "\n")


_PLAN_KEYS = {"schema_version", "model", "num_layers", "micro_batch_size", "global_batch_size", "precision",
              "optimizer", "recompute_activations", "distributed_optimizer", "microbatches_per_pipeline",
              "stages", "tie_embeddings", "recompute_granularity", "recompute_method", "recompute_num_layers",
              "p2p_pattern"}


def _stage_from_dict(data: Any, index: int) -> Stage:
    where = f"stages[{index}]"
    check_keys(data, {"first_layer", "num_layers", "replicas", "grad_sync"}, {"first_layer", "num_layers", "replicas"},
               where)
    reps = data["replicas"]
    if not isinstance(reps, list) or not reps:
        raise InputError(f"{where}.replicas must be a non-empty list, got {reps!r}")
    replicas = []
    for j, r in enumerate(reps):
        rw = f"{where}.replicas[{j}]"
        check_keys(r, {"gpu_type", "tp", "zone"}, {"gpu_type", "tp", "zone"}, rw)
        try:
            replicas.append(Replica(gpu_type=r["gpu_type"], tp=r["tp"], zone=r["zone"]))
        except InputError as exc:
            raise InputError(f"{rw}: {exc}") from None
    try:
        return Stage(first_layer=data["first_layer"], num_layers=data["num_layers"], replicas=tuple(replicas),
                     grad_sync=data.get("grad_sync"))
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def region_of(zone: str) -> str:
    """Region of a zone: the zone name minus its last ``-x`` part (``us-central1-a`` -> ``us-central1``)."""
    head, sep, _ = zone.rpartition("-")
    return head if sep and head else zone
