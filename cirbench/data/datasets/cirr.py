"""CIRR (Liu et al., ICCV 2021) read from the ``Cuberick-Orion/CIRR`` release layout.

Files under the root: ``captions/cap.rc2.<split>.json`` (a list of ``{"pairid",
"reference", "target_hard", "caption", "img_set": {"members": [...]}}``; test1 entries have
no target) and ``image_splits/split.rc2.<split>.json`` (image name -> path relative to the
root, e.g. ``./dev/dev-245-0-img0.png``), splits ``train``, ``val`` and ``test1``.

Evaluation (the official protocol): every validation query is ranked against all
validation images with its reference excluded: Recall@1/5/10/50; Recall_subset@1/2/3
ranks within the query's ``img_set.members`` (reference excluded); the headline is
``(R@5 + R_subset@1) / 2`` (metric ``mean(recall@5,recall_subset@1)`` of group ``all``).
test1 has no targets: :mod:`cirbench.engine.tools.predict` writes the submission files for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cirbench.data.base import EvalProtocol, SummaryFn
from cirbench.data.checks.files import PathEscapeError, resolve_inside
from cirbench.data.datasets.real import FileOptions, Query, Scan
from cirbench.results.metrics import CIRR_AVERAGE

FORMAT_VERSION = "1"
CONTENT_OPTIONS = ("image_size",)
HEADLINE = CIRR_AVERAGE.stored


@dataclass
class Options(FileOptions):
    """CIRR's ``--dataset-option`` settings: ``image_size`` and ``train_repeats`` (see
    :class:`~cirbench.data.datasets.real.FileOptions`). The evaluation protocol is fixed by the benchmark."""


def summarize(results: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Adds the headline ``(R@5 + R_subset@1) / 2`` (:data:`~cirbench.results.metrics.CIRR_AVERAGE`) to group ``all``."""
    metrics = results.get("all", {})
    if not all(part in metrics for part in CIRR_AVERAGE.parts):
        return {}
    return {"all": {**metrics, HEADLINE: CIRR_AVERAGE.of([metrics[part] for part in CIRR_AVERAGE.parts])}}


def protocol(options: Options) -> tuple[EvalProtocol, SummaryFn]:
    """CIRR's official protocol: reference excluded, R@1/5/10/50, R_subset@1/2/3."""
    return EvalProtocol("cirr", exclude_reference=True, recall_at=(1, 5, 10, 50), subset_recall_at=(1, 2, 3)), summarize


def _read_split(scan: Scan, split: str) -> dict[str, Path] | None:
    """Image name -> resolved path; paths out of the root are fatal problems."""
    rel = f"image_splits/split.rc2.{split}.json"
    entries = scan.read_entries(rel, dict)
    if entries is None:
        return None
    paths: dict[str, Path] = {}
    values: dict[str, object] = {}
    for i, (name, value) in enumerate(entries):
        assert name is not None
        where = f"#{i} {name}"
        first = scan.first_seen(rel, name, i)
        if first is not None:
            if values.get(name) == value:
                scan.problem(rel, where, "repeat", f"image {name!r} is listed twice with the same path (first at #{first})",
                             severity="warning")
            else:
                scan.problem(rel, where, "duplicate", f"image {name!r} is listed twice with different paths "
                             f"({values.get(name)!r} at #{first}, {value!r} here); the first is used")
            continue
        values[name] = value
        if not isinstance(value, str) or not value:
            scan.problem(rel, where, "missing-field", f"the path of image {name!r} must be a non-empty string, found {value!r}")
            continue
        try:
            paths[name] = resolve_inside(scan.root, value)
        except PathEscapeError as exc:
            scan.problem(rel, where, "path-escape", str(exc), fatal=True)
    return paths


_REQUIRED = {
    "train": ("pairid", "reference", "target_hard", "caption"),
    "val": ("pairid", "reference", "target_hard", "caption", "img_set"),
    "test1": ("pairid", "reference", "caption", "img_set"),
}


def _read_captions(scan: Scan, split: str, names: dict[str, Path] | None) -> list[Query]:
    rel = f"captions/cap.rc2.{split}.json"
    entries = scan.read_entries(rel, list)
    if entries is None:
        return []
    split_rel = f"image_splits/split.rc2.{split}.json"
    seen: dict[int, tuple[int, dict]] = {}
    queries = []
    for i, (_, entry) in enumerate(entries):
        where = f"#{i}"
        pairid = entry.get("pairid") if isinstance(entry, dict) else None
        sample = str(pairid) if pairid is not None else f"{rel} {where}"
        if not scan.fields(rel, where, split, sample, entry, _REQUIRED[split]):
            continue
        assert isinstance(entry, dict)
        target = entry.get("target_hard") if split != "test1" else None
        members = entry["img_set"].get("members") if isinstance(entry.get("img_set"), dict) else None
        wrong = [f for f, ok in (
            ("pairid", isinstance(pairid, int) and not isinstance(pairid, bool)),
            ("reference", isinstance(entry["reference"], str) and bool(entry["reference"])),
            ("target_hard", split == "test1" or (isinstance(target, str) and bool(target))),
            ("caption", isinstance(entry["caption"], str)),
            ("img_set.members", split == "train" or (isinstance(members, list) and bool(members)
                                                    and all(isinstance(m, str) for m in members))),
        ) if not ok]
        if wrong:
            scan.reject(rel, where, split, sample, "missing-field", f"invalid field(s): {', '.join(wrong)}")
            continue
        subset = tuple(members) if split != "train" else None
        used = [("reference", entry["reference"])] + ([("target_hard", target)] if target is not None else [])
        used += [("img_set member", m) for m in subset or ()]
        absent = [f"{role} {name!r}" for role, name in used if names is not None and name not in names]
        if absent:
            scan.reject(rel, where, split, sample, "not-in-split", f"{', '.join(absent)} not in {split_rel}")
            continue
        first, earlier = seen.setdefault(pairid, (i, entry))
        if first == i:
            queries.append(Query(str(pairid), entry["reference"], entry["caption"], target, "all", f"{rel} {where}", subset))
        elif _reused_pairid(scan, rel, where, split, entry, first, earlier == entry):
            queries.append(Query(f"{pairid}#{i}", entry["reference"], entry["caption"], target, "all", f"{rel} {where}",
                                 subset, repeat_of=f"{rel} #{first}" if earlier == entry else None))
    return queries


def _reused_pairid(scan: Scan, rel: str, where: str, split: str, entry: dict, first: int, exact: bool) -> bool:
    """Record an entry whose pairid an earlier entry ``#first`` has; whether to keep it.

    An exact repeat, or in train and val another entry under the same pairid, is a warning
    (the public loaders read both; the query's sample id becomes ``<pairid>#<index>``). In
    test1 an exact repeat is answered once in the submission (a warning), and other
    content under the same pairid is an error (a submission has one answer per pairid)."""
    pairid = entry["pairid"]
    if exact:
        note = " (answered once in the submission)" if split == "test1" else ""
        scan.problem(rel, where, "repeat", f"exact repeat of entry #{first}{note}", severity="warning")
        return split != "test1"
    if split == "test1":
        scan.reject(rel, where, split, str(pairid), "duplicate",
                    f"pairid {pairid} repeats entry #{first} with other content (a submission has one answer per pairid)")
        return False
    scan.problem(rel, where, "repeat", f"pairid {pairid} also names entry #{first}, with other content; "
                 "kept as a separate query", severity="warning")
    return True


def _scan_split(scan: Scan, split: str, gallery: bool) -> list[Query]:
    names = _read_split(scan, split)
    queries = _read_captions(scan, split, names)
    needed = {q.reference for q in queries} | {q.target for q in queries if q.target is not None}
    needed |= {m for q in queries for m in q.subset or ()}
    if gallery and names is not None:
        scan.gallery["all"] = list(names)
        needed |= set(names)
    for name in sorted(needed):
        path = (names or {}).get(name)
        if path is None:
            continue  # its entry already failed (a reported problem)
        if path.is_file():
            scan.images[name] = path
        else:
            rel = str(path.relative_to(scan.root.resolve()))
            scan.problem(rel, name, "missing-image", f"image file not found (listed in image_splits/split.rc2.{split}.json)")
            scan.bad_images[name] = f"image {rel} is missing"
    return queries


def scan(root: Path, options: Options, for_check: bool = False) -> Scan:
    """Read and validate the train and val files (and, for a check, test1 when present);
    images are located but not decoded."""
    out = Scan(root)
    out.train = _scan_split(out, "train", gallery=False)
    out.val = _scan_split(out, "val", gallery=True)
    out.counts = {"train_triplets": len(out.train), "val_queries": len(out.val)}
    if for_check and (root / "captions" / "cap.rc2.test1.json").exists():
        test = Scan(root)
        out.counts["test1_queries"] = len(_scan_split(test, "test1", gallery=True))
        out.problems += test.problems
        out.images.update(test.images)
    out.counts["images_found"] = len(out.images)
    return out


def scan_test(root: Path, options: Options) -> Scan:
    """Read and validate the test1 files: its queries (no targets) as the ``val`` split and
    every test1 image as the gallery."""
    out = Scan(root)
    out.val = _scan_split(out, "test1", gallery=True)
    out.counts = {"test1_queries": len(out.val), "images_found": len(out.images)}
    return out
