"""CPU/gloo compatibility patches for megatron-core (pinned to one exact version).

megatron-core 0.16.1 calls CUDA unconditionally in a few places our runtime (and the plain-megatron
baseline of ``benchmarks/runtime_overhead.py``) goes through. Each patch below replaces one upstream
symbol with a CPU equivalent; before replacing, it checks that the symbol exists, so an upgrade of
megatron-core fails loudly here instead of silently running unpatched code. Patches are applied only
when CUDA is not available (``apply_cpu_patches`` is a no-op on GPU machines).
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import types
from typing import Any, Callable

import torch

logger = logging.getLogger(__name__)

PINNED_MEGATRON_CORE = "0.16.1"
_APPLIED: list[str] = []


class PatchError(RuntimeError):
    """The installed megatron-core does not match what a patch expects."""


def _replace(module_name: str, attr_path: str, new: Any) -> None:
    """Replace ``module.attr_path`` (``Class.method`` allowed) after checking it exists upstream."""
    owner: Any = importlib.import_module(module_name)
    *parents, leaf = attr_path.split(".")
    for part in parents:
        if not hasattr(owner, part):
            raise PatchError(f"megatron-core changed: {module_name}.{attr_path} not found (missing {part})")
        owner = getattr(owner, part)
    if not hasattr(owner, leaf):
        raise PatchError(f"megatron-core changed: {module_name}.{attr_path} not found")
    setattr(owner, leaf, new)
    _APPLIED.append(f"{module_name}.{attr_path}")


# ---- replacements ------------------------------------------------------------------------------------
def _cpu_get_tensor(self: Any, tensor_shape: Any, dtype: torch.dtype, name: str,
                    mem_alloc_context: Callable | None = None) -> torch.Tensor:
    numel = 1
    for dim in tensor_shape:
        numel *= dim
    buf = self.buffer.get((name, dtype))
    if buf is None or buf.numel() < numel:
        buf = torch.empty(numel, dtype=dtype, device="cpu", requires_grad=False)
        self.buffer[(name, dtype)] = buf
    return buf[0:numel].view(*tensor_shape)


def _cpu_get_rng_state(device: Any = "cuda", clone: bool = False, graph_safe: bool = False) -> torch.Tensor:
    return torch.get_rng_state()


def _cpu_set_rng_state(new_state: torch.Tensor, device: int = -1, graph_safe: bool = False) -> None:
    torch.set_rng_state(new_state)


def _cpu_tracker_add(self: Any, name: str, seed: int) -> None:
    if seed in self.seeds_:
        raise Exception(f"seed {seed} already exists")
    self.seeds_.add(seed)
    if name in self.states_:
        raise Exception(f"cuda rng state {name} already exists")
    orig = torch.get_rng_state()
    torch.manual_seed(seed)
    self.states_[name] = torch.get_rng_state()
    torch.set_rng_state(orig)


def _cpu_current_device() -> str:
    return "cpu"


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


# ---- entry points ------------------------------------------------------------------------------------
def installed_version() -> str:
    from importlib.metadata import version
    return version("megatron-core")


def apply_cpu_patches(force: bool = False) -> list[str]:
    """Apply the model patches when running without CUDA; return the patched symbols."""
    if torch.cuda.is_available() and not force:
        return []
    if _APPLIED:
        return list(_APPLIED)
    found = installed_version()
    if found != PINNED_MEGATRON_CORE:
        raise PatchError(f"patches are pinned to megatron-core {PINNED_MEGATRON_CORE}, found {found}")
    _replace("megatron.core.utils", "GlobalMemoryBuffer.get_tensor", _cpu_get_tensor)
    _replace("megatron.core.tensor_parallel.random", "_get_cuda_rng_state", _cpu_get_rng_state)
    _replace("megatron.core.tensor_parallel.random", "_set_cuda_rng_state", _cpu_set_rng_state)
    _replace("megatron.core.tensor_parallel.random", "CudaRNGStatesTracker.add", _cpu_tracker_add)
    logger.debug("applied %d megatron-core CPU patches", len(_APPLIED))
    return list(_APPLIED)


class _TorchOnCpu(types.ModuleType):
    """A stand-in for the ``torch`` module inside one megatron module: tensor factories asked for
    ``device="cuda"`` get the CPU; everything else is torch itself."""

    def __init__(self) -> None:
        super().__init__("torch")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def zeros(*args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("device") == "cuda":
            kwargs["device"] = "cpu"
        return torch.zeros(*args, **kwargs)


def apply_baseline_patches() -> list[str]:
    """Extra patches for running megatron-core's own 1F1B schedule on CPU (benchmark baseline only)."""
    apply_cpu_patches()
    if torch.cuda.is_available():
        return []
    name = "megatron.core.pipeline_parallel.schedules.torch"
    if name not in _APPLIED:
        _replace("megatron.core.pipeline_parallel.schedules", "torch", _TorchOnCpu())
    return list(_APPLIED)


@contextlib.contextmanager
def cuda_calls_on_cpu() -> Any:
    """Temporarily route ``torch.cuda.current_device`` / ``synchronize`` to CPU no-ops.

    Used by the plain megatron-core baseline (its pipeline p2p and DDP ask for the current CUDA device).
    """
    saved = (torch.cuda.current_device, torch.cuda.synchronize)
    torch.cuda.current_device = _cpu_current_device  # type: ignore[assignment]
    torch.cuda.synchronize = _noop  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.cuda.current_device, torch.cuda.synchronize = saved  # type: ignore[assignment]
