"""Every registered method runs a few steps through the real loop and evaluates; the image
interface a method uses for images it builds gives, on every backbone, the batch's own
tokens for unchanged pixels; the methods that use it (and per-sample state) train on the
real backbones' tiny random checkpoints. ``tests/test_backbones_real.py`` runs every
registered method through the CLI on those checkpoints too."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from cirbench.backbones.registry import BACKBONES
from cirbench.data.noise.injection import inject_noise
from cirbench.data.datasets.registry import ShapesLoader
from cirbench.engine.cell.life import run_cell
from cirbench.engine.cell.features import SamplePixels, image_tokens, pixel_encoder
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.engine.cell.online import OnlineTokens
from cirbench.engine.cell.precision import use_precision
from cirbench.engine.cell.train import BatchMaker
from cirbench.plugins import discover
from cirbench.registry import Registry

from fixtures import use_datasets

METHODS = discover().methods.names()


@pytest.mark.parametrize("method", METHODS)
def test_method_conforms(method: str, tmp_path: Path, cache_dir: Path) -> None:
    grid = Grid(GridSpec(methods=[method], noise_rates=[0.5], dataset="shapes-mini", epochs=2, batch_size=128,
                         output=tmp_path, cache_dir=cache_dir))
    (cell,) = grid.cells
    outcome = run_cell(grid.resources, cell, lambda info: None, announce=lambda m: None)
    assert outcome.status == "completed", outcome.error
    recall = outcome.final["all"]
    assert set(recall) >= {"recall@1", "recall@5", "recall@10", "recall@50"}
    assert all(0.0 <= v <= 1.0 for v in recall.values())
    losses = outcome.result.tables["losses"]
    assert np.isfinite(losses.value).all() and "total" in set(losses.name)
    cls = cell.method_cls
    assert isinstance(cls.version, str) and cls.version
    purity = outcome.result.tables["purity"]
    if cls.partitions:
        final = purity[(purity.epoch == 1) & (purity.noise_type == "all")]
        assert len(final) == 1 and final.n_selected.iloc[0] > 0
    if cls.scores_noise:
        assert len(purity) > 0 and purity.auroc.notna().any()
    if not (cls.partitions or cls.scores_noise):
        assert purity.empty


# --- the image interface a method uses for images it builds (INTENT), on every backbone ---


def _has_open_clip() -> bool:
    try:
        import open_clip  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken torchvision import counts as absent
        return False
    return True


needs_open_clip = pytest.mark.skipif(not _has_open_clip(), reason="open_clip (and torchvision) not installed")
BACKBONE_NAMES = ["tiny", "blip2", pytest.param("clip", marks=needs_open_clip)]
MICRO = ShapesLoader("conformance micro set", n_train_scenes=30, n_val_scenes=10)


@pytest.fixture(scope="module")
def micro_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("micro")


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory, micro_root: Path) -> dict[str, str | None]:
    """Tiny random checkpoints of the real backbones (BLIP-2's vocabulary from the micro set)."""
    out: dict[str, str | None] = {"tiny": "random"}
    dataset = MICRO(micro_root, None)
    words = sorted({w for t in dataset.train.texts + dataset.val.texts for w in t.lower().split()})
    if importlib.util.find_spec("transformers") is not None:
        from cirbench.backbones.blip2 import write_random_checkpoint

        out["blip2"] = str(write_random_checkpoint(tmp_path_factory.mktemp("blip2") / "tiny-blip2", words=words))
    if _has_open_clip():
        from cirbench.backbones.clip import write_random_checkpoint as write_clip

        out["clip"] = str(write_clip(tmp_path_factory.mktemp("clip") / "tiny-clip"))
    return out


@pytest.mark.parametrize("features", ["cache", "online", "cache-bf16"])
@pytest.mark.parametrize("backbone_name", BACKBONE_NAMES)
def test_pixels_of_a_sample_encode_to_its_batch_tokens(backbone_name: str, features: str, weights: dict,
                                                       micro_root: Path) -> None:
    """``TrainingContext.pixels`` and ``encode_pixels`` as ``train_cell`` builds them: a
    sample's unchanged pixels give the tokens its batch holds (noise included), from the
    cache (also once the cell runs in bf16) or online."""
    if backbone_name not in weights:
        pytest.skip(f"{backbone_name} is not installed")
    dataset = MICRO(micro_root, None)
    backbone = BACKBONES.get(backbone_name)(0, micro_root, weights[backbone_name]).eval()
    cpu = torch.device("cpu")
    tokens = OnlineTokens(dataset, backbone) if features == "online" else image_tokens(dataset, backbone, micro_root, cpu)
    if features == "cache-bf16":
        use_precision(backbone, cpu, "bf16")
    noisy, manifest = inject_noise(dataset, "thirds", 0.5, 0)
    index = np.flatnonzero(manifest.noise_type == "reference")[:2].tolist() + [0, 3, 5]
    batch = BatchMaker(noisy, tokens, backbone.tokenize(noisy.texts), cpu)(np.asarray(index))
    pixels, encode = SamplePixels(noisy, dataset.images, backbone, cpu), pixel_encoder(backbone, tokens)
    for role in ("reference", "target"):
        image = pixels(batch.index, role)
        assert image.shape == (len(index), *backbone.image_shape)
        torch.testing.assert_close(encode(image), getattr(batch, role), atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="role"):
        pixels(batch.index, "candidate")


@pytest.mark.parametrize("method", ["habit", "intent"])
@pytest.mark.parametrize("backbone_name", ["blip2", pytest.param("clip", marks=needs_open_clip)])
def test_stateful_and_image_pass_methods_train_on_the_real_backbones(method: str, backbone_name: str, weights: dict,
                                                                       micro_root: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """HABIT (per-sample state across epochs) and INTENT (a second image pass on images it
    builds) through the real loop on tiny random checkpoints of ``blip2`` and ``clip``."""
    if backbone_name not in weights:
        pytest.skip(f"{backbone_name} is not installed")
    datasets = Registry("dataset")
    datasets.add("shapes-micro", MICRO)
    use_datasets(monkeypatch, datasets)
    grid = Grid(GridSpec(methods=[method], noise_rates=[0.5], dataset="shapes-micro", epochs=2, batch_size=20,
                         backbone=backbone_name, weights=weights[backbone_name], output=tmp_path, cache_dir=micro_root))
    outcome = run_cell(grid.resources, grid.cells[0], lambda info: None, announce=lambda m: None)
    assert outcome.status == "completed", outcome.error
    losses = outcome.result.tables["losses"]
    assert np.isfinite(losses.value).all()
    names = set(losses[losses.epoch == 0].name)
    assert ({"caco", "odl", "stu"} if method == "intent" else {"rank", "soft", "kl"}) <= names
    if method == "habit":
        assert (losses[(losses.epoch == 1) & (losses.name == "kl")].value > 0).all()
