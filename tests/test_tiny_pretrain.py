"""The ``tiny`` backbone's pre-trainings: they move the composer and not the tower, they are
cached and shared by every seed (the default ``cir`` start is the released file instead),
their data are disjoint from the benchmark, and the ``--weights`` tags of the factory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cirbench.backbones import tiny_pretrain
from cirbench.backbones.registry import BACKBONES
from cirbench.backbones.tiny import TinyBackbone
from cirbench.data.datasets.shapes import ShapesParams, generate_shapes


@pytest.mark.parametrize("stage", ["stage1", "cir"])
def test_pretraining_moves_the_composer_not_the_tower(stage: str) -> None:
    backbone = TinyBackbone(seed=0)
    before = {k: v.clone() for k, v in backbone.state_dict().items()}
    if stage == "stage1":
        state = tiny_pretrain.pretrain_stage1(backbone, steps=4, batch_size=8, pool=32)
    else:
        state = tiny_pretrain.pretrain_composed_retrieval(backbone, steps=4, batch_size=8, n_scenes=20, mods=2)
    after = backbone.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("tower."))
    assert not torch.equal(before["query_tokens"], after["query_tokens"])
    assert not torch.equal(before["layers.0.self_attn.in_proj_weight"], after["layers.0.self_attn.in_proj_weight"])
    assert set(state) == {k for k in after if not k.startswith("tower.")}


def test_composed_pretraining_data_share_no_scene_or_text_with_the_benchmark() -> None:
    images, split = tiny_pretrain.composed_pretraining_data(np.random.default_rng(0), 200, 4)
    assert images.shape == (200 * 5, 32, 32, 3)
    _, _, meta = generate_shapes(ShapesParams(seed=0, n_train_scenes=300, n_val_scenes=20))
    benchmark_texts = set(meta["train"]["texts"]) | set(meta["val"]["texts"])
    assert not benchmark_texts & set(split["texts"])
    # benchmark scenes hold 2 to 4 objects; pre-training scenes 5 to 7, before and after an edit
    assert all(2 <= len(scene) <= 4 for scene in meta["scenes"])
    first_words = {t.split()[0] for t in split["texts"]}
    assert first_words.isdisjoint({t.split()[0] for t in benchmark_texts} - {"the"})


def test_every_seed_starts_from_the_released_cir_composer_and_stage1_is_cached(tmp_path, quick_pretraining) -> None:
    first = tiny_pretrain.build_tiny("cir", 3, tmp_path)
    second = tiny_pretrain.build_tiny(None, 5, tmp_path)  # the default
    assert quick_pretraining == [] and not any(tmp_path.iterdir())  # the released file: nothing pre-trained or cached
    for key, value in first.state_dict().items():
        assert torch.equal(value, second.state_dict()[key]), key
    staged = tiny_pretrain.build_tiny("stage1", 3, tmp_path)
    tiny_pretrain.build_tiny("stage1", 4, tmp_path)
    assert quick_pretraining == ["stage1"]  # pre-trained on first use, then read from the cache
    assert {p.name.split("-composer-")[1] for p in (tmp_path / "towers").glob("*.pt")} == {
        f"h128-q8-l2-stage1-v{tiny_pretrain.STAGE1_VERSION}.pt"}
    random = tiny_pretrain.build_tiny("random", 3, tmp_path)
    assert not torch.equal(staged.query_tokens, first.query_tokens)
    assert not torch.equal(random.query_tokens, staged.query_tokens)


def test_factory_weights_tags(tmp_path, quick_pretraining) -> None:
    factory = BACKBONES.get("tiny")
    assert factory.default_weights == tiny_pretrain.DEFAULT_TINY_WEIGHTS == "cir"
    assert factory(0, tmp_path, "random").tower_kind == "random" and quick_pretraining == []
    with pytest.raises(ValueError, match="unknown --weights 'stage2'"):
        factory(0, tmp_path, "stage2")


def test_results_name_the_backbone_weights(tmp_path) -> None:
    from cirbench.engine.running.grid import Grid, GridSpec, backbone_label

    def spec(**kw) -> GridSpec:
        return GridSpec(methods=["sprc"], noise_rates=[0.0], output=tmp_path, cache_dir=tmp_path, **kw)

    assert backbone_label(Grid(spec()).spec) == "tiny[cir]"  # the default is named
    assert backbone_label(spec(weights="stage1")) == "tiny[stage1]"
    assert backbone_label(spec(backbone="blip2", weights="/models/blip2-itm/")) == "blip2[blip2-itm]"


def test_every_pretraining_runs_on_the_pinned_threads_whatever_the_callers(tmp_path, monkeypatch) -> None:
    """A matrix product's reductions depend on the thread count, so a start pre-trained in a
    one-thread worker differed from one pre-trained in the two-thread main process; every
    stage now runs on PRETRAIN_THREADS and the caller's count is restored."""
    seen: list[tuple[str, int]] = []

    def recording(stage):
        def run(backbone, **kwargs):
            seen.append((stage, torch.get_num_threads()))
            return tiny_pretrain.composer_state(backbone)
        return run

    monkeypatch.setattr(tiny_pretrain, "pretrain_stage1", recording("stage1"))
    monkeypatch.setattr(tiny_pretrain, "pretrain_composed_retrieval", recording("cir"))
    torch.set_num_threads(1)
    tiny_pretrain.pretrained_composer_state("cir", tmp_path, lambda: TinyBackbone(seed=0))  # what `start rebuild` runs
    assert seen == [("stage1", tiny_pretrain.PRETRAIN_THREADS), ("cir", tiny_pretrain.PRETRAIN_THREADS)]
    assert tiny_pretrain.PRETRAIN_THREADS != 1 and torch.get_num_threads() == 1
