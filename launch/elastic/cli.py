"""``sailor-elastic``: keep a training job running on changing GPU availability (docs/ELASTIC.md).

    sailor-elastic --trace TRACE.json [--time-unit s|iter] [--time-scale X] --work-dir runs/elastic \\
        --train-iters 40 --planner cpu-demo --model tiny -- --mock-data --lr 1e-3 --save-interval 5 ...
    sailor-elastic --nodes-file nodes.yaml ...             # an inventory the cluster manager rewrites
    sailor-elastic --trace TRACE.json --nodes-file nodes.yaml ...   # the trace's counts mapped onto nodes
    sailor-elastic --nodes-command "my-inventory-tool" ... [--slurm --slurm-partition P]

Everything after ``--`` goes to the training job (``megatron_sailor.train``); the controller adds
``--sailor-plan``, ``--train-iters``, ``--save``/``--load``, ``--elastic-control``, ``--elastic-events``
and ``--metrics-file``. Exit status: 0 when training reached ``--train-iters``, 1 when it gave up, 2 on
bad input.
"""
from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from pathlib import Path

from planner.errors import InputError, OneLineParser

from launch.elastic.controller import REPO, Controller, ControllerConfig
from launch.elastic.plans import CpuDemoPlanner, SailorPlanner
from launch.elastic.nodes import CommandNodes, FileNodes, LocalNodes, TraceOnNodes
from launch.elastic.sources import CommandSource, FileSource, pool_key, trace_source
from launch.inventory import load_inventory


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="sailor-elastic", description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--trace", help='Sailor trace: JSON [{"Time": s, "GPUs": n}] or CSV (,Timestamp,<GPU>_<zone>)')
    src.add_argument("--availability-file", help="file the cluster manager rewrites (n, {\"GPUs\": n} or "
                     "{\"TYPE@ZONE\": n})")
    src.add_argument("--availability-command", help="shell command printing the same forms")
    src.add_argument("--nodes-command", help="shell command printing a node inventory (YAML/JSON, docs/LAUNCH.md)")
    p.add_argument("--nodes-file", help="node inventory (docs/LAUNCH.md); alone: a file the cluster manager "
                   "rewrites; with --trace / --availability-*: the nodes their GPU counts are mapped onto "
                   "(file order). Without it every job runs on this machine")
    p.add_argument("--torchrun", default=None, help="torchrun command on the nodes (default: this Python's "
                   "'-m torch.distributed.run')")
    p.add_argument("--warm-standby", action="store_true", help="fork single-node local jobs from a warm "
                   "interpreter (torch and megatron-core imported) instead of torchrun: faster reconfigurations, "
                   "no torchrun restarts (a dead rank = a failed job, relaunched)")
    p.add_argument("--slurm", action="store_true", help="submit each job as a SLURM heterogeneous job "
                   "(sbatch; the inventory hosts must be SLURM node names) instead of starting torchruns")
    p.add_argument("--slurm-partition", default=None)
    p.add_argument("--slurm-account", default=None)
    p.add_argument("--slurm-time", default=None, help="SLURM time limit, e.g. 02:00:00")
    p.add_argument("--time-unit", choices=("s", "iter"), default="s",
                   help="trace times in seconds, or in training iterations (deterministic replay: the job "
                        "pauses at each change point until the controller decides)")
    p.add_argument("--time-scale", type=float, default=1.0, help="seconds-unit traces: replay X times slower "
                   "(0.1 = ten times faster)")
    p.add_argument("--gpu-type", default="cpu", help="GPU type of traces / files giving a bare count")
    p.add_argument("--zone", default="local", help="zone of traces / files giving a bare count")
    p.add_argument("--planner", choices=("sailor-plan", "cpu-demo"), default="sailor-plan",
                   help="sailor-plan: the planner (real clusters); cpu-demo: fixed multi-rank plans for a tiny "
                        "model on CPU ranks (docs/ELASTIC.md)")
    p.add_argument("--planner-args", default="", help="extra sailor-plan arguments, e.g. "
                   "\"--sailor-data ../shared/data/sailor --objective throughput\"")
    p.add_argument("--model", default="tiny", help="model name (built-in / planner model) for the plans")
    p.add_argument("--num-layers", type=int, default=None, help="layers (default: the model's)")
    p.add_argument("--gbs", type=int, default=8, help="global batch size (fixed across plans)")
    p.add_argument("--train-iters", type=int, required=True)
    p.add_argument("--work-dir", required=True, help="checkpoints, plans, job logs, metrics, report.json")
    p.add_argument("--horizon-s", type=float, default=3600.0,
                   help="switch only if the predicted time saved over this horizon exceeds the reconfiguration cost")
    p.add_argument("--reconfig-cost-s", type=float, default=15.0,
                   help="assumed reconfiguration cost until one has been measured")
    p.add_argument("--max-restarts", type=int, default=3, help="torchrun --max-restarts per job")
    p.add_argument("--max-failures", type=int, default=4,
                   help="give up at this many failed jobs (jobs torchrun gave up on, or that died before taking "
                        "over); the ones before are relaunched")
    p.add_argument("--poll-s", type=float, default=0.2)
    p.add_argument("--job-env", action="append", default=[], metavar="KEY=VALUE",
                   help="extra environment for the training jobs (repeatable); cpu-demo adds "
                        "TORCH_COMPILE_DISABLE=1 unless set (megatron's torch.compile'd cross entropy costs "
                        "~1.5 s in the first iteration on CPU)")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then training script arguments")
    return p


def _availability(args: argparse.Namespace):  # noqa: ANN202
    pool = pool_key(args.gpu_type, args.zone)
    if args.trace:
        return trace_source(args.trace, pool, unit=args.time_unit, time_scale=args.time_scale)
    if args.availability_file:
        if not Path(args.availability_file).is_file():
            raise InputError("file not found", source=args.availability_file)
        return FileSource(args.availability_file, pool)
    if args.availability_command:
        return CommandSource(args.availability_command, pool)
    return None


def _source(args: argparse.Namespace):  # noqa: ANN202
    """The node source: inventory file / command, an availability source on an inventory, or this machine."""
    if args.nodes_command:
        if args.nodes_file:
            raise InputError("--nodes-command and --nodes-file exclude each other")
        return CommandNodes(args.nodes_command)
    availability = _availability(args)
    if args.nodes_file:
        if availability is None:
            FileNodes(args.nodes_file).poll(0.0, 0)      # bad input fails here, before anything starts
            return FileNodes(args.nodes_file)
        load_inventory(args.nodes_file)                  # bad input fails here, before anything starts
        return TraceOnNodes(availability, args.nodes_file)
    if availability is None:
        raise InputError("give --trace, --availability-file, --availability-command, --nodes-file or "
                         "--nodes-command")
    if args.slurm:
        raise InputError("--slurm needs --nodes-file or --nodes-command (SLURM node names)")
    return LocalNodes(availability)


def make_controller(argv: list[str] | None = None) -> Controller:
    args = build_parser().parse_args(argv)
    train_args = list(args.train_args)
    if train_args[:1] == ["--"]:
        train_args = train_args[1:]
    if args.train_iters < 1 or args.gbs < 1:
        raise InputError(f"--train-iters and --gbs must be >= 1, got {args.train_iters}, {args.gbs}")
    if args.max_failures < 1:
        raise InputError(f"--max-failures must be >= 1, got {args.max_failures}")
    if not (args.time_scale > 0 and args.time_scale < float("inf")):
        raise InputError(f"--time-scale must be a positive finite number, got {args.time_scale}")
    if args.time_unit == "iter" and not args.trace:
        raise InputError("--time-unit iter needs --trace")
    source = _source(args)
    from planner.model import get_model
    num_layers = args.num_layers or get_model(args.model).num_layers
    if args.planner == "cpu-demo":
        planner = CpuDemoPlanner(num_layers, args.gbs, args.model)
    else:
        planner = SailorPlanner(["--model", args.model, *args.planner_args.split()], args.gbs)
    job_env = dict(kv.split("=", 1) for kv in args.job_env if "=" in kv)
    if len(job_env) != len(args.job_env):
        raise InputError(f"--job-env expects KEY=VALUE, got {args.job_env}")
    if args.planner == "cpu-demo":
        job_env.setdefault("TORCH_COMPILE_DISABLE", os.environ.get("TORCH_COMPILE_DISABLE", "1"))
    points = tuple(int(t) for t, _ in getattr(source, "points", ())) if args.time_unit == "iter" else ()
    cfg = ControllerConfig(work_dir=Path(args.work_dir), train_iters=args.train_iters, train_args=tuple(train_args),
                           max_restarts=args.max_restarts, max_failures=args.max_failures, horizon_s=args.horizon_s,
                           initial_cost_s=args.reconfig_cost_s, poll_s=args.poll_s,
                           hold_on_trace=args.time_unit == "iter", trace_points=points,
                           job_env=tuple(sorted(job_env.items())),
                           **({"torchrun": tuple(shlex.split(args.torchrun))} if args.torchrun else {}))
    backend = None
    if args.slurm:
        from launch.elastic.slurm_jobs import SlurmBackend
        from launch.slurm import SlurmOptions
        backend = SlurmBackend(SlurmOptions(job_name="sailor-elastic", partition=args.slurm_partition,
                                            account=args.slurm_account, time_limit=args.slurm_time,
                                            workdir=str(REPO)))
    if args.warm_standby:
        if backend is not None:
            raise InputError("--warm-standby and --slurm exclude each other")
        from launch.elastic.warm import WarmBackend
        backend = WarmBackend(Path(args.work_dir).resolve(), env=dict(cfg.job_env))
    return Controller(cfg, source, planner, backend=backend)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s.%(msecs)03d sailor-elastic: %(message)s", datefmt="%H:%M:%S")
    try:
        controller = make_controller(argv)
        return controller.run()
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
