"""Noisy Triplet Correspondence (NTC) injection with a truthful ground-truth manifest.

A noise protocol proposes, for the training split, a new reference, text and target for
each sample. This module turns the proposal into a :class:`NoiseManifest`, deciding the
flag of every sample from what actually changed: a permuted value that landed back on its
own sample (or on an equal value) leaves that sample clean, unlike the public TME/ConeSep
code, which counts it as noisy. Only the training split is ever corrupted.

Protocols register under a name in :data:`NOISE_PROTOCOLS`; a protocol (e.g. hard noise by
nearest-neighbour caption swap, :mod:`cirbench.data.noise.hard`) is one class with a ``propose``
method returning a :class:`~cirbench.data.noise.proposal.Proposal`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from cirbench.data.base import CIRDataset, TripletSplit
from cirbench.data.noise.hard import HardProtocol
from cirbench.data.noise.rules import NoiseProtocolError, mislabel_problems, proposal_problems
from cirbench.data.noise.proposal import NOISE_CONTRACT, NoiseContext, NoiseProtocol, Proposal, choose_noisy, untouched
from cirbench.data.noise.release import ReleaseProtocol
from cirbench.registry import Registry
from cirbench.results.atomic import atomic_write_parquet

__all__ = ["NOISE_CONTRACT", "NOISE_PROTOCOLS", "NOISE_TYPES", "NoiseContext", "NoiseManifest", "NoiseProtocol", "Proposal", "choose_noisy",
           "inject_noise"]

NOISE_TYPES = ("clean", "reference", "caption", "target")
"""The types the built-in protocols record; a plugin protocol may record others (the report reads them from the results)."""


class ThirdsProtocol(NoiseProtocol):
    """The TME/ConeSep protocol: the chosen samples are cut into thirds whose references,
    texts and targets are permuted among themselves, respectively (seeded here)."""

    name = "thirds"
    description = "TME/ConeSep protocol: permute references, texts, targets in thirds of the chosen samples"
    noise_types = {"reference": "reference image swapped", "caption": "caption swapped", "target": "target image swapped"}

    def propose(self, split: TripletSplit, rate: float, rng: np.random.Generator, context: NoiseContext) -> Proposal:
        out = untouched(split)
        chosen = choose_noisy(len(split), rate, rng)
        cut1, cut2 = int(len(chosen) / 3), int(2 * len(chosen) / 3)
        refs, texts, targets = chosen[:cut1], chosen[cut1:cut2], chosen[cut2:]
        out.reference[refs] = split.reference[rng.permutation(refs)]
        out.text_source[texts] = rng.permutation(texts)
        out.target[targets] = split.target[rng.permutation(targets)]
        out.attempted[refs], out.attempted[texts], out.attempted[targets] = "reference", "caption", "target"
        return out


class CaptionProtocol(NoiseProtocol):
    """Classic noisy correspondence: every chosen sample gets another chosen sample's text
    (a cyclic shift of a random order, so no sample keeps its own position's text)."""

    name = "caption"
    description = "every chosen triplet gets another triplet's modification text"
    noise_types = {"caption": "caption swapped with another triplet's"}

    def propose(self, split: TripletSplit, rate: float, rng: np.random.Generator, context: NoiseContext) -> Proposal:
        out = untouched(split)
        order = rng.permutation(choose_noisy(len(split), rate, rng))
        if len(order) >= 2:
            out.text_source[order] = np.roll(order, -1)
            out.attempted[order] = "caption"
        return out


NOISE_PROTOCOLS: Registry[type[NoiseProtocol]] = Registry("noise protocol", (NOISE_CONTRACT,))
for _builtin in (ThirdsProtocol, CaptionProtocol, HardProtocol, ReleaseProtocol):  # as a plugin's class is (cirbench.plugins)
    NOISE_PROTOCOLS.register(_builtin)


@dataclass
class NoiseManifest:
    """The ground truth of one noisy training split: one row per training sample.

    Columns: ``sample_id, is_noisy, noise_type, reference_id, text_source_id, target_id,
    original_reference_id, original_target_id`` (image ids and sample ids, not indices).
    """

    dataset_key: str
    protocol: str
    rate: float
    seed: int
    table: pd.DataFrame

    @property
    def hash(self) -> str:
        """A content hash of the table (sha256 of its canonical CSV form, first 16 hex)."""
        canonical = self.table.to_csv(index=False, float_format="%.17g").encode()
        return hashlib.sha256(canonical).hexdigest()[:16]

    @property
    def is_noisy(self) -> np.ndarray:
        """Boolean flag per training sample, in split order."""
        return self.table["is_noisy"].to_numpy(dtype=bool)

    @property
    def noise_type(self) -> np.ndarray:
        """Noise type name per training sample, in split order."""
        return self.table["noise_type"].to_numpy(dtype=object)

    def save(self, directory: Path) -> Path:
        """Write the manifest as parquet under ``directory`` (atomically); returns the path."""
        directory.mkdir(parents=True, exist_ok=True)
        name = f"{self.dataset_key}-{self.protocol}-{self.rate:g}-seed{self.seed}-{self.hash}.parquet"
        path = directory / name
        if not path.exists():
            atomic_write_parquet(self.table, path)
        return path


def inject_noise(
    dataset: CIRDataset,
    protocol: str,
    rate: float,
    seed: int,
    image_features: Callable[[], np.ndarray] | None = None,
) -> tuple[TripletSplit, NoiseManifest]:
    """Corrupt ``dataset.train`` with ``protocol`` at ``rate``; return the noisy split and
    its manifest. The flag of each sample is decided from what actually changed."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"noise rate must be in [0, 1), got {rate}")
    split = dataset.train
    proto: NoiseProtocol = NOISE_PROTOCOLS.get(protocol)()
    rng = np.random.default_rng(seed)
    proposal = proto.propose(split, rate, rng, NoiseContext(dataset, image_features))
    where = f"noise protocol {protocol!r} ({NOISE_PROTOCOLS.entry(protocol).source}) at rate {rate:g}, seed {seed}"
    problems = proposal_problems(proposal, len(split), len(dataset.image_ids))
    if problems:
        raise NoiseProtocolError(where, problems)

    texts = np.asarray(split.texts, dtype=object)
    new_texts = texts[proposal.text_source] if proposal.texts is None else np.asarray(proposal.texts, dtype=object)
    changed_ref = proposal.reference != split.reference
    changed_text = new_texts != texts
    changed_target = proposal.target != split.target
    is_noisy = changed_ref | changed_text | changed_target
    noise_type = np.where(is_noisy, proposal.attempted, "clean").astype(object)
    problems = mislabel_problems(split.sample_ids, {"reference": changed_ref, "text": changed_text, "target": changed_target},
                                 noise_type)
    if problems:
        raise NoiseProtocolError(where, problems)

    ids = np.asarray(dataset.image_ids, dtype=object)
    sample_ids = np.asarray(split.sample_ids, dtype=object)
    table = pd.DataFrame(
        {
            "sample_id": split.sample_ids,
            "is_noisy": is_noisy,
            "noise_type": noise_type,
            "reference_id": ids[proposal.reference],
            "text_source_id": sample_ids[proposal.text_source],
            "target_id": np.where(proposal.target >= 0, ids[proposal.target], ""),
            "original_reference_id": ids[split.reference],
            "original_target_id": np.where(split.target >= 0, ids[split.target], ""),
            # only for a protocol that writes texts, so that the other manifests (and their hashes) stay as they were
            **({"text": new_texts} if proposal.texts is not None else {}),
        }
    )
    noisy_split = replace(split, reference=proposal.reference, texts=list(new_texts), target=proposal.target)
    return noisy_split, NoiseManifest(dataset.key, protocol, float(rate), int(seed), table)
