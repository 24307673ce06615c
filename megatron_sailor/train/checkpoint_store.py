"""Which checkpoints under a folder are usable, which to keep, and what ``latest`` names.

Contract: :func:`verify` opens only ``meta.json`` and the plain files it lists by the writer's own names
(no path, no symlink), checks the meta seal and schema (:mod:`planner.schema.checkpoint_meta`), every
file's size and SHA-256, and the model identity; any problem is a :class:`CheckpointError` (a model mismatch
the subclass :class:`ModelMismatchError`). :func:`prune` counts only checkpoints that verify, never deletes
the newest one that verifies, renames one that fails to ``<name>.corrupt`` (never deletes it) and leaves
``latest`` naming the newest verified checkpoint (or removes it when none is left).
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from planner.errors import InputError, quote
from planner.schema.base import parse_json
from planner.schema.checkpoint_meta import FORMAT, CheckpointMeta, check_meta

logger = logging.getLogger(__name__)

DIR_RE = re.compile(r"^iter_(\d{7})$")
RNG_FILE = "rng.pt"
MAX_META_BYTES = 64 * 1024 * 1024


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used (message names the folder and the reason)."""


class ModelMismatchError(CheckpointError):
    """The checkpoint belongs to a model with other dimensions."""


def checkpoint_name(iteration: int) -> str:
    return f"iter_{iteration:07d}"


def expected_files(num_layers: int) -> set[str]:
    return {"embedding", "head"} | {f"layer_{i:05d}" for i in range(num_layers)}


def model_identity(model: Any) -> dict[str, Any]:
    """The model fields that must agree between a checkpoint and the run loading it."""
    d = dict(model.to_dict())
    d.pop("name", None)
    return d


def list_checkpoints(root: Path) -> list[Path]:
    """Committed checkpoint folders (``iter_NNNNNNN``, not symlinks), newest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if DIR_RE.match(p.name) and p.is_dir() and not p.is_symlink()]
    return sorted(found, key=lambda p: p.name, reverse=True)


def read_meta(path: Path) -> CheckpointMeta:
    """The checked meta of checkpoint folder ``path`` (CheckpointError when missing or malformed)."""
    meta_path = path / "meta.json"
    if meta_path.is_symlink() or not meta_path.is_file():
        raise CheckpointError(f"{path}: no meta.json (incomplete checkpoint)")
    try:
        if meta_path.stat().st_size > MAX_META_BYTES:
            raise CheckpointError(f"{meta_path}: larger than {MAX_META_BYTES} bytes")
        text = meta_path.read_text(encoding="utf-8")
        return check_meta(parse_json(text, str(meta_path)), str(meta_path))
    except InputError as exc:
        raise CheckpointError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{meta_path}: unreadable ({type(exc).__name__})") from None


def _check_model(path: Path, meta: CheckpointMeta, model: Any) -> None:
    theirs, ours = meta.model, model_identity(model)
    if theirs != ours:
        diff = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))[:8]
        detail = ", ".join(f"{k}: checkpoint {quote(theirs.get(k), 40)} vs run {quote(ours.get(k), 40)}"
                           for k in diff)
        raise ModelMismatchError(f"{path}: checkpoint of another model ({detail})")


def _num_layers(path: Path, meta: CheckpointMeta, model: Any | None) -> int:
    if model is not None:
        return int(model.num_layers)
    n = meta.model.get("num_layers")
    if isinstance(n, bool) or not isinstance(n, int) or not 0 < n <= 100_000:
        raise CheckpointError(f"{path}: meta.json field 'model.num_layers' is {quote(n)}")
    return n


def _sha256(f: Path) -> str:
    h = hashlib.sha256()
    with open(f, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: Path, model: Any | None = None, deep: bool = True) -> CheckpointMeta:
    """The checkpoint's meta if it is complete and intact (and, given ``model``, belongs to it)."""
    meta = read_meta(path)
    if model is not None:
        _check_model(path, meta, model)
    wanted = {k + ".pt" for k in expected_files(_num_layers(path, meta, model))} | {RNG_FILE}
    if set(meta.files) != wanted:
        missing, extra = sorted(wanted - set(meta.files))[:4], sorted(set(meta.files) - wanted)[:4]
        raise CheckpointError(f"{path}: meta.json lists the wrong files (missing {missing}, unexpected {extra})")
    for name, info in sorted(meta.files.items()):
        f = path / name
        try:
            if f.is_symlink() or not f.is_file():
                raise CheckpointError(f"{path}: file {name} missing (or not a plain file)")
            size = f.stat().st_size
            if size != info.bytes:
                raise CheckpointError(f"{path}: {name} has {size} bytes, meta.json says {info.bytes} (truncated?)")
            if deep and _sha256(f) != info.sha256:
                raise CheckpointError(f"{path}: {name} fails its SHA-256 check (corrupt)")
        except OSError as exc:
            raise CheckpointError(f"{path}: {name} unreadable ({type(exc).__name__})") from None
    return meta


def choose_checkpoint(load_dir: str, model: Any) -> tuple[Path, CheckpointMeta] | None:
    """Newest usable checkpoint under ``load_dir`` (None when there is none at all).

    Corrupt / incomplete checkpoints are skipped with a warning; if checkpoints exist but none verifies,
    or one belongs to another model, CheckpointError is raised (never a silent fresh start)."""
    root = Path(load_dir)
    if root.exists() and not root.is_dir():
        raise CheckpointError(f"{root}: --load names a file, expected a checkpoint folder")
    candidates = list_checkpoints(root)
    if not candidates:
        return None
    refused = []
    for path in candidates:
        try:
            return path, verify(path, model)
        except ModelMismatchError:
            raise
        except CheckpointError as exc:
            logger.warning("refusing checkpoint: %s", exc)
            refused.append(str(exc).replace(f"{root}{os.sep}", ""))
    raise CheckpointError(f"no usable checkpoint in {root}: " + "; ".join(refused[:3])
                          + (f"; and {len(refused) - 3} more" if len(refused) > 3 else ""))


def set_aside(path: Path) -> Path:
    """Rename a checkpoint that fails verification to ``<name>.corrupt[.N]`` (kept for inspection)."""
    target = path.with_name(path.name + ".corrupt")
    n = 1
    while target.exists():
        target = path.with_name(f"{path.name}.corrupt.{n}")
        n += 1
    os.rename(path, target)
    return target


def write_latest(root: Path, name: str | None) -> None:
    """Point ``latest`` at ``name`` atomically (remove it when ``name`` is None)."""
    if name is None:
        (root / "latest").unlink(missing_ok=True)
        return
    tmp = root / "latest.tmp"
    tmp.write_text(name + "\n")
    os.replace(tmp, root / "latest")


def prune(root: Path, keep_last: int, model: Any | None = None) -> list[Path]:
    """Keep the newest ``keep_last`` checkpoints that verify (0: keep all), set aside the ones that fail,
    remove stale ``.tmp`` folders, point ``latest`` at the newest that verifies. Returns the set-aside paths."""
    for p in root.iterdir():
        if p.name.endswith(".tmp") and p.is_dir() and not p.is_symlink() and DIR_RE.match(p.name[:-4]):
            shutil.rmtree(p, ignore_errors=True)
    good: list[Path] = []
    aside: list[Path] = []
    for p in list_checkpoints(root):
        if keep_last > 0 and len(good) >= keep_last:
            shutil.rmtree(p, ignore_errors=True)       # older than keep_last checkpoints that verify
            continue
        if keep_last == 0 and good:
            continue                                   # keep everything; only the newest must be known good
        try:
            verify(p, model)
            good.append(p)
        except ModelMismatchError as exc:
            logger.warning("keeping a checkpoint of another model (not counted): %s", exc)
        except CheckpointError as exc:
            aside.append(set_aside(p))
            logger.warning("checkpoint set aside as %s: %s", aside[-1].name, exc)
    write_latest(root, good[0].name if good else None)
    return aside
