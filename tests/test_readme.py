"""README.md runs as written: every command of every ```bash block, in order, in a copy of the repository.

Rules (README.md says so too):
- a trailing comment ``# README test: ARGS`` appends ARGS to that command (small sizes, fewer repeats);
- ``pip install ...`` is checked, not run (no network in CI): every extra it names exists in setup.py;
- ``python -m pytest ...`` is checked, not run (this test is part of that suite): CI runs the same commands;
- console scripts (``sailor-sim`` ...) run this checkout's code through shims built from setup.py;
- each ```bash block runs, its commands in order, in its own fresh copy of the repository (tracked and
  untracked-but-not-ignored files, ``../shared`` linked next to it), so commands that write ``runs/...`` never
  touch the working tree and every block runs on its own, as a reader may start at any section;
- blocks run side by side, ``README_TEST_JOBS`` at a time (default: 2, or 1 on a 1-core machine), each with
  its own ``PET_MASTER_PORT`` (torchrun's environment default for ``--master-port``) so two torchruns never
  share a port; the commands themselves are unchanged.
The fast tests check the parsing and that every file a command names exists; the slow test runs them all
and fails for each command that exits non-zero. ``benchmarks/readme_commands.py`` prints how long each takes.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from planner.ports import free_port

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
TEST_ARGS = re.compile(r"\s+#\s*README test:\s*(?P<args>.*)$")


def readme_blocks(text: str) -> list[list[str]]:
    """Logical commands of each ```bash block: continuation lines joined, comment-only lines dropped."""
    blocks: list[list[str]] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        commands: list[str] = []
        current = ""
        for line in block.splitlines():
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.rstrip().endswith("\\"):
                current += line.rstrip()[:-1].rstrip() + " "
                continue
            commands.append((current + line.strip()).strip())
            current = ""
        blocks.append(commands)
    return blocks


def readme_commands(text: str) -> list[str]:
    return [c for block in readme_blocks(text) for c in block]


def runnable(command: str) -> str:
    """Apply ``# README test: ARGS`` (ARGS go before the comment)."""
    m = TEST_ARGS.search(command)
    return command if m is None else command[:m.start()] + " " + m.group("args")


def _kind(command: str) -> str:
    head = command.split("&&")[0].strip()
    if head.startswith("pip install"):
        return "pip"
    if head.startswith("python -m pytest"):
        return "pytest"
    return "run"


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def _to_run(command: str) -> str | None:
    """The part of ``command`` the slow test runs (pip and pytest parts are checked by the fast tests)."""
    parts = [p.strip() for p in command.split("&&")]
    kept = [p for p in parts if _kind(p) == "run"]
    return " && ".join(kept) if kept else None


RUN = [c for c in map(_to_run, COMMANDS) if c is not None]
# (block number, command) of every command the slow test runs, in README order
RUN_BLOCKS = [(b, c) for b, block in enumerate(readme_blocks(README.read_text(encoding="utf-8")))
              for c in map(_to_run, block) if c is not None]


def _console_scripts() -> dict[str, str]:
    text = (REPO / "setup.py").read_text(encoding="utf-8")
    return dict(re.findall(r'"([a-z][\w-]*)=([\w.]+:\w+)"', text))


def test_readme_has_the_expected_blocks() -> None:
    assert len(RUN) >= 25 and not any(_kind(p) != "run" for c in RUN for p in c.split("&&")), RUN
    assert any("from-hf" in c for c in COMMANDS) and any("--sailor-plan" in c for c in COMMANDS)
    assert runnable("bash x.sh     # README test: --iters 6") == "bash x.sh --iters 6"
    assert [c for _, c in RUN_BLOCKS] == RUN and len({b for b, _ in RUN_BLOCKS}) >= 5


def test_every_file_a_command_names_exists() -> None:
    for command in COMMANDS:
        for token in shlex.split(runnable(command), comments=True):
            if re.match(r"^(examples|planner/data|benchmarks|launch)/[\w./-]+$", token):
                assert (REPO / token).exists(), f"README names {token}, which the repository lacks: {command}"


def test_pip_and_pytest_lines_match_setup_and_ci() -> None:
    extras = set(re.findall(r'"(\w+)":', (REPO / "setup.py").read_text(encoding="utf-8")))
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    for command in COMMANDS:
        for part in command.split("&&"):
            part = part.split("#")[0].strip()
            if part.startswith("pip install"):
                for extra in re.findall(r"\[([\w,]+)\]", part):
                    assert set(extra.split(",")) <= extras, part
            if part.startswith("python -m pytest"):
                # CI runs the README's test command: the same arguments, in the same order
                args = part[len("python -m pytest"):].strip()
                assert any(line.startswith("python3 -m pytest") and line.endswith(args)
                           for line in ci.splitlines()), (part, ci)


def make_sandbox(root: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the repository under ``root/repo`` (``../shared`` linked next to it), console-script shims
    running that copy's code, and the environment the commands run with."""
    repo = root / "repo"
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, repo / name)
    if (REPO.parent / "shared").is_dir():
        (root / "shared").symlink_to(REPO.parent / "shared")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name, target in _console_scripts().items():
        module, func = target.split(":")
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c 'import sys; from {module} import "
                        f"{func} as f; sys.exit(f())' \"$@\"\n")
        shim.chmod(0o755)
    python = bin_dir / "python"
    python.symlink_to(sys.executable)
    torchrun = bin_dir / "torchrun"
    torchrun.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m torch.distributed.run \"$@\"\n")
    torchrun.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", PYTHONPATH=str(repo),
               OMP_NUM_THREADS="1", MPLBACKEND="Agg", WANDB_MODE="offline", PET_MASTER_PORT=str(free_port()))
    return repo, env


@dataclass(frozen=True)
class Outcome:
    command: str
    returncode: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float          # user + system seconds of the command and every process it waited for


def run_command(command: str, repo: Path, env: dict[str, str], timeout_s: float) -> Outcome:
    """``bash -o pipefail -c`` the runnable form of ``command`` in its own session (the whole process tree is
    killed after ``timeout_s``: exit 124)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", runnable(command)], cwd=repo, env=env,
                                stdout=out, stderr=err, start_new_session=True)
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        timer = threading.Timer(timeout_s, kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = 124 if timed_out.is_set() else os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = (f.read().decode(errors="replace") for f in (out, err))
    if timed_out.is_set():
        stderr += f"\ntimed out after {timeout_s:.0f} s"
    return Outcome(command, proc.returncode, stdout, stderr, time.perf_counter() - start,
                   usage.ru_utime + usage.ru_stime)


def run_block(commands: list[str], root: Path, timeout_s: float = 900.0) -> list[Outcome]:
    """Run one block's commands in order in a fresh sandbox under ``root`` (every command runs, even after
    one failed, so each is reported)."""
    repo, env = make_sandbox(root)
    return [run_command(command, repo, env, timeout_s) for command in commands]


def default_jobs() -> int:
    value = os.environ.get("README_TEST_JOBS", "")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"README_TEST_JOBS must be a positive integer, got {value!r}")
        return int(value)
    return 2 if (os.cpu_count() or 1) >= 2 else 1


def run_readme(root: Path, jobs: int) -> list[Outcome]:
    """Every runnable README command (the order of ``RUN``), blocks ``jobs`` at a time."""
    blocks: dict[int, list[str]] = {}
    for b, command in RUN_BLOCKS:
        blocks.setdefault(b, []).append(command)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(run_block, cmds, root / f"block{b}") for b, cmds in blocks.items()]
        return [o for f in futures for o in f.result()]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> list[Outcome]:
    return run_readme(tmp_path_factory.mktemp("readme"), default_jobs())


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("index", range(len(RUN)), ids=[c[:60] for c in RUN])
def test_readme_command_runs(index: int, outcomes: list[Outcome]) -> None:
    o = outcomes[index]
    assert o.command == RUN[index]
    assert o.returncode == 0, f"{o.command}\nexit {o.returncode}\n{o.stdout[-2000:]}\n{o.stderr[-3000:]}"
