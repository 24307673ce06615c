"""Run the training entry in this process on one gloo rank (fast after the first import): tiny model."""
from __future__ import annotations

import os
from pathlib import Path

from tests.helpers.launch import REPO, free_port, tiny_model_args

PLAN = REPO / "tests" / "helpers" / "plans" / "sailor_1rank.json"
MODEL = tiny_model_args()


def train(monkeypatch, iters: int, *args: str) -> int:  # noqa: ANN001
    """``megatron_sailor.train.loop.main`` for ``iters`` iterations with mock data; returns the exit status."""
    from megatron_sailor.train.loop import main
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(free_port()), "OMP_NUM_THREADS": "1"}.items():
        monkeypatch.setenv(k, v)
    for k in ("SAILOR_RANK_MAP", "SAILOR_WORLD_SIZE", "SAILOR_FAULT"):
        monkeypatch.delenv(k, raising=False)
    try:
        return main(["--sailor-plan", str(PLAN), *MODEL, "--mock-data", "--lr", "1e-3", "--train-iters", str(iters), *args])
    finally:                                  # a run that died mid-way must not poison the next one
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def flip_byte(f: Path, offset: int = -20) -> None:
    data = bytearray(f.read_bytes())
    data[offset] ^= 0xFF
    f.write_bytes(bytes(data))
