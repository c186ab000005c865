"""The rules a loaded :class:`~cirbench.data.base.CIRDataset` must keep before anything
trains on it: enough triplets, texts that are strings, a gallery for every validation
group with in-range images holding each query's target, and in-range candidate subsets.
(:class:`~cirbench.data.base.CIRDataset` itself refuses out-of-range triplet indices when
built.) ``check-plugin`` and the grid's pre-flight apply them; each problem names the
split, the sample and the rule."""

from __future__ import annotations

import numpy as np

from cirbench.data.base import CIRDataset, TripletSplit


def _split_problems(name: str, split: TripletSplit, n_images: int) -> list[str]:
    problems = []
    bad = next((i for i, t in enumerate(split.texts) if not isinstance(t, str)), None)
    if bad is not None:
        problems.append(f"{name}: sample {split.sample_ids[bad]!r} has a text of type {type(split.texts[bad]).__name__} "
                        "(rule: every text is a str)")
    if split.group is not None and len(split.group) != len(split):
        problems.append(f"{name}: {len(split.group)} groups for {len(split)} samples (rule: one group per sample)")
    for i, members in enumerate(split.subset or []):
        members = np.asarray(members)
        if ((members < 0) | (members >= n_images)).any():
            problems.append(f"{name}: sample {split.sample_ids[i]!r} has a subset image index out of range "
                            f"(rule: in [0, {n_images}))")
            break
    return problems


def _gallery_problems(dataset: CIRDataset) -> list[str]:
    problems, n_images, val = [], len(dataset.image_ids), dataset.val
    groups = np.asarray(val.groups, dtype=object)
    for group in sorted(set(val.groups) - set(dataset.gallery)):
        problems.append(f"validation group {group!r} has no gallery (rule: gallery maps every group to image indices)")
    for group, gallery in sorted(dataset.gallery.items()):
        gallery = np.asarray(gallery)
        if gallery.ndim != 1 or not np.issubdtype(gallery.dtype, np.integer) or not len(gallery):
            problems.append(f"gallery {group!r} is not a non-empty 1-d array of image indices (got {gallery.dtype} "
                            f"{gallery.shape})")
            continue
        if ((gallery < 0) | (gallery >= n_images)).any():
            problems.append(f"gallery {group!r} holds an image index out of range (rule: in [0, {n_images}))")
            continue
        rows = np.flatnonzero((groups == group) & (val.target >= 0))
        missing = rows[~np.isin(val.target[rows], gallery)]
        if len(missing):
            problems.append(f"validation query {val.sample_ids[int(missing[0])]!r}: its target is not in its gallery "
                            f"{group!r}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                            + " (rule: every validation target is ranked)")
    return problems


def dataset_rule_problems(dataset: CIRDataset) -> list[str]:
    """What is wrong with the loaded ``dataset`` (see the module docstring); empty: it keeps the rules."""
    problems = []
    if len(dataset.train) < 2 or len(dataset.val) < 1:
        problems.append(f"too few triplets: {len(dataset.train)} training, {len(dataset.val)} validation "
                        "(rule: at least 2 and 1)")
    for name, split in (("train", dataset.train), ("val", dataset.val)):
        problems += _split_problems(name, split, len(dataset.image_ids))
    return problems + _gallery_problems(dataset)
