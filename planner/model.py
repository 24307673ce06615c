"""Model specifications and analytic per-layer sizes (parameters, FLOPs, activation bytes).

Layer indexing follows the plan: transformer layers are ``0 .. num_layers-1``; the embedding belongs to
stage 0 and the final norm + LM head + loss to the last stage. Sailor's files number layers differently
(``0`` = embedding, ``1..L`` = transformer layers, ``L+1`` = head); the importer converts.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from planner.errors import InputError


ACTIVATIONS = ("gelu", "gelu_tanh", "relu")


@dataclass(frozen=True)
class ModelSpec:
    """A dense GPT-style decoder."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    ffn_hidden_size: int
    seq_length: int
    vocab_size: int
    max_position_embeddings: int
    num_kv_heads: int | None = None      # grouped-query attention; None = num_heads
    tied_embeddings: bool = False
    learned_position_embeddings: bool = True
    gated_mlp: bool = False              # SwiGLU-style: 3 FFN matrices
    bias: bool = True
    make_vocab_size_divisible_by: int = 128
    activation: str = "gelu"             # MLP activation: gelu (erf), gelu_tanh (GPT-2's "gelu_new"), relu (OPT)

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "ffn_hidden_size", "seq_length", "vocab_size",
                     "max_position_embeddings", "make_vocab_size_divisible_by"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"model '{self.name}': field '{name}' must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise InputError(f"model '{self.name}': hidden_size {self.hidden_size} is not divisible by "
                             f"num_heads {self.num_heads}")
        if self.activation not in ACTIVATIONS:
            raise InputError(f"model '{self.name}': activation {self.activation!r} is not one of {ACTIVATIONS}")
        if self.kv_heads <= 0 or self.num_heads % self.kv_heads:
            raise InputError(f"model '{self.name}': num_kv_heads {self.num_kv_heads} must divide num_heads "
                             f"{self.num_heads}")

    # ---- shapes ---------------------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def padded_vocab_size(self) -> int:
        m = self.make_vocab_size_divisible_by
        return -(-self.vocab_size // m) * m

    def padded_vocab_for_tp(self, tp: int) -> int:
        """Megatron pads the vocabulary to a multiple of ``make_vocab_size_divisible_by * tp``."""
        m = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab_size // m) * m

    def check_tp(self, tp: int) -> None:
        """Raise :class:`InputError` if ``tp`` cannot shard this model."""
        if tp < 1 or self.num_heads % tp or self.kv_heads % tp or self.ffn_hidden_size % tp:
            raise InputError(f"TP degree {tp} does not divide model '{self.name}' (num_heads {self.num_heads}, "
                             f"kv_heads {self.kv_heads}, ffn_hidden_size {self.ffn_hidden_size})")

    # ---- parameters (element counts for ONE TP shard) -------------------------------------------
    def layer_params(self, tp: int = 1) -> tuple[int, int]:
        """(sharded, replicated) parameter counts of one transformer layer on one of ``tp`` ranks."""
        h, f = self.hidden_size, self.ffn_hidden_size
        qkv_out = h + 2 * self.kv_heads * self.head_dim
        n_ffn_in = 2 if self.gated_mlp else 1
        sharded = qkv_out * h + h * h + n_ffn_in * h * f + f * h
        replicated = 2 * (2 * h if self.bias else h)  # two norms (weight [+ bias])
        if self.bias:
            sharded += qkv_out + n_ffn_in * f      # column-parallel biases are sharded
            replicated += 2 * h                    # row-parallel biases (proj, fc2) are replicated
        return sharded // tp, replicated

    def embedding_params(self, tp: int = 1) -> tuple[int, int]:
        """(sharded, replicated) of the embedding (word embeddings are vocab-parallel)."""
        sharded = self.padded_vocab_for_tp(tp) * self.hidden_size // tp
        replicated = self.max_position_embeddings * self.hidden_size if self.learned_position_embeddings else 0
        return sharded, replicated

    def head_params(self, tp: int = 1) -> tuple[int, int]:
        """(sharded, replicated) of final norm + LM head (tied heads keep a copy on the last stage)."""
        norm = 2 * self.hidden_size if self.bias else self.hidden_size
        head = 0 if self.tied_embeddings else self.padded_vocab_for_tp(tp) * self.hidden_size // tp
        return head, norm

    def total_params(self) -> int:
        emb = sum(self.embedding_params())
        head = sum(self.head_params())
        return emb + head + self.num_layers * sum(self.layer_params())

    # ---- compute --------------------------------------------------------------------------------
    def layer_fwd_flops(self, micro_batch: int) -> float:
        """Forward FLOPs of one transformer layer for ``micro_batch`` sequences (matmuls + attention)."""
        s, h = self.seq_length, self.hidden_size
        sharded, _ = self.layer_params()
        return 2.0 * micro_batch * s * sharded + 4.0 * micro_batch * s * s * h

    def head_fwd_flops(self, micro_batch: int) -> float:
        return 2.0 * micro_batch * self.seq_length * self.hidden_size * self.padded_vocab_size

    # ---- activations (bytes) ---------------------------------------------------------------------
    def layer_activation_bytes(self, micro_batch: int, tp: int, bytes_per_elem: int) -> float:
        """Activation bytes one transformer layer keeps for backward per micro-batch.

        Element count per sequence, following Korthikanti et al. (2022) without dropout masks and with a
        fused softmax (one score matrix kept): ``s*h*(4 + 12/tp) + heads*s^2/tp``.
        """
        s, h, a = self.seq_length, self.hidden_size, self.num_heads
        elems = s * h * (4 + 12 / tp) + a * s * s / tp
        return micro_batch * elems * bytes_per_elem

    def boundary_activation_bytes(self, micro_batch: int, bytes_per_elem: int) -> float:
        """Bytes of the hidden state sent between pipeline stages for one micro-batch."""
        return float(micro_batch * self.seq_length * self.hidden_size * bytes_per_elem)

    def head_activation_bytes(self, micro_batch: int, tp: int, bytes_per_elem: int) -> float:
        """Activation bytes kept by final norm + LM head + loss (logits dominate)."""
        s = self.seq_length
        logits = s * self.padded_vocab_for_tp(tp) / tp
        return micro_batch * (2 * logits + 2 * s * self.hidden_size) * bytes_per_elem

    def embedding_activation_bytes(self, micro_batch: int, bytes_per_elem: int) -> float:
        return float(micro_batch * self.seq_length * self.hidden_size * bytes_per_elem)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["activation"] == "gelu":    # the default is left out: files written before the field stay valid
            d.pop("activation")
        return d


BUILTIN_MODELS: dict[str, ModelSpec] = {
    "tiny": ModelSpec("tiny", num_layers=4, hidden_size=64, num_heads=4, ffn_hidden_size=256, seq_length=32,
                      vocab_size=128, max_position_embeddings=32, make_vocab_size_divisible_by=8),
    "opt-350m": ModelSpec("opt-350m", num_layers=24, hidden_size=1024, num_heads=16, ffn_hidden_size=4096,
                          seq_length=2048, vocab_size=50272, max_position_embeddings=2048,
                          tied_embeddings=True),   # OPT ties its input and output embeddings
    "gpt-neo-2.7b": ModelSpec("gpt-neo-2.7b", num_layers=32, hidden_size=2560, num_heads=32,
                              ffn_hidden_size=10240, seq_length=2048, vocab_size=50257,
                              max_position_embeddings=2048, tied_embeddings=True),
    "opt-30b": ModelSpec("opt-30b", num_layers=48, hidden_size=7168, num_heads=56, ffn_hidden_size=28672,
                         seq_length=2048, vocab_size=50272, max_position_embeddings=2048),
    "llama-3-8b": ModelSpec("llama-3-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                            ffn_hidden_size=14336, seq_length=8192, vocab_size=128256,
                            max_position_embeddings=8192, tied_embeddings=False,
                            learned_position_embeddings=False, gated_mlp=True, bias=False),
}
# Sailor's model names map to ours.
MODEL_ALIASES = {"opt-350": "opt-350m", "gpt-neo-2.7": "gpt-neo-2.7b", "llama-3-8": "llama-3-8b", "opt-30": "opt-30b",
                 "opt350m": "opt-350m"}


def get_model(name: str) -> ModelSpec:
    """A built-in model by name (case-insensitive; Sailor's names accepted)."""
    key = name.lower()
    key = MODEL_ALIASES.get(key, key)
    if key not in BUILTIN_MODELS:
        raise InputError(f"unknown model '{name}'; built-in models: {sorted(BUILTIN_MODELS)} "
                         "(or pass a model JSON file)")
    return BUILTIN_MODELS[key]


def load_model(name_or_path: str) -> ModelSpec:
    """A built-in model name, or a JSON file with :class:`ModelSpec` fields."""
    if name_or_path.endswith(".json") or Path(name_or_path).is_file():
        from planner.textio import read_text
        try:
            data = json.loads(read_text(name_or_path))
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({exc.msg})", source=name_or_path) from None
        fields = set(ModelSpec.__dataclass_fields__)
        if not isinstance(data, dict) or set(data) - fields:
            raise InputError(f"model file keys must be among {sorted(fields)}", source=name_or_path)
        try:
            return ModelSpec(**data)
        except (TypeError, InputError) as exc:
            raise InputError(str(exc), source=name_or_path) from None
    return get_model(name_or_path)


def with_overrides(spec: ModelSpec, **changes: Any) -> ModelSpec:
    """A copy of ``spec`` with some fields changed (validated)."""
    return replace(spec, **{k: v for k, v in changes.items() if v is not None})
