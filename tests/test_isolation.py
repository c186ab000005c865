"""Methods never see the ground-truth noise flags, nor the configured noise rate; only a
declared oracle sees the flags, and only a method that declares ``reads_noise_rate`` the rate
(``tests/test_told_rate.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from cirbench.backbones.registry import BACKBONES
from cirbench.data.noise.injection import NoiseManifest, inject_noise
from cirbench.data.datasets.registry import DATASETS
from cirbench.engine.cell.features import image_tokens
from cirbench.engine.cell.train import train_cell
from cirbench.method import Batch, Method, MethodConfig, StepOutput
from cirbench.plugins import discover


class Spy(Method):
    """Records everything the harness hands it."""

    name = "spy"
    seen: list = []

    def training_step(self, batch: Batch, epoch: int, step: int) -> StepOutput:
        Spy.seen.append((batch, self.context))
        return StepOutput(self.backbone.composed_feature(batch.reference, batch.text).sum() * 0)


class PeekingOracle(Spy):
    """The same spy, declared as an oracle."""

    name = "peeking_oracle"
    oracle = True


def setup(cache_dir: Path, rate: float = 0.5):
    ds = DATASETS.get("shapes-mini")(cache_dir, None)
    backbone = BACKBONES.get("tiny")(0, cache_dir, None)
    tokens = image_tokens(ds, backbone, cache_dir)
    noisy, manifest = inject_noise(ds, "thirds", rate, 0)
    return ds, backbone, tokens, noisy, manifest


def test_batches_and_context_carry_no_flags(cache_dir: Path) -> None:
    ds, backbone, tokens, noisy, manifest = setup(cache_dir)
    Spy.seen.clear()
    train_cell(Spy, MethodConfig(), backbone, ds, noisy, manifest, tokens, 1, 128, 0)
    assert Spy.seen
    assert {f.name for f in dataclasses.fields(Batch)} == {"index", "reference", "target", "text", "texts"}
    batch, context = Spy.seen[0]
    assert context.noise_flags is None and context.noise_rate is None
    for value in [*vars(batch).values(), *vars(context).values()]:
        assert not isinstance(value, (NoiseManifest, pd.DataFrame))
    # the method trains on the corrupted split: its texts are the noisy ones
    seen = {int(i): t for b, _ in Spy.seen for i, t in zip(b.index.tolist(), b.texts)}
    assert len(seen) == len(noisy)
    assert [seen[i] for i in range(len(noisy))] == list(noisy.texts)
    assert [seen[i] for i in range(len(noisy))] != list(ds.train.texts)


def test_oracle_gets_the_true_flags(cache_dir: Path) -> None:
    ds, backbone, tokens, noisy, manifest = setup(cache_dir)
    Spy.seen.clear()
    train_cell(PeekingOracle, MethodConfig(), backbone, ds, noisy, manifest, tokens, 1, 128, 0)
    assert np.array_equal(Spy.seen[0][1].noise_flags, manifest.is_noisy)


def test_training_does_not_depend_on_the_flags(cache_dir: Path) -> None:
    ds, _, tokens, noisy, manifest = setup(cache_dir)
    flipped = NoiseManifest(manifest.dataset_key, manifest.protocol, manifest.rate, manifest.seed, manifest.table.copy())
    flipped.table["is_noisy"] = ~flipped.table["is_noisy"]
    sprc = discover().methods.get("sprc")
    losses = []
    for m in (manifest, flipped):
        backbone = BACKBONES.get("tiny")(0, cache_dir, None)
        result = train_cell(sprc, sprc.Config(), backbone, ds, noisy, m, tokens, 1, 128, 0)
        losses.append(result.tables["losses"].value.to_numpy())
    assert np.array_equal(losses[0], losses[1])
    torch.manual_seed(0)
