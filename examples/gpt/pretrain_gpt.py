"""Pretrain a GPT model on a megatron-sailor plan: the thin entry of ``megatron_sailor.train``.

    torchrun --nproc-per-node N examples/gpt/pretrain_gpt.py --sailor-plan PLAN \
        --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
        --max-position-embeddings 32 --vocab-size 128 --train-iters 20 --lr 1e-3 --mock-data

PLAN is our plan JSON or a Sailor plan_config JSON. Micro-batch and global batch come from the plan.
The training loop, arguments and checkpoints live in ``megatron_sailor/train/`` (``python -m
megatron_sailor.train`` is the same job); this file only records the process start time and calls it.
"""
from __future__ import annotations

import os
import sys
import time

_PROCESS_START_S = time.time()   # for sailor-elastic's start-up timing (megatron_sailor.train.elastic_hooks)

# c10d's C++ logger prints multi-line socket errors on a failed rendezvous; we report one line ourselves.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from megatron_sailor.train.loop import main as _train_main  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    return _train_main(argv, process_start_s=_PROCESS_START_S)


if __name__ == "__main__":
    sys.exit(main())
