"""Tests for the traditional methods ``ssn`` and ``cala`` (issue 67): how each maps onto the
composer (SSN's decomposition and residual, CaLa's two training-only modules), the readings
docs/ssn.md and docs/cala.md state, and their config checks. The harness runs them in
tests/test_conformance.py (tiny) and tests/test_backbones_real.py (blip2, clip)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cirbench.backbones.base import max_token_similarity
from cirbench.backbones.tiny import TinyBackbone
from cirbench.config import ConfigError, build_config
from cirbench.losses import info_nce
from cirbench.method import Batch, TrainingContext
from cirbench.plugins import discover

N, WORDS = 8, "add remove red blue green circle square large small left right".split()


def plugin(name: str):
    """The plugin's module and class, loaded through discovery as the harness loads them."""
    cls = discover().methods.get(name)
    return sys.modules[cls.__module__], cls


def batch_and_backbone(seed: int = 0) -> tuple[Batch, TinyBackbone]:
    """A fresh tiny backbone and one batch of random tower tokens and short texts."""
    backbone = TinyBackbone(seed=0)
    g = torch.Generator().manual_seed(seed)
    tokens = F.layer_norm(torch.randn(2 * N, 16, 64, generator=g), (64,))
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 6)))) for _ in range(N)]
    return Batch(torch.arange(N), tokens[:N], tokens[N:], backbone.tokenize(texts), texts), backbone


def build(name: str, backbone: TinyBackbone, **overrides: object):
    module, cls = plugin(name)
    context = TrainingContext(num_train=N, epochs=1, batch_size=N, steps_per_epoch=1, seed=0,
                              device=torch.device("cpu"), iterate=lambda shuffle=True: iter(()))
    return cls(backbone, build_config(cls.Config, {k: str(v) for k, v in overrides.items()}, name), context)


def test_ssn_without_its_residual_retrieves_as_the_composer_and_with_it_starts_close() -> None:
    batch, backbone = batch_and_backbone()
    composed = backbone.composed_feature(batch.reference, batch.text)
    targets = backbone.target_features(batch.target)
    bare = build("ssn", backbone, residual_scale=0).eval()
    torch.testing.assert_close(bare.encode_queries(batch.reference, batch.text), composed)
    torch.testing.assert_close(bare.encode_targets(batch.target), targets)
    ssn = build("ssn", backbone).eval()
    query = ssn.encode_queries(batch.reference, batch.text)
    assert not torch.allclose(query, composed) and F.cosine_similarity(query, composed).min() > 0.99


def test_ssn_splits_the_text_and_the_reference_into_complementary_parts() -> None:
    batch, backbone = batch_and_backbone()
    ssn = build("ssn", backbone).eval()
    parts = ssn.decomposed(batch.reference, batch.text)
    words = backbone.compose(None, batch.text).text
    image = backbone.compose(batch.reference, None).query
    torch.testing.assert_close(parts["up"] + parts["down"], words)
    torch.testing.assert_close(parts["prototype"] + parts["rest"], image)
    assert not torch.allclose(parts["up"], parts["down"])


@pytest.mark.filterwarnings("ignore:reduction. .mean. divides")
def test_ssn_kl_is_the_releases_reduction_and_finite_where_kl_div_is_not() -> None:
    module, _ = plugin("ssn")
    g = torch.Generator().manual_seed(0)
    log_input = torch.log_softmax(torch.randn(4, 4, generator=g), -1)
    log_target = torch.log_softmax(torch.randn(4, 4, generator=g), -1)
    torch.testing.assert_close(module.kl_mean(log_input, log_target),
                               F.kl_div(log_input, log_target.exp(), reduction="mean"))
    logits = torch.tensor([[0.0, 2.0], [1.0, 0.0]], requires_grad=True)  # at scale 100 a probability underflows
    F.kl_div(torch.log_softmax(logits, -1), torch.softmax(100 * logits, -1), reduction="mean").backward()
    assert torch.isnan(logits.grad).any()
    logits.grad = None
    module.kl_mean(torch.log_softmax(logits, -1), torch.log_softmax(100 * logits, -1)).backward()
    assert torch.isfinite(logits.grad).all()


def test_ssn_step_is_the_symmetric_cross_entropy_without_its_kl() -> None:
    batch, backbone = batch_and_backbone()
    torch.manual_seed(0)
    ssn = build("ssn", backbone, kl_weight=0, fusion_dropout=0)
    out = ssn.training_step(batch, 0, 0)
    sim = 100 * max_token_similarity(ssn.encode_queries(batch.reference, batch.text), ssn.encode_targets(batch.target))
    labels = torch.arange(N)
    expected = (F.cross_entropy(sim, labels) + F.cross_entropy(sim.T, labels)) / 2
    torch.testing.assert_close(out.loss, expected)
    assert set(out.components) == {"contrastive", "kl"}


def test_cala_with_both_weights_off_is_plain_matching_at_scale_100() -> None:
    batch, backbone = batch_and_backbone()
    cala = build("cala", backbone, tac_weight=0, hca_weight=0)
    out = cala.training_step(batch, 0, 0)
    sim = max_token_similarity(backbone.composed_feature(batch.reference, batch.text), backbone.target_features(batch.target))
    torch.testing.assert_close(out.loss, info_nce(sim, 0.01))
    full = build("cala", backbone).training_step(batch, 0, 0)
    assert not torch.isclose(full.loss, out.loss) and full.loss.requires_grad


def test_cala_hinge_attention_ignores_text_padding() -> None:
    module, _ = plugin("cala")
    hca = module.HingeCrossAttention(16, dropout=0.0)
    g = torch.Generator().manual_seed(0)
    reference, target, text = (torch.randn(2, n, 16, generator=g) for n in (4, 4, 3))
    mask = torch.ones(2, 3, dtype=torch.bool)
    padded = torch.cat([text, torch.randn(2, 2, 16, generator=g)], 1)
    padded_mask = torch.cat([mask, torch.zeros(2, 2, dtype=torch.bool)], 1)
    torch.testing.assert_close(hca(reference, padded, padded_mask, target), hca(reference, text, mask, target))
    assert hca(reference, text, mask, target).shape == (2, 16)
    tac = module.TwinAttentionCompositor(16, repeats=4)
    assert tac(reference, target).shape == (2, 16)


@pytest.mark.parametrize("name, key, value, message", [
    ("ssn", "kl_weight", -1, "kl_weight and residual_scale must be >= 0"),
    ("ssn", "fusion_heads", 0, "fusion_heads must be > 0"),
    ("ssn", "fusion_dropout", 1.0, "fusion_dropout must be in [0, 1)"),
    ("cala", "tac_weight", 1.5, "tac_weight must be in [0, 1]"),
    ("cala", "matching_scale", 0, "matching_scale must be > 0"),
])
def test_bad_settings_are_clear_errors(name: str, key: str, value: object, message: str) -> None:
    _, cls = plugin(name)
    with pytest.raises((ValueError, ConfigError), match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        build_config(cls.Config, {key: str(value)}, name)


def test_ssn_refuses_heads_that_do_not_divide_the_width() -> None:
    _, backbone = batch_and_backbone()
    with pytest.raises(ValueError, match=r"fusion_heads \(7\) must divide the backbone's hidden size \(128\)"):
        build("ssn", backbone, fusion_heads=7)
