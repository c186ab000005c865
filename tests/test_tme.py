"""Tests for the ``tme`` method plugin: the GMM split, the warm-up schedule, the switches,
the losses, and a short harness run whose partition lands in the purity table."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch

from cirbench.backbones.tiny import TinyBackbone
from cirbench.settings.config import ConfigError, build_config
from cirbench.data.datasets.registry import ShapesLoader
from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.method.losses import per_sample_robust_contrastive
from cirbench.method import Batch, TrainingContext
from cirbench.plugins import discover
from cirbench.registry import Registry

from fixtures import use_datasets

N_SAMPLES, BATCH = 24, 8
WORDS = "add remove red blue green circle square triangle large small left right top bottom".split()


@pytest.fixture(scope="module")
def tme_module():
    """The plugin module, loaded through discovery exactly as the harness loads it."""
    discovery = discover()
    cls = discovery.methods.get("tme")
    return sys.modules[cls.__module__]


@pytest.fixture(scope="module")
def data() -> dict[str, object]:
    """Random layer-normalised image tokens and short texts for ``N_SAMPLES`` triplets."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.nn.functional.layer_norm(torch.randn(2 * N_SAMPLES, 16, 64, generator=g), (64,))
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 6)))) for _ in range(N_SAMPLES)]
    return {"reference": tokens[:N_SAMPLES], "target": tokens[N_SAMPLES:], "texts": texts}


def make_batch(backbone: TinyBackbone, data: dict, index: np.ndarray, texts: list[str] | None = None) -> Batch:
    """A :class:`Batch` of rows ``index`` (optionally with replaced texts)."""
    texts = texts if texts is not None else [data["texts"][i] for i in index]
    idx = torch.as_tensor(index)
    return Batch(idx, data["reference"][idx], data["target"][idx], backbone.tokenize(texts), texts)


def make_method(tme_module, data: dict, epochs: int = 4, **overrides: object):
    """A TME instance on a fresh tiny backbone over the synthetic split."""
    backbone = TinyBackbone(seed=0)

    def iterate(shuffle: bool = True):
        order = np.random.default_rng(1).permutation(N_SAMPLES) if shuffle else np.arange(N_SAMPLES)
        for index in np.array_split(order, N_SAMPLES // BATCH):
            yield make_batch(backbone, data, index)

    context = TrainingContext(
        num_train=N_SAMPLES, epochs=epochs, batch_size=BATCH, steps_per_epoch=N_SAMPLES // BATCH, seed=0,
        device=torch.device("cpu"), iterate=iterate,
    )
    config = build_config(tme_module.TMEConfig, {k: str(v) for k, v in overrides.items()}, "tme")
    return tme_module.TME(backbone, config, context)


# ----------------------------------------------------------------------------- GMM split


def test_gmm_recovers_a_bimodal_loss_vector(tme_module) -> None:
    rng = np.random.default_rng(0)
    clean = rng.normal(0.5, 0.1, size=400)
    noisy = rng.normal(3.0, 0.3, size=250)
    values = np.concatenate([clean, noisy])
    truth_clean = np.arange(len(values)) < len(clean)

    posterior = tme_module.gmm_clean_posterior(values, clean_is_low=True, seed=0)
    assert posterior.shape == values.shape and ((posterior >= 0) & (posterior <= 1)).all()
    assert ((posterior > 0.5) == truth_clean).mean() > 0.99
    # As a similarity (higher = clean) the same split must come out of the other component.
    flipped = tme_module.gmm_clean_posterior(-values, clean_is_low=False, seed=0)
    assert ((flipped > 0.5) == truth_clean).mean() > 0.99
    # Deterministic for a fixed seed; invariant to affine rescaling (min-max normalisation).
    np.testing.assert_allclose(posterior, tme_module.gmm_clean_posterior(values, True, seed=0))
    np.testing.assert_allclose(posterior, tme_module.gmm_clean_posterior(10 * values + 3, True, seed=0), atol=1e-6)


def test_gmm_rejects_bad_input_and_handles_constant_values(tme_module) -> None:
    with pytest.raises(ValueError, match="finite"):
        tme_module.gmm_clean_posterior(np.array([0.1, np.nan, 0.3]), True, seed=0)
    with pytest.raises(ValueError, match="at least 2"):
        tme_module.gmm_clean_posterior(np.array([0.1]), True, seed=0)
    assert np.array_equal(tme_module.min_max(np.full(5, 2.0)), np.zeros(5))
    posterior = tme_module.gmm_clean_posterior(np.full(10, 2.0), True, seed=0)
    assert np.isfinite(posterior).all()


def test_config_validation(tme_module) -> None:
    with pytest.raises(ConfigError, match="gmm_input"):
        build_config(tme_module.TMEConfig, {"gmm_input": "entropy"}, "tme")
    with pytest.raises(ValueError, match="threshold"):
        tme_module.TMEConfig(threshold=1.5)
    with pytest.raises(ValueError, match="warmup_proj"):
        tme_module.TMEConfig(warmup_proj=-1)


# ----------------------------------------------------------------------------- schedule and switches


def test_warmup_phases_losses_and_partition_schedule(tme_module, data) -> None:
    method = make_method(tme_module, data, epochs=5, warmup_qformer=2, warmup_proj=1, warmup_last=1)
    assert [method.phase(e) for e in range(5)] == ["qformer", "qformer", "proj", "last", "train"]
    expected = {"qformer": {"lrm"}, "proj": {"lrd", "lpm", "lsa"}, "last": {"lrm", "lrd", "lpm", "lsa"}}
    batch = make_batch(method.backbone, data, np.arange(BATCH))
    for epoch in range(4):
        assert method.on_epoch_start(epoch) is None
        out = method.training_step(batch, epoch, 0)
        assert set(out.components) - {"temperature"} == expected[method.phase(epoch)]
        assert out.selected_clean is None and out.noise_score is None
    partition = method.on_epoch_start(4)
    assert partition is not None and partition.noise_score.shape == (N_SAMPLES,)
    assert np.array_equal(partition.selected_clean, partition.noise_score < 0.5)
    out = method.training_step(batch, 4, 0)
    assert out.components["partition_seconds"] == method.partition_seconds[4] > 0
    assert "partition_seconds" not in method.training_step(batch, 4, 1).components
    assert torch.equal(out.selected_clean, torch.as_tensor(partition.selected_clean[:BATCH]))
    np.testing.assert_allclose(out.noise_score.numpy(), partition.noise_score[:BATCH], rtol=1e-6)


@pytest.mark.parametrize("epochs", [10, 30])
def test_default_warmup_keeps_the_release_share_of_the_run(tme_module, data, epochs: int) -> None:
    method = make_method(tme_module, data, epochs=epochs)
    assert method.warmup == pytest.approx({"warmup_qformer": epochs / 10, "warmup_proj": epochs / 15, "warmup_last": epochs / 30})
    method.context.steps_per_epoch = steps = 12
    phases = [method.phase(s // steps, s) for s in range(epochs * steps)]
    counts = {p: phases.count(p) for p in ("qformer", "proj", "last")}
    assert counts == {"qformer": 3 * epochs * steps // 30, "proj": 2 * epochs * steps // 30, "last": epochs * steps // 30}
    first_train = phases.index("train")
    assert first_train == round(epochs / 5) * steps  # a fifth of the run, ending at an epoch boundary
    assert method.on_epoch_start(first_train // steps - 1) is None and method.on_epoch_start(first_train // steps) is not None


def test_lsa_target_is_fixed_when_the_method_is_built(tme_module, data) -> None:
    """The alignment target must not move with the weights it anchors (tme v2's did)."""
    method = make_method(tme_module, data, warmup_qformer=0, warmup_proj=0, warmup_last=0)
    before = method.word_targets.clone()
    assert torch.isfinite(before).all() and before.shape == (N_SAMPLES, method.backbone.hidden_size)
    batch = make_batch(method.backbone, data, np.arange(BATCH))
    out = method.training_step(batch, 0, 0)
    targets = method.word_targets
    assert not targets.requires_grad
    with torch.no_grad():
        for p in method.backbone.trainable_parameters():
            p.add_(torch.randn_like(p))
    assert torch.equal(method.word_targets, before)
    assert torch.isfinite(out.loss)


def test_a_fractional_warmup_never_partitions_the_epoch_it_ends_in(tme_module, data) -> None:
    method = make_method(tme_module, data, warmup_qformer=1.5, warmup_proj=0, warmup_last=0)
    method.context.steps_per_epoch = steps = 4
    assert [method.phase(1, steps + s) for s in range(steps)] == ["qformer"] * 2 + ["last"] * 2
    assert method.on_epoch_start(1) is None and method.on_epoch_start(2) is not None


def test_proj_warmup_trains_only_the_projection_and_prompt(tme_module, data) -> None:
    method = make_method(tme_module, data, warmup_qformer=0, warmup_proj=1, warmup_last=0)
    out = method.training_step(make_batch(method.backbone, data, np.arange(BATCH)), 0, 0)
    out.loss.backward()
    assert method.d2t_proj.weight.grad is not None and method.d2t_proj.weight.grad.abs().sum() > 0
    assert method.prompt_tokens.grad is not None and method.prompt_tokens.grad.abs().sum() > 0
    assert all(p.grad is None for p in method.backbone.trainable_parameters())
    assert method.temperature.grad is None
    assert all(p.requires_grad for p in method.backbone.trainable_parameters())  # restored afterwards


def test_losses_are_finite_and_reach_the_composer(tme_module, data) -> None:
    method = make_method(tme_module, data, warmup_qformer=0, warmup_proj=0, warmup_last=0)
    method.on_epoch_start(0)
    out = method.training_step(make_batch(method.backbone, data, np.arange(BATCH)), 0, 0)
    assert torch.isfinite(out.loss)
    assert all(np.isfinite(v) for v in out.components.values())
    out.loss.backward()
    for module in (method.backbone.layers[0].self_attn, method.backbone.layers[-1].cross_attn, method.backbone.text_proj,
                   method.backbone.vision_proj, method.d2t_proj):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())
    assert method.temperature.grad is not None and method.prompt_tokens.grad.abs().sum() > 0


def test_clean_only_terms_ignore_noisy_rows(tme_module, data) -> None:
    method = make_method(tme_module, data, warmup_qformer=0, warmup_proj=0, warmup_last=0)
    method.clean_mask = np.arange(N_SAMPLES) % 2 == 0
    method.partitioned = True
    index = np.arange(BATCH)
    base = method.training_step(make_batch(method.backbone, data, index), 0, 0).components
    texts = [data["texts"][i] for i in index]

    changed_noisy = texts.copy()
    changed_noisy[1] = "a completely different caption with green triangles"
    noisy = method.training_step(make_batch(method.backbone, data, index, changed_noisy), 0, 0).components
    for name in ("lrm", "lpm", "lsa", "lrd"):
        assert noisy[name] == pytest.approx(base[name], rel=1e-5), name

    changed_clean = texts.copy()
    changed_clean[0] = "a completely different caption with green triangles"
    clean = method.training_step(make_batch(method.backbone, data, index, changed_clean), 0, 0).components
    assert clean["lrm"] != pytest.approx(base["lrm"], rel=1e-5)
    assert clean["lrd"] == pytest.approx(base["lrd"], rel=1e-5)  # lrd never reads the text

    # lrm is the clean rows' RCL, each against all targets of the batch, averaged over clean rows.
    batch = make_batch(method.backbone, data, index)
    with torch.no_grad():
        rows = per_sample_robust_contrastive(method.query_target_similarity(batch), method.temperature)
    assert base["lrm"] == pytest.approx(float(rows[torch.as_tensor(method.clean_mask[index])].mean()), rel=1e-5)


def test_partition_off_never_partitions(tme_module, data) -> None:
    method = make_method(tme_module, data, partition=False, warmup_qformer=0, warmup_proj=0, warmup_last=0)
    batch = make_batch(method.backbone, data, np.arange(BATCH))
    for epoch in range(3):
        assert method.on_epoch_start(epoch) is None
        out = method.training_step(batch, epoch, 0)
        assert out.selected_clean is None and out.noise_score is None
        assert {"lrm", "lpm", "lsa", "lrd"} <= set(out.components)
    assert method.clean_mask.all() and not method.partition_seconds


@pytest.mark.parametrize("gmm_input", ["loss", "similarity"])
def test_gmm_input_switch_selects_what_is_fitted(tme_module, data, gmm_input: str) -> None:
    method = make_method(tme_module, data, gmm_input=gmm_input, warmup_qformer=0, warmup_proj=0, warmup_last=0)
    loss, sim = method.per_sample_statistics()
    partition = method.on_epoch_start(0)
    by_loss = gmm_input == "loss"
    expected = tme_module.gmm_clean_posterior(loss if by_loss else sim, clean_is_low=by_loss, seed=0)
    np.testing.assert_allclose(partition.noise_score, 1.0 - expected, atol=1e-6)
    other = tme_module.gmm_clean_posterior(sim if by_loss else loss, clean_is_low=not by_loss, seed=0)
    assert not np.allclose(partition.noise_score, 1.0 - other, atol=1e-3)
    assert method.training, "the partition pass must restore training mode"


# ----------------------------------------------------------------------------- the release's readings


def test_release_readings_turn_on_both_switches(tme_module) -> None:
    config = build_config(tme_module.TMEConfig, {"readings": "release"}, "tme")
    assert (config.rcl_clamp, config.lsa_target) == ("release", "release")
    default = tme_module.TMEConfig()
    assert (default.rcl_clamp, default.lsa_target) == ("port", "static")
    with pytest.raises(ValueError, match="rcl_clamp"):
        tme_module.TMEConfig(rcl_clamp="both")
    with pytest.raises(ValueError, match="lsa_target"):
        tme_module.TMEConfig(lsa_target="padded")


def test_rcl_clamp_differs_only_where_a_probability_saturates(tme_module) -> None:
    g = torch.Generator().manual_seed(3)
    sim = torch.nn.functional.normalize(torch.randn(6, 8, generator=g, dtype=torch.float64), dim=-1)
    sim = sim @ sim.T
    port = tme_module.robust_rows(sim, 0.07, "port")
    assert torch.equal(port, per_sample_robust_contrastive(sim, 0.07))  # the default is cirbench's RCL
    assert torch.allclose(tme_module.robust_rows(sim, 0.07, "release"), port, atol=1e-6)
    # An off-diagonal pair far above the rest: p ~ 1, where the two guards part.
    saturated = sim.clone()
    saturated[0, 1] = 5.0
    port, release = (tme_module.robust_rows(saturated, 0.07, c)[0] for c in ("port", "release"))
    assert float(port) == pytest.approx(-math.log(1e-6), abs=0.5) and float(release) == pytest.approx(-math.log(1e-7), abs=0.5)
    rows = torch.tensor([True, False, True, True, False, True])
    assert float(tme_module.rcl_term(sim, 0.07, rows)) == pytest.approx(float(per_sample_robust_contrastive(sim, 0.07)[rows].mean()))
    assert float(tme_module.rcl_term(sim, 0.07, torch.zeros(6, dtype=torch.bool))) == 0.0


def test_word_target_release_averages_the_pads_too(tme_module) -> None:
    words = torch.arange(2 * 4 * 3, dtype=torch.float64).reshape(2, 4, 3)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    assert torch.equal(tme_module.word_target(words, mask, "static")[0], words[0, :2].mean(0))
    assert torch.equal(tme_module.word_target(words, mask, "release"), words.mean(1))
    assert torch.equal(tme_module.word_target(words, mask, "static")[1], tme_module.word_target(words, mask, "release")[1])


def test_lsa_target_release_reads_the_current_word_embeddings(tme_module, data) -> None:
    """Under the release's reading the target is the batch's detached word embeddings of the
    current weights, over every padded position; nothing is precomputed."""
    method = make_method(tme_module, data, lsa_target="release", warmup_qformer=0, warmup_proj=0, warmup_last=0)
    assert method.word_targets is None
    batch = make_batch(method.backbone, data, np.arange(BATCH))
    clean = torch.ones(BATCH, dtype=torch.bool)
    lsa = method.losses(batch, "train", clean)["lsa"]
    with torch.no_grad():
        words = method.backbone.word_embeddings(batch.text)
        f_diff = method.difference_features(batch)
        expected = (f_diff.mean(1) - words.mean(1)).pow(2).mean()
    assert float(lsa.detach()) == pytest.approx(float(expected), rel=1e-5)
    static = make_method(tme_module, data, warmup_qformer=0, warmup_proj=0, warmup_last=0)  # the same start
    assert batch.text.mask.sum(1).min() < batch.text.mask.shape[1]  # the batch has pads
    assert not torch.allclose(static.word_targets[:BATCH], words.mean(1), atol=1e-3)
    with torch.no_grad():  # the word table moves: the release's target moves with it
        table = method.backbone.word_embed.weight
        table.add_(torch.randn(table.shape, generator=torch.Generator().manual_seed(0)))
        moved = method.losses(batch, "train", clean)["lsa"]
        words = method.backbone.word_embeddings(batch.text)
    assert float(moved) == pytest.approx(float(((f_diff.mean(1) - words.mean(1)).pow(2).mean())), rel=1e-5)
    assert float(moved) != pytest.approx(float(lsa.detach()), rel=1e-2)


# ----------------------------------------------------------------------------- a short harness run


def test_short_run_records_partition_after_warmup_only(tmp_path, monkeypatch, cache_dir) -> None:
    """Grid -> train_cell -> results store, on a micro shapes set (shapes-mini takes minutes
    on a loaded CPU): purity rows for every epoch after the one warm-up epoch, none before."""
    datasets = Registry("dataset")
    datasets.add("shapes-micro", ShapesLoader("tme test set", n_train_scenes=30, n_val_scenes=10))
    use_datasets(monkeypatch, datasets)
    spec = GridSpec(
        methods=["tme"], noise_rates=[0.5], dataset="shapes-micro", epochs=3, batch_size=16,
        output=tmp_path / "results", cache_dir=cache_dir,
        overrides={"tme": {"warmup_qformer": "1", "warmup_proj": "0", "warmup_last": "0"}},
    )
    grid = Grid(spec)
    outcome = run_cell(grid.resources, grid.cells[0], progress=lambda info: None, announce=lambda m: None)
    assert outcome.status == "completed", outcome.error

    purity = grid.store.read("purity")
    assert sorted(purity.epoch.unique()) == [1, 2]
    overall = purity[purity.noise_type == "all"]
    n_train = 60
    assert (overall.n_samples == n_train).all()
    assert set(purity.noise_type) == {"all", "reference", "caption", "target"}
    assert overall.auroc.notna().all() and overall.n_selected.notna().all()

    scores = grid.store.read("scores")
    assert sorted(scores.epoch.unique()) == [1, 2]
    for epoch, rows in scores.groupby("epoch"):
        assert np.array_equal(rows.selected_clean.astype(bool).to_numpy(), rows.score.to_numpy() < 0.5)
        assert int(rows.selected_clean.astype(bool).sum()) == int(overall[overall.epoch == epoch].n_selected.iloc[0])

    losses = grid.store.read("losses")
    seconds = losses[losses.name == "partition_seconds"]
    assert sorted(seconds.epoch) == [1, 2] and (seconds.value > 0).all()
    assert set(losses[losses.epoch == 0].name) == {"total", "lrm", "temperature"}
    assert {"lrm", "lpm", "lsa", "lrd"} <= set(losses[losses.epoch == 2].name)
    assert np.isfinite(losses.value).all()
