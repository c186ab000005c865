"""Tests for the traditional methods ``ssn`` and ``cala`` (issue 67): how each maps onto the
composer (SSN's decomposition and residual, CaLa's two training-only modules), the readings
docs/ssn.md and docs/cala.md state, and their config checks; and the switches to the
release's readings of ``ssn`` and of the ordinary baseline ``sprc`` (issue 75). The harness
runs them in tests/test_conformance.py (tiny) and tests/test_backbones_real.py (blip2, clip)."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cirbench.backbones.base import max_token_similarity
from cirbench.backbones.tiny import TinyBackbone
from cirbench.settings.config import ConfigError, build_config, identity_dict
from cirbench.method.losses import info_nce, per_sample_info_nce
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


# ----------------------------------------------------------------------------- the release's readings (issue 75)


def test_ssn_fusion_padding_mask_switch_moves_the_queries_only_where_text_is_padded() -> None:
    batch, backbone = batch_and_backbone()
    assert not batch.text.mask.all()  # the batch's texts have different lengths
    torch.manual_seed(0)
    masked = build("ssn", backbone).eval()
    unmasked = build("ssn", backbone, fusion_padding_mask="false").eval()
    unmasked.load_state_dict(masked.state_dict())
    assert not torch.allclose(unmasked.encode_queries(batch.reference, batch.text),
                              masked.encode_queries(batch.reference, batch.text))
    full = torch.ones_like(batch.text.mask)
    text = type(batch.text)(batch.text.ids, full)
    torch.testing.assert_close(unmasked.encode_queries(batch.reference, text), masked.encode_queries(batch.reference, text))
    torch.testing.assert_close(unmasked.encode_targets(batch.target), masked.encode_targets(batch.target))


def test_ssn_release_readings_unmask_the_fusion_and_widen_its_feed_forward() -> None:
    _, cls = plugin("ssn")
    _, backbone = batch_and_backbone()
    release = build_config(cls.Config, {"readings": "release"}, "ssn")
    assert (release.fusion_padding_mask, release.fusion_feedforward) == (False, 2048)
    assert build("ssn", backbone, readings="release").fusion.linear1.out_features == 2048
    assert build("ssn", backbone).fusion.linear1.out_features == 4 * backbone.hidden_size
    assert "fusion_padding_mask" not in identity_dict(cls.Config())  # a late field: the default's run ids stay


def sprc_at(backbone: TinyBackbone, **overrides: object):
    torch.manual_seed(0)
    return build("sprc", backbone, **overrides).eval()


def test_sprc_defaults_are_the_one_pass_log_temperature_clamped_at_0_01() -> None:
    batch, backbone = batch_and_backbone()
    sprc = sprc_at(backbone)
    composed = backbone.composed_feature(batch.reference, batch.text)
    targets = backbone.target_features(batch.target)
    torch.testing.assert_close(sprc.encode_queries(batch.reference, batch.text), composed)
    torch.testing.assert_close(sprc.per_sample_losses(batch)["itc"],
                               per_sample_info_nce(max_token_similarity(composed, targets), 0.07))
    torch.testing.assert_close(sprc.prompt_tokens.detach(), backbone.query_tokens.detach())
    assert [name for name, _ in sprc.named_parameters() if "temperature" in name] == ["log_temperature"]
    with torch.no_grad():
        sprc.log_temperature.fill_(math.log(0.001))
    assert float(sprc.temperature.detach()) == pytest.approx(0.01)
    _, cls = plugin("sprc")
    assert not {"composition", "temperature_parameter", "min_temperature", "prompt_init"} & set(identity_dict(cls.Config()))


def test_sprc_two_pass_changes_itc_and_retrieval_only() -> None:
    batch, backbone = batch_and_backbone()
    one, two = sprc_at(backbone), sprc_at(backbone, composition="two_pass")
    fused = backbone.compose(batch.reference, batch.text)
    composed = backbone.composed_feature(None, batch.text, queries=fused.query)
    torch.testing.assert_close(two.encode_queries(batch.reference, batch.text), composed)
    a, b = one.per_sample_losses(batch), two.per_sample_losses(batch)
    torch.testing.assert_close(b["itc"], per_sample_info_nce(max_token_similarity(composed, backbone.target_features(batch.target)), 0.07))
    assert not torch.allclose(a["itc"], b["itc"])
    torch.testing.assert_close(a["rtc"], b["rtc"])
    torch.testing.assert_close(a["align"], b["align"])


def test_sprc_linear_temperature_is_the_same_value_with_the_releases_gradient() -> None:
    batch, backbone = batch_and_backbone()
    log, linear = sprc_at(backbone), sprc_at(backbone, temperature_parameter="linear")
    assert float(linear.raw_temperature.detach()) == pytest.approx(0.07) and not hasattr(linear, "log_temperature")
    log_loss, linear_loss = log.sprc_step(batch).loss, linear.sprc_step(batch).loss
    torch.testing.assert_close(linear_loss, log_loss)
    log_loss.backward()
    linear_loss.backward()
    # d loss / d log t = t * d loss / d t
    torch.testing.assert_close(log.log_temperature.grad, 0.07 * linear.raw_temperature.grad, rtol=1e-4, atol=1e-6)


def test_sprc_min_temperature_0_removes_the_clamp_and_nothing_above_it() -> None:
    batch, backbone = batch_and_backbone()
    clamped, free = sprc_at(backbone), sprc_at(backbone, min_temperature=0)
    torch.testing.assert_close(free.sprc_step(batch).loss, clamped.sprc_step(batch).loss)
    with torch.no_grad():
        clamped.log_temperature.fill_(math.log(0.005))
        free.log_temperature.fill_(math.log(0.005))
    assert float(free.temperature.detach()) == pytest.approx(0.005) and float(clamped.temperature.detach()) == pytest.approx(0.01)
    assert not torch.isclose(free.sprc_step(batch).loss, clamped.sprc_step(batch).loss)
    with pytest.raises(ValueError, match="min_temperature must be >= 0"):
        build_config(plugin("sprc")[1].Config, {"min_temperature": "-1"}, "sprc")


def test_sprc_normal_prompt_init_draws_small_prompts_and_changes_rtc_and_align() -> None:
    batch, backbone = batch_and_backbone()
    copied, drawn = sprc_at(backbone), sprc_at(backbone, prompt_init="normal")
    assert drawn.prompt_tokens.shape == backbone.query_tokens.shape
    assert 0.015 < float(drawn.prompt_tokens.detach().std()) < 0.025 and abs(float(drawn.prompt_tokens.detach().mean())) < 0.005
    a, b = copied.per_sample_losses(batch), drawn.per_sample_losses(batch)
    torch.testing.assert_close(a["itc"], b["itc"])
    assert not torch.allclose(a["rtc"], b["rtc"]) and not torch.allclose(a["align"], b["align"])


def test_sprc_release_readings_turn_on_every_switch() -> None:
    _, cls = plugin("sprc")
    release = build_config(cls.Config, {"readings": "release"}, "sprc")
    assert (release.composition, release.temperature_parameter, release.min_temperature, release.prompt_init) == \
        ("two_pass", "linear", 0.0, "normal")
    assert (release.rtc_weight, release.align_weight) == (0.4, 0.4)  # the release's CIRR weights, the defaults
