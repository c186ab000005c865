"""Small dataset roots in the exact on-disk formats of the FashionIQ and CIRR releases,
with random images of varied sizes written by PIL (no conftest magic: tests call these)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from cirbench.backbones.base import TextBatch

FIQ_CATEGORIES = ("dress", "shirt", "toptee")
_WORDS = ("red", "blue", "longer", "shorter", "striped", "floral", "darker", "lighter", "sleeveless", "plain")


def write_image(path: Path, rng: np.random.Generator) -> None:
    """A random RGB image of a random size (about 20-40 px, not square), PNG or JPEG by suffix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    height, width = (int(v) for v in rng.integers(20, 41, size=2))
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def _caption(rng: np.random.Generator) -> str:
    return f"is {_WORDS[int(rng.integers(len(_WORDS)))]} and {_WORDS[int(rng.integers(len(_WORDS)))]}"


def write_json(path: Path, value: object) -> None:
    """Write ``value`` as JSON, creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1))


def write_fashioniq(
    root: Path,
    n_train_images: int = 10,
    n_train: int = 8,
    n_val_images: int = 14,
    n_val: int = 6,
    seed: int = 0,
) -> dict[str, dict[str, list]]:
    """A FashionIQ root: per category ``captions/cap.<cat>.<split>.json`` and
    ``image_splits/split.<cat>.<split>.json`` for train and val; dress and shirt images
    under ``images/`` (alternating .png and .jpg), toptee under ``resized_image/toptee/``.
    Returns, per category, the split names and caption entries written."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[str, list]] = {}
    for c, cat in enumerate(FIQ_CATEGORIES):
        out[cat] = {}
        for split, n_images, n_pairs in (("train", n_train_images, n_train), ("val", n_val_images, n_val)):
            names = [f"B{c}{split[0].upper()}{i:07d}" for i in range(n_images)]
            entries = []
            for _ in range(n_pairs):
                cand, target = rng.choice(n_images, size=2, replace=False)
                entries.append({"target": names[target], "candidate": names[cand], "captions": [_caption(rng), _caption(rng) + "."]})
            write_json(root / "image_splits" / f"split.{cat}.{split}.json", names)
            write_json(root / "captions" / f"cap.{cat}.{split}.json", entries)
            for i, name in enumerate(names):
                suffix = ".png" if i % 2 == 0 else ".jpg"
                folder = root / "resized_image" / cat if cat == "toptee" else root / "images"
                write_image(folder / f"{name}{suffix}", rng)
            out[cat][f"{split}_names"] = names
            out[cat][f"{split}_captions"] = entries
    return out


def write_cirr(root: Path, n_train_sets: int = 4, n_val_sets: int = 3, n_test_sets: int = 2, seed: int = 0) -> dict[str, list]:
    """A CIRR root: ``captions/cap.rc2.<split>.json`` and ``image_splits/split.rc2.<split>.json``
    for train, val and test1; sets of 6 images (``img_set.members``), two queries per set;
    images under ``./train/<n>/``, ``./dev/``, ``./test1/``. Returns the entries per split."""
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {}
    pairid = 0
    for split, prefix, folder, n_sets in (
        ("train", "train", "train", n_train_sets), ("val", "dev", "dev", n_val_sets), ("test1", "test1", "test1", n_test_sets)
    ):
        split_map: dict[str, str] = {}
        entries = []
        for s in range(n_sets):
            members = [f"{prefix}-{s}-{j}-img{j % 2}" for j in range(6)]
            for name in members:
                sub = f"{folder}/{s % 2}" if split == "train" else folder
                split_map[name] = f"./{sub}/{name}.png"
                write_image(root / sub / f"{name}.png", rng)
            for q in range(2):
                ref, target = rng.choice(6, size=2, replace=False)
                entry = {"pairid": pairid, "reference": members[ref], "caption": _caption(rng)}
                if split != "test1":
                    entry["target_hard"] = members[target]
                    entry["target_soft"] = {members[target]: 1.0}
                entry["img_set"] = {"id": s, "members": members, "reference_rank": int(ref), "target_rank": int(target)}
                entries.append(entry)
                pairid += 1
        write_json(root / "image_splits" / f"split.rc2.{split}.json", split_map)
        write_json(root / "captions" / f"cap.rc2.{split}.json", entries)
        out[split] = entries
        out[f"{split}_images"] = list(split_map)
    return out


class ScoreTableMethod(torch.nn.Module):
    """A stand-in method whose query-by-image scores are a given table, for checking the
    evaluator against hand-computed rankings. Image tokens are one-hot rows
    (:meth:`tokens`); each query's text carries its row of ``scores`` (:meth:`texts`)."""

    def __init__(self, scores: np.ndarray) -> None:
        super().__init__()
        self.scores = torch.as_tensor(scores, dtype=torch.float32)

    def tokens(self) -> np.ndarray:
        """One token per image: the one-hot vector of its index, (N, 1, N)."""
        return np.eye(self.scores.shape[1], dtype=np.float32)[:, None, :]

    def texts(self) -> TextBatch:
        """Query ``i``'s text is the single token ``i``."""
        n = self.scores.shape[0]
        return TextBatch(torch.arange(n)[:, None], torch.ones(n, 1, dtype=torch.bool))

    def encode_queries(self, reference: torch.Tensor, text: TextBatch) -> torch.Tensor:
        return self.scores[text.ids[:, 0]]

    def encode_targets(self, images: torch.Tensor) -> torch.Tensor:
        return images[:, 0, :]

    def similarity(self, queries: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return queries @ targets.T


def use_datasets(monkeypatch, datasets) -> None:
    """Make the grid, its plan and its cells' resources read ``datasets`` as the dataset registry."""
    import cirbench.engine.running.grid
    import cirbench.engine.cell.resources
    import cirbench.engine.planning.spec

    for module in (cirbench.engine.running.grid, cirbench.engine.planning.spec, cirbench.engine.cell.resources):
        monkeypatch.setattr(module, "DATASETS", datasets)
