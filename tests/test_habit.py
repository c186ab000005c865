"""Tests for the ``habit`` plugin: each loss term against its definition on tiny brute-force
examples, the vectorised mutual information against the release's per-sample loop, the
DBSCAN mask, the history keyed by sample across a reshuffle, and every ablation row."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from cirbench.backbones.base import max_token_similarity
from cirbench.backbones.tiny import TinyBackbone
from cirbench.settings.config import build_config
from cirbench.method.losses import per_sample_robust_contrastive
from cirbench.method import Batch, TrainingContext
from cirbench_methods.habit import (
    HABIT,
    HABITConfig,
    batch_matched_min_samples,
    consistency_kl,
    dbscan_outliers,
    histogram_bins,
    mutual_information,
    rcl_rows,
    soft_labels,
    soft_margin_loss,
)

N, B = 24, 8
WORDS = "add remove red blue green circle square triangle large small left right".split()


def release_mi(x: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    """The release's ``estimate_mutual_knowledge``: numpy histograms of one flattened pair."""
    x, y = x.reshape(-1), y.reshape(-1)
    d = x.shape[0]
    x_edges, y_edges = np.linspace(x.min(), x.max(), bins + 1), np.linspace(y.min(), y.max(), bins + 1)
    p_x = np.histogram(x, bins=x_edges)[0][:, None] / d
    p_y = np.histogram(y, bins=y_edges)[0][None, :] / d
    p_xy = np.histogram2d(x, y, bins=[x_edges, y_edges])[0] / d
    return float(np.sum(p_xy * np.log((p_xy + 1e-10) / (p_x * p_y + 1e-10))))


def features(seed: int = 0, size: int = B) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalised (size, 4, 16) fused-query and target tokens, the targets correlated with the queries."""
    g = torch.Generator().manual_seed(seed)
    fused = F.normalize(torch.randn(size, 4, 16, generator=g), dim=-1)
    targets = F.normalize(torch.randn(size, 4, 16, generator=g) + torch.rand(size, 1, 1, generator=g) * 2 * fused, dim=-1)
    return fused, targets


# ----------------------------------------------------------------------------- mutual knowledge


def test_vectorised_mutual_information_matches_the_release_loop() -> None:
    fused, targets = features()
    mi = mutual_information(histogram_bins(fused.flatten(1), 10), histogram_bins(targets.flatten(1), 10), 10)
    expected = [release_mi(fused[i].numpy(), targets[i].numpy()) for i in range(B)]
    np.testing.assert_allclose(mi.numpy(), expected, rtol=0, atol=1e-12)
    # the bins are np.histogram's, the last one closed (each row's maximum lands in bin 9)
    flat = fused.flatten(1)
    bins = histogram_bins(flat, 10)
    assert (bins.gather(1, flat.argmax(1, keepdim=True)) == 9).all() and (bins.gather(1, flat.argmin(1, keepdim=True)) == 0).all()


def test_soft_labels_follow_the_transition_rates() -> None:
    fused, targets = features(1)
    anchor = 3
    labels = soft_labels(fused, targets, anchor)
    f, t = fused.numpy(), targets.numpy()
    mi_a = release_mi(f[anchor], t[anchor])
    for i in range(B):
        rate = abs(mi_a - release_mi(f[i], t[i])) / mi_a
        rate_text = abs(mi_a - release_mi(f[anchor], t[i])) / mi_a
        rate_image = abs(mi_a - release_mi(f[i], t[anchor])) / mi_a
        assert float(labels[i]) == pytest.approx(1 / (1 + rate + abs(rate_text - rate_image)), rel=1e-6)
    assert float(labels[anchor]) == pytest.approx(1.0) and ((labels > 0) & (labels <= 1)).all()


def test_dbscan_outliers_are_the_isolated_values() -> None:
    values = np.concatenate([np.full(12, 0.5) + np.arange(12) * 1e-4, [0.9, 0.1]])
    assert dbscan_outliers(values, eps=0.01, min_samples=10).tolist() == [False] * 12 + [True, True]


def test_dbscan_density_keeps_the_release_share_of_the_batch() -> None:
    """10 of 256 at the release's batch: 5 at 128, 10 at 256, at least 1; 0 = the literal count."""
    assert [batch_matched_min_samples(10, 256, n) for n in (256, 128, 125, 64, 8, 512)] == [10, 5, 5, 2, 1, 20]
    assert batch_matched_min_samples(10, 0, 128) == 10
    # at the harness's batch of 128 the batch-matched density clusters what the literal one leaves out
    values = np.concatenate([np.full(6, 0.5) + np.arange(6) * 1e-4, np.linspace(0.0, 0.3, 122)])
    matched = dbscan_outliers(values, 0.01, batch_matched_min_samples(10, 256, len(values)))
    literal = dbscan_outliers(values, 0.01, 10)
    assert not matched[:6].any() and literal[:6].all()
    with pytest.raises(ValueError, match="dbscan_release_batch"):
        HABITConfig(dbscan_release_batch=-1)


# ----------------------------------------------------------------------------- the loss terms


def test_soft_margin_loss_is_the_hardest_negative_with_the_soft_margin() -> None:
    g = torch.Generator().manual_seed(2)
    sim, labels = torch.rand(5, 5, generator=g) * 2 - 1, torch.rand(5, generator=g)
    expected = 0.0
    for i in range(5):
        margin = 0.5 * (10 ** float(labels[i]) - 1) / 9
        expected += max(max(0.0, margin + float(sim[i, j]) - float(sim[i, i])) for j in range(5) if j != i)
    assert float(soft_margin_loss(sim, labels, 0.5)) == pytest.approx(expected / 5, rel=1e-6)
    assert float(soft_margin_loss(sim, torch.zeros(5), 0.5)) == pytest.approx(
        sum(max(max(0.0, float(sim[i, j] - sim[i, i])) for j in range(5) if j != i) for i in range(5)) / 5, rel=1e-6)


def test_consistency_kl_named_and_release_readings() -> None:
    g = torch.Generator().manual_seed(3)
    prev_sim, cur_sim = torch.rand(4, 4, generator=g), torch.rand(4, 4, generator=g, requires_grad=True)
    prev_lab, cur_lab = torch.rand(4, generator=g), torch.rand(4, generator=g)

    def kl_mean(p: torch.Tensor, q: torch.Tensor) -> float:  # nn.KLDivLoss('mean'): over all B*B entries
        return float((p * (p.log() - q.log())).sum().detach() / p.numel())

    p_prev = torch.softmax(10 * prev_lab[:, None] * prev_sim, 1)
    p_cur = torch.softmax(10 * cur_lab[:, None] * cur_sim, 1)
    named = consistency_kl(prev_sim, prev_lab, cur_sim, cur_lab, 10.0)
    assert float(named.detach()) == pytest.approx(kl_mean(p_prev, p_cur), rel=1e-5)
    released = consistency_kl(prev_sim, prev_lab, cur_sim, cur_lab, 10.0, "release")
    crossed_target = torch.softmax(10 * prev_lab[:, None] * cur_sim, 1)
    crossed_input = torch.softmax(10 * cur_lab[:, None] * prev_sim, 1)
    assert float(released.detach()) == pytest.approx(kl_mean(crossed_target, crossed_input), rel=1e-5)
    named.backward()
    assert cur_sim.grad is not None and cur_sim.grad.abs().sum() > 0
    same = consistency_kl(cur_sim.detach(), cur_lab, cur_sim.detach(), cur_lab, 10.0)
    assert float(same) == pytest.approx(0.0, abs=1e-7)


# ----------------------------------------------------------------------------- the method


@pytest.fixture(scope="module")
def data() -> dict:
    """Layer-normalised random tokens and short texts for ``N`` triplets."""
    g = torch.Generator().manual_seed(0)
    tokens = F.layer_norm(torch.randn(2 * N, 16, 64, generator=g), (64,))
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 6)))) for _ in range(N)]
    return {"reference": tokens[:N], "target": tokens[N:], "texts": texts}


def make_batch(backbone: TinyBackbone, data: dict, index: np.ndarray) -> Batch:
    idx = torch.as_tensor(index)
    texts = [data["texts"][i] for i in index]
    return Batch(idx, data["reference"][idx], data["target"][idx], backbone.tokenize(texts), texts)


def make_method(**overrides: object) -> HABIT:
    context = TrainingContext(num_train=N, epochs=3, batch_size=B, steps_per_epoch=N // B, seed=0,
                              device=torch.device("cpu"), iterate=lambda shuffle: iter(()))
    config = build_config(HABITConfig, {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in overrides.items()}, "habit")
    return HABIT(TinyBackbone(seed=0), config, context)


def epoch_orders(seed: int) -> list[np.ndarray]:
    return np.array_split(np.random.default_rng(seed).permutation(N), N // B)


def test_rank_loss_is_rcl_over_the_kept_rows(data) -> None:
    method = make_method(soft_loss=False, kl=False)
    batch = make_batch(method.backbone, data, np.arange(B))
    out = method.training_step(batch, 0, 0)
    with torch.no_grad():
        composed, _, targets = method.features(batch)
        rows = per_sample_robust_contrastive(max_token_similarity(composed, targets), 0.07)
    assert out.components["rank"] == pytest.approx(float(rows.sum() / B), rel=1e-5)
    keep = torch.tensor([True, False] * (B // 2))
    method.keep_mask = lambda *args: keep  # a mask from DBSCAN, fixed here
    for step, index in enumerate(epoch_orders(0)):  # a previous epoch for every sample
        method.training_step(make_batch(method.backbone, data, index), 0, step)
    out = method.training_step(batch, 1, N // B)
    assert out.components["rank"] == pytest.approx(float(rows[keep].sum() / B), rel=1e-5)
    assert torch.equal(out.selected_clean, keep) and out.loss.requires_grad


@pytest.mark.parametrize("history", ["sample", "batch_position"])
def test_history_follows_the_sample_across_a_reshuffle(data, history: str) -> None:
    """Epoch 0 and epoch 1 visit the samples in different shuffled batches (weights left
    unchanged): the previous epoch's soft label and similarity a batch reads back must be
    those of its own samples. Keyed by batch position (the release) they are not."""
    method = make_method(history=history)
    written: dict[int, float] = {}
    for step, index in enumerate(epoch_orders(0)):
        out = method.training_step(make_batch(method.backbone, data, index), 0, step)
        written.update(zip(index.tolist(), (1.0 - out.noise_score).tolist()))
    matches = []
    for step, index in enumerate(epoch_orders(1)):
        batch = make_batch(method.backbone, data, index)
        past_label, past_sim, has = method.past(batch, 1, N // B + step)
        with torch.no_grad():
            composed, _, targets = method.features(batch)
            sim_now = max_token_similarity(composed, targets)
        matches.append(has.all() and np.allclose(past_label.numpy(), [written[i] for i in index.tolist()], atol=1e-6)
                       and torch.allclose(past_sim, sim_now, atol=1e-5))
    assert all(matches) == (history == "sample")


def test_first_epoch_has_no_mask_and_no_kl_and_later_ones_do(data) -> None:
    method = make_method()
    for step, index in enumerate(epoch_orders(0)):
        out = method.training_step(make_batch(method.backbone, data, index), 0, step)
        assert out.selected_clean is None and out.components["kl"] == 0.0 and out.components["kept_share"] == 1.0
    with torch.no_grad():
        for p in method.backbone.trainable_parameters():
            p.add_(0.05 * torch.randn_like(p))  # the model moved since the previous epoch
    out = method.training_step(make_batch(method.backbone, data, epoch_orders(1)[0]), 1, N // B)
    assert out.selected_clean is not None and out.selected_clean.shape == (B,)
    assert out.components["kl"] > 0 and np.isfinite(float(out.loss.detach()))
    assert ((out.noise_score >= 0) & (out.noise_score < 1)).all()


@pytest.mark.parametrize("variant", ["full", *HABIT.ablations])
def test_each_ablation_row_trains_a_step(data, variant: str) -> None:
    method = make_method(**HABIT.ablations.get(variant, {}))
    optimizer = torch.optim.AdamW([p for p in method.parameters() if p.requires_grad], lr=1e-3)
    for epoch in range(2):
        for step, index in enumerate(epoch_orders(epoch)):
            out = method.training_step(make_batch(method.backbone, data, index), epoch, epoch * (N // B) + step)
            optimizer.zero_grad()
            out.loss.backward()
            optimizer.step()
            assert torch.isfinite(out.loss)
    if variant == "no_mke":
        assert out.components["soft_label_mean"] == 1.0
    if variant in ("no_kl", "no_dpl"):
        assert out.components["kl"] == 0.0
    assert (out.selected_clean is None) == (variant in ("no_mask", "no_dpl"))


def test_config_checks() -> None:
    with pytest.raises(ValueError, match="bins"):
        HABITConfig(bins=1)
    with pytest.raises(ValueError, match="history"):
        HABITConfig(history="position")
    with pytest.raises(ValueError, match="lr"):
        HABITConfig(lr=-1.0)


# ----------------------------------------------------------------------------- the release's readings (issue 75)


def saturated_sim() -> torch.Tensor:
    """Row 0's off-diagonal column 1 dominates (p_01 > 1 - 1e-7 at 0.07); the others are mild."""
    g = torch.Generator().manual_seed(4)
    sim = torch.rand(6, 6, generator=g, dtype=torch.float64) * 0.2
    sim[0] = -0.6
    sim[0, 1] = 1.0
    return sim


def test_rcl_clamp_probability_is_the_releases_clamp_and_one_minus_is_cirbenchs() -> None:
    sim = saturated_sim()
    one_minus = rcl_rows(sim, 0.07)
    assert torch.equal(one_minus, per_sample_robust_contrastive(sim, 0.07))  # off: cirbench's RCL, unchanged
    released = rcl_rows(sim, 0.07, "probability")
    p = torch.softmax(sim / 0.07, 1).clamp(1e-7, 1 - 1e-7)
    expected = -(torch.log(1 - p) * ~torch.eye(6, dtype=torch.bool)).sum(1)
    torch.testing.assert_close(released, expected)
    # the saturated row costs -log 1e-7 against -log 1e-6; the mild rows are the same
    assert float(released[0] - one_minus[0]) == pytest.approx(np.log(10), rel=1e-3)
    torch.testing.assert_close(released[1:], one_minus[1:], rtol=0, atol=1e-9)


def test_rcl_clamp_reaches_the_rank_loss_and_the_anchor(data, monkeypatch) -> None:
    import cirbench_methods.habit as habit_module

    batch = make_batch(TinyBackbone(seed=0), data, np.arange(B))
    out = {}
    for clamp in ("one_minus", "probability"):
        seen: list[str] = []

        def recording(sim, temperature, clamp_="one_minus", seen=seen):
            seen.append(clamp_)
            return rcl_rows(sim, temperature, clamp_)

        monkeypatch.setattr(habit_module, "rcl_rows", recording)
        out[clamp] = make_method(rcl_clamp=clamp).training_step(batch, 0, 0)
        assert seen == [clamp, clamp]  # the anchor's rows, then L_rank's
    # on an unsaturated batch the two clamps give the same loss
    assert out["probability"].components["rank"] == pytest.approx(out["one_minus"].components["rank"], rel=1e-6)


def test_release_readings_turn_on_every_release_switch() -> None:
    config = build_config(HABITConfig, {"readings": "release"}, "habit")
    assert (config.history, config.kl_arguments, config.rcl_clamp, config.dbscan_release_batch) == (
        "batch_position", "release", "probability", 0)
    assert build_config(HABITConfig, {"readings": "paper"}, "habit") == HABITConfig()
    with pytest.raises(ValueError, match="rcl_clamp"):
        HABITConfig(rcl_clamp="p")
