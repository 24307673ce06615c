"""One free TCP port for a rendezvous (``torchrun --master-port`` / ``--rdzv-endpoint``): the only copy.

It lives in the torch-free bottom layer because that is the one layer every part may import (the launcher,
the elastic controller, the profiler, tests and benchmarks; see the import-linter contracts in
pyproject.toml). The port is free when this returns; another process may take it before torchrun binds
it, which on a shared machine shows up as a rendezvous error, never as a silent mix-up.
"""
from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listened on a moment ago (the kernel's choice)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
