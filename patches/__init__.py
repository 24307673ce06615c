"""Version-pinned compatibility patches for megatron-core (CPU/gloo seams)."""
from patches.megatron_cpu import PINNED_MEGATRON_CORE, PatchError, apply_cpu_patches

__all__ = ["PINNED_MEGATRON_CORE", "PatchError", "apply_cpu_patches"]
