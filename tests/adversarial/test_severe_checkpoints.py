"""Issue 11, severe 1 and 2, end to end through the training entry (one gloo rank, in-process).

1. A checkpoint whose meta.json carries a hostile pickle (the old RNG format) or whose rng.pt is a hostile
   pickle must not execute it: the run refuses the checkpoint with one line and exit status 2.
2. Pruning counts only checkpoints that verify: the issue's scenario (iterations 2, 4, 6, one flipped byte
   in iteration 6, ``--train-iters 5 --keep-last 1``) and an empty ``iter_0000099/``.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import os
from pathlib import Path

import pytest
import torch

from tests.adversarial.trainer import flip_byte, train


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return os.system, (f"touch {self.marker}",)


def _reseal(meta: dict) -> dict:
    """What a forger does: recompute the seal if the format has one (plain SHA-256, no secret)."""
    try:
        from planner.schema.checkpoint_meta import seal
    except ImportError:
        return meta
    return seal(meta)


def _one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("sealed", [False, True])
def test_hostile_pickle_in_meta_json_is_not_executed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture, sealed: bool) -> None:
    ck, marker = tmp_path / "ck", tmp_path / "PWNED"
    assert train(monkeypatch, 2, "--save", str(ck)) == 0
    meta_path = ck / "iter_0000002" / "meta.json"
    meta = json.loads(meta_path.read_text())
    blob = io.BytesIO()
    torch.save(_Evil(marker), blob)
    meta["rng"] = {"pickled_b64": base64.b64encode(blob.getvalue()).decode()}
    meta_path.write_text(json.dumps(_reseal(meta) if sealed else meta))
    capsys.readouterr()
    code = train(monkeypatch, 3, "--load", str(ck))
    assert not marker.exists(), "the pickle in meta.json was executed"
    assert code == 2
    assert "iter_0000002" in _one_error_line(capsys.readouterr().err)


def test_hostile_pickle_as_rng_file_is_not_executed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture) -> None:
    ck, marker = tmp_path / "ck", tmp_path / "PWNED"
    assert train(monkeypatch, 2, "--save", str(ck)) == 0
    folder = ck / "iter_0000002"
    blob = io.BytesIO()
    torch.save({"format": "megatron-sailor-rng/1", "global": _Evil(marker)}, blob)
    (folder / "rng.pt").write_bytes(blob.getvalue())
    meta = json.loads((folder / "meta.json").read_text())
    meta["files"]["rng.pt"].update(sha256=hashlib.sha256(blob.getvalue()).hexdigest(), bytes=len(blob.getvalue()))
    (folder / "meta.json").write_text(json.dumps(_reseal(meta)))
    capsys.readouterr()
    code = train(monkeypatch, 3, "--load", str(ck))
    assert not marker.exists(), "the pickle in rng.pt was executed"
    assert code == 2 and "weights_only" in _one_error_line(capsys.readouterr().err)


def _names(ck: Path) -> list[str]:
    return sorted(p.name for p in ck.iterdir())


def _latest_ok(ck: Path, expected: str) -> None:
    latest = (ck / "latest").read_text().strip()
    assert latest == expected and (ck / latest / "meta.json").is_file(), (latest, _names(ck))


def test_prune_keeps_the_good_checkpoint_issue_scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    ck = tmp_path / "ck"
    assert train(monkeypatch, 6, "--save", str(ck), "--save-interval", "2", "--keep-last", "0") == 0
    assert {"iter_0000002", "iter_0000004", "iter_0000006"} <= set(_names(ck))
    flip_byte(ck / "iter_0000006" / "layer_00001.pt")
    assert train(monkeypatch, 5, "--load", str(ck), "--save", str(ck), "--keep-last", "1") == 0
    names = _names(ck)
    assert "iter_0000005" in names, names                                # the newest good one survives
    assert any(n.startswith("iter_0000006") for n in names), names       # the corrupt one is set aside, not lost
    assert "iter_0000006" not in names, names
    _latest_ok(ck, "iter_0000005")
    capsys.readouterr()
    assert train(monkeypatch, 6, "--load", str(ck), "--save", str(ck), "--keep-last", "1") == 0
    assert "resumed from " + str(ck / "iter_0000005") in capsys.readouterr().out


def test_empty_checkpoint_folder_does_not_cost_the_good_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture) -> None:
    ck = tmp_path / "ck"
    assert train(monkeypatch, 2, "--save", str(ck)) == 0
    (ck / "iter_0000099").mkdir()
    assert train(monkeypatch, 3, "--load", str(ck), "--save", str(ck), "--keep-last", "1") == 0
    names = _names(ck)
    assert "iter_0000003" in names and any(n.startswith("iter_0000099.corrupt") for n in names), names
    _latest_ok(ck, "iter_0000003")
    capsys.readouterr()
    assert train(monkeypatch, 4, "--load", str(ck), "--save", str(ck), "--keep-last", "1") == 0
    assert "resumed from " + str(ck / "iter_0000003") in capsys.readouterr().out
