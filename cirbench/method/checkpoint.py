"""Trained method weights on disk, with what is needed to rebuild the method.

A checkpoint is one ``torch.save`` file holding only tensors and a JSON string (the
metadata), read back with ``torch.load(..., weights_only=True)``, so loading one never
runs arbitrary pickled code. The frozen image tower is left out (it is rebuilt from the
backbone name, seed and weights, and its ``tower_key`` is checked on load); everything
else in the method's state dict is saved: the composer, the method's own modules and
buffers (per-sample state such as TME's losses included).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

import cirbench
from cirbench.backbones.registry import BACKBONES
from cirbench.settings.config import config_to_dict
from cirbench.method import Batch, Method, TrainingContext
from cirbench.results.atomic import atomic_write

FORMAT = "cirbench-checkpoint-1"


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded into the method it names."""


def frozen_keys(method: Method) -> list[str]:
    """State-dict keys of the backbone's frozen parameters (the tower), left out of a checkpoint."""
    frozen = {id(p) for p in method.backbone.parameters() if not p.requires_grad}
    return [k for k, v in method.state_dict(keep_vars=True).items() if id(v) in frozen]


def save_checkpoint(method: Method, path: Path, metadata: dict[str, Any]) -> Path:
    """Write ``method``'s trainable state and ``metadata`` (JSON-able) to ``path``, atomically.

    The metadata is completed with the method's name, version and config, the training
    context and the backbone's ``tower_key``; the caller adds how to rebuild the backbone
    (``backbone``, ``weights``, ``seed``) and where the data came from."""
    skip = set(frozen_keys(method))
    state = {k: v.detach().cpu().clone() for k, v in method.state_dict().items() if k not in skip}
    ctx = method.context
    meta = {
        **metadata,
        "format": FORMAT,
        "method_name": method.name,
        "method_version": method.version,
        "config": config_to_dict(method.config),
        "context": {"num_train": ctx.num_train, "epochs": ctx.epochs, "batch_size": ctx.batch_size,
                    "steps_per_epoch": ctx.steps_per_epoch, "seed": ctx.seed},
        "tower_key": method.backbone.tower_key(),
        "frozen_keys": sorted(skip),
        "cirbench_version": cirbench.__version__,
    }
    blob = {"format": FORMAT, "metadata": json.dumps(meta, sort_keys=True), "state_dict": state}
    atomic_write(Path(path), lambda tmp: torch.save(blob, tmp))
    return Path(path)


def read_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The metadata and state dict of a checkpoint file (tensors only, never pickled code)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} not found (was the run started with --save?)")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several types for foreign or corrupt files
        raise CheckpointError(f"{path} is not a readable cirbench checkpoint: {exc}") from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a cirbench checkpoint (format {FORMAT!r} expected)")
    return json.loads(blob["metadata"]), blob["state_dict"]


def _no_training_data(shuffle: bool = True) -> Iterator[Batch]:
    raise CheckpointError("a method rebuilt from a checkpoint has no training data to iterate")


@dataclass
class LoadedMethod:
    """A method rebuilt from a checkpoint, in eval mode, and the checkpoint's metadata."""

    method: Method
    metadata: dict[str, Any]


def load_method(path: Path, method_cls: type[Method], cache_dir: Path, device: torch.device) -> LoadedMethod:
    """Rebuild the method of a checkpoint: its backbone (checked against the saved
    ``tower_key``), config and training context, then its weights (strictly: every key
    but the frozen tower's must match)."""
    meta, state = read_checkpoint(path)
    if method_cls.name != meta["method_name"] or method_cls.version != meta["method_version"]:
        raise CheckpointError(
            f"{path} holds {meta['method_name']} version {meta['method_version']}; the installed method is "
            f"{method_cls.name} version {method_cls.version}"
        )
    backbone = BACKBONES.get(meta["backbone"])(int(meta["seed"]), Path(cache_dir), meta.get("weights"))
    if backbone.tower_key() != meta["tower_key"]:
        raise CheckpointError(
            f"{path}: the backbone's frozen tower differs from the one it was trained with "
            f"({backbone.tower_key()} != {meta['tower_key']}); check --weights and the cache directory"
        )
    config = method_cls.Config(**meta["config"])
    c = meta["context"]
    context = TrainingContext(
        num_train=c["num_train"], epochs=c["epochs"], batch_size=c["batch_size"], steps_per_epoch=c["steps_per_epoch"],
        seed=c["seed"], device=device, iterate=_no_training_data,
        noise_flags=np.zeros(c["num_train"], dtype=bool) if method_cls.oracle else None,
    )
    method = method_cls(backbone, config, context)
    result = method.load_state_dict(state, strict=False)
    missing = set(result.missing_keys) - set(meta["frozen_keys"])
    if missing or result.unexpected_keys:
        raise CheckpointError(
            f"{path} does not fit {method_cls.name}: missing {sorted(missing)[:5]}, unexpected {result.unexpected_keys[:5]}"
        )
    return LoadedMethod(method.to(device).eval(), meta)
