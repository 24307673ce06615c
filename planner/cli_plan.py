"""``sailor-plan``: choose GPUs, pipeline depth, layer split, TP, micro-batch size and DP for a model.

Every returned plan is scored by :func:`planner.simulator.simulate` (the same cost model as ``sailor-sim``).
The work is :func:`planner.api.plan`; this module parses flags, prints and writes files.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from planner.errors import InputError, OneLineParser, run_cli
from planner.options import add_data_args, add_request_args, time_limit_s

if TYPE_CHECKING:       # the search, the simulator and the data are imported when a plan is asked for, not for --help
    from planner.cluster import ClusterSpec
    from planner.search import Objective
    from planner.simulator import Estimate

GB = 1e9


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="sailor-plan", description=__doc__.splitlines()[0])
    add_data_args(p)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--gpus", metavar="TYPE@ZONE=N[,...]", help="GPU pools, e.g. A100-40@us-central1-a=32")
    g.add_argument("--cluster", metavar="FILE", help="cluster YAML/JSON file (pools with gpus_per_node)")
    g.add_argument("--trace", metavar="CSV", help="Sailor availability trace: plan every row")
    add_request_args(p)
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("-o", "--output", metavar="PLAN_JSON", help="write the best plan here")
    p.add_argument("--no-comparator", action="store_true", help="skip the grid comparator (faster)")
    p.add_argument("--progress-lines", action="store_true",
                   help="when stderr is not a terminal, print a plain progress line after 3 s, then every 10 s "
                        "(on a terminal a progress bar is shown anyway)")
    p.add_argument("--frontier", metavar="PNG", help="draw the throughput vs $/iteration frontier (needs matplotlib)")
    p.add_argument("--frontier-json", metavar="JSON", help="write the frontier's candidates and front as JSON")
    return p


def _clusters(args: argparse.Namespace, catalog) -> list[ClusterSpec]:
    from planner.cluster import load_cluster, load_trace_csv, parse_gpus
    if args.trace:
        return load_trace_csv(args.trace, catalog)
    if args.cluster:
        return [load_cluster(args.cluster, catalog)]
    if args.gpus:
        return [parse_gpus(args.gpus, catalog)]
    raise InputError("no GPUs: pass --gpus TYPE@ZONE=N[,...], --cluster FILE or --trace CSV")


def plan_one(args, ctx, cluster: ClusterSpec, gbs: int) -> dict:
    """:func:`planner.api.plan` for one cluster, with progress on a terminal (or lines when asked); the report as the dict
    :func:`render` and :func:`report_json` print (``ctx`` is not changed)."""
    from planner import api
    from planner.options import plan_request
    from planner.progress import search_progress
    request = plan_request(args, cluster, gbs, comparator=not args.no_comparator)
    with search_progress("sailor-plan", lines=args.progress_lines) as cb:
        rep = api.plan(request, ctx, progress=cb)
    out = {"plan": rep.plan, "estimate": rep.estimate, "search_time_s": rep.search_time_s,
           "candidates_evaluated": rep.candidates_evaluated, "candidate": rep.candidate,
           "others": list(rep.alternatives), "stats": rep.stats, "two_tp": request.two_tp}
    if rep.comparator_ran:
        out["comparator"] = rep.comparator
    return out


def search_outcome(rep: dict) -> dict:
    """Whether the search finished (the plan is the best of the declared space) or stopped at the time limit,
    with the best plan so far and the bound on every plan it did not search (``gap``: the objective key of
    the plan over that bound, >= 1; for throughput how many times faster the best plan could still be)."""
    st = rep["stats"]
    # "mixed_plan": the plan came from the local search after the exact one (docs/PLANNER.md 8)
    mixed = {"mixed_plan": True} if rep["candidate"].mix else {}
    # "two_tp": the space gives a GPU type up to two TP degrees (--two-tp, docs/PLANNER.md 10.7); "two_tp_plan": this
    # plan does
    if rep.get("two_tp"):
        mixed = {**mixed, "two_tp": True, **({"two_tp_plan": True} if rep["candidate"].two_tp() else {})}
    if getattr(st, "complete", True):
        return {"complete": True, **mixed}
    key, lb = rep["candidate"].key, st.lower_bound_key
    return {"complete": False, **mixed, "time_limit_s": st.time_limit_s, "objective_key": key, "lower_bound_key": lb,
            "gap": key / lb if lb and lb > 0 else None}


def outcome_line(out: dict, objective: Objective) -> str:
    if out["complete"] and out.get("mixed_plan"):
        return ("search finished (exact search), then the local search for mixed plans found this one, better "
                "than the exact search's best by more than 0.1 % (heuristic: docs/PLANNER.md 8)")
    space = "the declared space with up to two TP degrees per GPU type (--two-tp)" if out.get("two_tp") else \
        "the declared space"
    if out["complete"]:
        return f"search finished: this is the best plan of {space} (exact search)" + \
            ("; it gives a GPU type two TP degrees" if out.get("two_tp_plan") else "")
    what = {"throughput": "s/iteration", "cost": "$/iteration", "value": "s x $ per iteration^2"}[objective.kind]
    gap = "-" if out["gap"] is None else f"{out['gap']:.3f}x"
    return (f"search STOPPED at the time limit ({out['time_limit_s']:g} s): best plan found so far, NOT proven "
            f"optimal; no plan of {space} scores below {out['lower_bound_key']:.4g} {what} "
            f"(this plan: {out['objective_key']:.4g}; gap {gap})")


def _summary(est: Estimate) -> dict:
    return {"iteration_time_s": est.iteration_time_s, "throughput_iters_per_s": est.throughput_iters_per_s,
            "cost_per_iteration_usd": est.cost_per_iteration_usd, "num_gpus": est.num_gpus,
            "fits_in_memory": est.fits_in_memory}


def report_json(rep: dict, objective: Objective | None = None) -> dict:
    from planner.options import to_jsonable
    out = {"plan": rep["plan"].to_dict(), "estimate": to_jsonable(rep["estimate"].to_dict()),
           "search_time_s": rep["search_time_s"], "candidates_evaluated": rep["candidates_evaluated"],
           "search": to_jsonable(search_outcome(rep))}
    if rep.get("others"):
        out["alternatives"] = [{"plan": p.to_dict(), "estimate": _summary(e)} for p, e in rep["others"]]
    if "comparator" in rep:
        out["comparator"] = None if rep["comparator"] is None else {"planner": "grid", **_summary(rep["comparator"])}
    return out


def _top_table(rep: dict):  # noqa: ANN202
    """The K best plans (--top K), the chosen one first."""
    from rich import box
    from rich.table import Table
    rows = [(rep["plan"], rep["estimate"]), *rep.get("others", [])]
    t = Table(title=f"top {len(rows)} plans", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("#", "stages", "mbs", "pipelines", "GPUs", "it/s", "$/iter", "peak GB"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("GPU mix", overflow="fold")
    for k, (plan, est) in enumerate(rows, 1):
        mix: dict[str, int] = {}
        for _, _, r in plan.replicas():
            mix[r.gpu_type] = mix.get(r.gpu_type, 0) + r.tp
        t.add_row(str(k), str(plan.num_stages), str(plan.micro_batch_size), str(len(plan.stages[0].replicas)),
                  str(est.num_gpus), f"{est.throughput_iters_per_s:.4f}", f"{est.cost_per_iteration_usd:.4f}",
                  f"{est.peak_memory_bytes / GB:.2f}", " + ".join(f"{n} {g}" for g, n in sorted(mix.items())))
    return t


def render(rep: dict, cluster: ClusterSpec, objective: Objective) -> None:
    from rich.console import Console
    from planner.cli_sim import ESTIMATE_NOTE, stage_tables
    from planner.search.explain import unused_reasons
    console = Console()
    est, cand = rep["estimate"], rep["candidate"]
    title = (f"plan: {cand.num_stages} stage(s), micro-batch {cand.mbs}, {est.num_gpus} GPUs, "
             f"{cand.num_pipelines} pipelines")
    for table in stage_tables(est, title):
        console.print(table)
    parts, j = [], 0

    def span(counts) -> str:  # noqa: ANN001
        return f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)}..{max(counts)}"

    if cand.chain:
        parts.append("every pipeline " + " -> ".join(f"{g}@{z} TP {tp}" for g, z, tp in cand.chain)
                     + f": {span(cand.microbatches)}")
    for chain, n in cand.mix:            # a mixed plan (docs/PLANNER.md 8): runs of pipelines on one chain
        groups = list(dict.fromkeys(chain))
        label = " -> ".join(f"{g}@{z} TP {tp}" for g, z, tp in chain) if len(groups) > 1 else \
            "{}@{} TP {}".format(*groups[0])
        parts.append(f"{n} x {label}: {span(cand.microbatches[j:j + n])}")
        j += n
    for pu in cand.pools:
        tp = f" TP {pu.tp}" if cand.two_tp() else ""      # two TP degrees for one type (--two-tp)
        parts.append(f"{pu.gpu_type}@{pu.zone}{tp}: {span(cand.microbatches[j:j + pu.pipelines])}")
        j += pu.pipelines
    console.print("micro-batches per pipeline: " + ", ".join(parts), markup=False)
    console.print(f"activation recomputation {'on' if cand.recompute else 'off'}; distributed optimizer "
                  + (f"on (optimizer states and step sharded over the {cand.num_pipelines} replicas of every stage)"
                     if cand.distributed_optimizer else "off"), markup=False)
    if rep.get("others"):
        console.print(_top_table(rep))
    if est.estimated_profiles:
        console.print(ESTIMATE_NOTE, markup=False)
    console.print(f"predicted {est.throughput_iters_per_s:.4f} it/s ({est.iteration_time_s:.3f} s/iter), "
                  f"{est.tokens_per_s:,.0f} tokens/s, ${est.cost_per_iteration_usd:.4f}/iter "
                  f"(egress ${est.egress_usd_per_iteration:.4f}); bottleneck stage {est.bottleneck_stage}; "
                  f"sync {est.sync_s:.3f} s, optimizer {est.update_s:.3f} s; MFU {est.mfu:.1%}"
                  + (" | ESTIMATE (analytic profiles)" if est.estimated_profiles else ""), markup=False)
    for line in unused_reasons(cluster, cand, objective):
        console.print(f"  {line}", markup=False)
    comp = rep.get("comparator")
    if comp is not None:
        gain = est.throughput_iters_per_s / comp.throughput_iters_per_s - 1
        console.print(f"comparator (best homogeneous Megatron grid meeting the objective, same simulator): "
                      f"{comp.throughput_iters_per_s:.4f} it/s, ${comp.cost_per_iteration_usd:.4f}/iter "
                      f"on {comp.num_gpus} GPUs -> ours {gain:+.1%} it/s, "
                      f"{est.cost_per_iteration_usd / comp.cost_per_iteration_usd - 1:+.1%} $/iter", markup=False)
    elif "comparator" in rep:
        console.print("comparator (grid): no homogeneous grid plan meets the objective and its constraints "
                      "(a frontier picture still shows the best grid plan without the constraints)", markup=False)
    console.print(f"search {rep['search_time_s']:.2f} s, {rep['candidates_evaluated']} candidates scored exactly")
    outcome = search_outcome(rep)
    console.print(outcome_line(outcome, objective), markup=False)


def _trace(args, ctx, clusters, gbs) -> int:
    steps = []
    for i, cl in enumerate(clusters):
        try:
            rep = plan_one(args, ctx, cl, gbs)
        except InputError as exc:
            steps.append({"step": i, "cluster": cl.describe(), "error": str(exc)})
            continue
        steps.append({"step": i, "cluster": cl.describe(), **report_json(rep)})
    if args.json:
        sys.stdout.write(json.dumps({"steps": steps}) + "\n")   # dumps: the C encoder (json.dump streams in Python)
        return 0
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"trace {args.trace}")
    for col in ("step", "cluster", "S", "mbs", "GPUs", "it/s", "$/iter", "grid it/s", "search s"):
        t.add_column(col, justify="right")
    for s in steps:
        if "error" in s:
            t.add_row(str(s["step"]), s["cluster"], "-", "-", "-", "-", "-", "-", s["error"])
            continue
        e, c = s["estimate"], s.get("comparator")
        t.add_row(str(s["step"]), s["cluster"], str(len(s["plan"]["stages"])), str(s["plan"]["micro_batch_size"]),
                  str(e["num_gpus"]), f"{e['throughput_iters_per_s']:.4f}", f"{e['cost_per_iteration_usd']:.4f}",
                  "-" if not c else f"{c['throughput_iters_per_s']:.4f}", f"{s['search_time_s']:.2f}")
    Console().print(t)
    return 0


def _frontier(args, ctx, cluster: ClusterSpec, gbs: int, objective: Objective, space) -> None:
    from planner.baselines.spaces import baseline_space
    from planner.cli_sim import announce
    from planner.frontier import frontier_for, frontier_lines
    from planner.textio import atomic_write_text
    if args.frontier:
        from planner.simulator.timeline_plot import require_matplotlib
        require_matplotlib()
    fr = frontier_for(ctx, cluster, gbs, objective, space,
                      replace(baseline_space("grid", space.precision), tie_embeddings=space.tie_embeddings),
                      time_limit_s=time_limit_s(args))
    if args.frontier_json:
        from pathlib import Path
        atomic_write_text(Path(args.frontier_json), json.dumps(fr.to_dict()) + "\n")
        announce(f"wrote the frontier as JSON: {args.frontier_json}", args.json)
    if args.frontier:
        from planner.frontier_plot import draw_frontier
        draw_frontier(fr, args.frontier, f"{ctx.model.name} on {cluster.describe()}")
        announce(f"wrote the frontier picture: {args.frontier}", args.json)
    for line in frontier_lines(fr):
        announce(line, args.json)


def main_args(argv: list[str] | None = None, resume_gc: Callable[[], None] = lambda: None) -> int:
    """``sailor-plan``; ``resume_gc``: called once the inputs are loaded, before the search (:mod:`planner.gcpause`)."""
    args = build_parser().parse_args(argv)
    if args.top < 1:
        raise InputError(f"--top must be >= 1, got {args.top}")
    time_limit_s(args)                                  # checked before any work
    for flag, value in (("--gbs", args.gbs), ("--max-stages", args.max_stages)):
        if value is not None and value < 1:
            raise InputError(f"{flag} must be >= 1, got {value}")
    from planner.textio import check_output_path
    for flag, path in (("-o", args.output), ("--frontier-json", args.frontier_json), ("--frontier", args.frontier)):
        if path:
            check_output_path(path, flag)
    from planner import api
    from planner.baselines.spaces import baseline_space
    from planner.options import data_source
    from planner.options import objective as options_objective
    bundle = api.load_data(data_source(args), args.precision)
    ctx = api.make_context(bundle, args.runtime)
    gbs = args.gbs if args.gbs is not None else (bundle.default_gbs or 1024)
    objective = options_objective(args)
    space = replace(baseline_space(args.planner, args.precision, args.max_stages, recompute=not args.no_recompute,
                                   distributed_optimizer=not args.no_distributed_optimizer),
                    tie_embeddings=ctx.model.tied_embeddings)     # as api.plan plans it
    clusters = _clusters(args, bundle.catalog)
    resume_gc()
    if args.trace:
        return _trace(args, ctx, clusters, gbs)
    rep = plan_one(args, ctx, clusters[0], gbs)
    if args.frontier or args.frontier_json:
        _frontier(args, api.context_for(ctx, clusters[0]), clusters[0], gbs, objective, space)
    if args.output:
        rep["plan"].save(args.output)
    if args.json:
        sys.stdout.write(json.dumps(report_json(rep, objective)) + "\n")   # same bytes as json.dump, in C
    else:
        render(rep, clusters[0], objective)
    if args.output:
        from planner.cli_sim import announce
        announce(f"plan written to {args.output}", args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    from planner.blasthreads import one_blas_thread
    from planner.gcpause import paused
    one_blas_thread()              # before numpy is imported (planner/blasthreads.py)
    with paused() as resume:       # no collections while modules and inputs load (planner/gcpause.py)
        return run_cli(lambda a: main_args(a, resume), argv)


if __name__ == "__main__":
    sys.exit(main())
