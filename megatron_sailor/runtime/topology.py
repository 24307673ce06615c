"""Who is who in a plan: a readable rank table and the ``sailor-topology`` CLI.

The rank layout itself (:class:`RankInfo`, :class:`RankLayout`, :func:`build_layout`: rank order, fine
shards, P2P peers) is the torch-free contract in :mod:`planner.layout`; it is re-exported here under the
names the runtime has always used. ``python -m megatron_sailor.runtime.topology PLAN`` prints who is who.
"""
from __future__ import annotations

import sys

from planner.errors import InputError, OneLineParser
from planner.layout import RankInfo, RankLayout, build_layout
from planner.plan import Plan

__all__ = ["RankInfo", "RankLayout", "build_layout", "describe", "main"]


def describe(plan: Plan, layout: RankLayout) -> str:
    """A human-readable table: one line per rank."""
    lines = [f"plan: {plan.num_stages} stage(s) x {plan.dp_degree} pipeline(s), world size {layout.world_size}, "
             f"micro-batch {plan.micro_batch_size}, global batch {plan.global_batch_size}, "
             f"micro-batches per pipeline {list(plan.microbatch_counts)}",
             f"{'rank':>4}  {'stage':>5}  {'layers':>9}  {'pipeline':>8}  {'tp':>5}  {'gpu':<10} {'zone':<16} "
             "grad fine shards"]
    for r in layout.ranks:
        st = plan.stages[r.stage]
        extra = ("E" if r.stage == 0 else "") + ("H" if r.stage == plan.num_stages - 1 else "")
        layers = f"[{st.first_layer},{st.layer_end}){extra}"
        shards = f"{list(layout.fine_shards_of(r.rank))}/{layout.num_fine_shards(r.stage)}"
        lines.append(f"{r.rank:>4}  {r.stage:>5}  {layers:>9}  {r.replica:>8}  {r.tp_rank}/{r.tp:<3}  "
                     f"{r.gpu_type:<10} {r.zone:<16} {shards}")
    lines.append("E = embedding, H = final norm + LM head + loss")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m megatron_sailor.runtime.topology",
                           description="Print the rank layout of a plan (our JSON or Sailor's).")
    parser.add_argument("plan", help="plan JSON (ours or a Sailor plan_config)")
    try:
        args = parser.parse_args(argv)
        from planner.sailor_plan import load_any_plan
        plan, _ = load_any_plan(args.plan)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(describe(plan, build_layout(plan)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
