"""megatron_sailor.train: the training job: Megatron-style arguments, the training loop and checkpoints
(``python -m megatron_sailor.train``; examples/gpt/pretrain_gpt.py is its thin entry)."""
