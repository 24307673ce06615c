"""``python -m megatron_sailor.train ARGS``: the training job (same as examples/gpt/pretrain_gpt.py)."""
import os
import sys
import time

_PROCESS_START_S = time.time()
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")

from megatron_sailor.train.loop import main  # noqa: E402

sys.exit(main(process_start_s=_PROCESS_START_S))
