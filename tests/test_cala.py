"""Tests for ``cala``'s switches to its release's readings (issue 75): ``query`` (the
release's composed query and first-token targets, in training and at retrieval) and
``hca_text`` (HCA's text up to the batch's longest, padding included); each moves the terms
it should and nothing when off. The mapping and the other readings are tested in
tests/test_traditional.py; parity against the release in tests/parity/."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cirbench.backbones.base import TextBatch, max_token_similarity
from cirbench.backbones.tiny import TinyBackbone
from cirbench.settings.config import build_config, identity_dict
from cirbench.method import Batch, TrainingContext
from cirbench_methods.cala import CaLa, CaLaConfig, batch_longest, release_query

N, WORDS = 8, "add remove red blue green circle square large small left right".split()


def batch_and_backbone(seed: int = 0, pad_to: int = 0) -> tuple[Batch, TinyBackbone]:
    """A tiny backbone and one batch of random tower tokens and texts of 2-5 words; with
    ``pad_to`` the texts are padded further (as a batch selected from a larger one is)."""
    backbone = TinyBackbone(seed=0)
    g = torch.Generator().manual_seed(seed)
    tokens = F.layer_norm(torch.randn(2 * N, 16, 64, generator=g), (64,))
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 6)))) for _ in range(N)]
    text = backbone.tokenize(texts)
    if pad_to:
        extra = pad_to - text.ids.shape[1]
        text = TextBatch(F.pad(text.ids, (0, extra)), F.pad(text.mask, (0, extra)))
    return Batch(torch.arange(N), tokens[:N], tokens[N:], text, texts), backbone


def build(backbone: TinyBackbone, **overrides: object) -> CaLa:
    context = TrainingContext(num_train=N, epochs=1, batch_size=N, steps_per_epoch=1, seed=0,
                              device=torch.device("cpu"), iterate=lambda shuffle=True: iter(()))
    torch.manual_seed(0)  # the same TAC and HCA weights for every build
    return CaLa(backbone, build_config(CaLaConfig, {k: str(v) for k, v in overrides.items()}, "cala"), context)


def test_query_release_is_the_sum_of_first_tokens_against_the_targets_first_token() -> None:
    batch, backbone = batch_and_backbone()
    method = build(backbone, query="release").eval()
    with torch.no_grad():
        joint = backbone.compose(batch.reference, batch.text).query
        words = backbone.compose(None, batch.text).text
        target = backbone.compose(batch.target, None).query
        expected_query = F.normalize(joint[:, 0] + words[:, 0], dim=-1)
        torch.testing.assert_close(method.encode_queries(batch.reference, batch.text), expected_query)
        torch.testing.assert_close(release_query(joint, words), expected_query)
        targets = method.encode_targets(batch.target)
        torch.testing.assert_close(targets, F.normalize(target[:, :1], dim=-1))
        torch.testing.assert_close(method.logits(batch)["matching"], 100 * expected_query @ targets[:, 0].T)
    # off: the composed feature against the per-token target features, as every hosted method
    default = build(backbone).eval()
    with torch.no_grad():
        torch.testing.assert_close(default.encode_queries(batch.reference, batch.text),
                                   backbone.composed_feature(batch.reference, batch.text))
        torch.testing.assert_close(default.encode_targets(batch.target), backbone.target_features(batch.target))
        composed = backbone.composed_feature(batch.reference, batch.text)
        torch.testing.assert_close(default.logits(batch)["matching"],
                                   100 * max_token_similarity(composed, backbone.target_features(batch.target)))


def test_query_moves_matching_only() -> None:
    batch, backbone = batch_and_backbone()
    with torch.no_grad():
        default, released = build(backbone).eval().logits(batch), build(backbone, query="release").eval().logits(batch)
    assert not torch.allclose(default["matching"], released["matching"])
    torch.testing.assert_close(default["aligning"], released["aligning"])
    torch.testing.assert_close(default["reasoning"], released["reasoning"])


def test_batch_longest_keeps_the_padding_up_to_the_longest_text() -> None:
    tokens = torch.randn(3, 6, 4)
    mask = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    kept, ones = batch_longest(tokens, mask)
    assert torch.equal(kept, tokens[:, :4]) and ones.shape == (3, 4) and ones.all()


@pytest.mark.parametrize("pad_to", [0, 12])
def test_hca_text_release_lets_the_padding_in_and_moves_reasoning_only(pad_to: int) -> None:
    batch, backbone = batch_and_backbone(pad_to=pad_to)
    assert not batch.text.mask.all()  # some texts are padded within the batch
    with torch.no_grad():
        default = build(backbone).eval().logits(batch)
        released = build(backbone, hca_text="release").eval().logits(batch)
        joint = backbone.compose(batch.reference, batch.text).query
        words = backbone.compose(None, batch.text).text
        target = backbone.compose(batch.target, None).query
        hca = build(backbone).eval().hca
        longest = int(batch.text.mask.sum(1).max())
        unmasked = hca(joint, words[:, :longest], torch.ones(N, longest, dtype=torch.bool), target)
    torch.testing.assert_close(released["reasoning"], 10 * unmasked @ joint[:, 0].T)
    assert not torch.allclose(default["reasoning"], released["reasoning"])
    torch.testing.assert_close(default["matching"], released["matching"])
    torch.testing.assert_close(default["aligning"], released["aligning"])


def test_hca_text_release_changes_nothing_without_padding() -> None:
    batch, backbone = batch_and_backbone()
    full = TextBatch(batch.text.ids[:, :2], torch.ones(N, 2, dtype=torch.bool))  # every text two tokens long
    batch = Batch(batch.index, batch.reference, batch.target, full, batch.texts)
    with torch.no_grad():
        default = build(backbone).eval().logits(batch)
        released = build(backbone, hca_text="release").eval().logits(batch)
    torch.testing.assert_close(default["reasoning"], released["reasoning"])


def test_training_step_is_the_blend_of_the_logits() -> None:
    batch, backbone = batch_and_backbone()
    method = build(backbone, readings="release").eval()
    with torch.no_grad():
        logits = method.logits(batch)
        out = method.training_step(batch, 0, 0)
    labels = torch.arange(N)
    contrastive = F.cross_entropy(0.45 * logits["aligning"] + 0.55 * logits["matching"], labels)
    reasoning = F.cross_entropy(logits["reasoning"], labels)
    assert out.components["contrastive"] == pytest.approx(float(contrastive), rel=1e-6)
    assert float(out.loss) == pytest.approx(float(0.1 * reasoning + 0.9 * contrastive), rel=1e-6)


def test_release_readings_turn_on_both_switches_and_defaults_keep_the_run_ids() -> None:
    config = build_config(CaLaConfig, {"readings": "release"}, "cala")
    assert (config.query, config.hca_text) == ("release", "release")
    assert build_config(CaLaConfig, {"readings": "paper"}, "cala") == CaLaConfig()
    assert "query" not in identity_dict(CaLaConfig()) and "hca_text" not in identity_dict(CaLaConfig())
    with pytest.raises(ValueError, match="query must be one of"):
        CaLaConfig(query="sum")
    with pytest.raises(ValueError, match="hca_text must be one of"):
        CaLaConfig(hca_text="padded")
