"""Plugins for exploring the embedded default (issue 43): a ``tiny`` backbone that starts
from any start file made by ``make_start.py``, and ``shapes`` datasets of other sizes and
generator seeds.

``cirbench calibrate --plugin experiments/exploration/plugin.py --backbone tiny-file
--weights datasets/starts/NAME.pt --dataset shapes-s10000`` calibrates one setting; the
start's digest is its identity in the run ids, so two starts are never compared as one.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from cirbench.backbones.base import Backbone, state_digest
from cirbench.backbones.registry import BackboneFactory
from cirbench.backbones.tiny import TinyBackbone
from cirbench.backbones.tiny_start import TinyStart
from cirbench.data.datasets.registry import ShapesLoader

def load_start_file(path: str | Path, seed: int = 0) -> TinyBackbone:
    """A ``tiny`` backbone holding the start in ``path`` (``make_start.py``'s layout: the
    tower's state, the composer's, whose sizes are read from its tensors, and ``info``)."""
    payload = torch.load(Path(path), weights_only=True)
    try:
        backbone = TinyStart(payload["tower"], payload["composer"], {"tower": "file"}).backbone(seed)
    except ValueError as exc:
        raise ValueError(f"start file {path}: {exc}") from None
    backbone.pretrained_start = f"file-{state_digest(payload['composer']):08x}"
    return backbone


class TinyFromFile(BackboneFactory):
    """``tiny`` started from a start file given as ``--weights PATH``."""

    name = "tiny-file"
    description = "exploration: tiny started from a start file (--weights PATH, made by experiments/exploration/make_start.py)"
    default_lr = TinyBackbone.default_lr

    def start_identity(self, weights: str | None) -> str:
        """The start file's sha256 prefix (what a run id holds for the start)."""
        if not weights:
            raise ValueError("tiny-file needs --weights PATH (a start file)")
        return "file-" + hashlib.sha256(Path(weights).read_bytes()).hexdigest()[:12]

    def __call__(self, seed: int, cache_dir: Path, weights: str | None) -> Backbone:
        if not weights:
            raise ValueError("tiny-file needs --weights PATH (a start file)")
        return load_start_file(weights, seed)


def _shapes(name: str, **params: int) -> type[ShapesLoader]:
    description = f"exploration: shapes with {params}"

    class Sized(ShapesLoader):
        def __init__(self) -> None:
            super().__init__(description, **params)

    Sized.name = name
    Sized.__name__ = Sized.__qualname__ = "Shapes_" + name.replace("-", "_")
    return Sized


ShapesS5000 = _shapes("shapes-s5000", n_train_scenes=5000)
ShapesS10000 = _shapes("shapes-s10000", n_train_scenes=10000)
ShapesS20000 = _shapes("shapes-s20000", n_train_scenes=20000)
ShapesS10000G1 = _shapes("shapes-s10000-g1", n_train_scenes=10000, seed=1)
ShapesS10000G2 = _shapes("shapes-s10000-g2", n_train_scenes=10000, seed=2)
ShapesS5000G1 = _shapes("shapes-s5000-g1", n_train_scenes=5000, seed=1)
ShapesS5000G2 = _shapes("shapes-s5000-g2", n_train_scenes=5000, seed=2)


def _tiny_file_at(lr: float, tag: str) -> type[TinyFromFile]:
    """``tiny-file`` whose fine-tune runs at ``lr`` instead of the default's rate."""

    class AtRate(TinyFromFile):
        default_lr = lr

        def __call__(self, seed: int, cache_dir: Path, weights: str | None) -> Backbone:
            backbone = super().__call__(seed, cache_dir, weights)
            backbone.default_lr = lr  # the training loop reads the built backbone's rate
            return backbone

    AtRate.name = f"tiny-file-{tag}"
    AtRate.description = f"exploration: tiny-file fine-tuned at lr {lr:g}"
    AtRate.__name__ = AtRate.__qualname__ = "TinyFromFile_" + tag.replace(".", "_").replace("-", "_")
    return AtRate


TinyFileHalfRate = _tiny_file_at(TinyBackbone.default_lr / 2, "lr-half")
TinyFileDoubleRate = _tiny_file_at(TinyBackbone.default_lr * 2, "lr-double")
TinyFileRate6e4 = _tiny_file_at(6e-4, "lr-6e-4")
TinyFileRate1e3 = _tiny_file_at(1e-3, "lr-1e-3")
