"""Build this rank's megatron-core GPT stage (uneven layers, pre/post process, explicit groups).

Each stage is a ``GPTModel`` whose ``TransformerConfig.num_layers`` is the stage's own layer count (0 is
allowed for an embedding-only first stage or a head-only last stage); ``pre_process`` / ``post_process``
say whether it holds the embedding and the head. Process groups come in through ``pg_collection``.
The vocabulary is padded to a size fixed by the model (not by the plan) so every plan shares weights.
"""
from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import torch

from planner.errors import InputError
from planner.model import ModelSpec
from planner.plan import Plan

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageSpec:
    """What one rank builds: its layer range, role and TP degree."""

    first_layer: int
    num_layers: int
    pre_process: bool
    post_process: bool
    tp: int
    tp_rank: int
    tied: bool = False          # LM head reuses the word embedding (a copy on the last stage when S > 1)
    recompute: tuple[str | None, str | None, int | None] = (None, None, None)   # Plan.recompute


def padded_vocab_size(model: ModelSpec) -> int:
    """Vocabulary size padded to ``make_vocab_size_divisible_by`` (independent of the plan's TP)."""
    return model.padded_vocab_size


def check_model_fits_plan(model: ModelSpec, plan: Plan) -> None:
    """Raise :class:`InputError` if the plan's layers or TP degrees cannot shard ``model``."""
    if plan.num_layers != model.num_layers:
        raise InputError(f"plan covers {plan.num_layers} transformer layers but the model has "
                         f"--num-layers {model.num_layers}")
    vocab = padded_vocab_size(model)
    for s, j, rep in plan.replicas():
        where = f"stages[{s}].replicas[{j}]"
        for name, size in (("num_attention_heads", model.num_heads), ("hidden_size", model.hidden_size),
                           ("ffn_hidden_size", model.ffn_hidden_size), ("num_query_groups", model.kv_heads),
                           ("padded vocab size", vocab)):
            if size % rep.tp:
                raise InputError(f"{where}: tp {rep.tp} does not divide {name} {size}")


def activation_function(name: str):  # noqa: ANN201
    """The MLP activation of ``ModelSpec.activation`` (gelu = erf form, gelu_tanh = GPT-2's tanh form)."""
    import torch.nn.functional as F
    if name == "gelu_tanh":
        return lambda x: F.gelu(x, approximate="tanh")
    return {"gelu": F.gelu, "relu": F.relu}[name]


def _transformer_config(model: ModelSpec, num_layers: int, tp: int, hidden_dropout: float = 0.0,
                        attention_dropout: float = 0.0, dtype: torch.dtype = torch.float32,
                        recompute: tuple[str | None, str | None, int | None] = (None, None, None)) -> object:
    from megatron.core.transformer.transformer_config import TransformerConfig

    def _init(tensor: torch.Tensor) -> torch.Tensor:  # weights are overwritten by init_weights
        return torch.nn.init.zeros_(tensor)

    return TransformerConfig(
        num_layers=num_layers, hidden_size=model.hidden_size, num_attention_heads=model.num_heads,
        num_query_groups=model.kv_heads, ffn_hidden_size=model.ffn_hidden_size,
        tensor_model_parallel_size=tp, use_cpu_initialization=True, params_dtype=dtype,
        bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16,
        hidden_dropout=hidden_dropout, attention_dropout=attention_dropout, add_bias_linear=model.bias,
        gated_linear_unit=model.gated_mlp, activation_func=activation_function(model.activation),
        bias_activation_fusion=False, masked_softmax_fusion=False,
        persist_layer_norm=False, gradient_accumulation_fusion=False,
        cross_entropy_loss_fusion=True, cross_entropy_fusion_impl="native",
        init_method=_init, output_layer_init_method=_init, **_recompute_fields(recompute, num_layers))


def _recompute_fields(recompute: tuple[str | None, str | None, int | None], num_layers: int) -> dict:
    """megatron-core's recompute settings for a stage of ``num_layers`` layers (a group of full recompute
    never spans more layers than the stage has; a stage without layers recomputes nothing)."""
    granularity, method, group = recompute
    if granularity is None or num_layers == 0:
        return {}
    if granularity == "selective":
        return {"recompute_granularity": "selective"}
    return {"recompute_granularity": "full", "recompute_method": method,
            "recompute_num_layers": min(group, num_layers)}


def build_stage_model(model: ModelSpec, stage: StageSpec, groups: object, hidden_dropout: float = 0.0,
                      attention_dropout: float = 0.0, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """A megatron-core ``GPTModel`` for one stage; ``groups`` is a :class:`~megatron_sailor.runtime.groups.RankGroups`.

    Dropout probabilities go into the config; the runtime then swaps megatron's dropout modules for the
    plan-independent ones (:func:`megatron_sailor.runtime.dropout.install_dropout`). With ``stage.tied``
    and several stages, the stage's word embedding (first stage) or LM head copy (last stage) is marked
    ``sailor_tied`` (its gradient is summed over the embedding group), the head copy also
    ``sailor_tied_copy`` (counted once in the gradient norm)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core import parallel_state
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.models.gpt.gpt_model import GPTModel
        from megatron.core.process_groups_config import ProcessGroupCollection
    g = groups
    pgc = ProcessGroupCollection(tp=g.tp, pp=g.single, cp=g.single, tp_cp=g.tp, embd=g.single,
                                 pos_embd=g.single, dp=g.single, dp_cp=g.single, mp=g.tp)
    if parallel_state._GLOBAL_MEMORY_BUFFER is None:
        parallel_state._set_global_memory_buffer()
    config = _transformer_config(model, stage.num_layers, stage.tp, hidden_dropout, attention_dropout, dtype,
                                 stage.recompute)
    position = "learned_absolute" if model.learned_position_embeddings else "rope"
    gpt = GPTModel(config, get_gpt_layer_local_spec(), vocab_size=padded_vocab_size(model),
                   max_sequence_length=model.max_position_embeddings, pre_process=stage.pre_process,
                   post_process=stage.post_process, share_embeddings_and_output_weights=stage.tied,
                   position_embedding_type=position, pg_collection=pgc)
    gpt.to(dtype)        # norms are created in fp32 whatever params_dtype says (Megatron's Float16Module casts)
    if stage.tied and stage.pre_process != stage.post_process:   # first or last of several stages
        weight = gpt.shared_embedding_or_output_weight()
        weight.sailor_tied = True
        weight.sailor_tied_copy = not stage.pre_process
    logger.debug("built stage layers [%d,%d) pre=%s post=%s tp=%d/%d", stage.first_layer,
                 stage.first_layer + stage.num_layers, stage.pre_process, stage.post_process,
                 stage.tp_rank, stage.tp)
    return gpt
