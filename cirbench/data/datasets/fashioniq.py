"""FashionIQ (Wu et al., CVPR 2021) read from the ``XiaoxiaoGuo/fashion-iq`` release layout.

Files under the root: ``captions/cap.<cat>.<split>.json`` (a list of ``{"candidate",
"target", "captions": [c0, c1]}``), ``image_splits/split.<cat>.<split>.json`` (a list of
image names) and the images as ``images/<name>.png`` or ``.jpg`` (detected per file, not
assumed) or ``resized_image/<cat>/<name>.<ext>``. Categories ``dress``, ``shirt``,
``toptee``; splits ``train`` and ``val`` (the test split has no targets and no public
scores, so it is not read).

Captions follow CLIP4Cir, whose preprocessing SPRC, TME and ConeSep reuse: each caption is
stripped of ``". ?,"`` at both ends; validation joins the pair as ``"{c0 capitalised} and
{c1}"``; training uses the same join by default, or (``train_captions=random``) one of
CLIP4Cir's four variants ("c0 and c1", "c1 and c0", "c0", "c1") per triplet, drawn once
from ``caption_seed`` (CLIP4Cir redraws every time a sample is read; the harness tokenises
the training texts once per cell, so the draw is fixed for a run).

Evaluation: each validation query is ranked against its category's validation split;
Recall@10 and @50 per category, their averages over the categories and the overall
average ``(R@10 + R@50) / 2`` (group ``average``). The reference image is excluded from the
ranking by default (``reference=exclude``, as ConeSep, HABIT and INTENT do);
``reference=keep`` is the CLIP4Cir/SPRC/TME protocol. The choice is in every metrics row.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from cirbench.data.base import EvalProtocol, SummaryFn
from cirbench.data.checks.files import PathEscapeError, list_images, resolve_inside
from cirbench.data.datasets.real import FileOptions, Query, Scan
from cirbench.results.metrics import AVERAGE_GROUP, FASHIONIQ_AVERAGE

CATEGORIES: tuple[str, ...] = ("dress", "shirt", "toptee")
SPLITS: tuple[str, ...] = ("train", "val")
FORMAT_VERSION = "1"
CONTENT_OPTIONS = ("categories", "train_captions", "caption_seed", "image_size")
CAPTION_STRIP = ".?, "


@dataclass
class Options(FileOptions):
    """FashionIQ's ``--dataset-option`` settings (and ``image_size``, ``train_repeats``).

    ``categories``: ``all`` or a comma-separated subset of dress, shirt, toptee.
    ``train_captions``: ``joined`` ("c0 and c1", as validation) or ``random`` (CLIP4Cir's
    four variants, one per triplet from ``caption_seed``). ``reference``: ``exclude``
    (ConeSep/HABIT/INTENT) or ``keep`` (CLIP4Cir/SPRC/TME) the reference image in the
    ranking.
    """

    categories: str = "all"
    train_captions: Literal["joined", "random"] = "joined"
    caption_seed: int = 0
    reference: Literal["exclude", "keep"] = "exclude"

    def __post_init__(self) -> None:
        super().__post_init__()
        chosen = [c.strip() for c in self.categories.split(",") if c.strip()]
        if chosen == ["all"]:
            chosen = list(CATEGORIES)
        unknown = sorted(set(chosen) - set(CATEGORIES))
        if unknown or not chosen:
            raise ValueError(f"categories={self.categories!r}: choose 'all' or from {', '.join(CATEGORIES)}")
        self.categories = ",".join(c for c in CATEGORIES if c in chosen)

    @property
    def category_list(self) -> list[str]:
        """The selected categories, in the canonical order."""
        return self.categories.split(",")


def clean_caption(caption: str) -> str:
    """A caption stripped of ``". ?,"`` at both ends (CLIP4Cir)."""
    return caption.strip(CAPTION_STRIP)


def join_captions(first: str, second: str) -> str:
    """The validation text: ``"{first, capitalised} and {second}"`` (both cleaned)."""
    return f"{clean_caption(first).capitalize()} and {clean_caption(second)}"


def caption_variant(captions: tuple[str, str], variant: int) -> str:
    """CLIP4Cir's training variants: 0 "c0 and c1", 1 "c1 and c0", 2 "c0", 3 "c1"."""
    c0, c1 = captions
    if variant == 0:
        return join_captions(c0, c1)
    if variant == 1:
        return join_captions(c1, c0)
    return clean_caption(c0 if variant == 2 else c1).capitalize()


def summarize(results: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """The papers' headline rows (:data:`~cirbench.results.metrics.FASHIONIQ_AVERAGE`): the
    category averages of R@10 and R@50 and their mean."""
    present = [c for c in CATEGORIES if c in results]
    if not present:
        return {}
    means = {part: float(np.mean([results[c][part] for c in present])) for part in FASHIONIQ_AVERAGE.parts}
    return {AVERAGE_GROUP: {**means, FASHIONIQ_AVERAGE.stored: FASHIONIQ_AVERAGE.of(list(means.values()))}}


def protocol(options: Options) -> tuple[EvalProtocol, SummaryFn]:
    """The evaluation protocol and summary for ``options``."""
    return EvalProtocol("fashioniq", exclude_reference=options.reference == "exclude", recall_at=(10, 50)), summarize


def _plain_name(scan: Scan, rel: str, entry: str, name: str) -> bool:
    """Image names become file names: refuse anything that is not a plain name."""
    if "/" in name or "\\" in name or name in (".", "..") or "\x00" in name:
        scan.problem(rel, entry, "path-escape", f"image name {name!r} is not a plain file name", fatal=True)
        return False
    return True


def _read_split(scan: Scan, category: str, split: str) -> list[str] | None:
    rel = f"image_splits/split.{category}.{split}.json"
    entries = scan.read_entries(rel, list)
    if entries is None:
        return None
    names: dict[str, int] = {}
    for i, (_, name) in enumerate(entries):
        if not isinstance(name, str) or not name:
            scan.problem(rel, f"#{i}", "missing-field", f"an image name must be a non-empty string, found {name!r}")
        elif not _plain_name(scan, rel, f"#{i}", name):
            continue
        elif name in names:
            scan.problem(rel, f"#{i}", "repeat", f"image {name!r} is listed twice (first at #{names[name]}); "
                         "it counts once in the gallery", severity="warning")
        else:
            names[name] = i
    return list(names)


def _read_captions(scan: Scan, category: str, split: str, split_names: list[str] | None, options: Options) -> list[Query]:
    rel = f"captions/cap.{category}.{split}.json"
    entries = scan.read_entries(rel, list)
    if entries is None:
        return []
    in_split = set(split_names) if split_names is not None else None
    split_rel = f"image_splits/split.{category}.{split}.json"
    variants = np.random.default_rng([options.caption_seed, CATEGORIES.index(category)]).integers(0, 4, size=len(entries))
    queries = []
    for i, (_, entry) in enumerate(entries):
        where, sample_id = f"#{i}", f"{category}-{split}-{i:05d}"
        if not scan.fields(rel, where, split, sample_id, entry, ("candidate", "target", "captions")):
            continue
        candidate, target, captions = entry["candidate"], entry["target"], entry["captions"]  # type: ignore[index]
        wrong = [f for f, v in (("candidate", candidate), ("target", target)) if not isinstance(v, str) or not v]
        if wrong:
            scan.reject(rel, where, split, sample_id, "missing-field", f"field(s) {', '.join(wrong)} must be non-empty strings")
            continue
        if not (isinstance(captions, list) and len(captions) == 2 and all(isinstance(c, str) for c in captions)):
            scan.reject(rel, where, split, sample_id, "missing-field",
                        f"field 'captions' must be a list of two strings, found {captions!r:.80}")
            continue
        if not (_plain_name(scan, rel, where, candidate) and _plain_name(scan, rel, where, target)):
            continue
        absent = [f"{role} {name!r}" for role, name in (("candidate", candidate), ("target", target))
                  if in_split is not None and name not in in_split]
        if absent:
            scan.reject(rel, where, split, sample_id, "not-in-split", f"{' and '.join(absent)} not in {split_rel}")
            continue
        first = scan.first_seen(rel, (candidate, target, *captions), i)
        if first is not None:
            kept = "kept" if split == "val" or options.train_repeats == "keep" else "left out (train_repeats=drop)"
            scan.problem(rel, where, "repeat", f"exact repeat of entry #{first} ({kept})", severity="warning")
        pair = (captions[0], captions[1])
        text = caption_variant(pair, int(variants[i])) if split == "train" and options.train_captions == "random" \
            else join_captions(*pair)
        queries.append(Query(sample_id, candidate, text, target, category, f"{rel} {where}",
                             repeat_of=None if first is None else f"{rel} #{first}"))
    return queries


def _locate_images(scan: Scan, needed: dict[str, set[str]]) -> None:
    """Find each needed image under ``images/`` or ``resized_image/<cat>/``; record the
    missing ones (with the places looked at) and refuse links out of the root."""
    flat = list_images(scan.root / "images")
    resized = {c: list_images(scan.root / "resized_image" / c) for c in CATEGORIES}
    for name, categories in needed.items():
        rel = f"images/{flat[name]}" if name in flat else next(
            (f"resized_image/{c}/{resized[c][name]}" for c in CATEGORIES if c in categories and name in resized[c]), None
        )
        if rel is None:
            places = ", ".join([f"images/{name}.{{png,jpg,jpeg}}"] + [f"resized_image/{c}/{name}.*" for c in sorted(categories)])
            scan.problem(f"images/{name}.*", name, "missing-image", f"image not found (looked for {places})")
            scan.bad_images[name] = f"image {name} is missing"
            continue
        try:
            scan.images[name] = resolve_inside(scan.root, rel)
        except PathEscapeError as exc:
            scan.problem(rel, name, "path-escape", str(exc), fatal=True)
            scan.bad_images[name] = f"image {rel} leads out of the root"


def scan(root: Path, options: Options, for_check: bool = False) -> Scan:
    """Read and validate the train and val files of the selected categories (see the
    module docstring); images are located but not decoded."""
    out = Scan(root)
    needed: dict[str, set[str]] = defaultdict(set)
    for category in options.category_list:
        for split in SPLITS:
            names = _read_split(out, category, split)
            queries = _read_captions(out, category, split, names, options)
            getattr(out, split).extend(queries)
            for q in queries:
                needed[q.reference].add(category)
                needed[q.target].add(category)  # type: ignore[index]
            if split == "val" and names is not None:
                out.gallery[category] = names
                for name in names:
                    needed[name].add(category)
    _locate_images(out, needed)
    out.counts = {
        "train_triplets": len(out.train), "val_queries": len(out.val), "images_needed": len(needed),
        "images_found": len(out.images),
    }
    return out
