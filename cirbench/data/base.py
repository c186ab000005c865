"""The data model every dataset produces: images, triplet splits and the evaluation protocol.

A dataset is loaded into plain arrays once; the training loop, the noise layer and the
evaluator all work on integer image indices, never on file names, so that the frozen image
tower's outputs can be cached once per image and reused by every cell of a grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np


class ImageSource(Protocol):
    """Random access to a dataset's images, as uint8 RGB arrays of shape (H, W, 3)."""

    def __len__(self) -> int: ...

    def load(self, index: int) -> np.ndarray: ...


@dataclass
class ArrayImages:
    """An :class:`ImageSource` over images already in memory (the synthetic benchmark)."""

    pixels: np.ndarray  # (N, H, W, 3) uint8

    def __len__(self) -> int:
        return int(self.pixels.shape[0])

    def load(self, index: int) -> np.ndarray:
        return self.pixels[index]


@dataclass
class TripletSplit:
    """One split of (reference image, modification text, target image) triplets.

    ``reference`` and ``target`` index into :attr:`CIRDataset.image_ids`. ``target`` is -1
    where a split has no targets (CIRR's test1). ``group`` names the gallery a query is
    ranked against (a FashionIQ category; ``"all"`` otherwise). ``subset`` optionally holds,
    per query, the image indices of a small candidate set (CIRR's ``img_set.members``).
    """

    sample_ids: list[str]
    reference: np.ndarray
    texts: list[str]
    target: np.ndarray
    group: list[str] | None = None
    subset: list[np.ndarray] | None = None
    extra: dict[str, list] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.reference = np.asarray(self.reference, dtype=np.int64)
        self.target = np.asarray(self.target, dtype=np.int64)
        n = len(self.sample_ids)
        if len(self.reference) != n or len(self.target) != n or len(self.texts) != n:
            raise ValueError(
                f"triplet split columns differ in length: {n} ids, {len(self.reference)} "
                f"references, {len(self.texts)} texts, {len(self.target)} targets"
            )
        if len(set(self.sample_ids)) != n:
            raise ValueError("triplet split has duplicate sample ids")

    def __len__(self) -> int:
        return len(self.sample_ids)

    @property
    def groups(self) -> list[str]:
        """Per-query gallery group names (``"all"`` when the dataset has one gallery)."""
        return self.group if self.group is not None else ["all"] * len(self)


@dataclass(frozen=True)
class EvalProtocol:
    """How a dataset's validation split is scored; recorded with every metrics row.

    ``exclude_reference``: the reference image is removed from the ranking (its score set
    to -inf), as ConeSep and CIRR do; CLIP4Cir/SPRC/TME keep it for FashionIQ.
    """

    name: str
    exclude_reference: bool
    recall_at: tuple[int, ...] = (1, 5, 10, 50)
    subset_recall_at: tuple[int, ...] = ()

    def describe(self) -> str:
        """A short, stable text form for the results tables."""
        ref = "ref-excluded" if self.exclude_reference else "ref-kept"
        ks = ",".join(str(k) for k in self.recall_at)
        sub = ("+subset@" + ",".join(str(k) for k in self.subset_recall_at)) if self.subset_recall_at else ""
        return f"{self.name}:{ref}:R@{ks}{sub}"


# A function from a dataset's per-group metrics to extra headline rows, e.g. FashionIQ's
# average over categories or CIRR's (R@5 + R_subset@1) / 2. Input and output are
# {group: {metric: value}}.
SummaryFn = Callable[[dict[str, dict[str, float]]], dict[str, dict[str, float]]]


@dataclass
class CIRDataset:
    """A composed-image-retrieval dataset: images, a training split, a validation split.

    ``gallery`` maps each validation group to the image indices it is ranked against
    (for the synthetic benchmark, every validation image). ``key`` identifies the exact
    content (name, parameters, generator version) for caches and results.
    """

    name: str
    key: str
    image_ids: list[str]
    images: ImageSource
    train: TripletSplit
    val: TripletSplit
    gallery: dict[str, np.ndarray]
    protocol: EvalProtocol
    summarize: SummaryFn | None = None
    info: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.image_ids) != len(self.images):
            raise ValueError(f"{self.name}: {len(self.image_ids)} image ids but {len(self.images)} images")
        for split_name, split in (("train", self.train), ("val", self.val)):
            for column in ("reference", "target"):
                values = getattr(split, column)
                bad = (values < -1) | (values >= len(self.image_ids))
                if column == "reference":
                    bad |= values < 0
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise ValueError(
                        f"{self.name}/{split_name}: sample {split.sample_ids[i]!r} has an out-of-range "
                        f"{column} image index {int(values[i])}"
                    )
