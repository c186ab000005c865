"""The released start of the ``tiny`` backbone (``--weights cir``, the default): one small
versioned file inside the package (``cirbench/backbones/starts/tiny-cir-v<N>.pt``) holding
the frozen tower's state and the pre-trained composer's, checked against the sha256
recorded in :mod:`cirbench.backbones.tiny_release` every time it is read.

The papers all fine-tune one released BLIP-2 checkpoint; every ``tiny`` cell likewise
fine-tunes this one file, so no machine pre-trains the default start (the pre-training,
:mod:`cirbench.backbones.tiny_pretrain`, gives other last bits on another CPU kind or
thread count) and the start key recorded in ``runs`` is the same everywhere.
:mod:`cirbench.backbones.tiny_rebuild` re-runs the pre-training and re-releases the file.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from pathlib import Path

import torch

from cirbench.backbones import tiny_release
from cirbench.backbones.base import state_digest
from cirbench.backbones.tiny import TinyBackbone

STARTS_DIR = Path(__file__).resolve().parent / "starts"
"""Where the released start lives (package data)."""
FORMAT = 1
"""The layout of a start file: ``{"format", "tower", "composer", "info"}``."""


class StartFileError(RuntimeError):
    """A start file that is missing, altered (its sha256 is not the recorded one) or unreadable."""


@dataclass
class TinyStart:
    """A ``tiny`` start: the frozen tower's state, the composer's (every other tensor of a
    :class:`TinyBackbone`) and where it came from (``info``, plain strings)."""

    tower: dict[str, torch.Tensor]
    composer: dict[str, torch.Tensor]
    info: dict[str, str] = field(default_factory=dict)
    origin: str = "pre-trained here"
    """Where it was read from, for messages (``the start released with cirbench (<file>)``)."""

    def backbone(self, seed: int = 0) -> TinyBackbone:
        """A fresh :class:`TinyBackbone` holding this start (every weight is loaded, so
        ``seed`` changes nothing)."""
        backbone = TinyBackbone(seed=seed, tower=self.info.get("tower", "random"), tower_state=self.tower,
                                **composer_shape(self.composer))
        missing, unexpected = backbone.load_state_dict(self.composer, strict=False)
        missing = [name for name in missing if not name.startswith("tower.")]
        if missing or unexpected:
            raise ValueError(f"the start does not fit the tiny backbone: missing {missing}, unexpected {unexpected}")
        backbone.pretrained_start = f"cir-{state_digest(self.composer):08x}"
        backbone.start_origin = self.origin
        return backbone

    def key(self) -> str:
        """The start key a backbone holding this start records (tower key + composer digest)."""
        return self.backbone().start_key()


def composer_shape(composer: dict[str, torch.Tensor]) -> dict[str, int]:
    """The :class:`TinyBackbone` sizes a composer state was trained at (width, projection
    size, query tokens, layers), read from its tensors' shapes."""
    _, queries, hidden = composer["query_tokens"].shape
    layers = {name.split(".")[1] for name in composer if name.startswith("layers.")}
    return {"hidden_size": int(hidden), "embed_dim": int(composer["text_proj.weight"].shape[0]),
            "num_query_tokens": int(queries), "num_layers": len(layers)}


def start_bytes(start: TinyStart) -> bytes:
    """``start`` serialised as a start file (``torch.save`` into memory, so that the bytes
    do not depend on the file name they are written to)."""
    buffer = io.BytesIO()
    info = {str(key): f"{value}" for key, value in start.info.items()}  # plain strings: torch.__version__ is not one
    torch.save({"format": FORMAT, "tower": start.tower, "composer": start.composer, "info": info}, buffer)
    return buffer.getvalue()


def read_start(path: Path, sha256: str) -> TinyStart:
    """The start in ``path``, once its sha256 is ``sha256``; :class:`StartFileError` naming
    the file and what is wrong otherwise."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StartFileError(f"tiny start {path} cannot be read ({exc.strerror or exc}): reinstall cirbench (the file is "
                             "package data), or re-release it with `cirbench start rebuild --write`") from None
    found = hashlib.sha256(data).hexdigest()
    if found != sha256:
        raise StartFileError(f"tiny start {path} is not the released file: its sha256 is {found}, expected {sha256} "
                             f"(recorded in {tiny_release.__name__}). Restore it (reinstall cirbench or `git checkout` the "
                             "file), or re-release the start with `cirbench start rebuild --write`")
    try:
        payload = torch.load(io.BytesIO(data), weights_only=True)
        start = TinyStart(dict(payload["tower"]), dict(payload["composer"]), dict(payload.get("info", {})), f"read from {path}")
        if payload.get("format") != FORMAT:
            raise ValueError(f"format {payload.get('format')!r}, this cirbench reads format {FORMAT}")
    except Exception as exc:  # a file with the right digest but another layout: written by another cirbench
        raise StartFileError(f"tiny start {path} cannot be loaded: {exc}") from None
    return start


def shipped_path() -> Path:
    """The released start file of this cirbench (:mod:`cirbench.backbones.tiny_release`)."""
    if not tiny_release.FILE:
        raise StartFileError(f"no tiny start is released in {STARTS_DIR} yet: run `cirbench start rebuild --write`")
    return STARTS_DIR / tiny_release.FILE


def shipped_start() -> TinyStart:
    """The released start, checked against its recorded sha256."""
    return read_start(shipped_path(), tiny_release.SHA256)


def shipped_backbone(seed: int = 0) -> TinyBackbone:
    """A fresh ``tiny`` backbone holding the released start (``--weights cir``); no pre-training."""
    path = shipped_path()
    try:
        return shipped_start().backbone(seed)
    except ValueError as exc:
        raise StartFileError(f"tiny start {path}: {exc}") from None
