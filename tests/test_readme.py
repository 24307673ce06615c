"""README.md runs as written: every command of every ```bash block, in order, in a copy of the repository.

Rules (README.md says so too):
- a trailing comment ``# README test: ARGS`` appends ARGS to that command (small sizes, fewer repeats);
- ``pip install ...`` is checked, not run (no network in CI): every extra it names exists in setup.py;
- ``python -m pytest ...`` is checked, not run (this test is part of that suite): CI runs the same commands;
- console scripts (``sailor-sim`` ...) run this checkout's code through shims built from setup.py;
- the copy holds the tracked and untracked-but-not-ignored files, with ``../shared`` linked next to it, so
  commands that write ``runs/...`` never touch the working tree.
The fast tests check the parsing and that every file a command names exists; the slow test runs them all.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
TEST_ARGS = re.compile(r"\s+#\s*README test:\s*(?P<args>.*)$")


def readme_commands(text: str) -> list[str]:
    """Logical commands of the ```bash blocks: continuation lines joined, comment-only lines dropped."""
    commands: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        current = ""
        for line in block.splitlines():
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.rstrip().endswith("\\"):
                current += line.rstrip()[:-1].rstrip() + " "
                continue
            commands.append((current + line.strip()).strip())
            current = ""
    return commands


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


def _console_scripts() -> dict[str, str]:
    text = (REPO / "setup.py").read_text(encoding="utf-8")
    return dict(re.findall(r'"([a-z][\w-]*)=([\w.]+:\w+)"', text))


def test_readme_has_the_expected_blocks() -> None:
    assert len(RUN) >= 25 and not any(_kind(p) != "run" for c in RUN for p in c.split("&&")), RUN
    assert any("from-hf" in c for c in COMMANDS) and any("--sailor-plan" in c for c in COMMANDS)
    assert runnable("bash x.sh     # README test: --iters 6") == "bash x.sh --iters 6"


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
                assert "pytest" in ci and ("-m slow" in ci) == ("-m slow" in part or "-m slow" in ci), part


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("readme")
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
               OMP_NUM_THREADS="1", MPLBACKEND="Agg", WANDB_MODE="offline")
    return repo, env


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("index", range(len(RUN)), ids=[c[:60] for c in RUN])
def test_readme_command_runs(index: int, sandbox: tuple[Path, dict[str, str]]) -> None:
    command = RUN[index]
    repo, env = sandbox
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", runnable(command)], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{command}\nexit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
