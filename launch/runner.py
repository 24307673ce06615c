"""Run the per-node commands: local nodes as subprocesses, remote nodes over ssh.

Before anything starts, every host must resolve (``socket.getaddrinfo``); otherwise :class:`InputError`
names the node and nothing is launched. If one node's torchrun fails, the others are terminated.
"""
from __future__ import annotations

import logging
import os
import shlex
import socket
import subprocess
import time
from typing import Callable, Sequence

from planner.errors import InputError
from launch.inventory import is_loopback
from launch.torchrun_cmds import NodeCommand

logger = logging.getLogger(__name__)

Resolver = Callable[[str, object], object]


def check_hosts(commands: Sequence[NodeCommand], resolver: Resolver | None = None) -> None:
    """Raise :class:`InputError` for the first host that does not resolve (default: getaddrinfo)."""
    resolver = resolver or socket.getaddrinfo
    for cmd in commands:
        try:
            resolver(cmd.host, None)
        except (OSError, UnicodeError) as exc:
            raise InputError(f"node {cmd.node_name!r}: host {cmd.host!r} is unreachable "
                             f"(does not resolve: {exc}); nothing was launched") from None


def is_local_host(host: str) -> bool:
    """Loopback, or this machine's own name."""
    return is_loopback(host) or host in {socket.gethostname(), socket.getfqdn()}


def process_argv(cmd: NodeCommand, workdir: str,
                 force_local: bool = False) -> tuple[list[str], dict[str, str] | None]:
    """``(argv, env)`` for :class:`subprocess.Popen`: direct for a local host, ``ssh`` otherwise."""
    if force_local or is_local_host(cmd.host):
        return list(cmd.argv), {**os.environ, **dict(cmd.env)}
    remote = f"cd {shlex.quote(workdir)} && {cmd.shell()}"
    return ["ssh", "-o", "BatchMode=yes", "--", cmd.host, remote], None


def _terminate(procs: Sequence[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + 10.0
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_commands(commands: Sequence[NodeCommand], workdir: str | None = None, poll_s: float = 0.2,
                 force_local: bool = False) -> int:
    """Start every node's command, wait for all; return 0 or the first non-zero exit status.
    ``force_local``: run every command on this machine (no ssh)."""
    workdir = workdir or os.getcwd()
    procs: list[subprocess.Popen] = []
    try:
        for cmd in commands:
            argv, env = process_argv(cmd, workdir, force_local)
            logger.info("node %d (%s on %s): %s", cmd.node_rank, cmd.node_name, cmd.host, cmd.shell())
            procs.append(subprocess.Popen(argv, env=env, cwd=workdir))
        while True:
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                logger.error("a node exited with status %d; stopping the others", failed[0])
                return failed[0]
            if all(c == 0 for c in codes):
                return 0
            time.sleep(poll_s)
    finally:
        _terminate(procs)
