"""Tests for the ``intent`` plugin: the Fourier intervention (the reference's phase kept,
amplitudes mixed with each sample's lambda, no clamp), linear CKA, the credibility ``r``
and ``L_odl`` against brute-force definitions, the warm-up schedule, the intervened pass
through the context's pixels and tower, and every ablation row."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cirbench.backbones.tiny import TinyBackbone
from cirbench.settings.config import build_config
from cirbench.method import Batch, TrainingContext
from cirbench_methods.intent import (
    INTENT,
    INTENTConfig,
    amplitude_mix,
    credibility,
    linear_cka,
    odl_loss,
    rcl_loss,
    spectrum_window,
    warmup_length,
)
from cirbench.method.losses import robust_contrastive

N, B = 16, 8
WORDS = "add remove red blue green circle square triangle large small left right".split()


# ----------------------------------------------------------------------------- the intervention


def test_amplitude_mix_keeps_the_reference_phase_and_mixes_amplitudes_per_sample() -> None:
    g = torch.Generator().manual_seed(0)
    reference, target = torch.randn(3, 3, 8, 8, generator=g), torch.randn(3, 3, 8, 8, generator=g) * 2 + 1
    lam = torch.tensor([0.0, 0.3, 1.0])
    mixed = amplitude_mix(reference, target, lam)
    ref_fft, tgt_fft = torch.fft.fft2(reference), torch.fft.fft2(target)
    w = lam.view(-1, 1, 1, 1)
    expected = ((1 - w) * ref_fft.abs() + w * tgt_fft.abs()) * torch.exp(1j * ref_fft.angle())
    torch.testing.assert_close(torch.fft.fft2(mixed), expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(mixed[0], reference[0], atol=1e-5, rtol=0)  # lambda 0: the reference itself
    assert not torch.allclose(mixed[1], mixed[2], atol=1e-3)


def test_the_mix_stays_in_the_tower_input_space_unless_the_release_clamp_is_asked_for() -> None:
    g = torch.Generator().manual_seed(1)
    reference, target = torch.randn(2, 3, 8, 8, generator=g), torch.randn(2, 3, 8, 8, generator=g)
    lam = torch.tensor([0.2, 0.7])
    mixed = amplitude_mix(reference, target, lam)
    assert mixed.min() < 0 and mixed.max() > 1  # normalised pixels: no clamp to [0, 1]
    torch.testing.assert_close(amplitude_mix(reference, target, lam, clamp=True), mixed.clamp(0, 1))


def test_spectrum_window_is_the_centred_share_of_the_shifted_spectrum() -> None:
    assert spectrum_window(8, 8, 1.0, torch.device("cpu")).all()
    window = spectrum_window(8, 8, 0.25, torch.device("cpu"))
    assert int(window.sum()) == 16 and bool(window[0, 0])  # 4 x 4 around the zero frequency
    shifted = torch.fft.fftshift(window)
    assert shifted[2:6, 2:6].all() and int(shifted.sum()) == 16
    g = torch.Generator().manual_seed(2)
    reference, target = torch.randn(1, 3, 8, 8, generator=g), torch.randn(1, 3, 8, 8, generator=g)
    assert not torch.allclose(amplitude_mix(reference, target, torch.ones(1), ratio=0.25), amplitude_mix(reference, target, torch.ones(1)))


# ----------------------------------------------------------------------------- the loss terms


def test_linear_cka_matches_its_definition_and_invariances() -> None:
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(2, 5, 4, generator=g, dtype=torch.float64), torch.randn(2, 5, 4, generator=g, dtype=torch.float64)
    h = np.eye(5) - np.ones((5, 5)) / 5
    for b in range(2):
        k, l_ = h @ (x[b] @ x[b].T).numpy() @ h, h @ (y[b] @ y[b].T).numpy() @ h
        expected = np.trace(k @ l_) / np.sqrt(np.trace(k @ k) * np.trace(l_ @ l_))
        assert float(linear_cka(x, y)[b]) == pytest.approx(expected, rel=1e-6)
    rotation = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=torch.float64))[0]
    torch.testing.assert_close(linear_cka(x, 3.0 * x @ rotation), torch.ones(2, dtype=torch.float64), atol=1e-6, rtol=0)


def test_credibility_and_odl_loss_match_their_definitions() -> None:
    g = torch.Generator().manual_seed(4)
    sim = torch.rand(4, 4, generator=g) * 2 - 1
    p = torch.softmax(sim / 0.07, dim=1)
    r = credibility(sim, 0.07)
    for i in range(4):
        for j in range(4):
            top = max(float(p[i, k]) for k in range(4) if k != i)
            want = (float(p[i, i]) + 1 - top) / 2 if i == j else (float(p[i, j]) + 1 - float(p[i, i])) / 2
            assert float(r[i, j]) == pytest.approx(want, rel=1e-5)
    scale = torch.tensor(10.0)
    logits = r.clamp(1e-7, 1 - 1e-7) * 10.0
    want = -np.mean([float(torch.log_softmax(logits[i], 0)[i]) for i in range(4)])
    assert float(odl_loss(r, scale, 1e-7)) == pytest.approx(want, rel=1e-5)


# ----------------------------------------------------------------------------- the method


@pytest.fixture(scope="module")
def world() -> dict:
    """A tiny backbone's tower input for ``N`` reference and target images, their tokens and texts."""
    backbone = TinyBackbone(seed=0)
    g = torch.Generator().manual_seed(0)
    pixels = {"reference": torch.randn(N, 3, 32, 32, generator=g), "target": torch.randn(N, 3, 32, 32, generator=g)}
    tokens = {role: backbone.encode_image_tokens(p) for role, p in pixels.items()}
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 6)))) for _ in range(N)]
    return {"pixels": pixels, "tokens": tokens, "texts": texts, "state": backbone.state_dict()}


def make_method(world: dict, epochs: int = 10, **overrides: object) -> INTENT:
    backbone = TinyBackbone(seed=0)
    backbone.load_state_dict(world["state"])
    context = TrainingContext(
        num_train=N, epochs=epochs, batch_size=B, steps_per_epoch=N // B, seed=0, device=torch.device("cpu"),
        iterate=lambda shuffle: iter(()), pixels=lambda index, role: world["pixels"][role][index],
        encode_pixels=lambda p: backbone.encode_image_tokens(p).float(),
    )
    config = build_config(INTENTConfig, {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in overrides.items()}, "intent")
    return INTENT(backbone, config, context)


def make_batch(method: INTENT, world: dict, index: np.ndarray) -> Batch:
    idx = torch.as_tensor(index)
    texts = [world["texts"][i] for i in index]
    return Batch(idx, world["tokens"]["reference"][idx], world["tokens"]["target"][idx], method.backbone.tokenize(texts), texts)


@pytest.mark.parametrize("epochs, warmup", [(20, 2), (10, 1), (2, 1)])
def test_default_warmup_is_the_release_share_of_the_run(world, epochs: int, warmup: int) -> None:
    assert make_method(world, epochs=epochs).warmup == warmup


def test_warmup_adds_caco_then_it_stops(world) -> None:
    method = make_method(world, epochs=10)
    batch = make_batch(method, world, np.arange(B))
    warm = method.training_step(batch, 0, 0)
    later = method.training_step(batch, 1, N // B)
    assert set(warm.components) == {"stu", "odl", "caco", "lambda_mean", "loss_T"}
    assert set(later.components) == {"stu", "odl", "loss_T"}
    c = method.config
    assert float(warm.loss.detach()) == pytest.approx(warm.components["stu"] + c.odl_weight * warm.components["odl"]
                                             + c.caco_weight * warm.components["caco"], rel=1e-5)
    assert warm.noise_score.shape == (B,) and ((warm.noise_score >= 0) & (warm.noise_score <= 1)).all()


def test_the_intervened_pass_uses_the_batch_images_and_the_context_tower(world) -> None:
    method = make_method(world)
    index = np.array([3, 0, 5, 7, 1, 2, 6, 4])
    batch = make_batch(method, world, index)
    state = method.generator.get_state()
    tokens, lam = method.intervened_tokens(batch)
    assert ((lam >= 0) & (lam < 1)).all() and len(set(lam.tolist())) == B  # one lambda per sample
    method.generator.set_state(state)
    expected = amplitude_mix(world["pixels"]["reference"][index], world["pixels"]["target"][index], lam)
    torch.testing.assert_close(tokens, method.backbone.encode_image_tokens(expected))
    # with lambda 0 the intervened image is the reference: its tokens are the batch's, and CKA is 1
    still = make_method(world, mix_alpha=0.0)
    tokens, _ = still.intervened_tokens(batch)
    torch.testing.assert_close(tokens, batch.reference, atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        caco, _ = still.caco_loss(batch, still.backbone.compose(batch.reference, batch.text).query)
    assert float(caco) == pytest.approx(0.0, abs=1e-4)


def test_caco_reaches_the_composer_and_the_extra_head(world) -> None:
    method = make_method(world)
    out = method.training_step(make_batch(method, world, np.arange(B)), 0, 0)
    out.loss.backward()
    assert method.text_proj_cau.weight.grad is not None and method.text_proj_cau.weight.grad.abs().sum() > 0
    assert method.loss_T.grad is not None
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in method.backbone.layers[0].cross_attn.parameters())


def test_no_pixels_in_the_context_is_a_clear_error(world) -> None:
    method = make_method(world)
    method.context.pixels = None
    with pytest.raises(RuntimeError, match="no pixels"):
        method.training_step(make_batch(method, world, np.arange(B)), 0, 0)
    method.config.caco = False  # no intervention: no pixels needed
    assert torch.isfinite(method.training_step(make_batch(method, world, np.arange(B)), 0, 0).loss)


@pytest.mark.parametrize("variant", ["full", *INTENT.ablations, "release"])
def test_each_ablation_row_trains_a_step(world, variant: str) -> None:
    overrides = {"readings": "release"} if variant == "release" else INTENT.ablations.get(variant, {})
    method = make_method(world, epochs=2, **overrides)
    optimizer = torch.optim.AdamW([p for p in method.parameters() if p.requires_grad], lr=1e-3)
    seen: set[str] = set()
    for epoch in range(2):
        for step, index in enumerate(np.array_split(np.random.default_rng(epoch).permutation(N), N // B)):
            out = method.training_step(make_batch(method, world, index), epoch, epoch * (N // B) + step)
            optimizer.zero_grad()
            out.loss.backward()
            optimizer.step()
            assert torch.isfinite(out.loss)
            seen |= set(out.components)
    assert ("caco" in seen) == (variant != "no_vic") and ("odl" in seen) == (variant != "no_bdl")


def test_config_checks() -> None:
    with pytest.raises(ValueError, match="mix_ratio"):
        INTENTConfig(mix_ratio=0.0)
    with pytest.raises(ValueError, match="loss_scale"):
        INTENTConfig(loss_scale=-1.0)
    with pytest.raises(ValueError, match="weight_decay"):
        INTENTConfig(weight_decay=-1.0)


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
    assert torch.equal(rcl_loss(sim, 0.07), robust_contrastive(sim, 0.07))  # off: cirbench's RCL, unchanged
    p = torch.softmax(sim / 0.07, 1).clamp(1e-7, 1 - 1e-7)
    expected = -(torch.log(1 - p) * ~torch.eye(6, dtype=torch.bool)).sum() / 6
    released = rcl_loss(sim, 0.07, "probability")
    torch.testing.assert_close(released, expected)
    assert float(released - rcl_loss(sim, 0.07)) == pytest.approx(np.log(10) / 6, rel=1e-3)  # the one saturated row
    mild = sim[1:, 1:]
    torch.testing.assert_close(rcl_loss(mild, 0.07, "probability"), rcl_loss(mild, 0.07), rtol=0, atol=1e-9)


def test_rcl_clamp_reaches_l_stu(world, monkeypatch) -> None:
    import cirbench_methods.intent as intent_module

    for clamp in ("one_minus", "probability"):
        seen: list[str] = []

        def recording(sim, temperature, clamp_="one_minus", seen=seen):
            seen.append(clamp_)
            return rcl_loss(sim, temperature, clamp_)

        monkeypatch.setattr(intent_module, "rcl_loss", recording)
        method = make_method(world, caco=False, rcl_clamp=clamp)
        method.training_step(make_batch(method, world, np.arange(B)), 0, 0)
        assert seen == [clamp]


def test_draw_lambdas_is_the_methods_generator_and_the_mix_keeps_float64(world) -> None:
    method = make_method(world, mix_alpha=0.5)
    state = method.generator.get_state()
    lam = method.draw_lambdas(B)
    method.generator.set_state(state)
    torch.testing.assert_close(lam, torch.rand(B, generator=method.generator) * 0.5)
    g = torch.Generator().manual_seed(5)
    reference, target = torch.randn(2, 3, 8, 8, generator=g, dtype=torch.float64), torch.randn(2, 3, 8, 8, generator=g, dtype=torch.float64)
    lam = torch.tensor([0.2, 0.7], dtype=torch.float64)
    assert amplitude_mix(reference, target, lam).dtype == torch.float64
    assert amplitude_mix(reference.float(), target.float(), lam).dtype == torch.float32
    assert amplitude_mix(reference.bfloat16(), target.bfloat16(), lam).dtype == torch.float32


def test_release_readings_turn_on_every_release_switch(world) -> None:
    config = build_config(INTENTConfig, {"readings": "release"}, "intent")
    assert (config.mix_clamp, config.odl_token_norm, config.rcl_clamp, config.warmup_epochs) == (True, True, "probability", 2)
    assert build_config(INTENTConfig, {"readings": "paper"}, "intent") == INTENTConfig()
    assert [warmup_length(2, epochs) for epochs in (2, 10, 20)] == [2, 2, 2]  # the release's 2 epochs, literally
    assert [warmup_length(None, epochs) for epochs in (2, 10, 20)] == [1, 1, 2]  # the default: its share of the run
    assert make_method(world, epochs=2, readings="release").warmup == 2
    with pytest.raises(ValueError, match="rcl_clamp"):
        INTENTConfig(rcl_clamp="p")
