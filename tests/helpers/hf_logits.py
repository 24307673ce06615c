"""torchrun worker (1 rank): our megatron-core GPT's logits for a converted checkpoint.

Usage: torchrun --nproc-per-node 1 hf_logits.py CKPT TOKENS.pt OUT.pt
Builds the checkpoint's model under a 1-stage, TP-1 plan (tied exactly when the checkpoint's model is, so
megatron-core's own shared embedding/output weight is used), loads CKPT with the runtime's loader and writes
the logits of TOKENS ([b, s] int64, read with ``weights_only=True``) over the unpadded vocabulary.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import torch  # noqa: E402

from megatron_sailor.runtime.data import MockTokens  # noqa: E402
from megatron_sailor.runtime.distributed import env_from_torchrun, init_distributed  # noqa: E402
from megatron_sailor.runtime.rank_runtime import RankRuntime, RunConfig  # noqa: E402
from megatron_sailor.runtime.schedule import causal_mask  # noqa: E402
from megatron_sailor.train.checkpoint import list_checkpoints, load_checkpoint  # noqa: E402
from patches import apply_cpu_patches  # noqa: E402
from planner.model import ModelSpec  # noqa: E402
from planner.plan import Plan  # noqa: E402


def main() -> int:
    ckpt, tokens_path, out_path = sys.argv[1:4]
    torch.set_num_threads(1)
    tokens = torch.load(tokens_path, weights_only=True)
    meta = json.loads((list_checkpoints(Path(ckpt))[0] / "meta.json").read_text())
    model = ModelSpec(name="checkpoint", **meta["model"])
    batch, seq = tokens.shape
    plan = Plan.from_dict({"schema_version": 1, "num_layers": model.num_layers, "micro_batch_size": batch,
                           "global_batch_size": batch, "tie_embeddings": model.tied_embeddings,
                           "stages": [{"first_layer": 0, "num_layers": model.num_layers,
                                       "replicas": [{"gpu_type": "cpu", "tp": 1, "zone": "z"}]}]})
    env = env_from_torchrun()
    apply_cpu_patches()
    init_distributed(env, timeout_s=60)
    data = MockTokens(seed=0, seq_length=model.seq_length, vocab_size=model.vocab_size)
    rt = RankRuntime(plan, model, env.rank, data, RunConfig(seed=0))
    assert load_checkpoint(rt, ckpt) is not None
    rt.model.eval()
    positions = torch.arange(seq, dtype=torch.int64).unsqueeze(0).expand(batch, seq)
    mask = causal_mask(seq)
    with torch.no_grad():
        logits = rt.model(tokens, positions, mask)
    torch.save(logits.float()[..., :model.vocab_size].contiguous(), out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
