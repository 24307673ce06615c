"""megatron_sailor.runtime: the runtime core: process groups, the stage model, p2p, gradient sync, 1F1B schedule, optimizer,
initialisation, data and metrics for one rank of a plan (docs/RUNTIME.md)."""
