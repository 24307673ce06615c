"""``python -m launch PLAN --nodes-file NODES [--dry-run] [-- SCRIPT ARGS]``.

Loads the plan (ours or a Sailor plan_config), places it on the inventory, prints (``--dry-run``) or runs
one torchrun per node. Bad input: ``error: ...`` on one line, exit status 2, nothing launched.
"""
from __future__ import annotations

import argparse
import logging
import shlex
import sys
from typing import Sequence

from planner.errors import InputError, OneLineParser
from planner.sailor_plan import load_any_plan
from launch.assign import Assignment, assign
from launch.inventory import load_inventory
from launch.runner import check_hosts, run_commands
from launch.torchrun_cmds import DEFAULT_ENTRY, DEFAULT_PORT, LaunchConfig, NodeCommand, build_commands


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by ``python -m launch`` and ``python -m launch.slurm``."""
    parser.add_argument("plan", help="plan JSON (ours or a Sailor plan_config)")
    parser.add_argument("--nodes-file", required=True, help="node inventory (YAML or JSON)")
    parser.add_argument("--script", default=None, help=f"training script (default: torchrun {DEFAULT_ENTRY})")
    parser.add_argument("--master-port", type=int, default=DEFAULT_PORT, help="c10d rendezvous port")
    parser.add_argument("--run-id", default="sailor", help="c10d rendezvous id")
    parser.add_argument("--omp-threads", type=int, default=None,
                        help="OMP_NUM_THREADS (default: cpus_per_node // processes, else 1)")
    parser.add_argument("--torchrun", default="torchrun",
                        help="torchrun command (e.g. 'python -m torch.distributed.run')")
    parser.epilog = "Arguments after '--' go to the training script."


def split_script_args(argv: Sequence[str] | None) -> tuple[list[str], tuple[str, ...]]:
    """``[... , '--', a, b]`` -> ``([...], (a, b))``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], tuple(argv[cut + 1:])
    return argv, ()


def build_from_args(args: argparse.Namespace,
                    script_args: tuple[str, ...]) -> tuple[Assignment, tuple[NodeCommand, ...]]:
    plan, _ = load_any_plan(args.plan)
    inventory = load_inventory(args.nodes_file)
    assignment = assign(plan, inventory)
    try:
        config = LaunchConfig(plan_path=args.plan, script=args.script, script_args=script_args,
                              master_port=args.master_port, run_id=args.run_id,
                              torchrun=tuple(shlex.split(args.torchrun)), omp_threads=args.omp_threads)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return assignment, build_commands(assignment, config)


def describe(assignment: Assignment) -> list[str]:
    """Comment lines: which plan slots run where."""
    lines = [f"# world size {assignment.world_size} on {len(assignment.nodes)} node(s); "
             f"plan ranks contiguous in node order: {assignment.is_identity} (SAILOR_RANK_MAP remaps either way)"]
    for na in assignment.nodes:
        n = na.node
        slots = " ".join(f"r{s.rank}=s{s.stage}/d{s.replica}/t{s.tp_rank}" for s in na.slots)
        q = shlex.quote      # names are validated by launch.inventory; quoted all the same
        lines.append(f"# node {na.node_rank} {q(n.name)} ({q(n.host)}, {q(n.gpu_type)}, {q(n.zone)}, "
                     f"{na.nproc}/{n.gpus_per_node} GPUs): {slots}")
    return lines


def dry_run_text(assignment: Assignment, commands: Sequence[NodeCommand]) -> str:
    lines = ["#!/usr/bin/env bash", "# run each command on the host named above it", *describe(assignment)]
    for cmd in commands:
        lines += [f"# --- node {cmd.node_rank}: {shlex.quote(cmd.node_name)} on {shlex.quote(cmd.host)}",
                  cmd.shell()]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m launch", description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--dry-run", action="store_true", help="print the per-node commands, run nothing")
    parser.add_argument("--node", default=None,
                        help="run only this inventory node's command, here (start it on each host yourself)")
    own_argv, script_args = split_script_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        args = parser.parse_args(own_argv)
        assignment, commands = build_from_args(args, script_args)
        if args.dry_run:
            sys.stdout.write(dry_run_text(assignment, commands))
            return 0
        if args.node is not None:   # only this node's host and the rendezvous host must resolve
            selected = select_node(commands, args.node)
            check_hosts((commands[0], *selected))
            commands = selected
        else:
            check_hosts(commands)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return run_commands(commands, force_local=args.node is not None)


def select_node(commands: Sequence[NodeCommand], name: str) -> tuple[NodeCommand, ...]:
    chosen = tuple(c for c in commands if c.node_name == name)
    if not chosen:
        raise InputError(f"--node {name!r} runs nothing: the plan uses nodes {[c.node_name for c in commands]}")
    return chosen
