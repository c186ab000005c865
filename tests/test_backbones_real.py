"""The real backbones (``blip2`` through transformers, ``clip`` through open_clip) on tiny
random-weight checkpoints written to disk: faithfulness to the libraries' own modules,
weight resolution without downloads, and every registered method end to end through the
CLI on each backbone (training steps and evaluation)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

pytest.importorskip("transformers")

from cirbench.backbones.blip2 import Blip2Backbone, write_random_checkpoint as write_blip2  # noqa: E402
from cirbench.backbones.preprocess import ImagePrep  # noqa: E402
from cirbench.cli import app  # noqa: E402
from cirbench.data.datasets.registry import DATASETS  # noqa: E402
from cirbench.plugins import discover  # noqa: E402

METHODS = discover().methods.names()


def _has_open_clip() -> bool:
    try:
        import open_clip  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken torchvision import counts as absent
        return False
    return True


HAS_OPEN_CLIP = _has_open_clip()
needs_open_clip = pytest.mark.skipif(not HAS_OPEN_CLIP, reason="open_clip (and torchvision) not installed")


@pytest.fixture(autouse=True)
def one_thread() -> object:
    """One intra-op thread (after conftest's two): on a loaded 2-core machine two threads
    wait on each other, and these tests ran 3x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="module")
def words(data_dir: Path) -> list[str]:
    dataset = DATASETS.get("shapes-mini")(data_dir, None)
    return sorted({w for t in dataset.train.texts + dataset.val.texts for w in t.lower().split()})


@pytest.fixture(scope="module")
def blip2_dir(tmp_path_factory: pytest.TempPathFactory, words: list[str]) -> Path:
    return write_blip2(tmp_path_factory.mktemp("blip2") / "tiny-blip2", words=words)


@pytest.fixture(scope="module")
def blip2(blip2_dir: Path) -> Blip2Backbone:
    return Blip2Backbone.from_pretrained(str(blip2_dir)).eval()


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not HAS_OPEN_CLIP:
        pytest.skip("open_clip (and torchvision) not installed")
    from cirbench.backbones.clip import write_random_checkpoint

    return write_random_checkpoint(tmp_path_factory.mktemp("clip") / "tiny-clip")


def _images(n: int, seed: int = 0, size: tuple[int, int] = (32, 32)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(*size, 3), dtype=np.uint8) for _ in range(n)]


# --- blip2 -------------------------------------------------------------------------------


def test_blip2_compose_is_the_transformers_qformer_with_text(blip2: Blip2Backbone, blip2_dir: Path) -> None:
    from transformers import Blip2ForImageTextRetrieval

    reference = Blip2ForImageTextRetrieval.from_pretrained(blip2_dir).eval()
    tokens = blip2.encode_image_tokens(blip2.preprocess(_images(3)))
    text = blip2.tokenize(["make the red circle bigger", "remove the blue square", "zzz unknown"])
    queries = reference.query_tokens.expand(3, -1, -1)
    n = queries.shape[1]
    with torch.no_grad():
        embedded = reference.embeddings(input_ids=text.ids, query_embeds=queries)
        mask = torch.cat([torch.ones(3, n, dtype=torch.long), text.mask.long()], dim=1)
        expected = reference.qformer(
            query_embeds=embedded, query_length=n, attention_mask=mask, encoder_hidden_states=tokens
        ).last_hidden_state
        image_only = reference.qformer(query_embeds=queries, encoder_hidden_states=tokens).last_hidden_state
        out = blip2.compose(tokens, text)
        real = text.mask[:, :, None]
        assert torch.allclose(out.query, expected[:, :n], atol=1e-5)
        assert torch.allclose(out.text * real, expected[:, n:] * real, atol=1e-5)
        assert torch.allclose(blip2.compose(tokens, None).query, image_only, atol=1e-5)
        # the trap: the Q-Former forward without the text embeddings gives other query outputs
        assert not torch.allclose(out.query, image_only, atol=1e-3)


def test_blip2_text_and_prompt_passes(blip2: Blip2Backbone) -> None:
    tokens = blip2.encode_image_tokens(blip2.preprocess(_images(2)))
    a = blip2.composed_feature(tokens, blip2.tokenize(["make the red circle bigger"] * 2))
    b = blip2.composed_feature(tokens, blip2.tokenize(["remove the blue square"] * 2))
    assert not torch.allclose(a, b, atol=1e-4)
    prompt = torch.nn.Parameter(torch.randn(1, 5, blip2.hidden_size) * 0.02)
    blip2.train()
    try:
        feature = blip2.composed_feature(None, blip2.tokenize(["add a green triangle", "move it"]), queries=prompt)
        feature.sum().backward()
    finally:
        blip2.eval()
        blip2.zero_grad(set_to_none=True)
    assert feature.shape == (2, blip2.embed_dim)
    assert prompt.grad is not None and prompt.grad.abs().sum() > 0
    assert all(p.grad is None for p in blip2.vision.parameters())


def test_blip2_preprocess_resizes_and_normalises(blip2: Blip2Backbone) -> None:
    grey = np.full((48, 20, 3), 128, dtype=np.uint8)
    pixels = blip2.preprocess([grey, _images(1)[0]])
    assert pixels.shape == (2, *blip2.image_shape)
    mean, std = torch.tensor(blip2.prep.mean), torch.tensor(blip2.prep.std)
    assert torch.allclose(pixels[0, :, 5, 5], (128 / 255 - mean) / std, atol=1e-4)
    with pytest.raises(ValueError, match="RGB"):
        blip2.preprocess([np.zeros((8, 8), dtype=np.uint8)])


def test_shortest_side_resize_crops_the_centre() -> None:
    prep = ImagePrep(size=(4, 4), mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), resize_mode="shortest")
    image = np.zeros((4, 12, 3), dtype=np.uint8)
    image[:, 4:8] = 255
    assert torch.allclose(prep([image]), torch.ones(1, 3, 4, 4), atol=1e-3)


def test_blip2_weights_resolve_locally_only(blip2_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    snapshot = cache / "models--someone--tiny-blip2" / "snapshots" / "0123abcd"
    shutil.copytree(blip2_dir, snapshot)
    (cache / "models--someone--tiny-blip2" / "refs").mkdir()
    (cache / "models--someone--tiny-blip2" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    from_hub = Blip2Backbone.from_pretrained("someone/tiny-blip2")
    from_dir = Blip2Backbone.from_pretrained(str(blip2_dir))
    assert from_hub.tower_key().split("-")[-1] == from_dir.tower_key().split("-")[-1]
    with pytest.raises(FileNotFoundError, match="never downloads"):
        Blip2Backbone.from_pretrained("someone/not-cached")
    with pytest.raises(FileNotFoundError, match="not a checkpoint directory"):
        Blip2Backbone.from_pretrained(str(tmp_path / "missing"))


def test_blip2_refuses_a_qformer_without_text(blip2_dir: Path, tmp_path: Path) -> None:
    broken = shutil.copytree(blip2_dir, tmp_path / "no-text")
    config = json.loads((broken / "config.json").read_text())
    config["qformer_config"]["use_qformer_text_input"] = False
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="takes no text"):
        Blip2Backbone.from_pretrained(str(broken))


def test_blip2_tower_key_follows_the_weights(blip2: Blip2Backbone, blip2_dir: Path, tmp_path: Path, words: list[str]) -> None:
    assert Blip2Backbone.from_pretrained(str(blip2_dir)).tower_key() == blip2.tower_key()
    other = write_blip2(tmp_path / "tiny-blip2", seed=1, words=words)
    assert Blip2Backbone.from_pretrained(str(other)).tower_key() != blip2.tower_key()


@pytest.mark.parametrize("backbone_name", ["blip2", "clip"])
def test_gradient_checkpointing_gives_the_same_gradients(backbone_name: str, request: pytest.FixtureRequest) -> None:
    if backbone_name == "clip":
        from cirbench.backbones.clip import ClipBackbone

        backbone = ClipBackbone.from_weights(str(request.getfixturevalue("clip_dir")))
    else:
        backbone = Blip2Backbone.from_pretrained(str(request.getfixturevalue("blip2_dir")))
    backbone.train()
    tokens = backbone.encode_image_tokens(backbone.preprocess(_images(3)))
    text = backbone.tokenize(["make the red circle bigger", "remove it", "add a blue square"])
    grads = []
    for flag in (False, True):
        backbone.gradient_checkpointing = flag
        backbone.zero_grad(set_to_none=True)
        torch.manual_seed(0)  # the same dropout masks in both passes
        backbone.composed_feature(tokens, text).pow(2).sum().add(backbone.target_features(tokens).sum()).backward()
        grads.append(torch.cat([p.grad.flatten() for p in backbone.trainable_parameters() if p.grad is not None]))
    assert grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-5)


# --- clip --------------------------------------------------------------------------------


@needs_open_clip
def test_clip_weights_forms_and_token_features(clip_dir: Path, tmp_path: Path) -> None:
    from cirbench.backbones.clip import ClipBackbone

    backbone = ClipBackbone.from_weights(str(clip_dir))
    assert (backbone.hidden_size, backbone.num_query_tokens, backbone.image_shape) == (64, 8, (3, 32, 32))
    tokens = backbone.encode_image_tokens(backbone.preprocess(_images(2) + _images(1, size=(40, 64))))
    assert tokens.shape == (3, 16, 32)
    text = backbone.tokenize(["make it red", "a blue circle on the left", "x"])
    assert text.ids.shape[1] == int(text.mask.sum(1).max()) and bool(text.mask[:, 0].all())
    clip = backbone.clip
    full_ids = backbone.tokenizer(["a blue circle on the left"])
    with torch.no_grad():
        full = clip.ln_final(clip.transformer(clip.token_embedding(full_ids) + clip.positional_embedding, attn_mask=clip.attn_mask))
    assert torch.allclose(backbone.text_tokens(text.ids[1:2])[0], full[0, : text.ids.shape[1]], atol=1e-5)
    out = backbone.compose(tokens, text)
    assert out.query.shape == (3, 8, 64) and out.text.shape == (3, text.ids.shape[1], 64)
    assert not any(p.requires_grad for p in backbone.clip.parameters())
    # a built-in architecture with a local checkpoint file gives the same towers
    config = json.loads((clip_dir / "open_clip_config.json").read_text())["model_cfg"]
    import open_clip

    arch_dir = tmp_path / "configs"
    arch_dir.mkdir()
    (arch_dir / "cirbench-test-tiny.json").write_text(json.dumps(config))
    open_clip.add_model_config(arch_dir)
    by_file = ClipBackbone.from_weights(f"cirbench-test-tiny:{clip_dir / 'open_clip_pytorch_model.bin'}")
    assert by_file.tower_key().split("-")[-1] == backbone.tower_key().split("-")[-1]


@needs_open_clip
def test_clip_weight_errors_are_clear(tmp_path: Path) -> None:
    from cirbench.backbones.clip import ClipBackbone

    with pytest.raises(ValueError, match="expected ARCH:TAG"):
        ClipBackbone.from_weights("ViT-B-16")
    with pytest.raises(FileNotFoundError, match="never downloads"):
        ClipBackbone.from_weights("ViT-B-16:openai")
    with pytest.raises(ValueError, match="unknown open_clip architecture"):
        ClipBackbone.from_weights("NoSuchNet:random")
    with pytest.raises(FileNotFoundError, match="no such directory"):
        ClipBackbone.from_weights(str(tmp_path / "missing"))


# --- every method on every real backbone, through the CLI ---------------------------------


@pytest.mark.parametrize("backbone_name", ["blip2", pytest.param("clip", marks=needs_open_clip)])
def test_every_method_runs_end_to_end(backbone_name: str, request: pytest.FixtureRequest, data_dir: Path, tmp_path: Path) -> None:
    """``cirbench run`` with every registered method on the backbone's tiny checkpoint: one
    epoch of training steps and an evaluation each."""
    weights = request.getfixturevalue(f"{backbone_name}_dir")
    output = tmp_path / "results"
    result = CliRunner().invoke(app, [
        "run", "--methods", ",".join(METHODS), "--noise", "0.5", "--dataset", "shapes-mini", "--epochs", "1",
        "--batch-size", "120", "--backbone", backbone_name, "--weights", str(weights),
        "--output", str(output), "--cache-dir", str(data_dir),
    ])
    runs = pd.read_parquet(output / "runs").set_index("method")
    failed = {m: runs.error[m][-600:] for m in runs.index if runs.status[m] != "completed"}
    assert sorted(runs.index[runs.is_reference]) == ["text_blind", "text_only", "zero_shot"]  # the starting model's rows
    runs = runs[~runs.is_reference]
    assert result.exit_code == 0 and not failed, f"{result.output}\n{failed}"
    assert sorted(runs.index) == sorted(METHODS) and (runs.steps == 5).all()
    metrics = pd.read_parquet(output / "metrics")
    for split in ("val", "holdout"):  # shapes-mini holds out 10% of its training triplets by default
        recall = metrics[(metrics.split == split) & (metrics.metric == "recall@50") & (metrics.group == "all")
                         & metrics.method.isin(METHODS)].set_index("method").value
        assert sorted(recall.index) == sorted(METHODS) and recall.between(0.0, 1.0).all(), split
    losses = pd.read_parquet(output / "losses")
    assert np.isfinite(losses.value).all()
    assert (losses[losses.name == "total"].groupby("method").size() == 5).all()
