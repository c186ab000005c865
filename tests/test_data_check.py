"""``cirbench data check`` and the refusal of broken datasets: every kind of problem,
named by file, entry and what is wrong; path escapes; ``--allow-missing``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import cirbench.cli.main as cli
from cirbench.data.checks import imagecheck
from cirbench.data.datasets.check import DatasetProblemsError, check_dataset
from cirbench.data.checks.files import PathEscapeError, resolve_inside
from cirbench.data.datasets.registry import DATASETS
from fixtures import write_cirr, write_fashioniq


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("pristine")
    write_fashioniq(base / "fiq", n_train_images=6, n_train=4, n_val_images=6, n_val=3)
    write_cirr(base / "cirr", n_train_sets=2, n_val_sets=2, n_test_sets=1)
    return {"fashioniq": base / "fiq", "cirr": base / "cirr"}


@pytest.fixture
def fiq(pristine, tmp_path) -> Path:
    return Path(shutil.copytree(pristine["fashioniq"], tmp_path / "fiq", symlinks=True))


@pytest.fixture
def cirr(pristine, tmp_path) -> Path:
    return Path(shutil.copytree(pristine["cirr"], tmp_path / "cirr", symlinks=True))


def _check(name: str, root: Path, tmp_path: Path, **options: str):
    return check_dataset(name, root, options, tmp_path / "cache")


def _only(report, kind: str):
    found = [p for p in report.problems if p.kind == kind]
    assert len(found) == 1, report.problems
    return found[0]


def _load(path: Path) -> list | dict:
    return json.loads(path.read_text())


def _save(path: Path, value) -> None:
    path.write_text(json.dumps(value))


def test_clean_fixtures_have_no_problems(pristine, tmp_path) -> None:
    for name, root in pristine.items():
        report = _check(name, root, tmp_path)
        assert report.ok, report.problems
        assert report.counts["val_queries"] > 0


def test_malformed_json_names_file_and_entry(fiq, cirr, tmp_path) -> None:
    path = fiq / "captions/cap.dress.train.json"
    entries = _load(path)
    path.write_text("[" + ",\n".join(json.dumps(e) for e in entries[:3]) + ',\n{"target": "x", "candidate": }\n]')
    problem = _only(_check("fashioniq", fiq, tmp_path), "malformed-json")
    assert (problem.file, problem.entry, problem.fatal) == ("captions/cap.dress.train.json", "#3", True)
    assert "line 4" in problem.problem

    path.write_text("[" + json.dumps(entries[0]) + " " + json.dumps(entries[1]) + "]")  # a comma is missing
    problem = _only(_check("fashioniq", fiq, tmp_path), "malformed-json")
    assert problem.entry == "#0" and "expected ','" in problem.problem

    split = cirr / "image_splits/split.rc2.val.json"
    items = list(_load(split).items())
    split.write_text("{" + ", ".join(f'"{k}": "{v}"' for k, v in items[:2]) + ', "broken": ./dev/x.png}')
    problem = _only(_check("cirr", cirr, tmp_path), "malformed-json")
    assert (problem.file, problem.entry) == ("image_splits/split.rc2.val.json", "#2")


def test_entries_missing_fields(fiq, cirr, tmp_path) -> None:
    path = fiq / "captions/cap.shirt.val.json"
    entries = _load(path)
    del entries[2]["target"]
    entries[1]["captions"] = ["only one"]
    _save(path, entries)
    problems = {p.entry: p for p in _check("fashioniq", fiq, tmp_path).problems}
    assert problems["#2"].file == "captions/cap.shirt.val.json" and "target" in problems["#2"].problem
    assert problems["#1"].kind == "missing-field" and "two strings" in problems["#1"].problem

    path = cirr / "captions/cap.rc2.val.json"
    entries = _load(path)
    del entries[0]["img_set"]
    entries[1]["pairid"] = "not a number"
    _save(path, entries)
    problems = {p.entry: p for p in _check("cirr", cirr, tmp_path).problems}
    assert "img_set" in problems["#0"].problem and "pairid" in problems["#1"].problem
    assert {p.kind for p in problems.values()} == {"missing-field"}


def test_names_in_captions_but_not_in_splits(fiq, cirr, tmp_path) -> None:
    path = fiq / "captions/cap.dress.train.json"
    entries = _load(path)
    entries[1]["candidate"] = "B9NOTINSPLIT"
    _save(path, entries)
    problem = _only(_check("fashioniq", fiq, tmp_path), "not-in-split")
    assert (problem.file, problem.entry) == ("captions/cap.dress.train.json", "#1")
    assert "B9NOTINSPLIT" in problem.problem and "image_splits/split.dress.train.json" in problem.problem

    path = cirr / "captions/cap.rc2.val.json"
    entries = _load(path)
    entries[2]["img_set"]["members"][0] = "dev-9-9-img9"
    _save(path, entries)
    problem = _only(_check("cirr", cirr, tmp_path), "not-in-split")
    assert problem.entry == "#2" and "dev-9-9-img9" in problem.problem


def test_missing_images_are_counted_listed_and_refused(fiq, tmp_path) -> None:
    val = _load(fiq / "captions/cap.dress.val.json")
    gone = val[0]["target"]
    for name in (gone, "B0T0000005"):
        next((fiq / "images").glob(f"{name}.*")).unlink()
    report = _check("fashioniq", fiq, tmp_path)
    assert report.kinds() == {"missing-image": 2}
    assert {p.entry for p in report.problems} == {gone, "B0T0000005"}
    assert all(not p.fatal and "images/" in p.problem for p in report.problems)

    loader = DATASETS.get("fashioniq")
    with pytest.raises(DatasetProblemsError, match="--allow-missing") as info:
        loader(tmp_path / "cache", fiq)
    assert info.value.report.kinds() == {"missing-image": 2}
    data = loader(tmp_path / "cache", fiq, allow_missing=True)
    dropped = {(d["split"], d["sample"]) for d in data.info["dropped"]}
    assert ("val", "dress-val-00000") in dropped and ("gallery", f"dress/{gone}") in dropped
    assert "dress-val-00000" not in data.val.sample_ids and gone not in data.image_ids
    uses = [e for e in _load(fiq / "captions/cap.dress.train.json") if "B0T0000005" in (e["candidate"], e["target"])]
    assert len(data.train) == 3 * 4 - len(uses)


def test_unreadable_and_truncated_images(cirr, tmp_path) -> None:
    images = sorted((cirr / "dev").glob("*.png"))
    data = images[0].read_bytes()
    images[0].write_bytes(data[: len(data) // 2])  # truncated
    images[1].write_bytes(b"this is not an image")
    report = _check("cirr", cirr, tmp_path)
    assert report.kinds() == {"unreadable-image": 2}
    assert {p.file for p in report.problems} == {f"dev/{images[0].name}", f"dev/{images[1].name}"}


def test_exact_repeats_are_warnings(fiq, cirr, tmp_path) -> None:
    path = fiq / "captions/cap.toptee.train.json"
    entries = _load(path)
    _save(path, entries + [entries[0]])
    split = fiq / "image_splits/split.toptee.val.json"
    names = _load(split)
    _save(split, names + [names[1]])
    report = _check("fashioniq", fiq, tmp_path)
    problems = {p.file: p for p in report.problems}
    assert report.ok and not report.errors and report.kinds() == {"repeat": 2}
    assert {p.severity for p in report.problems} == {"warning"}
    assert problems["captions/cap.toptee.train.json"].entry == f"#{len(entries)}"
    assert "#0" in problems["captions/cap.toptee.train.json"].problem
    assert problems["image_splits/split.toptee.val.json"].entry == f"#{len(names)}"

    path = cirr / "captions/cap.rc2.train.json"
    entries = _load(path)
    _save(path, entries + [entries[1]])
    split = cirr / "image_splits/split.rc2.val.json"
    text = split.read_text().rstrip().rstrip("}")
    first = next(iter(_load(split)))
    split.write_text(text + f', "{first}": "./dev/{first}.png"}}')
    report = _check("cirr", cirr, tmp_path)
    assert report.ok and report.kinds() == {"repeat": 2}
    assert {p.file for p in report.problems} == {"captions/cap.rc2.train.json", "image_splits/split.rc2.val.json"}


def test_conflicting_duplicates_stay_errors(cirr, tmp_path) -> None:
    split = cirr / "image_splits/split.rc2.val.json"
    text = split.read_text().rstrip().rstrip("}")
    first = next(iter(_load(split)))
    split.write_text(text + f', "{first}": "./dev/elsewhere.png"}}')
    path = cirr / "captions/cap.rc2.test1.json"
    entries = _load(path)
    entries[1]["pairid"] = entries[0]["pairid"]
    _save(path, entries)
    report = _check("cirr", cirr, tmp_path)
    assert not report.ok and report.kinds() == {"duplicate": 2}
    by_file = {p.file: p for p in report.errors}
    assert "different paths" in by_file["image_splits/split.rc2.val.json"].problem
    assert by_file["captions/cap.rc2.test1.json"].entry == "#1" and "one answer per pairid" in by_file[
        "captions/cap.rc2.test1.json"].problem


def test_repeats_are_kept_in_validation_and_optionally_dropped_from_training(fiq, cirr, tmp_path) -> None:
    loader = DATASETS.get("fashioniq")
    base = loader(tmp_path / "cache", fiq)
    for split in ("train", "val"):
        path = fiq / f"captions/cap.dress.{split}.json"
        entries = _load(path)
        _save(path, entries + [entries[0], entries[0]])
    data = loader(tmp_path / "cache", fiq)
    assert (len(data.train), len(data.val)) == (len(base.train) + 2, len(base.val) + 2)
    assert data.info["n_warnings"] == 4 and not data.info["dropped"]
    n_val = len(_load(fiq / "captions/cap.dress.val.json"))
    assert {f"dress-val-{n_val - 2:05d}", f"dress-val-{n_val - 1:05d}"} <= set(data.val.sample_ids)
    dropped = loader(tmp_path / "cache", fiq, options={"train_repeats": "drop"})
    assert (len(dropped.train), len(dropped.val)) == (len(base.train), len(base.val) + 2)

    path = cirr / "captions/cap.rc2.val.json"
    entries = _load(path)
    _save(path, entries + [entries[2]])
    data = DATASETS.get("cirr")(tmp_path / "cache", cirr)
    assert data.val.sample_ids.count(str(entries[2]["pairid"])) == 1
    assert f"{entries[2]['pairid']}#{len(entries)}" in data.val.sample_ids and len(data.val) == len(entries) + 1


def test_missing_files_are_fatal_unless_not_selected(fiq, tmp_path) -> None:
    (fiq / "captions/cap.toptee.val.json").unlink()
    problem = _only(_check("fashioniq", fiq, tmp_path), "missing-file")
    assert problem.fatal and problem.file == "captions/cap.toptee.val.json"
    assert _check("fashioniq", fiq, tmp_path, categories="dress,shirt").ok
    with pytest.raises(DatasetProblemsError, match="unreadable; fix the files"):
        DATASETS.get("fashioniq")(tmp_path / "cache", fiq, allow_missing=True)


def test_resolve_inside_refuses_escapes(tmp_path) -> None:
    (tmp_path / "root" / "dev").mkdir(parents=True)
    (tmp_path / "outside.png").write_bytes(b"x")
    root = tmp_path / "root"
    assert resolve_inside(root, "./dev/a.png") == (root / "dev" / "a.png").resolve()
    for bad, why in (("../outside.png", "'..'"), ("dev/../../outside.png", "'..'"), (str(tmp_path / "outside.png"), "absolute"),
                     ("C:\\data\\x.png", "absolute")):
        with pytest.raises(PathEscapeError, match=why):
            resolve_inside(root, bad)
    os.symlink(tmp_path / "outside.png", root / "dev" / "link.png")
    with pytest.raises(PathEscapeError, match="outside the dataset root"):
        resolve_inside(root, "dev/link.png")
    os.symlink(root / "dev", root / "inner")  # a link that stays inside is fine
    assert resolve_inside(root, "inner/a.png") == (root / "dev" / "a.png").resolve()


def test_path_escapes_in_dataset_files_are_fatal(fiq, cirr, tmp_path) -> None:
    outside = tmp_path / "secret.png"
    shutil.copy(next((cirr / "dev").glob("*.png")), outside)
    split = cirr / "image_splits/split.rc2.train.json"
    mapping = _load(split)
    keys = list(mapping)
    mapping[keys[0]], mapping[keys[1]] = "../secret.png", str(outside)
    _save(split, mapping)
    val_image = next((cirr / "dev").glob("*.png"))
    val_image.unlink()
    os.symlink(outside, val_image)
    report = _check("cirr", cirr, tmp_path)
    escapes = [p for p in report.problems if p.kind == "path-escape"]
    assert len(escapes) == 3 and all(p.fatal for p in escapes)
    assert {p.entry.split(" ")[-1] for p in escapes} >= {keys[0], keys[1]}

    names = _load(fiq / "image_splits/split.dress.val.json")
    _save(fiq / "image_splits/split.dress.val.json", names + ["../../etc/passwd"])
    target = next((fiq / "images").glob("B1V0000000.*"))
    target.unlink()
    os.symlink(outside, target)
    report = _check("fashioniq", fiq, tmp_path)
    assert {p.kind for p in report.problems} == {"path-escape"} and len(report.problems) == 2
    with pytest.raises(DatasetProblemsError):
        DATASETS.get("fashioniq")(tmp_path / "cache", fiq, allow_missing=True)


def test_image_verdicts_are_cached_per_file_and_level(cirr, tmp_path, monkeypatch) -> None:
    assert _check("cirr", cirr, tmp_path).ok
    calls: list[str] = []
    original = imagecheck._check_one

    def counting(path, level):
        calls.append(level)
        return original(path, level)

    monkeypatch.setattr(imagecheck, "_check_one", counting)
    assert _check("cirr", cirr, tmp_path).ok and calls == []  # every header verdict came from the cache
    assert check_dataset("cirr", cirr, {}, tmp_path / "cache", deep=True).ok
    n_images = len(calls)
    assert n_images > 0 and set(calls) == {"deep"}  # a header verdict does not answer a deep check
    assert check_dataset("cirr", cirr, {}, tmp_path / "cache", deep=True, workers=1).ok and len(calls) == n_images
    assert _check("cirr", cirr, tmp_path).ok and len(calls) == n_images  # a deep verdict answers a header check

    def refuse(path, level):
        return f"cannot read image {path}: checked again"

    monkeypatch.setattr(imagecheck, "_check_one", refuse)
    changed = next((cirr / "dev").glob("*.png"))
    changed.write_bytes(changed.read_bytes() + b"\0")
    report = _check("cirr", cirr, tmp_path)
    assert report.kinds() == {"unreadable-image": 1} and "checked again" in report.problems[0].problem


def test_a_corrupt_jpeg_body_needs_the_deep_check(fiq, tmp_path) -> None:
    jpeg = next((fiq / "images").glob("*.jpg"))
    data = bytearray(jpeg.read_bytes())
    jpeg.write_bytes(bytes(data[: len(data) * 2 // 3]))  # the header survives, the scan data is cut
    assert _check("fashioniq", fiq, tmp_path).ok
    report = check_dataset("fashioniq", fiq, {}, tmp_path / "deep-cache", deep=True)
    problem = _only(report, "unreadable-image")
    assert problem.file == f"images/{jpeg.name}" and problem.entry == jpeg.stem


def test_data_root_from_environment_or_a_clear_error(pristine, tmp_path, monkeypatch) -> None:
    for var in ("CIRBENCH_DATA_ROOT", "CIRBENCH_CIRR_ROOT", "CIRBENCH_FASHIONIQ_ROOT"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="--data-root"):
        check_dataset("cirr", None)
    monkeypatch.setenv("CIRBENCH_CIRR_ROOT", str(pristine["cirr"]))
    assert check_dataset("cirr", None, cache_dir=tmp_path).ok
    with pytest.raises(ValueError, match="generated"):
        check_dataset("shapes", None)


def test_cli_data_check_and_run_refusal(fiq, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cli.console, "width", 300)
    runner = CliRunner()
    clean = runner.invoke(cli.app, ["data", "check", "fashioniq", "--data-root", str(fiq), "--cache-dir", str(tmp_path)])
    assert clean.exit_code == 0 and "no problems" in clean.output
    path = fiq / "captions/cap.shirt.train.json"
    entries = _load(path)
    del entries[3]["captions"]
    _save(path, entries)
    report_file = tmp_path / "report.json"
    result = runner.invoke(cli.app, ["data", "check", "fashioniq", "--data-root", str(fiq), "--cache-dir", str(tmp_path),
                                     "--json", str(report_file)])
    assert result.exit_code == 1
    assert "captions/cap.shirt.train.json" in result.output and "#3" in result.output and "captions" in result.output
    written = json.loads(report_file.read_text())
    assert written["problems"][0]["entry"] == "#3" and written["kinds"] == {"missing-field": 1}

    out = tmp_path / "results"
    args = ["run", "--dataset", "fashioniq", "--data-root", str(fiq), "--methods", "sprc", "--noise", "0", "--epochs", "1",
            "--batch-size", "4", "--output", str(out), "--cache-dir", str(tmp_path / "cache"),
            "--dataset-option", "categories=shirt"]
    refused = runner.invoke(cli.app, args)
    assert refused.exit_code == 2 and "captions/cap.shirt.train.json" in refused.output
    assert "--allow-missing" in refused.output and not (out / "runs").exists()

    accepted = runner.invoke(cli.app, args + ["--allow-missing"])
    assert accepted.exit_code == 0, accepted.output
    assert "shirt-train-00003" in accepted.output
    runs = pd.read_parquet(out / "runs")
    runs = runs[~runs.is_reference]  # the reference rows of the starting model come with every grid
    assert runs.n_dropped.tolist() == [1] and runs.dataset.tolist() == ["fashioniq[categories=shirt]"]
    record = json.loads(Path(runs.dropped_path.iloc[0]).read_text())
    assert record["dropped"][0]["sample"] == "shirt-train-00003" and record["problems"][0]["entry"] == "#3"


@pytest.mark.parametrize(("name", "captions"), [("fashioniq", "captions/cap.dress.val.json"), ("cirr", "captions/cap.rc2.val.json")])
def test_cli_repeats_are_listed_and_the_run_counts_them(name, captions, pristine, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cli.console, "width", 300)
    root = Path(shutil.copytree(pristine[name], tmp_path / name))
    for split in ("train", "val"):
        path = root / captions.replace(".val.", f".{split}.")
        entries = _load(path)
        _save(path, entries + [entries[0]])
    runner = CliRunner()
    checked = runner.invoke(cli.app, ["data", "check", name, "--data-root", str(root), "--cache-dir", str(tmp_path)])
    assert checked.exit_code == 0, checked.output
    assert "no errors, 2 warning(s)" in checked.output and checked.output.count("exact repeat of entry #0") == 2
    out = tmp_path / "results"
    done = runner.invoke(cli.app, ["run", "--dataset", name, "--data-root", str(root), "--methods", "sprc", "--noise", "0",
                                   "--epochs", "1", "--batch-size", "4", "--output", str(out), "--cache-dir", str(tmp_path / "c")])
    assert done.exit_code == 0, done.output
    runs = pd.read_parquet(out / "runs")
    assert runs.n_warnings.eq(2).all() and runs.status.eq("completed").all()  # the reference rows too
    runs = runs[~runs.is_reference]
    assert runs.status.tolist() == ["completed"] and runs.n_warnings.tolist() == [2] and runs.n_dropped.tolist() == [0]
    assert "2 warning(s)" in done.output
