"""The planner's command-line vocabulary: argparse groups and their translation into the API's typed,
frozen arguments (:class:`~planner.inputs.DataSource`, :class:`~planner.api.PlanRequest`).

Shared by ``sailor-plan``, ``sailor-sim`` and ``sailor-elastic --planner-args`` so that a flag means the same
everywhere; nothing here runs a search or prints.
"""
from __future__ import annotations

import argparse
from typing import Any

from planner.errors import InputError, OneLineParser
from planner.inputs import DataSource, NETWORK_FORMAT
from planner.simulator.settings import PRESETS


def add_data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and data")
    g.add_argument("--model", help="built-in model name, Sailor model name (with --sailor-data) or model JSON")
    g.add_argument("--sailor-data", metavar="DIR", help="Sailor data folder (like ../shared/data/sailor): model, "
                   "profiles, network and egress prices")
    g.add_argument("--profiles", nargs="+", default=[], metavar="FILE", help="profile files (our format)")
    g.add_argument("--gpu-catalog", metavar="FILE", help="JSON file adding or overriding GPU types")
    g.add_argument("--network", metavar="FILE", help=f"network file ({NETWORK_FORMAT}); replaces link fits")
    g.add_argument("--runtime", default=None, choices=sorted(PRESETS),
                   help="runtime behaviour preset (default: megatron-sailor, or sailor-deepspeed for Sailor plans)")
    g.add_argument("--no-estimates", action="store_true",
                   help="refuse GPU types without a measured profile instead of estimating analytically")


def data_source(args: argparse.Namespace) -> DataSource:
    """The :class:`DataSource` that :func:`add_data_args`'s flags name."""
    return DataSource(model=args.model, sailor_data=args.sailor_data, profiles=tuple(args.profiles),
                      gpu_catalog=args.gpu_catalog, network=args.network, runtime=args.runtime,
                      allow_estimates=not args.no_estimates)


def add_request_args(p: argparse.ArgumentParser) -> None:
    """What to optimise and over which space (``PlanRequest`` fields other than the cluster)."""
    from planner.baselines.spaces import PLANNERS
    p.add_argument("--gbs", type=int, help="global batch size in sequences (default: the data folder's, else 1024)")
    p.add_argument("--objective", default="throughput", choices=["throughput", "cost", "value"])
    p.add_argument("--max-cost-per-iter", type=float, metavar="USD")
    p.add_argument("--min-throughput", type=float, metavar="ITERS_PER_S")
    p.add_argument("--max-gpus", type=int, metavar="N")
    p.add_argument("--max-stages", type=int, metavar="S", help="largest pipeline depth to consider")
    p.add_argument("--planner", default="ours", choices=sorted(PLANNERS),
                   help="ours (default), grid (best homogeneous Megatron 3D grid), sailor (Sailor's plan shape) "
                        "or sailor-space (Sailor's space with homogeneous pipelines or chain plans)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--no-recompute", action="store_true",
                   help="do not search full activation recomputation (searched by default in --planner ours)")
    p.add_argument("--no-distributed-optimizer", action="store_true",
                   help="do not search the distributed optimizer (optimizer states and step sharded over the data-"
                        "parallel replicas; searched by default in --planner ours)")
    p.add_argument("--mixed-plans", action="store_true",
                   help="after the exact search, also run a bounded local search for mixed plans (stages shared by "
                        "pipelines of different chains, as Sailor's planner may return; heuristic, docs/PLANNER.md "
                        "8; --planner ours only)")
    p.add_argument("--two-tp", action="store_true",
                   help="let pool plans give one GPU type two TP degrees (different pipelines of the type at different "
                        "TP, sharing its pools; searched exactly with the rest of the space; can win on small "
                        "clusters with few micro-batches per pipeline; more tasks and rows, so slower on large "
                        "clusters; those plans have the distributed optimizer off; docs/PLANNER.md 10.7; --planner "
                        "ours only)")
    p.add_argument("--top", type=int, default=1, metavar="K",
                   help="also report the K best plans the search kept (its dominance rules keep the optimum, "
                        "not every runner-up: docs/PLANNER.md 2.1)")
    p.add_argument("--chain-segments", type=int, default=None, metavar="N",
                   help="also search chain plans (pipelines that change GPU type, TP and zone along their stages) "
                        "with up to N runs of equal stages, 2..8; 1 leaves them out (default 3, or under the "
                        "throughput objective the number of zones up to 5; ours and sailor-space)")
    p.add_argument("--chain-splits", default=None, metavar="{even,segment,refine}",
                   help="the chain plans' layer splits: even (Sailor's: the extra layers on the last stages), "
                        "segment (each run of equal stages its own layer total, split evenly inside the run: a "
                        "larger space, a slower search; docs/PLANNER.md 1.1) or refine (the even split's search, "
                        "then a heuristic pass giving two- and three-run chains their own run totals, kept "
                        "only when better; docs/PLANNER.md 2.7); default: the request's (planner.api.PlanRequest)")

    p.add_argument("--time-limit-s", default=str(DEFAULT_TIME_LIMIT_S), metavar="S",
                   help="stop a search after S seconds with the best plan found so far and a bound on how much "
                        f"better any other plan can be (default {DEFAULT_TIME_LIMIT_S:g}; a search that finishes "
                        "earlier is exact, up to which of equally scored plans it returns); 'none': no limit. "
                        "--frontier shares it among its searches; sailor-elastic gives it to every replan")


DEFAULT_TIME_LIMIT_S = 45.0


def time_limit_s(args: argparse.Namespace) -> float | None:
    """``--time-limit-s``: a positive finite number of seconds, or ``none`` (InputError otherwise)."""
    text = str(getattr(args, "time_limit_s", "none"))
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise InputError(f"--time-limit-s must be a positive number of seconds or 'none', got {text!r}")
    return value

def objective(args: argparse.Namespace):  # noqa: ANN201 - planner.search.Objective
    """The :class:`~planner.search.Objective` of :func:`add_request_args`'s flags."""
    from planner.search import Objective
    return Objective(args.objective, args.max_cost_per_iter, args.min_throughput, args.max_gpus)


def plan_request(args: argparse.Namespace, cluster, gbs: int, comparator: bool):  # noqa: ANN001, ANN201
    """The :class:`~planner.api.PlanRequest` of :func:`add_request_args`'s flags for ``cluster``."""
    from planner.api import PlanRequest
    return PlanRequest(cluster=cluster, global_batch_size=gbs, objective=objective(args), planner=args.planner,
                       precision=args.precision, max_stages=args.max_stages, top_k=max(1, args.top),
                       comparator=comparator, recompute=not args.no_recompute, chain_segments=args.chain_segments,
                       **({} if args.chain_splits is None else {"chain_splits": args.chain_splits}),
                       distributed_optimizer=not args.no_distributed_optimizer, mixed_plans=args.mixed_plans,
                       two_tp=args.two_tp, time_limit_s=time_limit_s(args))


def request_parser(prog: str) -> argparse.ArgumentParser:
    """Data and request flags only (``sailor-elastic --planner-args``; the cluster comes from elsewhere)."""
    p = OneLineParser(prog=prog)
    add_data_args(p)
    add_request_args(p)
    return p


def to_jsonable(obj: Any) -> Any:
    """``obj`` with non-finite floats as ``None`` and tuple/dict keys made JSON-safe."""
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj
