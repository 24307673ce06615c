"""Run the per-node commands: local nodes as subprocesses, remote nodes over ssh.

Before anything starts, every host must resolve (``socket.getaddrinfo``); otherwise :class:`InputError`
names the node and nothing is launched. If one node's torchrun fails, the others are terminated.

Every command's stderr passes through :class:`StderrRelay`: lines are forwarded as they come, except that a
``Traceback`` block is held back; if a worker printed an ``error: ...`` line (our one-line contract, exit
status 2) and its torchrun failed, the held-back torchrun traceback (ChildFailedError) is dropped, the
worker's line is printed last and the status is 2. ``python -m launch.runner [--status LABEL]
[--drop-torchrun-warnings] -- CMD ...`` applies the same to one local command (used by launch/train_opt.sh):
``--status`` shows a start-up spinner on a terminal until CMD's first output (launch.startup),
``--drop-torchrun-warnings`` leaves out torchrun's own warning lines.
"""
from __future__ import annotations

import logging
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Callable, Sequence

from planner.errors import InputError
from launch.inventory import is_loopback
from launch.startup import StartupStatus, is_torchrun_noise, relay_stdout
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


class StderrRelay:
    """Forward a child's stderr line by line, holding back traceback blocks; remember worker error lines."""

    def __init__(self, stream: IO[str], out: IO[str] | None = None, drop_noise: bool = False,
                 on_line: Callable[[], None] | None = None) -> None:
        """``drop_noise``: leave out torchrun's warning lines; ``on_line``: called before a line is written."""
        self.out = out or sys.stderr
        self.drop_noise, self.on_line = drop_noise, on_line
        self.error_line: str | None = None
        self.held: list[str] = []
        self.thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self.thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            text = line.rstrip("\n")
            tail = text.split("]:", 1)[-1].strip() if text.startswith("[") else text.strip()
            if tail.startswith("error: "):
                self.error_line = tail
            if self.held or text.startswith("Traceback (most recent call last)"):
                self.held.append(line)
                continue
            if self.drop_noise and is_torchrun_noise(text):
                continue
            if self.on_line is not None:
                self.on_line()
            self.out.write(line)
            self.out.flush()

    def finish(self, code: int) -> int:
        """Join the reader; return the status to report (2 when a worker's error line explains a failure)."""
        self.thread.join(timeout=10.0)
        if code != 0 and self.error_line is not None:
            self.out.write(self.error_line + "\n")
            self.out.flush()
            return 2
        self.out.writelines(self.held)
        self.out.flush()
        return code


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
    relays: list[StderrRelay] = []
    code = 0
    try:
        for cmd in commands:
            argv, env = process_argv(cmd, workdir, force_local)
            logger.info("node %d (%s on %s): %s", cmd.node_rank, cmd.node_name, cmd.host, cmd.shell())
            procs.append(subprocess.Popen(argv, env=env, cwd=workdir, stderr=subprocess.PIPE, text=True,
                                          errors="replace"))
            relays.append(StderrRelay(procs[-1].stderr))
        while True:
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                logger.error("a node exited with status %d; stopping the others", failed[0])
                code = failed[0]
                break
            if all(c == 0 for c in codes):
                break
            time.sleep(poll_s)
    finally:
        _terminate(procs)
    results = [r.finish(p.returncode or 0) for r, p in zip(relays, procs)]
    return 2 if code and 2 in results else code


def _options(args: list[str]) -> tuple[str | None, bool, list[str]]:
    """(status label, drop torchrun warnings, command) of ``[--status L] [--drop-torchrun-warnings] -- CMD``."""
    label, drop = None, False
    while args and args[0] != "--":
        if args[0] == "--status" and len(args) >= 2:
            label, args = args[1], args[2:]
        elif args[0] == "--drop-torchrun-warnings":
            drop, args = True, args[1:]
        else:
            break
    return label, drop, args[1:] if args[:1] == ["--"] else args


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m launch.runner [--status LABEL] [--drop-torchrun-warnings] -- CMD ...``: run CMD here with
    the stderr contract above."""
    label, drop, args = _options(list(sys.argv[1:] if argv is None else argv))
    if not args:
        print("error: python -m launch.runner [--status LABEL] [--drop-torchrun-warnings] -- CMD ...: "
              "no command given", file=sys.stderr)
        return 2
    status = StartupStatus(label or "")
    show = label is not None and status.enabled
    env = {**os.environ, "PYTHONUNBUFFERED": "1"} if show else None
    if show:
        status.start()        # before the relays: their first line stops it
    proc = subprocess.Popen(args, stdout=subprocess.PIPE if show else None, stderr=subprocess.PIPE, text=True,
                            errors="replace", env=env)
    relay = StderrRelay(proc.stderr, drop_noise=drop, on_line=status.done if show else None)
    out_thread = relay_stdout(proc.stdout, status) if show else None
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        code = proc.wait()
    finally:
        if out_thread is not None:
            out_thread.join(timeout=10.0)
        status.done()
    return relay.finish(code)


if __name__ == "__main__":
    sys.exit(main())
