"""Write a small random GPT-2 (4 layers, hidden 64, vocabulary 128, 32 positions) as a Hugging Face folder,
built from transformers' own config class: no download. For the README's conversion example.

    python examples/hf/make_tiny_gpt2.py OUT_DIR [--arch gpt2|opt]
"""
from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--arch", choices=("gpt2", "opt"), default="gpt2")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        import torch
        import transformers
    except ImportError:
        print("error: needs the hf extra: pip install -e \".[hf]\"", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    if args.arch == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=4, n_embd=64, n_head=4, n_positions=32, vocab_size=128, bos_token_id=0, eos_token_id=0))
    else:
        model = transformers.OPTForCausalLM(transformers.OPTConfig(
            num_hidden_layers=4, hidden_size=64, num_attention_heads=4, ffn_dim=256, max_position_embeddings=32,
            vocab_size=128, word_embed_proj_dim=64))
    model.save_pretrained(args.out)
    print(f"wrote a random {args.arch} model to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
