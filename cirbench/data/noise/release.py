"""The ``release`` noise protocol: the noisy triplets of the TME release, which HABIT and
INTENT share (their training scripts seed Python's ``random`` with 42 before the data is
read), reproduced on FashionIQ and CIRR.

The releases' ``shuffle()``: ``random.sample`` draws ``int(rate * N)`` positions of the
training triplets in the release's order (FashionIQ: the entries of ``cap.dress.train.json``,
``cap.shirt.train.json`` and ``cap.toptee.train.json`` concatenated; CIRR: those of
``cap.rc2.train.json``); the draw is cut into thirds (at ``int(len / 3)`` and
``int(2 * len / 3)``) whose references, captions and targets are collected, each list
``random.shuffle``-d, and written back: on FashionIQ with ``.pop()`` (the first position of
a third gets the shuffled list's last value), on CIRR by position. FashionIQ moves the
caption pair, which is joined afterwards, so moving the joined text is the same.
:func:`release_moves` restates that with one ``random.Random(seed)``; ``random.shuffle``
permutes by the list's length alone, so shuffling the positions gives the same moves as
shuffling the values.

The shuffle seed is the releases' 42 whatever the cell's seed (the releases train every seed
on one noise instance); a protocol with another shuffle seed is a subclass setting
``shuffle_seed``. The flags are still decided by what changed: a value that lands back on
its own sample (or an equal value) leaves it clean, where the releases count it noisy.

The instance exists only on the release's list: the protocol refuses a dataset other than
FashionIQ or CIRR (the synthetic ``shapes`` has no release order), a FashionIQ subset of
categories, and a training split that left out or reordered any entry of the files
(missing images, ``train_repeats=drop``).
"""

from __future__ import annotations

import random
import re
from itertools import groupby
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from cirbench.data.base import CIRDataset, TripletSplit
from cirbench.data.noise.proposal import NoiseContext, NoiseProtocol, Proposal, untouched

PARTS: tuple[str, ...] = ("reference", "caption", "target")
"""The thirds of the draw, in order: the values each third's samples exchange."""

WRITE_BACK: dict[str, Literal["pop", "position"]] = {"fashioniq": "pop", "cirr": "position"}
"""How each release writes a third's shuffled values back (see the module docstring)."""

RELEASE_FILES: dict[str, tuple[str, ...]] = {
    "fashioniq": tuple(f"captions/cap.{c}.train.json" for c in ("dress", "shirt", "toptee")),
    "cirr": ("captions/cap.rc2.train.json",),
}
"""The training files of each release, in the order the release concatenates them."""

_ORIGIN = re.compile(r"^(?P<file>\S+) #(?P<entry>\d+)$")


@dataclass(frozen=True)
class ReleaseMoves:
    """The releases' instance on ``n`` triplets: per part (:data:`PARTS`), the positions that
    receive a value (``positions``) and the position each one's value comes from (``sources``)."""

    n: int
    positions: dict[str, np.ndarray]
    sources: dict[str, np.ndarray]

    @property
    def drawn(self) -> np.ndarray:
        """Every drawn position, in draw order (the releases count all of them noisy)."""
        return np.concatenate([self.positions[part] for part in PARTS])


def release_moves(n: int, rate: float, seed: int, write_back: Literal["pop", "position"]) -> ReleaseMoves:
    """The releases' ``shuffle()`` on ``n`` triplets at ``rate`` after ``random.seed(seed)``
    (see the module docstring), as the positions each part's values move from."""
    rng = random.Random(seed)
    drawn = rng.sample(range(n), int(rate * n))
    cut1, cut2 = int(len(drawn) * (1 / 3)), int(len(drawn) * (2 / 3))
    thirds = dict(zip(PARTS, (drawn[:cut1], drawn[cut1:cut2], drawn[cut2:])))
    shuffled = {}
    for part in PARTS:  # the releases shuffle the three lists in this order, one generator
        values = list(thirds[part])
        rng.shuffle(values)
        shuffled[part] = values[::-1] if write_back == "pop" else values
    as_array = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    return ReleaseMoves(n, {p: as_array(thirds[p]) for p in PARTS}, {p: as_array(shuffled[p]) for p in PARTS})


def release_order_problem(dataset: CIRDataset) -> str | None:
    """Why ``dataset``'s training split is not the release's list of triplets (None when it is)."""
    files = RELEASE_FILES.get(dataset.name)
    if files is None:
        return (f"dataset {dataset.name!r} has no release order to follow (the releases' instance exists on "
                f"{' and '.join(RELEASE_FILES)} only): use the 'thirds' protocol")
    options = dataset.info.get("options", {})
    if dataset.name == "fashioniq" and options.get("categories", "dress,shirt,toptee") != "dress,shirt,toptee":
        return f"--dataset-option categories={options['categories']}: the release draws over all three categories"
    if options.get("train_repeats", "keep") != "keep":
        return "--dataset-option train_repeats=drop: the release keeps every training entry"
    dropped = [d for d in dataset.info.get("dropped", []) if d.get("split") == "train"]
    if dropped:
        return (f"{len(dropped)} training entries were left out (first: {dropped[0]['sample']}: {dropped[0]['reason']}); "
                "the release's instance needs every entry of the files")
    origins = dataset.train.extra.get("origin")
    if origins is None or len(origins) != len(dataset.train):
        return "the training split does not record where each triplet was read (extra['origin'])"
    parsed = [(m["file"], int(m["entry"])) if (m := _ORIGIN.match(o)) else (o, -1) for o in origins]
    blocks = [(file, [entry for _, entry in group]) for file, group in groupby(parsed, key=lambda p: p[0])]
    if [file for file, _ in blocks] != list(files):
        return f"the training split was read from {', '.join(f for f, _ in blocks)}, not {', '.join(files)} in this order"
    for file, entries in blocks:
        wrong = next((k for k, entry in enumerate(entries) if entry != k), None)
        if wrong is not None:
            return f"{file}: the training split's triplet {wrong} of this file is entry #{entries[wrong]}, not #{wrong}"
    return None


class ReleaseProtocol(NoiseProtocol):
    """The releases' noisy triplets on FashionIQ and CIRR (see the module docstring)."""

    name = "release"
    description = "the TME/HABIT/INTENT releases' instance (Python random, shuffle seed 42) on FashionIQ and CIRR"
    noise_types = {"reference": "reference image swapped", "caption": "caption swapped", "target": "target image swapped"}
    shuffle_seed: ClassVar[int] = 42

    def propose(self, split: TripletSplit, rate: float, rng: np.random.Generator, context: NoiseContext) -> Proposal:
        """The releases' moves on ``split`` (``rng`` unused: the instance is the shuffle seed's)."""
        problem = release_order_problem(context.dataset)
        if problem is not None:
            raise ValueError(f"the 'release' noise protocol: {problem}")
        moves = release_moves(len(split), rate, self.shuffle_seed, WRITE_BACK[context.dataset.name])
        out = untouched(split)
        into, come = moves.positions, moves.sources
        out.reference[into["reference"]] = split.reference[come["reference"]]
        out.text_source[into["caption"]] = come["caption"]
        out.target[into["target"]] = split.target[come["target"]]
        for part in PARTS:
            out.attempted[into[part]] = part
        return out
