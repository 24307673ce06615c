"""RNG states of a checkpoint as plain tensors, ints and floats (never a pickle of Python objects).

Contract: :func:`capture` returns ``{"format", "global": {...}, "per_layer": {}}`` where ``global`` holds
the torch CPU generator (uint8 tensor), Python's ``random`` (version, 625 words as an int64 tensor,
``gauss_next``), numpy's legacy global generator (624 words, position, gauss cache), every CUDA device's
generator when CUDA is up, and megatron-core's model-parallel RNG tracker states (``{name: uint8 tensor}``)
when megatron is loaded. ``per_layer`` is reserved for states kept per global layer file key
(``layer_00003``...); it is empty today and :func:`restore` ignores keys it does not know inside it.
The object is written with ``torch.save`` and read back with ``torch.load(weights_only=True)``, which
admits only tensors and primitive containers; :func:`restore` checks every shape and type and raises
:class:`RNGStateError` instead of setting a malformed state. Restoring is exact.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import torch

RNG_FORMAT = "megatron-sailor-rng/1"
RNG_FILE = "rng.pt"
_TRACKER_MODULE = "megatron.core.tensor_parallel.random"


class RNGStateError(ValueError):
    """The RNG file is malformed (message says which part)."""


def _tracker() -> Any:
    mod = sys.modules.get(_TRACKER_MODULE)      # only when the runtime already imported megatron
    return None if mod is None else mod.get_cuda_rng_tracker()


def capture() -> dict[str, Any]:
    """This process's RNG states (see the module docstring)."""
    import numpy as np
    version, words, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "torch_cpu": torch.get_rng_state().clone(),
        "python": {"version": int(version), "words": torch.tensor(list(words), dtype=torch.int64),
                   "gauss_next": gauss},
        "numpy": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = [t.clone() for t in torch.cuda.get_rng_state_all()]
    tracker = _tracker()
    if tracker is not None:
        state["tracker"] = {str(k): v.clone() for k, v in tracker.get_states().items()}
    return {"format": RNG_FORMAT, "global": state, "per_layer": {}}


def _tensor(obj: Any, where: str, dtype: torch.dtype, numel: int | None = None) -> torch.Tensor:
    if not isinstance(obj, torch.Tensor) or obj.dtype != dtype or obj.dim() != 1 or \
            (numel is not None and obj.numel() != numel):
        raise RNGStateError(f"{where} must be a 1-D {dtype} tensor" + (f" of {numel} values" if numel else ""))
    return obj


def _check(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict) or obj.get("format") != RNG_FORMAT or not isinstance(obj.get("global"), dict):
        raise RNGStateError(f"not a {RNG_FORMAT} object")
    g = obj["global"]
    unknown = set(g) - {"torch_cpu", "python", "numpy", "cuda", "tracker"}
    if unknown:
        raise RNGStateError(f"unknown RNG state(s) {sorted(map(str, unknown))[:5]}")
    _tensor(g.get("torch_cpu"), "torch_cpu", torch.uint8, torch.get_rng_state().numel())
    py, npy = g.get("python"), g.get("numpy")
    if not isinstance(py, dict) or not isinstance(py.get("version"), int) or \
            not (py.get("gauss_next") is None or isinstance(py.get("gauss_next"), float)):
        raise RNGStateError("python state must be {version, words, gauss_next}")
    _tensor(py.get("words"), "python.words", torch.int64, 625)
    if not isinstance(npy, dict) or npy.get("kind") != "MT19937" or not isinstance(npy.get("pos"), int) \
            or not isinstance(npy.get("has_gauss"), int) or not isinstance(npy.get("cached_gaussian"), float):
        raise RNGStateError("numpy state must be {kind: MT19937, keys, pos, has_gauss, cached_gaussian}")
    keys = _tensor(npy.get("keys"), "numpy.keys", torch.int64, 624)
    if not 0 <= npy["pos"] <= 624 or bool(((keys < 0) | (keys >= 2 ** 32)).any()):
        raise RNGStateError("numpy state is out of range")
    for i, t in enumerate(g.get("cuda", [])):
        _tensor(t, f"cuda[{i}]", torch.uint8)
    tracker = g.get("tracker", {})
    if not isinstance(tracker, dict):
        raise RNGStateError("tracker must map names to uint8 tensors")
    for name, t in tracker.items():
        _tensor(t, f"tracker[{str(name)[:50]!r}]", torch.uint8)
    return g


def restore(obj: Any) -> None:
    """Set this process's RNGs from a :func:`capture` object (checked first; nothing set if malformed)."""
    import numpy as np
    g = _check(obj)
    py, npy = g["python"], g["numpy"]
    words = tuple(int(x) for x in py["words"].tolist())
    try:
        random.setstate((py["version"], words, py["gauss_next"]))
    except (ValueError, TypeError, OverflowError) as exc:
        raise RNGStateError(f"python state refused ({exc})") from None
    np.random.set_state((npy["kind"], npy["keys"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"],
                         npy["cached_gaussian"]))
    torch.set_rng_state(g["torch_cpu"].clone())
    if g.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([t.clone() for t in g["cuda"]])
    tracker = _tracker()
    if tracker is not None and g.get("tracker"):
        tracker.set_states({k: v.clone() for k, v in g["tracker"].items()})


def load(path: Path) -> dict[str, Any]:
    """Read an RNG file with ``torch.load(weights_only=True)`` (no code from the file can run)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - UnpicklingError, RuntimeError, OSError: all mean "unusable"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise RNGStateError(f"{path.name} refused by torch.load(weights_only=True): {first}") from None
