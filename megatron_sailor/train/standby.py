"""Warm standby for sailor-elastic (``--warm-standby``): one interpreter that has imported torch,
megatron-core and the runtime, and forks the ranks of each new job on this machine, so a reconfiguration
does not pay interpreter start-up and imports (seconds per rank on a loaded CPU).

    python -m megatron_sailor.train.standby DIR

Protocol (files in ``DIR``, each written atomically by its writer):

* ``ready``: written by the standby once its imports are done;
* ``job_K.json`` (the controller): ``{"ranks": [{"env": {...}, "argv": [...]}], "log": PATH}``; the standby
  forks one child per entry; a child replaces its environment's keys by ``env``, sends stdout / stderr to
  ``log`` (appended) and runs :func:`megatron_sailor.train.loop.main` with ``argv``;
* ``job_K.pids`` (the standby): the children's pids, in rank order;
* ``job_K.rc`` (the standby): ``{"codes": [...]}`` once every child exited. As under torchrun, the first
  child to fail makes the standby SIGKILL its siblings;
* ``shutdown`` (the controller): the standby kills its children and exits. If the controller dies the
  standby exits and leaves the ranks running (a restarted controller stops them through ``state.json``).

The standby itself never initialises torch.distributed or runs a tensor operation (forking is safe only
before threads and process groups exist); each child's ``process_start`` event is its fork time.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path


def _warm_imports() -> None:
    import torch  # noqa: F401
    import megatron.core  # noqa: F401
    from megatron_sailor.runtime import groups, rank_runtime, topology  # noqa: F401
    from megatron_sailor.train import checkpoint, elastic_hooks, loop  # noqa: F401


def _write(path: Path, obj: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


def _child(env: dict[str, str], argv: list[str], log: str) -> None:
    """In the forked child: become the rank, never return."""
    code = 1
    try:
        os.setpgid(0, 0)
        os.environ.update(env)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        from megatron_sailor.train.loop import main
        code = main(argv, process_start_s=time.time())
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - reported in the job log, then the rank exits
        print(f"error: standby rank: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _start_job(d: Path, req: Path) -> list[int]:
    spec = json.loads(req.read_text())
    pids = []
    for rank in spec["ranks"]:
        pid = os.fork()
        if pid == 0:
            _child(rank["env"], rank["argv"], spec["log"])
        pids.append(pid)
    _write(d / (req.stem + ".pids"), pids)
    return pids


def serve(d: Path, poll_s: float = 0.01) -> int:
    _warm_imports()
    _write(d / "ready", {"pid": os.getpid()})
    jobs: dict[str, list[int]] = {}          # job name -> pids
    codes: dict[int, int] = {}
    parent = os.getppid()
    while not (d / "shutdown").exists() and os.getppid() == parent:   # the controller died: stop serving
        for req in sorted(d.glob("job_*.json")):
            if req.stem not in jobs:
                jobs[req.stem] = _start_job(d, req)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            codes[pid] = os.waitstatus_to_exitcode(status)
        for name, pids in jobs.items():
            if (d / f"{name}.rc").exists():
                continue
            if any(codes.get(p, 0) != 0 for p in pids if p in codes):
                for p in pids:
                    if p not in codes:
                        os.kill(p, signal.SIGKILL)
            if all(p in codes for p in pids):
                _write(d / f"{name}.rc", {"codes": [codes[p] for p in pids]})
        time.sleep(poll_s)
    if os.getppid() != parent:
        return 0                             # leave the ranks to the restarted controller (state.json)
    for pids in jobs.values():
        for p in pids:
            if p not in codes:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m megatron_sailor.train.standby DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(serve(Path(sys.argv[1])))
