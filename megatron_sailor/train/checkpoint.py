"""Plan-independent checkpoints: full (unsharded) tensors per global layer, atomic commits, reshard on load.

Layout of ``SAVE/``::

    latest                      name of the newest committed checkpoint (replaced atomically)
    iter_0000012/               one committed checkpoint
        meta.json               format, iteration, consumed samples, plan, model, seed, file checksums,
                                sealed by its own SHA-256 (``meta_sha256``)
        rng.pt                  RNG states as tensors (megatron_sailor.train.checkpoint_rng)
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
Nothing read from a checkpoint is executed: every ``.pt`` is read with ``torch.load(weights_only=True)``,
only the writer's own file names are opened (checkpoint_store), and every loaded entry is type-checked.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from megatron_sailor.runtime.init_weights import WORD_EMBEDDING, full_shape, global_name, is_sharded, shard_of
from megatron_sailor.train import checkpoint_rng
from megatron_sailor.train.checkpoint_store import (RNG_FILE, CheckpointError, ModelMismatchError,  # noqa: F401
                                                     checkpoint_name, choose_checkpoint, expected_files,
                                                     list_checkpoints, model_identity, prune, read_meta,
                                                     verify, write_latest)
from planner.schema.checkpoint_meta import FORMAT, seal

logger = logging.getLogger(__name__)

_LAYER_RE = re.compile(r"^layers\.(\d+)\.")
STATE_KEYS = ("exp_avg", "exp_avg_sq")


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


def rng_state() -> dict:
    """This process's RNG states as tensors (see :mod:`megatron_sailor.train.checkpoint_rng`)."""
    return checkpoint_rng.capture()


def set_rng_state(state: dict) -> None:
    """Restore :func:`rng_state` output (checked; raises CheckpointError when malformed)."""
    try:
        checkpoint_rng.restore(state)
    except checkpoint_rng.RNGStateError as exc:
        raise CheckpointError(f"RNG state refused: {exc}") from None


# ---------------------------------------------------------------------------------------------- save
def _gather_full(t: torch.Tensor, param: torch.nn.Parameter, tp: int, group: Any) -> torch.Tensor:
    if tp == 1 or not is_sharded(param):
        return t.detach().cpu().clone()
    parts = [torch.empty_like(t) for _ in range(tp)]
    dist.all_gather(parts, t.detach().contiguous(), group=group)
    return torch.cat([p.cpu() for p in parts], dim=param.partition_dim)


def _full_entries(rt: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """{file key: {global name: entry}} for replica 0 (gathers across TP; only TP-rank 0 gets a result).

    Every rank must call it: under the distributed optimizer the owned segments are all-gathered first."""
    me, out = rt.me, {}
    trained = rt.trained_state()            # fp32 values (main weights of a 16-bit model) + AdamW states
    if me.replica != 0:
        return {}
    for name, p, state in trained:
        entry: dict[str, Any] = {k: _gather_full(state[k], p, me.tp, rt.groups.tp) for k in ("param", *STATE_KEYS)}
        entry["step"] = float(state["step"])
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
    rng: dict[str, Any]
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
    scaler = rt.scaler.state() if getattr(rt, "scaler", None) is not None else {}
    pending = PendingSave(root, root / (final.name + ".tmp"), final, iteration, consumed_samples, keep_last,
                          {**(extra or {}), **scaler}, rng_state())
    if dist.get_rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(pending.tmp, ignore_errors=True)
        pending.tmp.mkdir()
    dist.barrier(group=rt.groups.world)
    entries = _full_entries(rt)
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
        prune(pending.root, pending.keep_last, rt.spec)
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
        raise CheckpointError(f"{tmp}: files missing after the write: {sorted(missing)[:8]}")
    files[RNG_FILE] = _write_file(tmp / RNG_FILE, pending.rng)
    meta = seal({"format": FORMAT, "iteration": pending.iteration, "consumed_samples": pending.consumed_samples,
                 "global_batch_size": rt.plan.global_batch_size, "plan": rt.plan.to_dict(),
                 "model": model_identity(rt.spec), "seed": rt.cfg.seed,
                 "optimizer": {"lr": float(rt.cfg.optimizer.lr), "betas": [float(b) for b in rt.cfg.optimizer.betas],
                               "eps": float(rt.cfg.optimizer.eps),
                               "weight_decay": float(rt.cfg.optimizer.weight_decay),
                               "clip_grad": float(rt.cfg.optimizer.clip_grad)},
                 "files": files, "written_unix_s": time.time(), "extra": dict(pending.extra)})
    write_meta(tmp, meta)
    _fsync_dir(tmp)
    if final.exists():                     # re-saving the same iteration: replace the old copy
        shutil.rmtree(final)
    os.rename(tmp, final)
    write_latest(root, final.name)
    _fsync_dir(root)
    logger.info("checkpoint %s committed (%d files)", final, len(files))


def write_meta(folder: Path, meta: dict[str, Any]) -> None:
    """Write a sealed meta.json into ``folder`` (fsynced)."""
    import json
    with open(folder / "meta.json", "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=1, allow_nan=False)
        fh.flush()
        os.fsync(fh.fileno())


def check_save_dir(save_dir: str) -> None:
    """Raise InputError now (before training) if ``save_dir`` cannot hold checkpoints."""
    from planner.errors import InputError
    root = Path(save_dir)
    for parent in (root, *root.parents):
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"--save {save_dir}: {parent} is not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise InputError(f"--save {save_dir}: folder {parent} is not writable")
            return


# ---------------------------------------------------------------------------------------------- load
def _check_entries(path: Path, key: str, obj: Any) -> dict[str, dict[str, Any]]:
    """A loaded layer file must be {global name: {param, exp_avg, exp_avg_sq: tensors, step: number}}."""
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path}: {key}.pt does not hold a mapping of parameters")
    for g, e in obj.items():
        if not isinstance(g, str) or not isinstance(e, dict) or \
                not all(isinstance(e.get(k), torch.Tensor) for k in ("param", *STATE_KEYS)) or \
                isinstance(e.get("step"), bool) or not isinstance(e.get("step"), (int, float)):
            raise CheckpointError(f"{path}: {key}.pt entry {str(g)[:80]!r} is not "
                                  "{param, exp_avg, exp_avg_sq: tensor, step: number}")
        if any(e[k].shape != e["param"].shape for k in STATE_KEYS):
            raise CheckpointError(f"{path}: {key}.pt entry {g[:80]!r}: optimizer states differ in shape")
    return obj


def _load_files(path: Path, keys: set[str]) -> dict[str, dict[str, Any]]:
    entries: dict[str, dict[str, Any]] = {}
    for key in sorted(keys):
        try:
            obj = torch.load(path / (key + ".pt"), map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - UnpicklingError / RuntimeError / OSError: unusable file
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise CheckpointError(f"{path}: {key}.pt refused by torch.load(weights_only=True): {first}") from None
        entries.update(_check_entries(path, key, obj))
    return entries


@torch.no_grad()
def apply_state(rt: Any, path: Path) -> None:
    """Give this rank its slices of the checkpoint's full tensors: the model (cast to its dtype), the fp32
    main weights and the AdamW states, whatever the plan's TP, precision and optimizer sharding."""
    me, first = rt.me, rt.stage.first_layer
    names = {n: global_name(n, first) for n, _ in rt.model.named_parameters()}
    entries = _load_files(path, {file_key(g) for g in names.values()})
    state: dict[int, dict[str, Any]] = {}
    for name, p in rt.model.named_parameters():
        g = names[name]
        if getattr(p, "sailor_tied_copy", False):   # the last stage's copy of the tied weight: one source of
            g = WORD_EMBEDDING                      # truth (a one-stage tied plan writes no output_layer.weight)
            entries.update(_load_files(path, {file_key(g)}))
        if g not in entries:
            raise CheckpointError(f"{path}: parameter {g} not found")
        e = entries[g]
        want = full_shape(p, me.tp)
        if tuple(e["param"].shape) != want:
            raise CheckpointError(f"{path}: {g} has shape {tuple(e['param'].shape)}, the model needs {want}")
        state[id(p)] = {"step": float(e["step"]),
                        **{k: shard_of(e[k], p, me.tp, me.tp_rank).float() for k in ("param", *STATE_KEYS)}}
    rt.load_trained_state(state)


def apply_scaler(rt: Any, path: str, extra: dict[str, Any]) -> None:
    """Resume an fp16 run's dynamic loss scaler from the meta's ``extra`` (absent: the flags' initial scale)."""
    if getattr(rt, "scaler", None) is None or "loss_scale" not in extra:
        return
    try:
        rt.scaler.load_state(extra)
    except ValueError as exc:
        raise CheckpointError(f"{path}: meta.json extra: {exc}") from None


def load_rng(path: Path) -> None:
    """Restore the RNG states saved in checkpoint ``path`` (weights_only load, checked)."""
    try:
        checkpoint_rng.restore(checkpoint_rng.load(path / RNG_FILE))
    except checkpoint_rng.RNGStateError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def load_checkpoint(rt: Any, load_dir: str) -> ResumeState | None:
    """Collective: rank 0 chooses and verifies, every rank loads its slices. None = nothing to resume."""
    start = time.perf_counter()
    choice: list[Any] = [None]
    if dist.get_rank() == 0:
        try:
            found = choose_checkpoint(load_dir, rt.spec)
            choice[0] = (("ok", str(found[0]), found[1].iteration, found[1].consumed_samples,
                          dict(found[1].extra)) if found else ("none", None, 0, 0, {}))
        except CheckpointError as exc:
            choice[0] = ("error", str(exc), 0, 0, {})
    dist.broadcast_object_list(choice, src=0, group=rt.groups.world)
    status, where, iteration, consumed, extra = choice[0]
    if status == "error":
        raise CheckpointError(where)
    if status == "none":
        return None
    apply_state(rt, Path(where))
    apply_scaler(rt, where, extra)
    load_rng(Path(where))
    dist.barrier(group=rt.groups.world)
    return ResumeState(iteration=int(iteration), consumed_samples=int(consumed), path=where,
                       load_s=time.perf_counter() - start)


def read_full_state(path: str) -> dict[str, dict[str, Any]]:
    """Every full tensor of a verified checkpoint (for tests and tools): {global name: entry}."""
    p = Path(path)
    keys = {f[:-3] for f in verify(p).files if f != RNG_FILE}
    return _load_files(p, keys)


def write_full_checkpoint(save_dir: str, model: Any, params: dict[str, torch.Tensor],
                          meta_extra: dict[str, Any] | None = None) -> Path:
    """Write full (TP=1) parameters as a committed iteration-0 checkpoint without a running job (for
    converters): fresh AdamW states, ``latest`` pointing at it; ``meta_extra`` (scalars) goes to the meta's
    ``extra``. Refuses a folder that already holds a
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
    files = {key + ".pt": _write_file(tmp / (key + ".pt"), obj) for key, obj in sorted(entries.items())}
    files[RNG_FILE] = _write_file(tmp / RNG_FILE, rng_state())
    meta = seal({"format": FORMAT, "iteration": 0, "consumed_samples": 0, "model": model_identity(model),
                 "files": files, "written_unix_s": time.time(), "extra": dict(meta_extra or {})})
    write_meta(tmp, meta)
    os.rename(tmp, final)
    write_latest(root, final.name)
    return final
