"""A noise instance as a file: written by ``cirbench noise export``, read back by
``--noise-file``, so that other runs (and other people's code) train on the same noisy triplets.

The parquet file has one row per training triplet: ``index`` (its position in the training
split), ``sample_id``, ``is_noisy``, ``noise_type``, the values it trains on
(``reference_id``, ``text``, ``target_id``, and ``text_source_id``, the triplet whose text it
carries) and its originals (``original_reference_id``, ``original_target_id``); the schema
metadata names the dataset, its triplet count, the protocol, rate and seed. Reading it back
checks it against the dataset (same dataset, same triplet count, every index and value in
range, the flags what changed) and refuses a bad file with a :class:`NoiseFileError` naming
the file and the entry. :func:`write_release_json` writes the releases' own training files
(FashionIQ's ``captions/cap.<cat>.train.json``, CIRR's ``captions/cap.rc2.train.json``) with
the noisy values in, so that the authors' code trains on the same triplets.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from cirbench.data.base import CIRDataset, TripletSplit
from cirbench.data.noise.injection import NoiseManifest, inject_noise
from cirbench.results.atomic import atomic_write, atomic_write_text

FORMAT = "cirbench-noise-instance/1"
MANIFEST_COLUMNS = ("sample_id", "is_noisy", "noise_type", "reference_id", "text_source_id", "target_id",
                    "original_reference_id", "original_target_id")
COLUMNS = ("index", *MANIFEST_COLUMNS, "text")
RELEASE_FIELDS = {"fashioniq": ("candidate", "captions", "target"), "cirr": ("reference", "caption", "target_hard")}
"""The fields of a release entry that hold a triplet's reference, text and target."""
_ORIGIN = re.compile(r"^(?P<file>\S+) #(?P<entry>\d+)$")


class NoiseFileError(ValueError):
    """A noise-instance file that cannot be used for a dataset (the message names the file and the entry)."""


def file_digest(path: Path) -> str:
    """The sha256 of the file's bytes (first 16 hex): what a run id records of ``--noise-file``."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def write_instance(path: Path, dataset: CIRDataset, noisy: TripletSplit, manifest: NoiseManifest) -> Path:
    """Write the instance (``noisy``, the split as trained on, and its ``manifest``) as parquet at ``path``."""
    frame = manifest.table.copy()
    frame.insert(0, "index", np.arange(len(frame), dtype=np.int64))
    has_text = "text" in frame.columns
    frame["text"] = list(noisy.texts)
    meta = {"format": FORMAT, "dataset": dataset.name, "dataset_key": dataset.key, "n_triplets": len(frame),
            "protocol": manifest.protocol, "rate": manifest.rate, "seed": manifest.seed, "manifest_hash": manifest.hash,
            "protocol_wrote_texts": has_text}
    table = pa.Table.from_pandas(frame[list(COLUMNS)], preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"cirbench": json.dumps(meta).encode()})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))
    return path


def instance_metadata(path: Path) -> dict:
    """The metadata of the instance file ``path`` (NoiseFileError when it is not one)."""
    try:
        raw = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException) as exc:
        raise NoiseFileError(f"{path}: not a readable parquet noise instance ({exc})") from None
    if b"cirbench" not in raw:
        raise NoiseFileError(f"{path}: no cirbench noise-instance metadata (write one with `cirbench noise export`)")
    meta = json.loads(raw[b"cirbench"])
    if meta.get("format") != FORMAT:
        raise NoiseFileError(f"{path}: format {meta.get('format')!r}, not {FORMAT!r}")
    return meta


def _entry_problem(frame: pd.DataFrame, dataset: CIRDataset) -> tuple[int, str] | None:
    """The first row of ``frame`` that does not fit ``dataset``'s training split, and what is wrong."""
    split, n = dataset.train, len(dataset.train)
    images, samples = set(dataset.image_ids), set(split.sample_ids)
    ids = np.asarray(dataset.image_ids, dtype=object)
    seen: set[int] = set()
    for row, entry in enumerate(frame.itertuples(index=False)):
        index = entry.index
        if not isinstance(index, (int, np.integer)) or not 0 <= index < n:
            return row, f"index {index!r} out of range [0, {n})"
        if index in seen:
            return row, f"index {index} repeats an earlier entry's"
        seen.add(int(index))
        if entry.sample_id != split.sample_ids[index]:
            return row, f"sample_id {entry.sample_id!r} is not training triplet {index} ({split.sample_ids[index]!r})"
        originals = (ids[split.reference[index]], ids[split.target[index]] if split.target[index] >= 0 else "")
        if (entry.original_reference_id, entry.original_target_id) != originals:
            return row, f"its original reference/target {entry.original_reference_id!r}/{entry.original_target_id!r} " \
                        f"are not the dataset's {originals[0]!r}/{originals[1]!r} (another version of the files?)"
        for column in ("reference_id", "target_id"):
            if getattr(entry, column) not in images:
                return row, f"{column} {getattr(entry, column)!r} is not an image of dataset {dataset.name!r}"
        if entry.text_source_id not in samples or not isinstance(entry.text, str):
            return row, f"text_source_id {entry.text_source_id!r} is not a training triplet, or its text is not a string"
        changed = (entry.reference_id, entry.text, entry.target_id) != (originals[0], split.texts[index], originals[1])
        if bool(entry.is_noisy) != changed or (entry.noise_type == "clean") == changed:
            return row, f"is_noisy={entry.is_noisy} and noise_type {entry.noise_type!r}, but the triplet " \
                        f"{'changed' if changed else 'is unchanged'} (the flags are what changed)"
    return None


def read_instance(path: Path, dataset: CIRDataset) -> tuple[TripletSplit, NoiseManifest]:
    """The noisy training split and manifest stored in ``path``, checked against ``dataset``
    (see the module docstring); NoiseFileError naming the file and the first bad entry."""
    meta = instance_metadata(path)
    if meta.get("dataset") != dataset.name:
        raise NoiseFileError(f"{path}: an instance of dataset {meta.get('dataset')!r}, not {dataset.name!r}")
    frame = pq.read_table(path).to_pandas()
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise NoiseFileError(f"{path}: missing column(s) {', '.join(missing)}")
    if len(frame) != len(dataset.train) or meta.get("n_triplets") != len(frame):
        raise NoiseFileError(f"{path}: holds {len(frame)} triplets (metadata: {meta.get('n_triplets')}), dataset "
                             f"{dataset.name!r} has {len(dataset.train)} training triplets")
    problem = _entry_problem(frame, dataset)
    if problem is not None:
        row, what = problem
        raise NoiseFileError(f"{path}: entry #{row} (index {frame['index'].iloc[row]}): {what}")
    frame = frame.sort_values("index", kind="stable").reset_index(drop=True)
    position = {name: i for i, name in enumerate(dataset.image_ids)}
    noisy = replace(dataset.train, reference=np.asarray([position[v] for v in frame.reference_id], dtype=np.int64),
                    texts=list(frame.text), target=np.asarray([position[v] for v in frame.target_id], dtype=np.int64))
    columns = list(MANIFEST_COLUMNS) + (["text"] if meta.get("protocol_wrote_texts") else [])
    manifest = NoiseManifest(dataset.key, str(meta["protocol"]), float(meta["rate"]), int(meta["seed"]),
                             frame[columns].reset_index(drop=True))
    return noisy, manifest


def noisy_training(dataset: CIRDataset, protocol: str, rate: float, seed: int, noise_file: Path | None,
                   image_features: Callable[[], np.ndarray] | None = None) -> tuple[TripletSplit, NoiseManifest]:
    """A cell's noisy training split and manifest: the instance of ``noise_file`` (which must
    be ``protocol``'s at ``rate``; it serves every seed) or else the injection of ``protocol``."""
    if noise_file is None:
        return inject_noise(dataset, protocol, rate, seed, image_features)
    noisy, manifest = read_instance(noise_file, dataset)
    if (manifest.protocol, manifest.rate) != (protocol, rate):
        raise NoiseFileError(f"{noise_file}: a {manifest.protocol!r} instance at rate {manifest.rate:g}, not "
                             f"{protocol!r} at {rate:g} (run it with --noise-protocol {manifest.protocol} --noise {manifest.rate:g})")
    return noisy, manifest


def write_release_json(directory: Path, dataset: CIRDataset, manifest: NoiseManifest) -> list[Path]:
    """The release's training files of ``dataset`` with the noisy values of ``manifest`` written
    in (every other field, and every other file, as it was), under ``directory`` at their
    relative paths; the paths written. FashionIQ's files carry caption pairs, so an instance
    whose protocol wrote new texts cannot be written into them."""
    fields = RELEASE_FIELDS.get(dataset.name)
    if fields is None:
        raise NoiseFileError(f"dataset {dataset.name!r} has no release files to write (only {', '.join(RELEASE_FIELDS)})")
    if "text" in manifest.table.columns and dataset.name == "fashioniq":
        raise NoiseFileError(f"protocol {manifest.protocol!r} writes new texts: FashionIQ's files hold caption pairs")
    root = Path(str(dataset.info["data_root"]))
    origins = [_ORIGIN.match(o) for o in dataset.train.extra["origin"]]
    where = {sid: (m["file"], int(m["entry"])) for sid, m in zip(dataset.train.sample_ids, origins)}
    files = {file: json.loads((root / file).read_text(encoding="utf-8")) for file in dict.fromkeys(f for f, _ in where.values())}
    out = {file: copy.deepcopy(entries) for file, entries in files.items()}
    ref, text, target = fields
    texts = manifest.table["text"] if "text" in manifest.table.columns else None
    for i, row in enumerate(manifest.table.itertuples(index=False)):
        file, entry = where[row.sample_id]
        source_file, source_entry = where[row.text_source_id]
        out[file][entry][ref] = row.reference_id
        out[file][entry][text] = texts.iloc[i] if texts is not None else copy.deepcopy(files[source_file][source_entry][text])
        out[file][entry][target] = row.target_id
    written = []
    for file, entries in out.items():
        atomic_write_text(json.dumps(entries, indent=4), directory / file)
        written.append(directory / file)
    return written


def moved_counts(manifest: NoiseManifest) -> dict[str, int]:
    """The number of noisy triplets per noise type (for the command's summary)."""
    counts: dict[str, int] = defaultdict(int)
    for noise_type, noisy in zip(manifest.noise_type, manifest.is_noisy):
        if noisy:
            counts[str(noise_type)] += 1
    return dict(counts)
