"""The one-line contract, checked around an in-process CLI call: exit 2, one ``error:`` line under 300
characters on stderr, no traceback, nothing written, nothing opened outside the allowed folders, < 5 s."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

from tests.helpers.launch import REPO

_OPENED: list[str] | None = None


def _hook(event: str, args: tuple) -> None:
    if _OPENED is not None and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_hook)
ALLOWED = tuple(str(p) for p in {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), REPO.resolve(),
                                  (REPO.parent / "shared").resolve()}) + ("/dev/", "/proc/", "/sys/", "/usr/", "/lib")


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def call(main: Callable[[list[str]], int], argv: list[str], capsys, workdir: Path) -> tuple[int, str, str, list[str], float]:  # noqa: ANN001
    global _OPENED
    capsys.readouterr()
    _OPENED = []
    start = time.perf_counter()
    try:
        code = main(argv)
    except SystemExit as exc:                    # argparse
        code = exc.code if isinstance(exc.code, int) else 2
    finally:
        opened, _OPENED = _OPENED, None
    out, err = capsys.readouterr()
    return code, out, err, opened, time.perf_counter() - start


def assert_refused(main, argv: list[str], capsys, workdir: Path, expect: str = "",  # noqa: ANN001
                   limit_s: float = 5.0) -> str:
    before = _tree(workdir)
    code, out, err, opened, took = call(main, argv, capsys, workdir)
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2, (code, err[-500:])
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-800:]
    assert len(lines[0]) < 300 and "Traceback" not in err, lines[0][:400]
    assert expect in lines[0], (expect, lines[0])
    assert _tree(workdir) == before, sorted(_tree(workdir) ^ before)
    outside = [p for p in opened if not os.path.abspath(p).startswith((str(workdir.resolve()), *ALLOWED))]
    assert not outside, outside[:5]
    assert took < limit_s, f"took {took:.1f} s"
    return lines[0]
