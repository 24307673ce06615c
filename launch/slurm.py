"""``python -m launch.slurm PLAN --nodes-file NODES [--partition P] [-- SCRIPT ARGS] > job.sbatch``.

Writes a SLURM batch script. Default: a heterogeneous job with one component per pool of identical nodes
(GPU type, zone, GPUs per node), each pinned to the inventory's hosts (``--nodelist``) with
``--gres=gpu:N``. ``--single-allocation``: one allocation of all hosts (``--exclusive``), no per-pool gres.
Either way the script starts one ``srun`` + torchrun per node (the same commands as ``python -m launch``)
in the background and exits with the first non-zero status. Inventory hosts must be SLURM node names.
Every option is checked before anything is written (``--job-name``: letters, digits, ``. _ + -``;
``--partition`` / ``--account``: letters, digits, ``. _ -``; ``--time``: SLURM's ``[D-]H[:M[:S]]`` forms or
``UNLIMITED``; ``--workdir``: no control characters) and every interpolation is quoted with ``shlex.quote``.
"""
from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from typing import Sequence

from planner.errors import InputError, OneLineParser, quote
from launch.assign import Assignment, NodeAssignment
from launch.cli import add_common_args, build_from_args, describe, split_script_args
from launch.inventory import is_loopback
from launch.torchrun_cmds import NodeCommand


@dataclass(frozen=True)
class SlurmOptions:
    job_name: str = "sailor"
    partition: str | None = None
    account: str | None = None
    time_limit: str | None = None
    output: str = "sailor-%j.out"
    workdir: str | None = None
    hetjob: bool = True

    def __post_init__(self) -> None:
        for flag, value, pattern in (("--job-name", self.job_name, _JOB_NAME), ("--partition", self.partition, _PART),
                                     ("--account", self.account, _PART), ("--time", self.time_limit, _TIME),
                                     ("output", self.output, _OUTPUT), ("--workdir", self.workdir, _PATH)):
            if value is not None and (not isinstance(value, str) or not pattern.match(value)):
                raise InputError(f"{flag} {quote(value)} is not allowed in a SLURM script "
                                 f"(must match {pattern.pattern})")


_JOB_NAME = re.compile(r"^[A-Za-z0-9._+-]{1,128}$")
_PART = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_TIME = re.compile(r"^(?:(?:\d{1,5}-)?\d{1,5}(?::\d{1,2}){0,2}|UNLIMITED|INFINITE|unlimited|infinite)$")
_OUTPUT = re.compile(r"^[A-Za-z0-9._%/-]{1,255}$")
_PATH = re.compile(r"^[^\x00-\x1f\x7f]{1,4096}$")

def pools(assignment: Assignment) -> tuple[tuple[NodeAssignment, ...], ...]:
    """Used nodes grouped by (GPU type, zone, GPUs per node), in order of first node rank."""
    groups: dict[tuple[str, str, int], list[NodeAssignment]] = {}
    for na in assignment.nodes:
        key = (na.node.gpu_type, na.node.zone, na.node.gpus_per_node)
        groups.setdefault(key, []).append(na)
    return tuple(tuple(g) for g in groups.values())


def _job_directives(opts: SlurmOptions) -> list[str]:
    q = shlex.quote
    lines = [f"#SBATCH --job-name={q(opts.job_name)}", f"#SBATCH --output={q(opts.output)}"]
    if opts.time_limit:
        lines.append(f"#SBATCH --time={q(opts.time_limit)}")
    if opts.account:
        lines.append(f"#SBATCH --account={q(opts.account)}")
    return lines


def _component(nodes: Sequence[NodeAssignment], opts: SlurmOptions, gres: bool) -> list[str]:
    hosts = shlex.quote(",".join(na.node.host for na in nodes))
    lines = [f"#SBATCH --nodes={len(nodes)}", f"#SBATCH --nodelist={hosts}", "#SBATCH --ntasks-per-node=1"]
    if gres:
        lines.append(f"#SBATCH --gres=gpu:{int(nodes[0].node.gpus_per_node)}")
    else:
        lines.append("#SBATCH --exclusive")
    if opts.partition:
        lines.append(f"#SBATCH --partition={shlex.quote(opts.partition)}")
    return lines


def directives(assignment: Assignment, opts: SlurmOptions) -> tuple[list[str], dict[str, int]]:
    """``#SBATCH`` lines and the het-group index of every node name (empty without hetjob)."""
    lines = _job_directives(opts)
    if not opts.hetjob:
        return lines + _component(assignment.nodes, opts, gres=False), {}
    group_of: dict[str, int] = {}
    for g, nodes in enumerate(pools(assignment)):
        if g:
            lines.append("#SBATCH hetjob")
        lines += _component(nodes, opts, gres=True)
        group_of.update({na.node.name: g for na in nodes})
    return lines, group_of


def srun_line(cmd: NodeCommand, het_group: int | None) -> str:
    words = ["srun"] + ([f"--het-group={het_group}"] if het_group is not None else [])
    words += ["--nodes=1", "--ntasks=1", f"--nodelist={shlex.quote(cmd.host)}", "env", cmd.shell()]
    return " ".join(words) + " &"


def render_sbatch(assignment: Assignment, commands: Sequence[NodeCommand], opts: SlurmOptions) -> str:
    """The batch script text (pure)."""
    for na in assignment.nodes:
        if is_loopback(na.node.host):
            raise InputError(f"node {na.node.name!r} has loopback host {na.node.host!r}: a SLURM script needs "
                             "the SLURM node name of every host")
    head, group_of = directives(assignment, opts)
    body = ["set -euo pipefail"]
    if opts.workdir:
        body.append(f"cd {shlex.quote(opts.workdir)}")
    body.append("pids=()")
    for cmd in commands:
        body += [f"# node {cmd.node_rank}: {shlex.quote(cmd.node_name)}", srun_line(cmd, group_of.get(cmd.node_name)),
                 'pids+=("$!")']
    body += ["status=0", 'for pid in "${pids[@]}"; do', '  wait "$pid" || status=$?', "done",
             'exit "$status"']
    return "\n".join(["#!/bin/bash", *head, *describe(assignment), *body]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m launch.slurm", description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--partition", default=None)
    parser.add_argument("--account", default=None)
    parser.add_argument("--time", dest="time_limit", default=None, help="SLURM time limit, e.g. 02:00:00")
    parser.add_argument("--job-name", default="sailor")
    parser.add_argument("--workdir", default=None, help="cd here before launching (default: submit dir)")
    parser.add_argument("--single-allocation", action="store_true",
                        help="one allocation with --nodelist instead of a heterogeneous job")
    own_argv, script_args = split_script_args(argv)
    try:
        args = parser.parse_args(own_argv)
        opts = SlurmOptions(job_name=args.job_name, partition=args.partition, account=args.account,
                            time_limit=args.time_limit, workdir=args.workdir, hetjob=not args.single_allocation)
        assignment, commands = build_from_args(args, script_args)
        text = render_sbatch(assignment, commands, opts)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
