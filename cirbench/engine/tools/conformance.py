"""What a plugin must provide, checked: one function per kind, each returning the list of
problems (empty: it conforms). ``cirbench check-plugin FILE`` runs them on every plugin a
file defines; ``tests/test_plugin_kinds.py`` runs them on every registered one.

- a dataset loads into a :class:`~cirbench.data.base.CIRDataset` whose content key is the
  one ``key()`` announced, twice the same, with images, texts and a gallery holding every
  validation target;
- a noise protocol proposes, deterministically in its generator, in-range images and texts
  for every sample, nothing at rate 0, and a manifest whose noisy samples carry a type;
- a backbone builds the same model from the same seed and composes queries and targets of
  one width, and a method trains on it through the real loop (as below);
- a method trains through the real loop for :data:`EPOCHS` epochs of batches of
  :data:`BATCH_SIZE` (7 steps an epoch on the micro set's 60 triplets, the last three a
  triplet short, as a grid's last batches are), every step's output and the epoch's kept set
  checked against the contract (:mod:`cirbench.engine.cell.step_rules`, whose message is
  printed as the cell would stop with it), with finite losses and sane recalls.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from cirbench.backbones.base import OPTIONAL_CAPABILITIES, Backbone, TextBatch, capabilities
from cirbench.backbones.registry import BACKBONES, BackboneFactory
from cirbench.backbones.tiny_pretrain import build_tiny
from cirbench.settings.config import build_config
from cirbench.data.base import CIRDataset
from cirbench.data.datasets.loader import DatasetLoader
from cirbench.data.datasets.dataset_rules import dataset_rule_problems
from cirbench.data.noise.injection import inject_noise
from cirbench.data.noise.rules import NoiseProtocolError, proposal_problems
from cirbench.data.noise.proposal import NoiseContext, NoiseProtocol
from cirbench.data.datasets.registry import ShapesLoader
from cirbench.engine.cell.features import image_tokens
from cirbench.engine.cell.step_rules import MethodContractError
from cirbench.engine.cell.train import train_cell
from cirbench.method import Method
from cirbench.plugins import discover

MICRO = ShapesLoader("conformance micro set", n_train_scenes=30, n_val_scenes=10)
"""The small generated dataset the checks of a protocol, a backbone and a method run on."""
EPOCHS, BATCH_SIZE = 2, 9
"""What a method is trained for: two epochs (so an epoch's start after the first, and
every later step, are seen) in batches of at most 9 (60 triplets: 9, 9, 9, 9, 8, 8, 8)."""


def micro_dataset(cache_dir: Path) -> CIRDataset:
    """:data:`MICRO`, generated under ``cache_dir``."""
    return MICRO(cache_dir, None)


def _kind_attributes(obj: object, needed: dict[str, type]) -> list[str]:
    """The attributes of ``needed`` that ``obj`` lacks or holds with another type."""
    return [f"{name} must be a {kind.__name__}, got {getattr(obj, name, None)!r}"
            for name, kind in needed.items() if not isinstance(getattr(obj, name, None), kind)]


def dataset_problems(loader: DatasetLoader, cache_dir: Path, data_root: Path | None = None) -> list[str]:
    """What is wrong with the dataset ``loader`` (see the module docstring)."""
    problems = _kind_attributes(loader, {"description": str, "files": bool})
    key = loader.key()
    dataset = loader(cache_dir, data_root)
    if not isinstance(dataset, CIRDataset):
        return problems + [f"__call__ returned {type(dataset).__name__}, not a CIRDataset"]
    if key is not None and key != dataset.key:
        problems.append(f"key() is {key!r} but the loaded dataset's key is {dataset.key!r}")
    problems += dataset_rule_problems(dataset)
    image = np.asarray(dataset.images.load(0))
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
        problems.append(f"images must be uint8 (H, W, 3) arrays, got {image.dtype} {image.shape}")
    again = loader(cache_dir, data_root)
    if again.key != dataset.key or again.train.texts != dataset.train.texts:
        problems.append("two loads differ: a dataset must be deterministic")
    return problems


def noise_problems(protocol: type[NoiseProtocol], dataset: CIRDataset) -> list[str]:
    """What is wrong with the noise protocol class ``protocol``, tried on ``dataset``."""
    problems = _kind_attributes(protocol, {"name": str, "description": str})
    features = np.random.default_rng(0).standard_normal((len(dataset.image_ids), 16)).astype(np.float32)
    context = NoiseContext(dataset, lambda: features)
    n = len(dataset.train)
    first = protocol().propose(dataset.train, 0.5, np.random.default_rng(0), context)
    problems += proposal_problems(first, n, len(dataset.image_ids))
    if problems:
        return problems
    second = protocol().propose(dataset.train, 0.5, np.random.default_rng(0), context)
    if any(not np.array_equal(getattr(first, f), getattr(second, f)) for f in ("reference", "text_source", "target", "attempted")):
        problems.append("two proposals from the same generator differ: propose must be deterministic in rng")
    try:
        manifests = [inject_noise(dataset, protocol.name, rate, 0, lambda: features)[1] for rate in (0.0, 0.5, 0.5)]
    except NoiseProtocolError as exc:  # a mislabelled sample: the rule's own words
        return problems + exc.problems
    if manifests[0].is_noisy.any():
        problems.append(f"at rate 0 it makes {int(manifests[0].is_noisy.sum())} samples noisy")
    if not manifests[1].is_noisy.any():
        problems.append("at rate 0.5 it makes no sample noisy")
    if manifests[1].hash != manifests[2].hash:
        problems.append("two injections with one seed give different manifests")
    return problems


def _trained_problems(method_cls: type[Method], backbone: Backbone, dataset: CIRDataset, cache_dir: Path) -> list[str]:
    """What goes wrong when ``method_cls`` trains :data:`EPOCHS` epochs in batches of
    :data:`BATCH_SIZE` on ``backbone`` at 50% noise."""
    tokens = image_tokens(dataset, backbone, cache_dir, torch.device("cpu"))
    noisy, manifest = inject_noise(dataset, "thirds", 0.5, 0)
    config = build_config(method_cls.Config, {}, method_cls.name)
    result = train_cell(method_cls, config, backbone, dataset, noisy, manifest, tokens, EPOCHS, BATCH_SIZE, 0)
    problems = []
    losses = result.tables["losses"]
    if "total" not in set(losses.name) or not np.isfinite(losses.value).all():
        problems.append("the training losses are missing or not finite")
    recalls = [v for group in result.final.values() for v in group.values()]
    if not recalls or not all(0.0 <= v <= 1.0 for v in recalls if not math.isnan(v)):
        problems.append(f"validation recalls out of [0, 1]: {result.final}")
    purity = result.tables["purity"]
    if (method_cls.partitions or method_cls.scores_noise) and purity.empty:
        problems.append("it declares partitions or scores_noise but recorded no per-sample view")
    return problems


def backbone_problems(factory: BackboneFactory, cache_dir: Path, method: type[Method], weights: str | None = None) -> list[str]:
    """What is wrong with the backbone ``factory`` (``method``: the one trained on it)."""
    problems = _kind_attributes(factory, {"description": str, "default_lr": float})
    backbone = factory(0, cache_dir, weights)
    if not isinstance(backbone, Backbone):
        return problems + [f"__call__ returned {type(backbone).__name__}, not a Backbone"]
    same = factory(0, cache_dir, weights)
    if any(not torch.equal(a, b) for a, b in zip(backbone.state_dict().values(), same.state_dict().values())):
        problems.append("two backbones from one seed differ: the seed must decide the initialisation")
    dataset = micro_dataset(cache_dir)
    pixels = backbone.preprocess([dataset.images.load(i) for i in range(2)])
    tokens = backbone.encode_image_tokens(pixels)
    text = backbone.tokenize(["make it red", "blue"])
    if tuple(pixels.shape[1:]) != tuple(backbone.image_shape) or tokens.ndim != 3 or not isinstance(text, TextBatch):
        problems.append(f"preprocess gives {tuple(pixels.shape)} for image_shape {backbone.image_shape}; "
                        f"image tokens must be (B, P, D), got {tuple(tokens.shape)}")
        return problems
    query, target = backbone.composed_feature(tokens, text), backbone.target_features(tokens)
    if query.shape[-1] != target.shape[-1]:
        problems.append(f"composed queries ({query.shape[-1]}) and targets ({target.shape[-1]}) differ in width")
    if not (isinstance(backbone.tower_key(), str) and isinstance(backbone.start_key(), str)):
        problems.append("tower_key() and start_key() must be str")
    return problems + _trained_problems(method, backbone, dataset, cache_dir)


def method_problems(method_cls: type[Method], cache_dir: Path) -> list[str]:
    """What is wrong with the method ``method_cls``, trained on ``tiny`` from a random start."""
    problems = _kind_attributes(method_cls, {"name": str, "version": str})
    return problems + _trained_problems(method_cls, build_tiny("random", 0, cache_dir), micro_dataset(cache_dir), cache_dir)


def check_plugin_file(path: Path, cache_dir: Path) -> dict[str, list[str]]:
    """Every plugin ``path`` (a file or folder) defines, as ``"<kind> <name>"``, with its
    problems; the discovery's errors (a file that does not import, defines nothing) under
    ``"--plugin"``. A backbone is checked by training ``sprc`` on it."""
    discovery = discover([Path(path)])
    if discovery.errors:
        return {"--plugin": discovery.errors}
    own = [(kind, name) for kind, name, source in discovery.found if not source.startswith("built-in")]
    if not own:
        return {"--plugin": [f"{path}: no plugin found"]}
    checks = {
        "method": lambda name: method_problems(discovery.methods.get(name), cache_dir),
        "dataset": lambda name: dataset_problems(discovery.registries["dataset"].get(name), cache_dir),
        "noise protocol": lambda name: noise_problems(discovery.registries["noise protocol"].get(name), micro_dataset(cache_dir)),
        "backbone": lambda name: backbone_problems(discovery.registries["backbone"].get(name), cache_dir,
                                                   discovery.methods.get("sprc")),
    }
    results = {}
    for kind, name in own:
        try:
            results[f"{kind} {name}"] = checks[kind](name)
        except MethodContractError as exc:  # the message a cell that breaks the contract stops with
            results[f"{kind} {name}"] = [str(exc)]
        except Exception as exc:  # a plugin that raises has that as its problem
            results[f"{kind} {name}"] = [f"raised {type(exc).__name__}: {exc}"]
    return results


CHECKED = {
    "method": f"trained {EPOCHS} epochs of 7 steps (batches of {BATCH_SIZE}, the last three of {BATCH_SIZE - 1}) on tiny "
              "(random start) at 50% noise: every step's output as the contract wants it (a finite scalar loss that "
              "requires grad; a boolean mask and finite float scores of the batch's length, or None; all on the batch's "
              "device), the batch left unchanged, every epoch's kept set not empty, recalls in [0, 1], a per-sample view "
              "if it partitions or scores noise",
    "dataset": "loaded twice (deterministic, its key() the loaded key), at least 2 training and 1 validation triplets, str "
               "texts, a gallery of in-range images per group holding every target, uint8 (H, W, 3) images",
    "noise protocol": "one in-range value per sample, deterministic in rng, nothing noisy at rate 0 and something at 0.5, one "
                      "manifest per seed, every changed sample typed (not 'clean')",
    "backbone": "built twice from one seed alike, preprocess and image-token shapes, TextBatch, query and target widths, "
                f"str keys, sprc trained {EPOCHS} epochs in batches of {BATCH_SIZE}",
}
"""What ``check-plugin`` checks of each kind, for the line under its verdict."""


def checked_line(plugin: str, cache_dir: Path) -> str:
    """The line under ``plugin``'s verdict (``"<kind> <name>"``, as :func:`check_plugin_file`
    names it): what was checked, and for a backbone the optional capabilities it offers and
    the built-in methods refused on it for lacking one."""
    kind, name = plugin.rsplit(" ", 1)
    line = f"checked: {CHECKED[kind]}"
    if kind != "backbone":
        return line
    offered = capabilities(BACKBONES.get(name)(0, cache_dir, None))
    methods = discover().methods
    refused = [m for m in methods if set(methods.get(m).needs) - offered]
    lacking = [c for c in OPTIONAL_CAPABILITIES if c not in offered]
    return (f"{line}; optional capabilities: {', '.join(sorted(offered)) or 'none'}"
            + (f" (lacks {', '.join(lacking)}: {', '.join(refused) or 'no method'} refused on it)" if lacking else ""))
