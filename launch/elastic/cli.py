"""``sailor-elastic``: keep a training job running on changing GPU availability (docs/ELASTIC.md).

    sailor-elastic --trace TRACE.json [--time-unit s|iter] [--time-scale X] --work-dir runs/elastic \\
        --train-iters 40 --planner cpu-demo --model tiny -- --mock-data --lr 1e-3 --save-interval 5 ...

Everything after ``--`` goes to the training script (examples/gpt/pretrain_gpt.py); the controller adds
``--sailor-plan``, ``--train-iters``, ``--save``/``--load``, ``--elastic-control``, ``--elastic-events``
and ``--metrics-file``. Exit status: 0 when training reached ``--train-iters``, 1 when it gave up, 2 on
bad input.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from planner.errors import InputError

from launch.elastic.controller import Controller, ControllerConfig
from launch.elastic.plans import CpuDemoPlanner, SailorPlanner
from launch.elastic.sources import CommandSource, FileSource, pool_key, trace_source


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sailor-elastic", description=__doc__.splitlines()[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", help='Sailor trace: JSON [{"Time": s, "GPUs": n}] or CSV (,Timestamp,<GPU>_<zone>)')
    src.add_argument("--availability-file", help="file the cluster manager rewrites (n, {\"GPUs\": n} or "
                     "{\"TYPE@ZONE\": n})")
    src.add_argument("--availability-command", help="shell command printing the same forms")
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


def _source(args: argparse.Namespace):  # noqa: ANN202
    pool = pool_key(args.gpu_type, args.zone)
    if args.trace:
        return trace_source(args.trace, pool, unit=args.time_unit, time_scale=args.time_scale)
    if args.availability_file:
        if not Path(args.availability_file).is_file():
            raise InputError("file not found", source=args.availability_file)
        return FileSource(args.availability_file, pool)
    return CommandSource(args.availability_command, pool)


def make_controller(argv: list[str] | None = None) -> Controller:
    args = build_parser().parse_args(argv)
    train_args = list(args.train_args)
    if train_args[:1] == ["--"]:
        train_args = train_args[1:]
    if args.train_iters < 1 or args.gbs < 1:
        raise InputError(f"--train-iters and --gbs must be >= 1, got {args.train_iters}, {args.gbs}")
    if args.max_failures < 1:
        raise InputError(f"--max-failures must be >= 1, got {args.max_failures}")
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
    points = tuple(int(t) for t, _ in source.points) if args.time_unit == "iter" else ()
    cfg = ControllerConfig(work_dir=Path(args.work_dir), train_iters=args.train_iters, train_args=tuple(train_args),
                           max_restarts=args.max_restarts, max_failures=args.max_failures, horizon_s=args.horizon_s,
                           initial_cost_s=args.reconfig_cost_s, poll_s=args.poll_s,
                           hold_on_trace=args.time_unit == "iter", trace_points=points,
                           job_env=tuple(sorted(job_env.items())))
    return Controller(cfg, source, planner)


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
