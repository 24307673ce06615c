"""``sailor-sim PLAN``: predict iteration time, per-GPU peak memory and $/iteration of a plan.

PLAN is our plan JSON or a Sailor ``plan_config`` JSON (auto-detected; Sailor plans default to the
``sailor-deepspeed`` runtime preset, the runtime they were measured on).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING

from planner.errors import OneLineParser, run_cli
from planner.inputs import load_data, make_context
from planner.options import add_data_args, data_source, to_jsonable
from planner.sailor_plan import load_any_plan

if TYPE_CHECKING:
    from planner.simulator import Estimate

GB = 1e9


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="sailor-sim", description=__doc__.splitlines()[0])
    p.add_argument("plan", help="plan JSON (ours or Sailor's plan_config)")
    add_data_args(p)
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--timeline", metavar="PNG", help="draw the event timeline of one iteration (needs matplotlib)")
    p.add_argument("--timeline-json", metavar="JSON", help="write the event timeline of one iteration as JSON")
    return p


def estimate_json(est: Estimate) -> dict:
    return to_jsonable(est.to_dict())


def _num_columns(t, names: tuple[str, ...]) -> None:  # noqa: ANN001
    for name in names:
        t.add_column(name, justify="right", no_wrap=True)


def stage_tables(est: Estimate, title: str) -> tuple:
    """Two rich tables: per stage (time of its slowest replica), per replica (its own peak memory against
    its own GPU's capacity). Shared by sailor-sim and sailor-plan."""
    from rich import box
    from rich.table import Table
    times = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False,
                  caption="per micro-batch: compute (fwd+bwd) and busy (with blocking p2p) of the slowest "
                          "replica; p2p: one transfer to the next stage; sync: gradient sync per iteration")
    _num_columns(times, ("stage", "layers", "compute s", "busy s", "p2p s", "sync s"))
    times.add_column("sync mode", overflow="ellipsis")
    _num_columns(times, ("MFU",))
    mem = Table(title="memory per replica (pipe j = replica j of every stage; a-b: replicas a..b, alike)",
                box=box.SIMPLE_HEAD, pad_edge=False,
                caption="peak: this replica's GPUs; cap: usable memory of its GPU type; free = cap - peak")
    _num_columns(mem, ("stage", "pipe"))
    mem.add_column("GPU x TP" + ("*" if est.estimated_profiles else ""), no_wrap=True, overflow="ellipsis")
    mem.add_column("zone", no_wrap=True, overflow="ellipsis")
    _num_columns(mem, ("peak GB", "cap GB", "free GB", "fits"))
    for st in est.stages:
        layers = f"{st.first_layer}-{st.first_layer + st.num_layers - 1}" if st.num_layers else "-"
        times.add_row(str(st.stage), layers, f"{st.compute_s:.4f}", f"{st.busy_s:.4f}", f"{st.p2p_s:.4f}",
                      f"{st.sync_s:.4f}", st.sync_mode, f"{st.mfu:.1%}")
        peaks = st.replica_peak_bytes or (st.peak_memory_bytes,) * st.replicas
        caps = st.replica_capacity_bytes or (st.memory_capacity_bytes,) * st.replicas
        rows = [(f"{g} x{tp}", z, f"{peaks[j] / GB:.2f}", f"{caps[j] / GB:.2f}", f"{(caps[j] - peaks[j]) / GB:.2f}",
                 "yes" if peaks[j] <= caps[j] else "[red]OOM[/red]")
                for j, (g, tp, z) in enumerate(zip(st.gpu_types, st.tp_degrees, st.zones))]
        runs = _runs(rows)
        for k, (a, b) in enumerate(runs):
            mem.add_row(str(st.stage) if k == 0 else "", str(a) if a == b else f"{a}-{b}", *rows[a],
                        end_section=k == len(runs) - 1)
    return times, mem


def _runs(rows: list) -> list[tuple[int, int]]:
    """(first, last) index of each run of consecutive equal rows."""
    runs: list[tuple[int, int]] = []
    for j, row in enumerate(rows):
        if runs and rows[runs[-1][0]] == row:
            runs[-1] = (runs[-1][0], j)
        else:
            runs.append((j, j))
    return runs


def announce(line: str, json_mode: bool) -> None:
    """Say which file was written (on stderr when stdout carries exactly one JSON object)."""
    print(line, file=sys.stderr if json_mode else sys.stdout, flush=True)


ESTIMATE_NOTE = "* ESTIMATE: no measured profile for some GPU type; its times are analytic estimates"


def render_table(est: Estimate, plan_name: str) -> None:
    """sailor-sim's text output (rich fits the tables to the terminal width)."""
    from rich.console import Console
    console = Console()
    for table in stage_tables(est, f"{plan_name}: {est.num_gpus} GPUs, runtime model '{est.runtime}'"):
        console.print(table)
    if est.estimated_profiles:
        console.print(ESTIMATE_NOTE, markup=False)
    console.print(
        f"iteration {est.iteration_time_s:.4f} s | {est.throughput_iters_per_s:.4f} it/s | "
        f"{est.tokens_per_s:,.0f} tokens/s | peak {est.peak_memory_bytes / GB:.2f} GB "
        f"({'fits' if est.fits_in_memory else 'DOES NOT FIT'}) | ${est.cost_per_iteration_usd:.4f}/iter "
        f"(egress ${est.egress_usd_per_iteration:.4f}) | bottleneck stage {est.bottleneck_stage} | "
        f"MFU {est.mfu:.1%} of {est.peak_flops_per_s / 1e12:,.0f} peak TFLOP/s"
        + (" | ESTIMATE (analytic profiles)" if est.estimated_profiles else ""), markup=False)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from planner.simulator import simulate        # the cost model (numpy): not needed for --help or bad flags
    from planner.simulator.checks import check_plan_inputs
    plan, info = load_any_plan(args.plan)
    bundle = load_data(data_source(args), plan.precision, model_hint=plan.model)
    ctx = make_context(bundle, args.runtime, "sailor-deepspeed" if info else "megatron-sailor",
                           info.gpus_per_node if info else None)
    if info:   # Sailor plans: node size per replica
        ctx = dataclasses.replace(ctx, replica_node_gpus=info.replica_node_gpus)
    check_plan_inputs(plan, ctx, args.plan)
    est = simulate(plan, ctx)     # what planner.api.simulate runs (sailor-sim needs no search)
    if args.timeline or args.timeline_json:
        from planner.simulator.events import simulate_events
        from planner.simulator.timeline_plot import draw_timeline, require_matplotlib, write_timeline_json
        if args.timeline:
            require_matplotlib()
        timeline = simulate_events(plan, ctx)
        if args.timeline_json:
            write_timeline_json(timeline, est.iteration_time_s, args.timeline_json)
            announce(f"wrote the timeline as JSON: {args.timeline_json}", args.json)
        if args.timeline:
            draw_timeline(timeline, plan, args.timeline, title=args.plan.rsplit("/", 1)[-1])
            announce(f"wrote the timeline picture: {args.timeline}", args.json)
    if args.json:
        json.dump(estimate_json(est), sys.stdout)
        sys.stdout.write("\n")
    else:
        render_table(est, args.plan)
    return 0


def entry(argv: list[str] | None = None) -> int:
    from planner.blasthreads import one_blas_thread
    one_blas_thread()              # before numpy is imported (planner/blasthreads.py)
    return run_cli(main, argv)


if __name__ == "__main__":
    sys.exit(entry())
