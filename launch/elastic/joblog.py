"""What a finished training job left behind, read by sailor-elastic without torch: the job's own last error
line (from its logs) and the newest committed checkpoint iteration (from the checkpoint folder's names and
``meta.json``).

Error line: the last ``error: ...`` line the training script printed (its one-line input / checkpoint /
distributed errors); failing that, the last line of a Python traceback (``SomeError: ...``) that is not
torchrun's own wrapper (``ChildFailedError``); failing that, the last non-empty line.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable

from planner.schema.checkpoint_meta import digest

_COMMITTED = re.compile(r"^iter_(\d{7})$")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*")
_TORCHRUN_NOISE = ("ChildFailedError", "torch.distributed.elastic", "SignalException")


def _lines(paths: Iterable[Path], tail_bytes: int) -> list[str]:
    out: list[str] = []
    for p in paths:
        try:
            with open(p, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                fh.seek(max(0, size - tail_bytes))
                out += fh.read().decode("utf-8", "replace").splitlines()
        except OSError:
            continue
    return out


def last_error_line(paths: Iterable[Path], tail_bytes: int = 65536, max_chars: int = 300) -> str:
    """The most useful single line explaining why a job failed ("" when the logs are empty)."""
    lines = [ln.strip() for ln in _lines(paths, tail_bytes) if ln.strip()]
    own = [ln for ln in lines if ln.startswith("error: ")]
    if own:
        return own[-1][:max_chars]
    exc = [ln for ln in lines if _EXC_LINE.match(ln) and not any(n in ln for n in _TORCHRUN_NOISE)]
    if exc:
        return exc[-1][:max_chars]
    return lines[-1][:max_chars] if lines else ""


def committed_iteration(ckpt_dir: Path) -> int | None:
    """Iteration of the newest committed checkpoint under ``ckpt_dir`` (None: none).

    A committed folder ``iter_N`` is renamed from ``iter_N.tmp`` only after its ``meta.json`` is written, so
    the name is trusted; ``meta.json`` must carry its writer's seal (``meta_sha256``) and its iteration must
    agree with the name."""
    if not ckpt_dir.is_dir():
        return None
    for p in sorted((p for p in ckpt_dir.iterdir() if _COMMITTED.match(p.name)), key=lambda p: p.name,
                    reverse=True):
        try:
            meta = json.loads((p / "meta.json").read_text(encoding="utf-8"))
            it = int(meta["iteration"])
            if meta.get("meta_sha256") != digest(meta):      # not sealed by its writer: not trusted
                continue
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if it == int(_COMMITTED.match(p.name).group(1)):   # type: ignore[union-attr]
            return it
    return None
