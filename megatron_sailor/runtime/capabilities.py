"""What the runtime can execute: a plan option it cannot honour is refused before any process group exists.

The plan is what runs (issue 12): there is no fallback that trains something else with a warning.
:func:`check_runtime_supports` raises one-line :class:`~planner.errors.InputError`s; the training CLI calls
it while validating its arguments and :class:`~megatron_sailor.runtime.rank_runtime.RankRuntime` calls it
again before it creates anything.
"""
from __future__ import annotations

from planner.errors import InputError
from planner.hardware import GPUCatalog
from planner.plan import Plan, uniform_recompute_conflict

SUPPORTED_PRECISIONS = ("fp32", "bf16", "fp16")
SUPPORTED_OPTIMIZERS = ("adamw",)
SUPPORTED_SYNC_MODES = ("flat", "hierarchical")      # stages[s].grad_sync (None: the --grad-sync flag)
SUPPORTED_P2P_PATTERNS = ("tp0-to-all",)             # runtime/p2p.py


def unsupported_options(plan: Plan) -> list[str]:
    """One message per plan option this runtime cannot execute (empty: the plan runs as written)."""
    msgs = []
    if plan.precision not in SUPPORTED_PRECISIONS:
        msgs.append(f"precision '{plan.precision}' is not implemented by the runtime yet "
                    f"(supported: {', '.join(SUPPORTED_PRECISIONS)})")
    if plan.precision == "bf16":
        catalog = GPUCatalog()
        lacking = sorted({rep.gpu_type for _, _, rep in plan.replicas()
                          if rep.gpu_type in catalog and not catalog.get(rep.gpu_type).supports_bf16})
        if lacking:
            msgs.append(f"precision 'bf16' is not supported by GPU type {lacking[0]} (no bf16 units): "
                        "use precision fp16")
    for s, st in enumerate(plan.stages):
        if st.grad_sync is not None and st.grad_sync not in SUPPORTED_SYNC_MODES:
            msgs.append(f"stages[{s}].grad_sync '{st.grad_sync}' is not implemented by the runtime "
                        f"(supported: {', '.join(SUPPORTED_SYNC_MODES)} or null)")
    if plan.p2p_pattern not in SUPPORTED_P2P_PATTERNS:
        msgs.append(f"p2p_pattern '{plan.p2p_pattern}' is not implemented by the runtime "
                    f"(supported: {', '.join(SUPPORTED_P2P_PATTERNS)})")
    conflict = uniform_recompute_conflict([st.num_layers for st in plan.stages], plan.recompute)
    if conflict:                 # Plan validation refuses it already; kept should that rule ever relax
        msgs.append(conflict.removeprefix("field "))
    if plan.optimizer not in SUPPORTED_OPTIMIZERS:
        msgs.append(f"optimizer '{plan.optimizer}' is not implemented by the runtime "
                    f"(supported: {', '.join(SUPPORTED_OPTIMIZERS)})")
    return msgs


def check_runtime_supports(plan: Plan, source: str | None = None) -> None:
    """Raise :class:`InputError` naming the first plan option the runtime cannot honour."""
    msgs = unsupported_options(plan)
    if msgs:
        raise InputError(f"plan field {msgs[0]}", source=source)
