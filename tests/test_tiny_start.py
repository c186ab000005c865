"""The ``tiny`` start is a released file: it loads to its recorded digest and start key on
any machine, a corrupted or missing file is refused with a clear message, ``--weights cir``
never pre-trains, the package carries the file, and ``cirbench start rebuild`` compares a
rebuild with the release bit for bit and re-releases it (on a quick pre-training here: the
real one takes minutes)."""

from __future__ import annotations

import fnmatch
import hashlib
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cirbench.backbones import tiny_pretrain, tiny_release, tiny_start
from cirbench.backbones.registry import BACKBONES
from cirbench.backbones.tiny_rebuild import compare, rebuild_start, release
from cirbench.backbones.tiny_start import StartFileError, read_start, shipped_path
from cirbench.cli import app
from start_release import use_release

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def test_the_shipped_start_has_its_recorded_digest_and_start_key(tmp_path: Path) -> None:
    path = shipped_path()
    assert path.parent == ROOT / "cirbench" / "backbones" / "starts" and path.name == f"tiny-cir-v{tiny_release.RELEASE}.pt"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == tiny_release.SHA256
    assert path.stat().st_size < 8 * 2**20
    backbone = BACKBONES.get("tiny")(0, tmp_path, None)
    assert backbone.start_key() == tiny_release.START_KEY
    assert backbone.start_key().startswith(backbone.tower_key() + "+cir-")  # the key keeps its meaning
    assert backbone.tower_key().startswith("tiny-pretrained-")  # the released start's tower is pre-trained
    assert (backbone.hidden_size, backbone.num_query_tokens, len(backbone.layers)) == (64, 8, 2)  # its composer's shape
    assert tiny_pretrain.start_identity("cir") == tiny_pretrain.start_identity(None) == tiny_release.START_KEY


def test_a_corrupted_start_file_is_refused_naming_the_file_and_both_digests(tmp_path: Path, monkeypatch) -> None:
    copy = tmp_path / tiny_release.FILE
    data = bytearray(shipped_path().read_bytes())
    data[len(data) // 2] ^= 0xFF
    copy.write_bytes(bytes(data))
    monkeypatch.setattr(tiny_start, "STARTS_DIR", tmp_path)
    with pytest.raises(StartFileError) as refused:
        BACKBONES.get("tiny")(0, tmp_path, "cir")
    message = str(refused.value)
    assert str(copy) in message and tiny_release.SHA256 in message and hashlib.sha256(data).hexdigest() in message
    assert "cirbench start rebuild --write" in message

    copy.unlink()
    with pytest.raises(StartFileError, match=f"tiny start {copy} cannot be read"):
        BACKBONES.get("tiny")(0, tmp_path, None)


def test_weights_cir_never_pretrains(tmp_path: Path, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the released start must not be pre-trained")

    for name in ("pretrain_stage1", "pretrain_composed_retrieval", "pretrained_composer_state", "_cached", "pretrain_tiny_tower",
                 "pretrained_tower_state"):
        monkeypatch.setattr(tiny_pretrain, name, refuse)
    for weights in ("cir", None):
        assert BACKBONES.get("tiny")(3, tmp_path, weights).start_key() == tiny_release.START_KEY
    assert not any(tmp_path.iterdir())


def test_the_package_data_carries_the_start() -> None:
    """A wheel and an editable install carry what ``package-data`` names (checked by hand
    with `pip wheel`): the released file must match its pattern."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "cirbench.backbones" in config["packages"]
    patterns = config["package-data"]["cirbench.backbones"]
    relative = shipped_path().relative_to(ROOT / "cirbench" / "backbones").as_posix()
    assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns)


def test_rebuild_is_compared_bit_for_bit_and_released(tmp_path: Path, monkeypatch) -> None:
    rebuilt = rebuild_start()  # the quick pre-training of the test session
    differences = compare(rebuilt, tiny_start.shipped_start())
    differing = [d for d in differences if not d.equal]  # the quick tower and composer: same shapes, other values
    assert {d.name.split(".")[0] for d in differing} == {"tower", "composer"}
    assert all(0 < d.max_abs < float("inf") for d in differing)
    assert rebuilt.info["tower"] == "pretrained" and rebuilt.key().startswith("tiny-pretrained-")

    first = release(rebuilt, tmp_path / "starts", tmp_path / "record.py")
    assert first.release == 1 and first.path.name == "tiny-cir-v1.pt"
    assert f"SHA256 = {first.sha256!r}" in (tmp_path / "record.py").read_text()
    assert read_start(first.path, first.sha256).key() == first.start_key == rebuilt.key()
    again = rebuild_start()
    assert all(d.equal for d in compare(again, read_start(first.path, first.sha256)))  # same code, same machine

    second = release(again, tmp_path / "starts", tmp_path / "record.py")
    assert second.release == 2 and [p.name for p in (tmp_path / "starts").iterdir()] == ["tiny-cir-v2.pt"]


def test_the_rebuild_command_prints_the_comparison_and_writes_a_release(tmp_path: Path, monkeypatch) -> None:
    from cirbench.backbones import tiny_rebuild

    use_release(monkeypatch, rebuild_start(), tmp_path)  # the quick start is the released one
    monkeypatch.setattr(tiny_rebuild, "RELEASE_RECORD", tmp_path / "tiny_release.py")
    same = runner.invoke(app, ["start", "rebuild"])
    assert same.exit_code == 0, same.output
    assert f"rebuilt start key: {tiny_release.START_KEY}" in same.output and "bit for bit equal" in same.output

    monkeypatch.setattr(tiny_pretrain, "STAGE1_LR", tiny_pretrain.STAGE1_LR * 2)  # the pre-training changes
    differs = runner.invoke(app, ["start", "rebuild"])
    assert differs.exit_code == 1 and "differs from the shipped start" in differs.output
    assert "composer.query_tokens" in differs.output and "max |difference|" in differs.output

    written = runner.invoke(app, ["start", "rebuild", "--write"])
    assert written.exit_code == 0 and "released v2" in written.output
    assert [p.name for p in (tmp_path / "starts").iterdir()] == ["tiny-cir-v2.pt"]
    assert "RELEASE = 2" in (tmp_path / "tiny_release.py").read_text()

