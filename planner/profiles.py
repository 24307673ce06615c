"""Per-layer cost profiles: forward/backward seconds, optimizer seconds per parameter, activation bytes.

A :class:`LayerCosts` holds one (GPU type, micro-batch size, TP degree) measurement for a whole model.
A :class:`ProfileStore` answers ``get(gpu, mbs, tp)`` from (in order): loaded measurements (our JSON format or
Sailor's, see :mod:`planner.sailor_data`), else an analytic roofline estimate from the GPU catalog, which is
marked ``estimated=True`` and reported as such by every output.

Our profile JSON format (``format: megatron-sailor-profile/1``)::

    {"format": "megatron-sailor-profile/1", "model": "tiny", "gpu_type": "cpu-x86",
     "entries": [{"mbs": 1, "tp": 1, "embedding_s": [fwd, bwd], "layers_s": [[fwd, bwd], ...],
                  "head_s": [fwd, bwd], "update_s_per_param": 1e-9,
                  "layer_act_bytes": 123.0, "embedding_act_bytes": 1.0, "head_act_bytes": 9.0}]}

``layers_s`` lists one ``[fwd, bwd]`` per transformer layer, or a single pair used for every layer.
Activation bytes are per micro-batch at that ``mbs`` and optional (analytic when absent).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.model import ModelSpec
from planner.textio import read_text
PROFILE_FORMAT = "megatron-sailor-profile/1"
# Analytic estimate: achieved fraction of peak FLOP/s, and bytes touched per parameter by one AdamW step.
ESTIMATE_MFU = 0.35
ADAM_BYTES_PER_PARAM = 32.0


@dataclass(frozen=True)
class LayerCosts:
    """Costs of one micro-batch on one GPU of ``gpu_type`` at (``mbs``, ``tp``)."""

    gpu_type: str
    mbs: int
    tp: int
    embedding_fwd_s: float
    embedding_bwd_s: float
    layer_fwd_s: tuple[float, ...]
    layer_bwd_s: tuple[float, ...]
    head_fwd_s: float
    head_bwd_s: float
    update_s_per_param: float
    layer_act_bytes: float | None = None
    embedding_act_bytes: float | None = None
    head_act_bytes: float | None = None
    layer_params: int | None = None         # per TP shard, when measured (Sailor llm_info)
    embedding_params: int | None = None
    head_params: int | None = None
    estimated: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        values = [self.embedding_fwd_s, self.embedding_bwd_s, self.head_fwd_s, self.head_bwd_s,
                  self.update_s_per_param, *self.layer_fwd_s, *self.layer_bwd_s]
        if any(not isinstance(v, (int, float)) or v < 0 for v in values):
            raise InputError(f"profile {self.gpu_type} mbs={self.mbs} tp={self.tp}: times must be "
                             "non-negative numbers")
        if len(self.layer_fwd_s) != len(self.layer_bwd_s) or not self.layer_fwd_s:
            raise InputError(f"profile {self.gpu_type} mbs={self.mbs} tp={self.tp}: layer lists differ in "
                             "length or are empty")


class ProfileStore:
    """Profiles per (gpu_type, mbs, tp) for one model, with analytic fallback."""

    def __init__(self, model: ModelSpec, catalog: GPUCatalog, precision: str = "fp32",
                 allow_estimates: bool = True) -> None:
        self.model = model
        self.catalog = catalog
        self.precision = precision
        self.allow_estimates = allow_estimates
        self._entries: dict[tuple[str, int, int], LayerCosts] = {}
        self._cache: dict[tuple[str, int, int], LayerCosts] = {}
        # measured entries whose smoothed value (smooth_across_mbs) is computed on first get(): (the entry,
        # its neighbours and their micro-batch sizes, as they were when smoothing was asked for)
        self._to_smooth: dict[tuple[str, int, int], tuple[LayerCosts, list[LayerCosts], list[int]]] = {}

    def add(self, costs: LayerCosts) -> None:
        n = len(costs.layer_fwd_s)
        if n not in (1, self.model.num_layers):
            raise InputError(f"profile {costs.gpu_type} mbs={costs.mbs} tp={costs.tp} ({costs.source}) has {n} "
                             f"layers but model '{self.model.name}' has {self.model.num_layers}")
        if n == 1 and self.model.num_layers > 1:
            costs = _replicate_layers(costs, self.model.num_layers)
        self._entries[(costs.gpu_type, costs.mbs, costs.tp)] = costs
        self._to_smooth.pop((costs.gpu_type, costs.mbs, costs.tp), None)
        self._cache.clear()

    def measured_gpu_types(self) -> list[str]:
        return sorted({k[0] for k in self._entries})

    def options(self, gpu_type: str) -> list[tuple[int, int]]:
        """Measured (mbs, tp) pairs for a GPU type (empty if only estimates are available)."""
        return sorted((m, t) for g, m, t in self._entries if g == gpu_type)

    def has(self, gpu_type: str, mbs: int, tp: int) -> bool:
        return (gpu_type, mbs, tp) in self._entries or (self.allow_estimates and gpu_type in self.catalog)

    def get(self, gpu_type: str, mbs: int, tp: int) -> LayerCosts:
        key = (gpu_type, mbs, tp)
        if key in self._to_smooth:
            self._entries[key] = _smoothed(*self._to_smooth.pop(key))
        if key in self._entries:
            return self._entries[key]
        if key in self._cache:
            return self._cache[key]
        if not self.allow_estimates or gpu_type not in self.catalog:
            have = self.options(gpu_type)
            raise InputError(f"no profile for GPU type '{gpu_type}' at micro-batch {mbs}, TP {tp} "
                             f"(profiled: {have or 'none'}; catalog has it: {gpu_type in self.catalog})")
        self.model.check_tp(tp)
        costs = estimate_costs(self.model, self.catalog, gpu_type, mbs, tp, self.precision)
        self._cache[key] = costs
        return costs

    def smooth_across_mbs(self, window: float = 4.0) -> None:
        """Replace each measured fwd/bwd time by a least-squares affine fit ``a + b*mbs`` over the profiled
        micro-batch sizes within ``[mbs/window, mbs*window]`` of the same (GPU, TP) (at least 3 points).

        Kernel time is affine in the batch (fixed launch/latency cost + work); single short measurements
        at small sizes are noisy (launch-bound), so a local fit denoises them. Not fitted to any run.

        Each fit is computed when :meth:`get` first asks for its entry (a plan uses few of them), from the
        entries as they are now, so the values are those of fitting every entry here.
        """
        for key in list(self._to_smooth):          # a second smoothing starts from the first one's values
            self._entries[key] = _smoothed(*self._to_smooth.pop(key))
        groups: dict[tuple[str, int], dict[int, LayerCosts]] = {}
        for (g, m, t), c in self._entries.items():
            groups.setdefault((g, t), {})[m] = c
        for (g, t), by_mbs in groups.items():
            for m, c in by_mbs.items():
                near = sorted(x for x in by_mbs if m / window <= x <= m * window)
                if len(near) >= 3:
                    self._to_smooth[(g, m, t)] = (c, [by_mbs[x] for x in near], near)
        self._cache.clear()

    def load_file(self, path: str | Path) -> None:
        for costs in parse_profile_file(path, self.model):
            self.add(costs)


def _affine_fit(xs: list[int]):  # noqa: ANN202
    """``at(ys, x)``: the least-squares line through (xs, ys) evaluated at ``x``, clamped at 0 (the sums over
    ``xs`` are done once)."""
    n = len(xs)
    mx = sum(xs) / n
    var = sum((a - mx) ** 2 for a in xs)

    def at(ys: list[float], x: float) -> float:
        my = sum(ys) / n
        slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / var if var else 0.0
        return max(0.0, my + slope * (x - mx))
    return at


def _smoothed(c: LayerCosts, near: list[LayerCosts], sizes: list[int]) -> LayerCosts:
    from dataclasses import replace
    at, x = _affine_fit(sizes), c.mbs
    fwd = zip(*(n.layer_fwd_s for n in near))          # per layer: its time at each neighbouring size
    bwd = zip(*(n.layer_bwd_s for n in near))
    return replace(
        c, layer_fwd_s=tuple(at(list(ys), x) for ys in fwd), layer_bwd_s=tuple(at(list(ys), x) for ys in bwd),
        head_fwd_s=at([n.head_fwd_s for n in near], x), head_bwd_s=at([n.head_bwd_s for n in near], x),
        source=c.source + " (smoothed across mbs)")


def _replicate_layers(c: LayerCosts, n: int) -> LayerCosts:
    from dataclasses import replace
    return replace(c, layer_fwd_s=c.layer_fwd_s * n, layer_bwd_s=c.layer_bwd_s * n)


def estimate_costs(model: ModelSpec, catalog: GPUCatalog, gpu_type: str, mbs: int, tp: int,
                   precision: str) -> LayerCosts:
    """Roofline estimate: FLOPs / (peak x ESTIMATE_MFU) plus TP all-reduces over the intra-node link."""
    gpu = catalog.get(gpu_type)
    flops_per_s = gpu.flops_for(precision) * ESTIMATE_MFU
    elem = 4 if precision == "fp32" else 2
    hidden_bytes = model.boundary_activation_bytes(mbs, elem)
    allreduce_s = 0.0 if tp == 1 else 2 * (tp - 1) / tp * hidden_bytes / gpu.intra_node_bw_bytes_per_s
    layer_fwd = model.layer_fwd_flops(mbs) / tp / flops_per_s + 2 * allreduce_s
    head_fwd = model.head_fwd_flops(mbs) / tp / flops_per_s
    emb_fwd = hidden_bytes / gpu.mem_bw_bytes_per_s * 2
    return LayerCosts(
        gpu_type=gpu_type, mbs=mbs, tp=tp, embedding_fwd_s=emb_fwd, embedding_bwd_s=emb_fwd,
        layer_fwd_s=(layer_fwd,) * model.num_layers, layer_bwd_s=(2 * layer_fwd,) * model.num_layers,
        head_fwd_s=head_fwd, head_bwd_s=2 * head_fwd,
        update_s_per_param=ADAM_BYTES_PER_PARAM / gpu.mem_bw_bytes_per_s,
        estimated=True, source=f"analytic estimate ({ESTIMATE_MFU:.0%} of peak)")


def _pair(value: Any, where: str) -> tuple[float, float]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, (int, float)) and v >= 0 for v in value)):
        raise InputError(f"{where} must be [fwd_s, bwd_s] with non-negative numbers, got {value!r}")
    return float(value[0]), float(value[1])


def _entry_to_costs(e: Any, gpu_type: str, i: int, source: str) -> LayerCosts:
    where = f"entries[{i}]"
    required = {"mbs", "tp", "embedding_s", "layers_s", "head_s", "update_s_per_param"}
    optional = {"layer_act_bytes", "embedding_act_bytes", "head_act_bytes"}
    if not isinstance(e, Mapping) or not required <= set(e) or set(e) - required - optional:
        raise InputError(f"{where} must have keys {sorted(required)} (optional {sorted(optional)})")
    for k in ("mbs", "tp"):
        if isinstance(e[k], bool) or not isinstance(e[k], int) or e[k] < 1:
            raise InputError(f"{where}.{k} must be a positive integer, got {e[k]!r}")
    layers = e["layers_s"]
    if not isinstance(layers, list) or not layers:
        raise InputError(f"{where}.layers_s must be a non-empty list of [fwd_s, bwd_s]")
    pairs = [_pair(p, f"{where}.layers_s[{j}]") for j, p in enumerate(layers)]
    emb, head = _pair(e["embedding_s"], f"{where}.embedding_s"), _pair(e["head_s"], f"{where}.head_s")
    upd = e["update_s_per_param"]
    if not isinstance(upd, (int, float)) or upd < 0:
        raise InputError(f"{where}.update_s_per_param must be a non-negative number, got {upd!r}")
    extra = {k: float(e[k]) for k in optional if k in e}
    return LayerCosts(gpu_type=gpu_type, mbs=e["mbs"], tp=e["tp"], embedding_fwd_s=emb[0],
                      embedding_bwd_s=emb[1], layer_fwd_s=tuple(p[0] for p in pairs),
                      layer_bwd_s=tuple(p[1] for p in pairs), head_fwd_s=head[0], head_bwd_s=head[1],
                      update_s_per_param=float(upd), source=source, **extra)


def parse_profile_file(path: str | Path, model: ModelSpec | None = None) -> list[LayerCosts]:
    """Read one profile file in our format. Errors name the file and the field."""
    from planner.schema.base import parse_json, validate
    from planner.schema.files import ProfileFile
    src = str(path)
    data = parse_json(read_text(path), src)
    try:
        if isinstance(data, Mapping) and data.get("format") == PROFILE_FORMAT:
            validate(ProfileFile, data)
        if not isinstance(data, Mapping) or data.get("format") != PROFILE_FORMAT:
            raise InputError(f"field 'format' must be '{PROFILE_FORMAT}', got "
                             f"{data.get('format') if isinstance(data, Mapping) else data!r}")
        gpu_type = data.get("gpu_type")
        if not isinstance(gpu_type, str) or not gpu_type:
            raise InputError(f"field 'gpu_type' must be a non-empty string, got {gpu_type!r}")
        if model is not None and data.get("model") not in (None, model.name):
            raise InputError(f"field 'model' is {data.get('model')!r} but the model is '{model.name}'")
        entries = data.get("entries")
        if not isinstance(entries, list) or not entries:
            raise InputError("field 'entries' must be a non-empty list")
        return [_entry_to_costs(e, gpu_type, i, src) for i, e in enumerate(entries)]
    except InputError as exc:
        raise exc.with_source(src) from None


def costs_to_entry(c: LayerCosts) -> dict[str, Any]:
    """The JSON entry of one LayerCosts (our format)."""
    out: dict[str, Any] = {
        "mbs": c.mbs, "tp": c.tp, "embedding_s": [c.embedding_fwd_s, c.embedding_bwd_s],
        "layers_s": [[f, b] for f, b in zip(c.layer_fwd_s, c.layer_bwd_s)],
        "head_s": [c.head_fwd_s, c.head_bwd_s], "update_s_per_param": c.update_s_per_param}
    for k in ("layer_act_bytes", "embedding_act_bytes", "head_act_bytes"):
        if getattr(c, k) is not None:
            out[k] = getattr(c, k)
    return out


def write_profile_file(path: str | Path, model: str, gpu_type: str, costs: Iterable[LayerCosts]) -> None:
    from planner.textio import atomic_write_text
    data = {"format": PROFILE_FORMAT, "model": model, "gpu_type": gpu_type,
            "entries": [costs_to_entry(c) for c in costs]}
    atomic_write_text(Path(path), json.dumps(data, indent=1) + "\n")
