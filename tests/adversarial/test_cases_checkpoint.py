"""Issue 11, items 4, 6 and 7 for checkpoints, through the training entry (one gloo rank, in-process)."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests.adversarial.trainer import train


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ck = tmp_path_factory.mktemp("good") / "ck"
    mp = pytest.MonkeyPatch()
    try:
        assert train(mp, 4, "--save", str(ck), "--save-interval", "2", "--keep-last", "0") == 0
    finally:
        mp.undo()
    return ck


def _edit_meta(ck: Path, change) -> None:  # noqa: ANN001
    from planner.schema.checkpoint_meta import seal
    f = ck / "iter_0000004" / "meta.json"
    meta = json.loads(f.read_text())
    change(meta)
    f.write_text(json.dumps(seal(meta)))


def _one_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err[-800:]
    assert len(lines[0]) < 300
    return lines[0]


META_CASES = {
    "missing files": (lambda m: m.pop("files"), "missing required key(s) ['files']"),
    "iteration 'abc'": (lambda m: m.update(iteration="abc"), "field 'iteration' must be an integer, got 'abc'"),
    "model [1,2]": (lambda m: m.update(model=[1, 2]), "field 'model' must be an object"),
    "files entry not a string": (lambda m: m.update(files={**m["files"], "head.pt": 5}), "files: field 'head.pt' must be an object, got 5"),
    "consumed_samples -100": (lambda m: m.update(consumed_samples=-100), "field 'consumed_samples' must be >= 0"),
    "files ../../etc/passwd": (lambda m: m["files"].update({"../../../../etc/passwd": {
        "sha256": hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest(),
        "bytes": Path("/etc/passwd").stat().st_size, "params": []}}), "field 'files' names '../../../../etc/passwd'"),
    "files /etc/shadow": (lambda m: m["files"].update({"/etc/shadow": {"sha256": "0" * 64, "bytes": 1}}),
                          "field 'files' names '/etc/shadow'"),
}


@pytest.mark.parametrize("case", sorted(META_CASES))
def test_bad_meta_falls_back_to_the_older_checkpoint(case: str, good: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    change, expect = META_CASES[case]
    _edit_meta(ck, change)
    with caplog.at_level("WARNING"):
        assert train(monkeypatch, 5, "--load", str(ck)) == 0
    assert "resumed from " + str(ck / "iter_0000002") in capsys.readouterr().out
    assert expect in caplog.text, caplog.text[-600:]


@pytest.mark.parametrize("case", sorted(META_CASES))
def test_bad_meta_without_a_fallback_is_one_line(case: str, good: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    shutil.rmtree(ck / "iter_0000002")
    change, expect = META_CASES[case]
    _edit_meta(ck, change)
    capsys.readouterr()
    assert train(monkeypatch, 5, "--load", str(ck)) == 2
    assert expect in _one_line(capsys)


def test_unreadable_file_falls_back(good: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture) -> None:
    from megatron_sailor.train import checkpoint_store
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    real = checkpoint_store._sha256

    def denied(f: Path) -> str:              # this machine runs tests as root: chmod 000 would not stop a read
        if f.parent.name == "iter_0000004" and f.name == "layer_00001.pt":
            raise PermissionError(13, "Permission denied", str(f))
        return real(f)

    monkeypatch.setattr(checkpoint_store, "_sha256", denied)
    assert train(monkeypatch, 5, "--load", str(ck)) == 0
    assert "resumed from " + str(ck / "iter_0000002") in capsys.readouterr().out


def test_save_under_a_regular_file_fails_before_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "file").write_text("x")
    capsys.readouterr()
    assert train(monkeypatch, 2, "--save", str(tmp_path / "file" / "ck")) == 2
    out = capsys.readouterr()
    assert "iteration" not in out.out
    lines = [x for x in out.err.splitlines() if x.strip()]
    assert len(lines) == 1 and "is not a folder" in lines[0]


def test_load_of_a_regular_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "file").write_text("x")
    capsys.readouterr()
    assert train(monkeypatch, 2, "--load", str(tmp_path / "file")) == 2
    assert "--load names a file" in _one_line(capsys)


def test_symlinked_layer_file_is_not_followed(good: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture, caplog: pytest.LogCaptureFixture) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    f = ck / "iter_0000004" / "head.pt"
    f.unlink()
    f.symlink_to("/etc/passwd")
    with caplog.at_level("WARNING"):
        assert train(monkeypatch, 5, "--load", str(ck)) == 0
    assert "not a plain file" in caplog.text
