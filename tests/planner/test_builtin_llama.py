"""The built-in llama-3-8b is untied (Llama-3-8B's HF config: ``tie_word_embeddings: false``); the Sailor-data
LLAMA-3-8 keeps the tie read off Sailor's llm_info.json."""
from __future__ import annotations

import json

from planner.model import get_model
from planner.sailor_data import load_sailor_data


def test_builtin_llama_3_8b_is_untied_with_its_published_parameter_count() -> None:
    llama = get_model("llama-3-8b")
    assert not llama.tied_embeddings
    assert llama.head_params() == (128256 * 4096, 4096)      # its own LM head + the final RMSNorm
    assert llama.total_params() == 8_030_261_248              # Meta's count for Llama-3-8B (untied)


def test_sailor_llama_3_8_stays_tied_as_its_llm_info_says(sailor_data_dir) -> None:
    """Sailor's LLAMA-3-8 head layer (TP 1, layer 34) holds 4,096 floats: the final norm only, no output
    matrix, so the model of Sailor's runs ties whatever the built-in says."""
    info = json.loads((sailor_data_dir / "sailor/Planner/llm_info.json").read_text())["LLAMA-3-8"]
    assert info["1"]["34"]["params_floats"] == 4096
    model = load_sailor_data(sailor_data_dir, "LLAMA-3-8").model
    assert model.tied_embeddings and not get_model("llama-3-8b").tied_embeddings
