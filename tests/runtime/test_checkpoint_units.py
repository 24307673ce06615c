"""Checkpoint format units (no process group): file keys, verification, refusal and fall-back, pruning."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from megatron_sailor.train import checkpoint as ck
from planner.model import get_model

TINY = get_model("tiny")


def _fake_checkpoint(root: Path, iteration: int, model=TINY) -> Path:  # noqa: ANN001
    """A committed checkpoint with the expected files (small tensors) and a valid meta.json."""
    path = root / ck.checkpoint_name(iteration)
    path.mkdir(parents=True)
    files = {}
    for key in sorted(ck.expected_files(model.num_layers)):
        entry = {"param": torch.full((2, 2), float(iteration)), "exp_avg": torch.zeros(2, 2),
                 "exp_avg_sq": torch.zeros(2, 2), "step": float(iteration)}
        files[key + ".pt"] = ck._write_file(path / (key + ".pt"), {f"{key}.w": entry})
    files[ck.RNG_FILE] = ck._write_file(path / ck.RNG_FILE, ck.rng_state())
    meta = {"format": ck.FORMAT, "iteration": iteration, "consumed_samples": 8 * iteration,
            "model": ck.model_identity(model), "files": files}
    ck.write_meta(path, ck.seal(meta))
    (root / "latest").write_text(path.name + "\n")
    return path


def test_file_keys_are_per_global_layer() -> None:
    assert ck.file_key("layers.12.self_attention.linear_qkv.weight") == "layer_00012"
    assert ck.file_key("embedding.word_embeddings.weight") == "embedding"
    assert ck.file_key("embedding.position_embeddings.weight") == "embedding"
    assert ck.file_key("decoder.final_layernorm.weight") == "head"
    assert ck.file_key("output_layer.weight") == "head"
    assert len(ck.expected_files(4)) == 6


def test_empty_or_missing_folder_means_fresh_start(tmp_path: Path) -> None:
    assert ck.choose_checkpoint(str(tmp_path / "nothing"), TINY) is None
    assert ck.choose_checkpoint(str(tmp_path), TINY) is None
    (tmp_path / "iter_0000004.tmp").mkdir()          # an interrupted write is not a checkpoint
    assert ck.choose_checkpoint(str(tmp_path), TINY) is None


def test_newest_valid_checkpoint_is_chosen(tmp_path: Path) -> None:
    _fake_checkpoint(tmp_path, 4)
    _fake_checkpoint(tmp_path, 8)
    path, meta = ck.choose_checkpoint(str(tmp_path), TINY)
    assert path.name == "iter_0000008" and meta.consumed_samples == 64


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "meta"])
def test_damaged_newest_falls_back_to_older(tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    _fake_checkpoint(tmp_path, 4)
    bad = _fake_checkpoint(tmp_path, 8)
    f = bad / "layer_00001.pt"
    if damage == "truncate":
        f.write_bytes(f.read_bytes()[:50])
    elif damage == "flip":
        data = bytearray(f.read_bytes())
        data[-20] ^= 0xFF
        f.write_bytes(bytes(data))
    elif damage == "delete":
        f.unlink()
    else:
        (bad / "meta.json").write_text("{not json")
    with caplog.at_level("WARNING"):
        path, _ = ck.choose_checkpoint(str(tmp_path), TINY)
    assert path.name == "iter_0000004"
    assert "refusing checkpoint" in caplog.text and "iter_0000008" in caplog.text
    expected = {"truncate": "truncated", "flip": "SHA-256", "delete": "missing", "meta": "not valid JSON"}[damage]
    assert expected in caplog.text


def test_all_damaged_is_an_error_not_a_fresh_start(tmp_path: Path) -> None:
    bad = _fake_checkpoint(tmp_path, 4)
    (bad / "head.pt").write_bytes(b"")
    with pytest.raises(ck.CheckpointError, match="no usable checkpoint .*head.pt"):
        ck.choose_checkpoint(str(tmp_path), TINY)


def test_other_model_stops_without_fallback(tmp_path: Path) -> None:
    _fake_checkpoint(tmp_path, 4)
    other = TINY.__class__(**{**TINY.to_dict(), "hidden_size": 128, "ffn_hidden_size": 512})
    _fake_checkpoint(tmp_path, 8, model=other)
    with pytest.raises(ck.ModelMismatchError, match="another model .*hidden_size: checkpoint 128 vs run 64"):
        ck.choose_checkpoint(str(tmp_path), TINY)


def test_not_our_format_is_refused(tmp_path: Path) -> None:
    path = _fake_checkpoint(tmp_path, 4)
    meta = json.loads((path / "meta.json").read_text())
    meta["format"] = "something-else/9"
    (path / "meta.json").write_text(json.dumps(ck.seal(meta)))
    with pytest.raises(ck.CheckpointError, match="field 'format' must be 'megatron-sailor-checkpoint/2'"):
        ck.choose_checkpoint(str(tmp_path), TINY)


def test_prune_keeps_last_k_and_removes_partial_writes(tmp_path: Path) -> None:
    for it in (2, 4, 6, 8):
        _fake_checkpoint(tmp_path, it)
    (tmp_path / "iter_0000010.tmp").mkdir()
    ck.prune(tmp_path, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["iter_0000006", "iter_0000008"]
    ck.prune(tmp_path, keep_last=0)                   # 0 = keep all
    assert len(ck.list_checkpoints(tmp_path)) == 2


def test_rng_state_round_trip() -> None:
    state = ck.rng_state()
    a = torch.rand(3)
    ck.set_rng_state(state)
    assert torch.equal(torch.rand(3), a)


def test_rng_states_round_trip_exactly_through_a_weights_only_file(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import random
    import sys
    import types

    import numpy as np
    from megatron_sailor.train import checkpoint_rng

    class Tracker:
        def __init__(self) -> None:
            self.states = {"model-parallel-rng": torch.get_rng_state()}

        def get_states(self):  # noqa: ANN201
            return dict(self.states)

        def set_states(self, states) -> None:  # noqa: ANN001
            self.states = states

    tracker = Tracker()
    monkeypatch.setitem(sys.modules, checkpoint_rng._TRACKER_MODULE,
                        types.SimpleNamespace(get_cuda_rng_tracker=lambda: tracker))
    random.gauss(0, 1)                                     # a cached gauss_next must survive too
    np.random.normal()
    info = ck._write_file(tmp_path / "rng.pt", ck.rng_state())
    want = (torch.rand(4), random.random(), random.gauss(0, 1), np.random.rand(3), np.random.normal())
    tracker.states = {"model-parallel-rng": torch.zeros(5, dtype=torch.uint8)}
    checkpoint_rng.restore(checkpoint_rng.load(tmp_path / "rng.pt"))
    got = (torch.rand(4), random.random(), random.gauss(0, 1), np.random.rand(3), np.random.normal())
    assert torch.equal(got[0], want[0]) and got[1:3] == want[1:3] and np.array_equal(got[3], want[3])
    assert got[4] == want[4] and tracker.states["model-parallel-rng"].numel() > 5 and info["bytes"] > 0
