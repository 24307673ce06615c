"""megatron_sailor.profiler: the profiler: per-layer timings, optimizer and network fits for this device
(``sailor-profile``; docs/PROFILER.md)."""
