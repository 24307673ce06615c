"""Parameter maps between Hugging Face GPT-2 / OPT state dicts and megatron-sailor's full (TP=1) names.

Contract: :func:`from_hf` takes ``(arch, hf config dict, hf state dict)`` and returns a :class:`Converted`:
the model's dimensions (``ModelSpec`` fields), our parameters under global names (``embedding.*``,
``layers.<i>.*``, ``decoder.final_layernorm.*``, ``output_layer.weight``) and the tensors of the Hugging Face
model that have no place in ours (OPT's two unused position rows) so a round trip is bit-exact.
:func:`to_hf` is its inverse. Layout facts (re-derived from the two libraries' documented module layouts): GPT-2's ``Conv1D`` weights
are ``[in, out]`` (transposed against ``nn.Linear``); megatron's fused QKV weight interleaves per attention
head ``[q_h; k_h; v_h]`` while GPT-2 concatenates ``[Q; K; V]`` and OPT keeps three matrices; OPT's learned
positions are offset by 2 rows. The word embedding is padded with zero rows to the padded vocabulary.
Tied embeddings follow transformers' rule (:func:`hf_ties`: the config's ``tie_word_embeddings``, true by
default for GPT-2 and OPT): a tied model converts to a tied checkpoint (``tied_embeddings``; the plan's
``tie_embeddings`` must be true) whose ``output_layer.weight`` entry is the copy a several-stage plan's
last stage holds (equal to the word embedding); ``untie=True`` gives an untied head initialised with the
embedding. :func:`to_hf` writes a tied model exactly when the checkpoint's model is tied. Unsupported
variants (OPT-350m's post-LayerNorm layers and projected embeddings among them) are one-line
:class:`InputError` s.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch

from planner.errors import InputError

ARCHS = ("gpt2", "opt")
_HF_ACT = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
_OUR_ACT = {"gpt2": {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"},
            "opt": {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}}
OPT_POSITION_OFFSET = 2


@dataclass(frozen=True)
class Converted:
    dims: dict[str, Any]                  # ModelSpec fields
    params: dict[str, torch.Tensor]       # our global names -> full tensors
    extra: dict[str, torch.Tensor]        # Hugging Face tensors with no place in our model
    tied: bool = False                    # the checkpoint's model ties the LM head to the word embedding


def arch_of(config: dict[str, Any]) -> str:
    kind = config.get("model_type")
    if kind not in ARCHS:
        raise InputError(f"config.json: model_type {kind!r} is not supported (supported: {', '.join(ARCHS)})")
    return kind


def _need(config: dict[str, Any], key: str) -> Any:
    if key not in config:
        raise InputError(f"config.json: field '{key}' missing")
    return config[key]


def dims_of(arch: str, c: dict[str, Any], seq_length: int | None) -> dict[str, Any]:
    act = c.get("activation_function", "gelu_new" if arch == "gpt2" else "relu")
    if act not in _HF_ACT:
        raise InputError(f"config.json: activation_function {act!r} is not supported ({sorted(_HF_ACT)})")
    if arch == "gpt2":
        h = _need(c, "n_embd")
        d = dict(num_layers=_need(c, "n_layer"), hidden_size=h, num_heads=_need(c, "n_head"),
                 ffn_hidden_size=c.get("n_inner") or 4 * h, max_position_embeddings=_need(c, "n_positions"),
                 vocab_size=_need(c, "vocab_size"))
        eps = c.get("layer_norm_epsilon", 1e-5)
        for key in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
            if c.get(key):
                raise InputError(f"config.json: {key} = true is not supported")
    else:
        h = _need(c, "hidden_size")
        _check_opt_variant(c, h)
        d = dict(num_layers=_need(c, "num_hidden_layers"), hidden_size=h, num_heads=_need(c, "num_attention_heads"),
                 ffn_hidden_size=_need(c, "ffn_dim"), max_position_embeddings=_need(c, "max_position_embeddings"),
                 vocab_size=_need(c, "vocab_size"))
        eps = 1e-5
    if abs(eps - 1e-5) > 1e-12:
        raise InputError(f"config.json: layer norm epsilon {eps} is not supported (the runtime uses 1e-5)")
    d["seq_length"] = seq_length or d["max_position_embeddings"]
    d["activation"] = _HF_ACT[act]
    return d


def _check_opt_variant(c: dict[str, Any], hidden: int) -> None:
    """OPT variants the runtime's pre-LayerNorm GPT layers cannot express: one line naming the field."""
    refusals = (("do_layer_norm_before", True, "post-LayerNorm layers, as in OPT-350m"),
                ("word_embed_proj_dim", hidden, "a projected word embedding, as in OPT-350m"),
                ("_remove_final_layer_norm", False, "no final LayerNorm"),
                ("enable_bias", True, "linears without bias"),
                ("layer_norm_elementwise_affine", True, "LayerNorms without weight and bias"))
    for key, supported, what in refusals:
        value = c.get(key, supported)
        if value != supported:
            raise InputError(f"config.json: {key} = {json.dumps(value)} ({what}) is not supported: the runtime "
                             f"trains pre-LayerNorm GPT layers with biases (needs {key} = {json.dumps(supported)})")


def hf_ties(config: dict[str, Any], sd: dict[str, torch.Tensor]) -> bool:
    """Whether the Hugging Face model ties its LM head to the word embedding (transformers' rule: the
    config's ``tie_word_embeddings``, default true for GPT-2 and OPT; a file's ``lm_head.weight`` is then
    ignored)."""
    tie = config.get("tie_word_embeddings", True)
    if not isinstance(tie, bool):
        raise InputError(f"config.json: field 'tie_word_embeddings' must be true or false, got {tie!r}")
    if not tie and "lm_head.weight" not in sd:
        raise InputError("weights: tensor 'lm_head.weight' missing (config.json: tie_word_embeddings is false)")
    return tie


def _pad_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    if t.shape[0] == rows:
        return t.clone()
    return torch.cat([t, torch.zeros(rows - t.shape[0], *t.shape[1:], dtype=t.dtype)])


def _qkv_in(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> torch.Tensor:
    """[Q; K; V] (each [h*d, ...]) -> megatron's per-head [q_h; k_h; v_h] layout."""
    parts = [x.reshape(heads, -1, *x.shape[1:]) for x in (q, k, v)]
    return torch.cat(parts, dim=1).reshape(-1, *q.shape[1:])


def _qkv_out(qkv: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    per_head = qkv.reshape(heads, 3, -1, *qkv.shape[1:])
    return tuple(per_head[:, j].reshape(-1, *qkv.shape[1:]).clone() for j in range(3))  # type: ignore[return-value]


def _get(sd: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    if name not in sd:
        raise InputError(f"weights: tensor '{name}' missing")
    return sd[name].to(torch.float32)


def from_hf(arch: str, config: dict[str, Any], sd: dict[str, torch.Tensor], padded_vocab: int,
            seq_length: int | None = None, untie: bool = False) -> Converted:
    """``untie``: a tied Hugging Face model becomes an untied checkpoint (head initialised with the embedding)."""
    tied = hf_ties(config, sd)
    dims = dims_of(arch, config, seq_length)
    heads, L = dims["num_heads"], dims["num_layers"]
    p: dict[str, torch.Tensor] = {}
    extra: dict[str, torch.Tensor] = {}
    if arch == "gpt2":
        pre = "transformer." if "transformer.wte.weight" in sd else ""
        wte, pos = _get(sd, f"{pre}wte.weight"), _get(sd, f"{pre}wpe.weight")
        norms = {"input_layernorm": "ln_1", "pre_mlp_layernorm": "ln_2"}
        for i in range(L):
            b = f"{pre}h.{i}."
            for ours, theirs in norms.items():
                p[f"layers.{i}.{ours}.weight"] = _get(sd, b + theirs + ".weight").clone()
                p[f"layers.{i}.{ours}.bias"] = _get(sd, b + theirs + ".bias").clone()
            w, bias = _get(sd, b + "attn.c_attn.weight").t(), _get(sd, b + "attn.c_attn.bias")
            p[f"layers.{i}.self_attention.linear_qkv.weight"] = _qkv_in(*w.chunk(3, dim=0), heads)
            p[f"layers.{i}.self_attention.linear_qkv.bias"] = _qkv_in(*bias.chunk(3, dim=0), heads)
            for ours, theirs in (("self_attention.linear_proj", "attn.c_proj"), ("mlp.linear_fc1", "mlp.c_fc"),
                                 ("mlp.linear_fc2", "mlp.c_proj")):
                p[f"layers.{i}.{ours}.weight"] = _get(sd, b + theirs + ".weight").t().contiguous()
                p[f"layers.{i}.{ours}.bias"] = _get(sd, b + theirs + ".bias").clone()
        final = f"{pre}ln_f"
    else:
        pre = "model.decoder." if "model.decoder.embed_tokens.weight" in sd else "decoder."
        wte = _get(sd, f"{pre}embed_tokens.weight")
        pos_all = _get(sd, f"{pre}embed_positions.weight")
        pos, extra["opt.embed_positions.offset_rows"] = pos_all[OPT_POSITION_OFFSET:], pos_all[:OPT_POSITION_OFFSET].clone()
        for i in range(L):
            b = f"{pre}layers.{i}."
            for ours, theirs in (("input_layernorm", "self_attn_layer_norm"), ("pre_mlp_layernorm", "final_layer_norm")):
                p[f"layers.{i}.{ours}.weight"] = _get(sd, b + theirs + ".weight").clone()
                p[f"layers.{i}.{ours}.bias"] = _get(sd, b + theirs + ".bias").clone()
            for suffix in ("weight", "bias"):
                q, k, v = (_get(sd, f"{b}self_attn.{x}_proj.{suffix}") for x in "qkv")
                p[f"layers.{i}.self_attention.linear_qkv.{suffix}"] = _qkv_in(q, k, v, heads)
                for ours, theirs in (("self_attention.linear_proj", "self_attn.out_proj"), ("mlp.linear_fc1", "fc1"),
                                     ("mlp.linear_fc2", "fc2")):
                    p[f"layers.{i}.{ours}.{suffix}"] = _get(sd, f"{b}{theirs}.{suffix}").clone()
        final = f"{pre}final_layer_norm"
    p["embedding.word_embeddings.weight"] = _pad_rows(wte, padded_vocab)
    p["embedding.position_embeddings.weight"] = pos.clone()
    p["decoder.final_layernorm.weight"] = _get(sd, final + ".weight").clone()
    p["decoder.final_layernorm.bias"] = _get(sd, final + ".bias").clone()
    p["output_layer.weight"] = _pad_rows(wte if tied else _get(sd, "lm_head.weight"), padded_vocab)
    return Converted(dims, p, extra, tied=tied and not untie)


def hf_config(arch: str, dims: dict[str, Any], tied: bool, base: dict[str, Any] | None) -> dict[str, Any]:
    """The Hugging Face config of ``dims`` (fields of ``base``, the original config, kept where they agree)."""
    act = _OUR_ACT[arch][dims.get("activation", "gelu")]
    if arch == "gpt2":
        mine = dict(model_type="gpt2", architectures=["GPT2LMHeadModel"], n_layer=dims["num_layers"],
                    n_embd=dims["hidden_size"], n_head=dims["num_heads"], n_inner=dims["ffn_hidden_size"],
                    n_positions=dims["max_position_embeddings"], vocab_size=dims["vocab_size"],
                    activation_function=act, layer_norm_epsilon=1e-5)
    else:
        mine = dict(model_type="opt", architectures=["OPTForCausalLM"], num_hidden_layers=dims["num_layers"],
                    hidden_size=dims["hidden_size"], num_attention_heads=dims["num_heads"],
                    ffn_dim=dims["ffn_hidden_size"], max_position_embeddings=dims["max_position_embeddings"],
                    vocab_size=dims["vocab_size"], activation_function=act, do_layer_norm_before=True,
                    word_embed_proj_dim=dims["hidden_size"], enable_bias=True)
    out = dict(base or {})
    if base and base.get("model_type") == arch and base.get("n_inner", "x") is None:
        mine["n_inner"] = None if dims["ffn_hidden_size"] == 4 * dims["hidden_size"] else mine["n_inner"]
    out.update(mine)
    out["tie_word_embeddings"] = tied
    return out


def to_hf(arch: str, dims: dict[str, Any], p: dict[str, torch.Tensor], extra: dict[str, torch.Tensor],
          tied: bool) -> dict[str, torch.Tensor]:
    """Our full parameters -> Hugging Face state dict (no ``lm_head.weight`` when ``tied``). Padded
    vocabulary rows are dropped. A tied checkpoint's head copy (several-stage runs save it) must equal
    the word embedding."""
    heads, L, V = dims["num_heads"], dims["num_layers"], dims["vocab_size"]
    wte, head = p["embedding.word_embeddings.weight"], p.get("output_layer.weight")
    if tied and head is not None and not torch.equal(wte, head):
        raise InputError("checkpoint: tied_embeddings is true but output_layer.weight differs from the word "
                         "embedding")
    if not tied and head is None:
        raise InputError("checkpoint: output_layer.weight missing (tied_embeddings is false)")
    sd: dict[str, torch.Tensor] = {}
    if arch == "gpt2":
        pre = "transformer."
        sd[pre + "wte.weight"] = wte[:V].clone()
        sd[pre + "wpe.weight"] = p["embedding.position_embeddings.weight"].clone()
        for i in range(L):
            b, o = f"{pre}h.{i}.", f"layers.{i}."
            for ours, theirs in (("input_layernorm", "ln_1"), ("pre_mlp_layernorm", "ln_2")):
                sd[b + theirs + ".weight"] = p[o + ours + ".weight"].clone()
                sd[b + theirs + ".bias"] = p[o + ours + ".bias"].clone()
            w = _qkv_out(p[o + "self_attention.linear_qkv.weight"], heads)
            sd[b + "attn.c_attn.weight"] = torch.cat(w, dim=0).t().contiguous()
            sd[b + "attn.c_attn.bias"] = torch.cat(_qkv_out(p[o + "self_attention.linear_qkv.bias"], heads))
            for ours, theirs in (("self_attention.linear_proj", "attn.c_proj"), ("mlp.linear_fc1", "mlp.c_fc"),
                                 ("mlp.linear_fc2", "mlp.c_proj")):
                sd[b + theirs + ".weight"] = p[o + ours + ".weight"].t().contiguous()
                sd[b + theirs + ".bias"] = p[o + ours + ".bias"].clone()
        final = pre + "ln_f"
    else:
        pre = "model.decoder."
        sd[pre + "embed_tokens.weight"] = wte[:V].clone()
        rows = extra.get("opt.embed_positions.offset_rows")
        pos = p["embedding.position_embeddings.weight"]
        if rows is None:
            rows = torch.zeros(OPT_POSITION_OFFSET, pos.shape[1])
        sd[pre + "embed_positions.weight"] = torch.cat([rows, pos])
        for i in range(L):
            b, o = f"{pre}layers.{i}.", f"layers.{i}."
            for ours, theirs in (("input_layernorm", "self_attn_layer_norm"), ("pre_mlp_layernorm", "final_layer_norm")):
                sd[b + theirs + ".weight"] = p[o + ours + ".weight"].clone()
                sd[b + theirs + ".bias"] = p[o + ours + ".bias"].clone()
            for suffix in ("weight", "bias"):
                for x, t in zip("qkv", _qkv_out(p[f"{o}self_attention.linear_qkv.{suffix}"], heads)):
                    sd[f"{b}self_attn.{x}_proj.{suffix}"] = t
                for ours, theirs in (("self_attention.linear_proj", "self_attn.out_proj"), ("mlp.linear_fc1", "fc1"),
                                     ("mlp.linear_fc2", "fc2")):
                    sd[f"{b}{theirs}.{suffix}"] = p[f"{o}{ours}.{suffix}"].clone()
        final = pre + "final_layer_norm"
    sd[final + ".weight"] = p["decoder.final_layernorm.weight"].clone()
    sd[final + ".bias"] = p["decoder.final_layernorm.bias"].clone()
    if not tied:
        sd["lm_head.weight"] = head[:V].clone()
    return sd
