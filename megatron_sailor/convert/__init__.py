"""Hugging Face checkpoints in and out (OPT and GPT-2 architectures): ``python -m megatron_sailor.convert``."""
