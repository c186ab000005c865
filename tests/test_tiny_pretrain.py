"""The ``tiny`` backbone's ``stage1`` composer: image-text pre-training that moves the
composer and not the tower, its cache, and the ``--weights`` tags of the factory."""

from __future__ import annotations

from functools import partial

import pytest
import torch

import cirbench.backbones.composer_pretrain as composer_pretrain
from cirbench.backbones.registry import BACKBONES
from cirbench.backbones.tiny import TinyBackbone


@pytest.fixture
def quick_pretraining(monkeypatch):
    """The real pre-training at a test's size (a few steps on a small pool), counting calls."""
    calls = []
    real = composer_pretrain.pretrain_tiny_composer

    def small(backbone, **_):
        calls.append(backbone)
        return real(backbone, steps=4, batch_size=8, pool=32)

    monkeypatch.setattr(composer_pretrain, "pretrain_tiny_composer", small)
    return calls


def test_pretraining_moves_the_composer_not_the_tower() -> None:
    backbone = TinyBackbone(seed=0)
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    state = composer_pretrain.pretrain_tiny_composer(backbone, steps=4, batch_size=8, pool=32)
    after = backbone.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("tower."))
    assert not torch.equal(before["query_tokens"], after["query_tokens"])
    assert not torch.equal(before["layers.0.self_attn.in_proj_weight"], after["layers.0.self_attn.in_proj_weight"])
    assert set(state) == {k for k in after if not k.startswith("tower.")}


def test_stage1_is_cached_and_the_same_for_every_seed(tmp_path, quick_pretraining) -> None:
    first = TinyBackbone(seed=3, cache_dir=tmp_path, composer="stage1")
    second = TinyBackbone(seed=5, cache_dir=tmp_path, composer="stage1")
    assert len(quick_pretraining) == 1  # the second backbone read the cache
    assert list((tmp_path / "towers").glob("*stage1*.pt"))
    for key, value in first.state_dict().items():
        assert torch.equal(value, second.state_dict()[key]), key
    random = TinyBackbone(seed=3, cache_dir=tmp_path)
    assert not torch.equal(random.query_tokens, first.query_tokens)


def test_factory_weights_tags(tmp_path, quick_pretraining) -> None:
    factory = BACKBONES.get("tiny")
    staged = factory(0, tmp_path, "stage1")
    assert staged.tower_kind == "random" and len(quick_pretraining) == 1
    assert factory(0, tmp_path, None).tower_kind == "random"
    with pytest.raises(ValueError, match="unknown --weights 'stage2'"):
        factory(0, tmp_path, "stage2")
    with pytest.raises(ValueError, match="unknown composer"):
        partial(TinyBackbone, composer="bert")()


def test_results_name_the_backbone_weights(tmp_path) -> None:
    from cirbench.engine.grid import GridSpec, backbone_label

    def spec(**kw) -> GridSpec:
        return GridSpec(methods=["sprc"], noise_rates=[0.0], output=tmp_path, cache_dir=tmp_path, **kw)

    assert backbone_label(spec()) == "tiny"
    assert backbone_label(spec(weights="stage1")) == "tiny[stage1]"
    assert backbone_label(spec(backbone="blip2", weights="/models/blip2-itm/")) == "blip2[blip2-itm]"
