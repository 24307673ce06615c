"""Run a command with its stderr on a pseudo-terminal (to see what a person at a terminal sees) or on a
pipe; stdout is always a pipe. Returns (exit status, stdout, what reached stderr)."""
from __future__ import annotations

import os
import pty
import subprocess
import sys

from tests.helpers.launch import REPO


def run_with_stderr(argv: list[str], tty: bool, timeout_s: float = 120.0) -> tuple[int, str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="xterm", COLUMNS="100")
    if not tty:
        proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
        return proc.returncode, proc.stdout, proc.stderr
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=slave,
                                stdin=subprocess.DEVNULL)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:        # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        out = proc.stdout.read().decode() if proc.stdout else ""
        code = proc.wait(timeout=timeout_s)
    finally:
        os.close(master)
    return code, out, b"".join(chunks).decode(errors="replace")


PY = sys.executable
