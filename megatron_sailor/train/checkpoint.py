"""Plan-independent checkpoints: full (unsharded) tensors per global layer, atomic commits, reshard on load.

Layout of ``SAVE/``::

    latest                      name of the newest committed checkpoint (replaced atomically)
    iter_0000012/               one committed checkpoint
        meta.json               format, iteration, consumed samples, plan, model, seed, RNG, file checksums
        embedding.pt            {global name: {"param", "exp_avg", "exp_avg_sq", "step"}} (full TP-1 tensors)
        layer_00003.pt          the same for transformer layer 3 (global numbering)
        head.pt                 final norm + LM head
    iter_0000016.tmp/           being written (ignored and removed by the next save / load)

Writing: replica 0 of every stage gathers its TP shards (parameters and AdamW states) into full tensors and
its TP-rank 0 writes one file per global layer into ``iter_N.tmp``; rank 0 checks that every expected file
arrived, writes ``meta.json`` (with a SHA-256 per file), renames the folder to ``iter_N`` and then rewrites
``latest``. A run killed before the rename leaves the previous checkpoint untouched. Loading: rank 0 picks
the newest committed checkpoint whose meta and checksums verify (a corrupt or truncated one is refused with a
message and the next older one is tried; a checkpoint of another model stops the run); every rank then
reads the files of its own layers and slices them by its plan's TP. The format knows nothing about plans.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import logging
import os
import random
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from megatron_sailor.runtime.init_weights import full_shape, global_name, is_sharded, shard_of

logger = logging.getLogger(__name__)

FORMAT = "megatron-sailor-checkpoint/1"
_DIR_RE = re.compile(r"^iter_(\d{7})$")
_LAYER_RE = re.compile(r"^layers\.(\d+)\.")
STATE_KEYS = ("exp_avg", "exp_avg_sq")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used (message names the folder and the reason)."""


@dataclass(frozen=True)
class ResumeState:
    iteration: int            # next iteration to run
    consumed_samples: int     # samples consumed by iterations < iteration
    path: str
    load_s: float


def file_key(gname: str) -> str:
    """Which file of a checkpoint holds global parameter ``gname``."""
    m = _LAYER_RE.match(gname)
    if m:
        return f"layer_{int(m.group(1)):05d}"
    return "embedding" if gname.startswith("embedding.") else "head"


def checkpoint_name(iteration: int) -> str:
    return f"iter_{iteration:07d}"


def expected_files(num_layers: int) -> set[str]:
    return {"embedding", "head"} | {f"layer_{i:05d}" for i in range(num_layers)}


def model_identity(model: Any) -> dict[str, Any]:
    """The model fields that must agree between a checkpoint and the run loading it."""
    d = dict(model.to_dict())
    d.pop("name", None)
    return d


# ---------------------------------------------------------------------------------------------- RNG
def rng_state() -> dict[str, str]:
    import numpy as np
    blob = io.BytesIO()
    torch.save({"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
               blob)
    return {"pickled_b64": base64.b64encode(blob.getvalue()).decode()}


def set_rng_state(state: dict[str, str]) -> None:
    import numpy as np
    obj = torch.load(io.BytesIO(base64.b64decode(state["pickled_b64"])), weights_only=False)
    torch.set_rng_state(obj["torch"])
    random.setstate(obj["python"])
    np.random.set_state(obj["numpy"])


# ---------------------------------------------------------------------------------------------- save
def _gather_full(t: torch.Tensor, param: torch.nn.Parameter, tp: int, group: Any) -> torch.Tensor:
    if tp == 1 or not is_sharded(param):
        return t.detach().cpu().clone()
    parts = [torch.empty_like(t) for _ in range(tp)]
    dist.all_gather(parts, t.detach().contiguous(), group=group)
    return torch.cat([p.cpu() for p in parts], dim=param.partition_dim)


def _full_entries(rt: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """{file key: {global name: entry}} for replica 0 (gathers across TP; only TP-rank 0 gets a result)."""
    me, out = rt.me, {}
    for name, p in rt.model.named_parameters():
        st = rt.optimizer.state.get(p, {})
        entry: dict[str, Any] = {"param": _gather_full(p, p, me.tp, rt.groups.tp)}
        for k in STATE_KEYS:
            entry[k] = _gather_full(st[k], p, me.tp, rt.groups.tp) if k in st else torch.zeros(full_shape(p, me.tp))
        entry["step"] = float(st["step"]) if "step" in st else 0.0
        gname = global_name(name, rt.stage.first_layer)
        out.setdefault(file_key(gname), {})[gname] = entry
    return out if me.tp_rank == 0 else {}


def _write_file(path: Path, obj: Any) -> dict[str, Any]:
    blob = io.BytesIO()
    torch.save(obj, blob)
    data = blob.getvalue()
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data), "params": sorted(obj)}


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class PendingSave:
    """A save whose files are still being written (``asynchronous=True``); commit with :func:`finish_save`."""

    root: Path
    tmp: Path
    final: Path
    iteration: int
    consumed_samples: int
    keep_last: int
    extra: dict[str, Any]
    rng: dict[str, str]
    blocking_s: float = 0.0           # time training was blocked by the snapshot
    written: dict[str, Any] | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = None


def _write_all(pending: PendingSave, entries: dict[str, Any], fault_hook: Any) -> None:
    written: dict[str, Any] = {}
    try:
        for key, obj in sorted(entries.items()):
            written[key + ".pt"] = _write_file(pending.tmp / (key + ".pt"), obj)
            if fault_hook is not None:
                fault_hook("save", pending.iteration)
        pending.written = written
    except BaseException as exc:  # noqa: BLE001 - reported by finish_save on the training thread
        pending.error = exc


def begin_save(rt: Any, save_dir: str, iteration: int, consumed_samples: int, keep_last: int = 2,
               extra: dict[str, Any] | None = None, fault_hook: Any = None,
               asynchronous: bool = False) -> PendingSave:
    """Collective: snapshot full tensors (TP all-gathers into CPU copies) and write them, in a background
    thread when ``asynchronous``. Nothing is committed until :func:`finish_save`."""
    start = time.perf_counter()
    root = Path(save_dir)
    final = root / checkpoint_name(iteration)
    pending = PendingSave(root, root / (final.name + ".tmp"), final, iteration, consumed_samples, keep_last,
                          extra or {}, rng_state())
    if dist.get_rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(pending.tmp, ignore_errors=True)
        pending.tmp.mkdir()
    dist.barrier(group=rt.groups.world)
    entries = _full_entries(rt) if rt.me.replica == 0 else {}
    if asynchronous:
        pending.thread = threading.Thread(target=_write_all, args=(pending, entries, fault_hook), daemon=True)
        pending.thread.start()
    else:
        _write_all(pending, entries, fault_hook)
    pending.blocking_s = time.perf_counter() - start
    return pending


def finish_save(rt: Any, pending: PendingSave) -> float:
    """Collective: wait for this rank's files, then rank 0 verifies completeness, commits and prunes.
    Returns the seconds spent here."""
    start = time.perf_counter()
    if pending.thread is not None:
        pending.thread.join()
    if pending.error is not None:
        raise CheckpointError(f"{pending.tmp}: writing failed: {pending.error}")
    rank = dist.get_rank()
    reports: list[Any] = [None] * dist.get_world_size() if rank == 0 else None  # type: ignore[assignment]
    dist.gather_object(pending.written or {}, reports, dst=0, group=rt.groups.world)
    if rank == 0:
        files: dict[str, Any] = {}
        for rep in reports:
            files.update(rep)
        _commit(rt, pending, files)
        prune(pending.root, pending.keep_last)
    dist.barrier(group=rt.groups.world)
    return time.perf_counter() - start


def save_checkpoint(rt: Any, save_dir: str, iteration: int, consumed_samples: int, keep_last: int = 2,
                    extra: dict[str, Any] | None = None, fault_hook: Any = None) -> float:
    """Collective, synchronous: write and commit the state after ``iteration`` iterations; returns seconds."""
    pending = begin_save(rt, save_dir, iteration, consumed_samples, keep_last, extra, fault_hook)
    return pending.blocking_s + finish_save(rt, pending)


def _commit(rt: Any, pending: PendingSave, files: dict[str, Any]) -> None:
    root, tmp, final = pending.root, pending.tmp, pending.final
    missing = {k + ".pt" for k in expected_files(rt.spec.num_layers)} - set(files)
    if missing:
        raise CheckpointError(f"{tmp}: files missing after the write: {sorted(missing)}")
    meta = {"format": FORMAT, "iteration": pending.iteration, "consumed_samples": pending.consumed_samples,
            "global_batch_size": rt.plan.global_batch_size, "plan": rt.plan.to_dict(),
            "model": model_identity(rt.spec), "seed": rt.cfg.seed, "rng": pending.rng,
            "optimizer": {"lr": rt.cfg.optimizer.lr, "betas": list(rt.cfg.optimizer.betas),
                          "eps": rt.cfg.optimizer.eps, "weight_decay": rt.cfg.optimizer.weight_decay,
                          "clip_grad": rt.cfg.optimizer.clip_grad},
            "files": files, "written_unix_s": time.time(), **pending.extra}
    with open(tmp / "meta.json", "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    _fsync_dir(tmp)
    if final.exists():                     # re-saving the same iteration: replace the old copy
        shutil.rmtree(final)
    os.rename(tmp, final)
    latest_tmp = root / "latest.tmp"
    latest_tmp.write_text(final.name + "\n")
    os.replace(latest_tmp, root / "latest")
    _fsync_dir(root)
    logger.info("checkpoint %s committed (%d files)", final, len(files))


def list_checkpoints(root: Path) -> list[Path]:
    """Committed checkpoint folders, newest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _DIR_RE.match(p.name)]
    return sorted(found, key=lambda p: p.name, reverse=True)


def prune(root: Path, keep_last: int) -> None:
    """Keep the newest ``keep_last`` committed checkpoints; remove the rest and stale ``.tmp`` folders."""
    for p in root.iterdir():
        if p.is_dir() and p.name.endswith(".tmp"):
            shutil.rmtree(p, ignore_errors=True)
    if keep_last > 0:
        for p in list_checkpoints(root)[keep_last:]:
            shutil.rmtree(p, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- verify
def verify(path: Path, model: Any, deep: bool = True) -> dict[str, Any]:
    """The checkpoint's meta if it is complete and intact and belongs to ``model``; else CheckpointError.

    A model mismatch raises :class:`ModelMismatchError` (the run must stop, not fall back)."""
    meta_path = path / "meta.json"
    if not meta_path.is_file():
        raise CheckpointError(f"{path}: no meta.json (incomplete checkpoint)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{meta_path}: unreadable ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{meta_path}: not a {FORMAT} checkpoint (format {meta.get('format')!r})"
                              if isinstance(meta, dict) else f"{meta_path}: not a JSON object")
    theirs, ours = meta.get("model", {}), model_identity(model)
    if theirs != ours:
        diff = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
        detail = ", ".join(f"{k}: checkpoint {theirs.get(k)!r} vs run {ours.get(k)!r}" for k in diff)
        raise ModelMismatchError(f"{path}: checkpoint of another model ({detail})")
    files = meta.get("files", {})
    missing = {k + ".pt" for k in expected_files(model.num_layers)} - set(files)
    if missing:
        raise CheckpointError(f"{path}: meta.json lists no {sorted(missing)}")
    for name, info in files.items():
        f = path / name
        if not f.is_file():
            raise CheckpointError(f"{path}: file {name} missing")
        size = f.stat().st_size
        if size != info["bytes"]:
            raise CheckpointError(f"{path}: {name} has {size} bytes, meta.json says {info['bytes']} (truncated?)")
        if deep and hashlib.sha256(f.read_bytes()).hexdigest() != info["sha256"]:
            raise CheckpointError(f"{path}: {name} fails its SHA-256 check (corrupt)")
    return meta


class ModelMismatchError(CheckpointError):
    """The checkpoint belongs to a model with other dimensions."""


def choose_checkpoint(load_dir: str, model: Any) -> tuple[Path, dict[str, Any]] | None:
    """Newest usable checkpoint under ``load_dir`` (None when there is none at all).

    Corrupt / incomplete checkpoints are skipped with a warning; if checkpoints exist but none verifies,
    or one belongs to another model, CheckpointError is raised (never a silent fresh start)."""
    root = Path(load_dir)
    # newest first: a committed folder is complete (renamed only after meta.json); ``latest`` may lag by one
    # checkpoint if the writer died between the rename and rewriting it, so it is informational only
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
            refused.append(str(exc))
    raise CheckpointError(f"no usable checkpoint in {root}: " + "; ".join(refused))


# ---------------------------------------------------------------------------------------------- load
def _load_files(path: Path, keys: set[str]) -> dict[str, dict[str, Any]]:
    entries: dict[str, dict[str, Any]] = {}
    for key in sorted(keys):
        entries.update(torch.load(path / (key + ".pt"), map_location="cpu", weights_only=True))
    return entries


@torch.no_grad()
def apply_state(rt: Any, path: Path) -> None:
    """Copy this rank's slices of the checkpoint's full tensors into its parameters and AdamW states."""
    me, first = rt.me, rt.stage.first_layer
    names = {n: global_name(n, first) for n, _ in rt.model.named_parameters()}
    entries = _load_files(path, {file_key(g) for g in names.values()})
    for name, p in rt.model.named_parameters():
        g = names[name]
        if g not in entries:
            raise CheckpointError(f"{path}: parameter {g} not found")
        e = entries[g]
        want = full_shape(p, me.tp)
        if tuple(e["param"].shape) != want:
            raise CheckpointError(f"{path}: {g} has shape {tuple(e['param'].shape)}, the model needs {want}")
        p.copy_(shard_of(e["param"], p, me.tp, me.tp_rank).to(p.device))
        if e["step"] > 0:
            rt.optimizer.state[p] = {
                "step": torch.tensor(float(e["step"]), dtype=torch.float32),
                **{k: shard_of(e[k], p, me.tp, me.tp_rank).to(p.device).clone() for k in STATE_KEYS}}


def load_checkpoint(rt: Any, load_dir: str) -> ResumeState | None:
    """Collective: rank 0 chooses and verifies, every rank loads its slices. None = nothing to resume."""
    start = time.perf_counter()
    choice: list[Any] = [None]
    if dist.get_rank() == 0:
        try:
            found = choose_checkpoint(load_dir, rt.spec)
            choice[0] = ("ok", str(found[0]), found[1]) if found else ("none", None, None)
        except CheckpointError as exc:
            choice[0] = ("error", str(exc), None)
    dist.broadcast_object_list(choice, src=0, group=rt.groups.world)
    status, where, meta = choice[0]
    if status == "error":
        raise CheckpointError(where)
    if status == "none":
        return None
    apply_state(rt, Path(where))
    set_rng_state(meta["rng"])
    dist.barrier(group=rt.groups.world)
    return ResumeState(iteration=int(meta["iteration"]), consumed_samples=int(meta["consumed_samples"]),
                       path=where, load_s=time.perf_counter() - start)


def read_full_state(path: str) -> dict[str, dict[str, Any]]:
    """Every full tensor of a checkpoint (for tests and tools): {global name: entry}."""
    p = Path(path)
    keys = {f[:-3] for f in json.loads((p / "meta.json").read_text())["files"]}
    return _load_files(p, keys)


def write_full_checkpoint(save_dir: str, model: Any, params: dict[str, torch.Tensor],
                          meta_extra: dict[str, Any] | None = None) -> Path:
    """Write full (TP=1) parameters as a committed iteration-0 checkpoint without a running job (for
    converters): fresh AdamW states, ``latest`` pointing at it. Refuses a folder that already holds a
    checkpoint (nothing is overwritten)."""
    root = Path(save_dir)
    if list_checkpoints(root):
        raise CheckpointError(f"{root}: already holds a checkpoint; choose an empty --out folder")
    want = expected_files(model.num_layers)
    entries: dict[str, dict[str, Any]] = {}
    for gname, t in params.items():
        full = t.detach().to(torch.float32).contiguous()
        entries.setdefault(file_key(gname), {})[gname] = {
            "param": full, **{k: torch.zeros_like(full) for k in STATE_KEYS}, "step": 0.0}
    if set(entries) != want:
        raise CheckpointError(f"parameters cover files {sorted(entries)}, the model needs {sorted(want)}")
    final = root / checkpoint_name(0)
    tmp = root / (final.name + ".tmp")
    root.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    files = {key + ".pt": _write_file(tmp / (key + ".pt"), obj)
             for key, obj in sorted(entries.items())}
    meta = {"format": FORMAT, "iteration": 0, "consumed_samples": 0, "global_batch_size": None, "plan": None,
            "model": model_identity(model), "seed": 0, "rng": rng_state(), "optimizer": None, "files": files,
            "written_unix_s": time.time(), **(meta_extra or {})}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    os.rename(tmp, final)
    (root / "latest").write_text(final.name + "\n")
    return final
