"""Schema of a checkpoint's ``meta.json`` (written by :mod:`megatron_sailor.train.checkpoint`).

Contract: :func:`seal` adds ``meta_sha256`` (SHA-256 of the canonical JSON of every other field);
:func:`check_meta` takes the parsed file and returns a :class:`CheckpointMeta` or raises InputError when the
seal does not match, a field has the wrong type or range, a key is unknown, or a ``files`` entry is not a
name the writer produces (``embedding.pt``, ``head.pt``, ``layer_NNNNN.pt``, ``rng.pt``: never a path).
The seal detects corruption and careless edits, not a deliberate forger: safety against a forged
checkpoint comes from never executing its content (docs/SECURITY.md).
"""
from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal, Optional, Union

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from planner.errors import InputError, quote
from planner.schema.base import MAX_BATCH, Strict, validate

FORMAT = "megatron-sailor-checkpoint/2"
FILE_NAME_RE = re.compile(r"^(embedding|head|rng|layer_\d{5})\.pt$")
MAX_FILE_BYTES = 2 ** 50
Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr, None]


class FileInfo(Strict):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(strict=True, ge=0, le=MAX_FILE_BYTES)
    params: list[StrictStr] = Field(default_factory=list, max_length=100_000)


class OptimizerInfo(Strict):
    lr: float
    betas: list[float] = Field(min_length=2, max_length=2)
    eps: float
    weight_decay: float
    clip_grad: float


class CheckpointMeta(Strict):
    format: Literal["megatron-sailor-checkpoint/2"]
    iteration: int = Field(strict=True, ge=0, le=10 ** 12)
    consumed_samples: int = Field(strict=True, ge=0, le=10 ** 15)
    model: dict[str, Scalar]
    files: dict[str, FileInfo]
    meta_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    global_batch_size: Optional[int] = Field(default=None, ge=1, le=MAX_BATCH)
    plan: Optional[dict[str, Any]] = None
    seed: Optional[int] = None
    optimizer: Optional[OptimizerInfo] = None
    written_unix_s: Optional[float] = None
    extra: dict[str, Scalar] = Field(default_factory=dict)


def digest(meta: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``meta`` without its ``meta_sha256``."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def seal(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` with its ``meta_sha256`` set."""
    out = {k: v for k, v in meta.items() if k != "meta_sha256"}
    out["meta_sha256"] = digest(out)
    return out


def check_meta(data: Any, source: str) -> CheckpointMeta:
    if not isinstance(data, dict):
        raise InputError("meta.json must be a JSON object", source=source)
    if data.get("format") != FORMAT:
        raise InputError(f"field 'format' must be {FORMAT!r}, got {quote(data.get('format'))}", source=source)
    if data.get("meta_sha256") != digest(data):
        raise InputError("fails its SHA-256 seal (field 'meta_sha256'): corrupt or edited", source=source)
    meta = validate(CheckpointMeta, data, source)
    for name in meta.files:
        if not FILE_NAME_RE.match(name):
            raise InputError(f"field 'files' names {quote(name, 60)}: only the writer's own file names",
                             source=source)
    return meta
