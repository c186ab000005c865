"""Tests for the ConeSep method plugin: GFQ, NBL, BTU pieces, every ablation switch, and a
short grid run that records purity per noise type."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from cirbench.backbones.base import max_token_similarity
from cirbench.backbones.tiny import TinyBackbone
from cirbench.settings.config import ConfigError, build_config
from cirbench.data.datasets.registry import ShapesLoader
from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.method import Batch, TrainingContext
from cirbench.registry import Registry
from cirbench_methods.conesep import (
    ConeSep,
    ConeSepConfig,
    fidelity_eq3,
    fidelity_release,
    hard_label,
    partition,
    query_oriented_loss,
    sample_images,
    soft_label,
    target_matrix,
    target_oriented_loss,
    unlearning_cost,
    unlearning_loss,
    unlearning_mask,
)

from fixtures import use_datasets

B = 6
TEXTS = ["make the red circle blue", "add a small square", "remove the triangle", "move the circle left",
         "make it large", "change the square into a circle"]


@pytest.fixture(scope="module")
def backbone_state() -> dict:
    return TinyBackbone(seed=0).state_dict()


def make_method(backbone_state: dict, **overrides) -> ConeSep:
    backbone = TinyBackbone(seed=0)
    backbone.load_state_dict(backbone_state)
    context = TrainingContext(num_train=100, epochs=4, batch_size=B, steps_per_epoch=1, seed=0,
                              device=torch.device("cpu"), iterate=lambda shuffle: iter(()))
    return ConeSep(backbone, ConeSepConfig(**overrides), context)


def make_batch(backbone: TinyBackbone, size: int = B) -> Batch:
    gen = torch.Generator().manual_seed(7)
    texts = [TEXTS[i % len(TEXTS)] for i in range(size)]
    return Batch(index=torch.arange(size), reference=torch.randn(size, 16, 64, generator=gen),
                 target=torch.randn(size, 16, 64, generator=gen), text=backbone.tokenize(texts), texts=texts)


def grads(method: ConeSep, loss: torch.Tensor) -> dict[str, torch.Tensor | None]:
    method.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad for n, p in method.named_parameters()}


# ----------------------------------------------------------------------------- GFQ


def test_fidelity_variants_on_hand_made_similarities() -> None:
    sim = torch.tensor([0.9, 0.6, 0.5, 0.2])
    x = torch.tensor([0.7, 0.4, 0.3, 0.0])
    torch.testing.assert_close(fidelity_eq3(sim, 0.2), x.pow(2) * (x - 1))
    torch.testing.assert_close(fidelity_eq3(sim, 0.2, apply_function=False), x)
    xn = x / 0.7
    torch.testing.assert_close(fidelity_release(sim, 0.2), xn.pow(2) * (1 - xn.pow(2)))
    torch.testing.assert_close(fidelity_release(sim, 0.2, apply_function=False), xn)
    # The release's f is 0 both below the boundary and at the batch's best sample.
    assert fidelity_release(sim, 0.2)[0] == 0 and fidelity_release(sim, 0.2)[3] == 0
    # Eq. 3 as printed is <= 0 whenever s - B <= 1, so omega = 0.5 keeps nothing.
    assert not partition(fidelity_eq3(sim, 0.2), 0.5, "eq3").any()
    assert partition(fidelity_eq3(sim, 0.2), -0.1, "eq3").tolist() == [False, True, True, True]
    # The release flags the int(omega * B) lowest, whatever their values.
    assert partition(fidelity_release(sim, 0.2), 0.5, "release").tolist() == [False, True, True, False]
    assert partition(fidelity_release(sim, 0.2), 0.0, "release").all()


def test_release_fidelity_survives_an_all_below_boundary_batch() -> None:
    f = fidelity_release(torch.tensor([0.1, 0.2]), 0.5)
    assert torch.isfinite(f).all() and (f == 0).all()


def test_sampling_distributions_have_unit_variance_and_their_shape() -> None:
    gen = torch.Generator().manual_seed(0)
    draws = {k: sample_images(k, 200, (3, 16, 16), gen, torch.device("cpu")) for k in ("gaussian", "uniform", "laplace")}
    for kind, x in draws.items():
        assert x.shape == (200, 3, 16, 16)
        assert abs(float(x.mean())) < 0.02 and abs(float(x.var()) - 1) < 0.05, kind
    assert float(draws["uniform"].abs().max()) <= math.sqrt(3) + 1e-6
    kurtosis = {k: float((x**4).mean() / x.var() ** 2) for k, x in draws.items()}
    assert kurtosis["uniform"] < kurtosis["gaussian"] < kurtosis["laplace"]  # 1.8 < 3 < 6


def test_boundary_uses_k_random_images_of_the_tower_shape(backbone_state, monkeypatch) -> None:
    method = make_method(backbone_state, K=3)
    seen = []
    original = method.backbone.encode_image_tokens
    monkeypatch.setattr(method.backbone, "encode_image_tokens", lambda px: seen.append(tuple(px.shape)) or original(px))
    boundary = method.estimate_boundary(make_batch(method.backbone))
    assert seen == [(3, 3, 32, 32), (3, 3, 32, 32)]  # references and targets
    assert -1.0 <= boundary <= 1.0


def test_empirical_boundary_never_calls_the_tower(backbone_state, monkeypatch) -> None:
    method = make_method(backbone_state, boundary_sampling="empirical")
    monkeypatch.setattr(method.backbone, "encode_image_tokens", lambda px: pytest.fail("tower called"))
    assert -1.0 <= method.estimate_boundary(make_batch(method.backbone)) <= 1.0


def test_random_switches_replace_random_parts_with_real_batch_values(backbone_state, monkeypatch) -> None:
    real = make_method(backbone_state, K=B, random_reference=False, random_target=False, random_text=False)
    monkeypatch.setattr(real.backbone, "encode_image_tokens", lambda px: pytest.fail("tower called"))
    batch = make_batch(real.backbone)
    with torch.no_grad():
        sim = real.backbone.composed_feature(batch.reference, batch.text) @ real.backbone.target_features(batch.target).transpose(1, 2)
    paired = float(sim.amax(-1).diagonal().mean())
    assert real.estimate_boundary(batch) == pytest.approx(paired, abs=1e-6)  # K = B real triplets
    shuffled = make_method(backbone_state, K=B, random_reference=False, random_target=False, random_text=True)
    assert shuffled.estimate_boundary(batch) != pytest.approx(paired, abs=1e-6)


def test_boundary_switch_sets_b_to_zero(backbone_state) -> None:
    method = make_method(backbone_state, boundary=False, fidelity=False)
    out = method.training_step(make_batch(method.backbone), epoch=0, step=0)
    assert out.components["boundary"] == 0.0
    with torch.no_grad():
        composed, _ = method.composed_and_negative(make_batch(method.backbone))
        sim = composed @ method.backbone.target_features(make_batch(method.backbone).target).transpose(1, 2)
    # fidelity off and B = 0: the fidelity is relu(s) / max, so the noise score is its negative.
    x = sim.amax(-1).diagonal().clamp_min(0)
    torch.testing.assert_close(-out.noise_score, x / x.max(), atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------- NBL


def test_target_matrix_variants() -> None:
    assert target_matrix("paper", 3, torch.device("cpu")).tolist() == [[1, -1, -1], [-1, 1, -1], [-1, -1, 1]]
    for kind, value in (("ones", 1.0), ("minus_ones", -1.0), ("zeros", 0.0)):
        assert (target_matrix(kind, 3, torch.device("cpu")) == value).all()


def test_target_oriented_loss_sign_and_clean_rows() -> None:
    T = target_matrix("paper", 3, torch.device("cpu"))
    clean = torch.tensor([True, True, False])
    good = target_oriented_loss(-T * 0.5, clean, T, 0.07)  # far from own target, close to others
    bad = target_oriented_loss(T * 0.5, clean, T, 0.07)
    assert 0 <= good < bad
    # A noisy row does not count: changing it leaves the loss unchanged.
    changed = (-T * 0.5).clone()
    changed[2] = 0.9
    assert target_oriented_loss(changed, clean, T, 0.07) == good
    assert target_oriented_loss(T, torch.zeros(3, dtype=torch.bool), T, 0.07) == 0


def test_query_oriented_loss_zero_inside_the_interval_positive_outside() -> None:
    # Composed features e0, e1; negatives chosen so the batch cosines are {0.6, -0.2, ...}.
    composed = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    negative = torch.nn.functional.normalize(torch.tensor([[0.6, 0.8], [-0.2, 0.98]]), dim=-1)
    pairs = composed @ negative.T
    alpha1, alpha2 = float(pairs[pairs < 0].mean()), float(pairs[pairs > 0].mean())
    clean = torch.tensor([True, True])
    loss = query_oriented_loss(composed, negative, clean)
    s_n = pairs.diagonal()
    expected = (torch.relu(s_n + alpha1) + torch.relu(-alpha2 - s_n)).mean()
    torch.testing.assert_close(loss, expected)
    assert loss > 0  # s_n = (0.6, 0.98) lies above -alpha1
    orthogonal = torch.tensor([[0.0, 1.0], [-1.0, 0.0]])
    assert query_oriented_loss(composed, orthogonal, clean) == 0  # cos = 0 sits inside


def test_warmup_losses_are_finite_and_reach_the_negative_prompt(backbone_state) -> None:
    method = make_method(backbone_state, fidelity_variant="release")
    batch = make_batch(method.backbone)
    out = method.training_step(batch, epoch=0, step=0)
    assert torch.isfinite(out.loss) and set(out.components) >= {"robust", "intra", "inter"}
    assert out.noise_score.shape == (B,) and out.selected_clean.dtype == torch.bool
    composed, negative = method.composed_and_negative(batch)
    neg_sim = negative @ method.backbone.target_features(batch.target).transpose(1, 2)
    inter = target_oriented_loss(neg_sim.amax(-1), torch.ones(B, dtype=torch.bool), target_matrix("paper", B, torch.device("cpu")), 0.07)
    g = grads(method, inter)
    assert g["negative_prompt"] is not None and g["negative_prompt"].abs().sum() > 0
    assert g["backbone.query_tokens"] is not None  # through the target features
    g = grads(method, method.training_step(batch, epoch=0, step=0).loss)
    assert g["negative_prompt"].abs().sum() > 0 and g["backbone.text_proj.weight"].abs().sum() > 0


# ----------------------------------------------------------------------------- BTU


def test_mask_and_hard_label() -> None:
    clean = torch.tensor([True, False, True])
    mask = unlearning_mask(clean)
    expected = torch.zeros(3, 6, dtype=torch.bool)
    expected[1, 1] = True  # noisy: no path to its own target
    expected[0, 3] = expected[2, 5] = True  # clean: no path to its own negative boundary
    assert torch.equal(mask, expected)
    label = hard_label(clean)
    assert label.tolist() == [[1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0], [0, 0, 1, 0, 0, 0]]


def test_soft_label_rows_are_distributions_and_respect_blocked_paths() -> None:
    gen = torch.Generator().manual_seed(0)
    clean = torch.tensor([True, False, True, False])
    cost = torch.rand(4, 8, generator=gen)
    cost[1, 1] = cost[3, 3] = -5.0  # very attractive, yet blocked
    label = soft_label(cost, clean, gamma=0.7, epsilon=0.03, iterations=200)
    torch.testing.assert_close(label.sum(1), torch.ones(4))
    assert label[1, 1] == 0 and label[3, 3] == 0 and label[0, 4] == 0 and label[2, 6] == 0
    assert label[1, 5] >= 0.3 and label[0, 0] >= 0.3
    assert torch.equal(soft_label(cost, clean, 0.7, 0.03, 200, use_ot=False), hard_label(clean))


def test_unlearning_cost_blocks_and_ot_negative_switch() -> None:
    sim = torch.tensor([[0.8, 0.1], [0.2, 0.7]])
    composed = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    negative = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    cost = unlearning_cost(sim, composed, negative, use_negative=True)
    torch.testing.assert_close(cost, torch.tensor([[0.2, 0.9, 1.0, 0.0], [0.8, 0.3, 0.0, 1.0]]))
    assert (unlearning_cost(sim, composed, negative, use_negative=False)[:, 2:] == 1).all()


def test_unlearning_loss_sign() -> None:
    label = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]])
    agree = torch.tensor([[0.0, 0.0, 0.5, 0.0], [0.0, 0.5, 0.0, 0.0]])
    assert 0 <= unlearning_loss(agree, label, 0.07) < unlearning_loss(-agree, label, 0.07)


def test_btu_step_is_finite_and_trains_the_negative_prompt(backbone_state) -> None:
    method = make_method(backbone_state)
    out = method.training_step(make_batch(method.backbone), epoch=5, step=0)
    assert torch.isfinite(out.loss) and "ul" in out.components and "inter" not in out.components
    g = grads(method, out.loss)
    assert g["negative_prompt"].abs().sum() > 0


def test_btu_step_under_bf16_autocast(backbone_state) -> None:
    method = make_method(backbone_state)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = method.training_step(make_batch(method.backbone), epoch=5, step=0)
    assert torch.isfinite(out.loss) and out.components["ul"] > 0
    assert grads(method, out.loss)["negative_prompt"].abs().sum() > 0


@pytest.mark.parametrize("size", [2, 3])
def test_small_batches_work(backbone_state, size: int) -> None:
    for variant in ("eq3", "release"):
        method = make_method(backbone_state, fidelity_variant=variant)
        for epoch in (0, 3):
            assert torch.isfinite(method.training_step(make_batch(method.backbone, size), epoch=epoch, step=0).loss)


# ----------------------------------------------------------------------------- switches


def _parts(method: ConeSep, epoch: int) -> dict[str, float]:
    torch.manual_seed(0)
    return method.training_step(make_batch(method.backbone), epoch=epoch, step=0).components


def test_loss_switches_zero_their_term(backbone_state) -> None:
    assert _parts(make_method(backbone_state, rcl=False), 0)["robust"] == 0
    assert _parts(make_method(backbone_state, query_loss=False), 0)["intra"] == 0
    assert _parts(make_method(backbone_state, unlearning=False), 3)["ul"] == 0
    full = _parts(make_method(backbone_state), 3)
    assert full["robust"] > 0 and full["ul"] > 0


def test_ranking_loss_switch_puts_infonce_in_place_of_rcl(backbone_state) -> None:
    from cirbench.backbones.base import max_token_similarity
    from cirbench.method.losses import info_nce

    method = make_method(backbone_state, ranking_loss="infonce")
    batch = make_batch(method.backbone)
    composed, _ = method.composed_and_negative(batch)
    expected = info_nce(max_token_similarity(composed, method.backbone.target_features(batch.target)), method.config.tau)
    assert _parts(method, 0)["robust"] == pytest.approx(expected.item(), rel=1e-5)
    assert _parts(make_method(backbone_state), 0)["robust"] != pytest.approx(expected.item(), rel=1e-3)
    with pytest.raises(ValueError, match="ranking_loss"):
        ConeSepConfig(ranking_loss="hinge")


def test_target_matrix_zeros_gives_a_constant_loss_without_gradient(backbone_state) -> None:
    method = make_method(backbone_state, target_matrix="zeros", rcl=False, query_loss=False)
    out = method.training_step(make_batch(method.backbone), epoch=0, step=0)
    assert out.components["inter"] == pytest.approx(math.log(2))
    g = grads(method, out.loss)
    assert g["negative_prompt"] is None or g["negative_prompt"].abs().sum() == 0
    ones = make_method(backbone_state, target_matrix="ones").training_step(make_batch(method.backbone), 0, 0)
    assert ones.components["inter"] != pytest.approx(math.log(2))


def test_ot_switches(backbone_state, monkeypatch) -> None:
    import cirbench_methods._conesep_math as module  # where the plugin's unlearning terms call it

    calls = []
    real_plan = module.transport_plan
    monkeypatch.setattr(module, "transport_plan", lambda cost, *a: calls.append(cost) or real_plan(cost, *a))
    make_method(backbone_state, ot_negative=False).training_step(make_batch(TinyBackbone(seed=0)), 3, 0)
    assert len(calls) == 1 and (calls[-1][:, B:] == 1).all()
    make_method(backbone_state).training_step(make_batch(TinyBackbone(seed=0)), 3, 0)
    assert len(calls) == 2 and not (calls[-1][:, B:] == 1).all()
    make_method(backbone_state, ot=False).training_step(make_batch(TinyBackbone(seed=0)), 3, 0)
    assert len(calls) == 2  # Y = L: no plan


def test_negative_prompt_switch(backbone_state) -> None:
    method = make_method(backbone_state, negative_prompt=False)
    assert not hasattr(method, "negative_prompt")
    batch = make_batch(method.backbone)
    with torch.no_grad():
        composed, negative = method.composed_and_negative(batch)
    assert not torch.allclose(composed, negative)  # the negated text keeps F_neg apart
    assert torch.isfinite(method.training_step(batch, 0, 0).loss)
    copied = make_method(backbone_state, negative_init="copy")
    with torch.no_grad():
        composed, negative = copied.composed_and_negative(batch)
    torch.testing.assert_close(composed, negative)  # the release's prompt starts as a copy of the queries
    drawn = make_method(backbone_state)
    with torch.no_grad():
        composed, negative = drawn.composed_and_negative(batch)
    assert not torch.allclose(composed, negative)  # the default draws its own start
    assert drawn.negative_prompt.std().item() == pytest.approx(drawn.backbone.query_tokens.std().item(), rel=0.2)


def _nbl_objective(method: ConeSep, batch: Batch) -> torch.Tensor:
    """The NBL terms of Eq. 8 at epoch 0, step 0 (zeta L_intra + nu L_inter)."""
    parts = method.loss_terms(batch, epoch=0)[0]
    return method.config.zeta * parts["intra"] + method.config.nu * parts["inter"]


def _own_target_margin(method: ConeSep, batch: Batch) -> float:
    """How much closer the composed queries are to their own targets than to the others."""
    with torch.no_grad():
        composed, _ = method.composed_and_negative(batch)
        sim = max_token_similarity(composed, method.backbone.target_features(batch.target))
        off = ~torch.eye(len(sim), dtype=torch.bool)
        return float(sim.diagonal().mean() - sim[off].mean())


def test_nbl_never_moves_a_composed_query_away_from_its_target(backbone_state) -> None:
    """Eq. 8 trains the NBL module (the negative prompt): at step 0 its gradient reaches no
    weight of the composer, so a step on it leaves every composed query where it was. The
    release's routing (through the composer, from a copied prompt) is the defect this
    guards against: a step on it moves the queries away from their own targets, towards
    the others."""
    batch = make_batch(TinyBackbone(seed=0))
    method = make_method(backbone_state)
    g = grads(method, _nbl_objective(method, batch))
    assert g["negative_prompt"] is not None and g["negative_prompt"].abs().sum() > 0
    assert all(v is None or v.abs().sum() == 0 for n, v in g.items() if n.startswith("backbone."))

    release = make_method(backbone_state, nbl_gradient="all", negative_init="copy")
    before = _own_target_margin(release, batch)
    g = grads(release, _nbl_objective(release, batch))
    with torch.no_grad():
        for name, p in release.named_parameters():
            if name.startswith("backbone.") and g[name] is not None:
                p -= 0.05 * g[name] / g[name].norm().clamp_min(1e-12)
    assert _own_target_margin(release, batch) < before


def test_warmup_epochs_switch_the_objective(backbone_state) -> None:
    method = make_method(backbone_state, warmup_epochs=1)
    assert "inter" in _parts(method, 0) and "ul" in _parts(method, 1)
    assert "ul" in _parts(make_method(backbone_state, warmup_epochs=0), 0)


def test_inference_is_the_plain_composed_query() -> None:
    from cirbench.method import Method

    for name in ("encode_queries", "encode_targets", "similarity"):
        assert getattr(ConeSep, name) is getattr(Method, name)


def test_config_from_the_command_line_and_bad_values() -> None:
    cfg = build_config(ConeSepConfig, {"ot": "false", "K": "8", "boundary_sampling": "laplace", "target_matrix": "zeros"}, "conesep")
    assert (cfg.ot, cfg.K, cfg.boundary_sampling, cfg.target_matrix) == (False, 8, "laplace", "zeros")
    with pytest.raises(ConfigError):
        build_config(ConeSepConfig, {"boundary_sampling": "cauchy"}, "conesep")
    with pytest.raises(ValueError, match="K"):
        ConeSepConfig(K=0)
    with pytest.raises(ValueError, match="gamma"):
        ConeSepConfig(gamma=1.5)
    with pytest.raises(ValueError, match="fidelity_variant"):
        ConeSepConfig(fidelity_variant="paper")
    names = {f.name for f in dataclasses.fields(ConeSepConfig)}
    assert {"K", "tau", "omega", "gamma", "zeta", "nu", "kappa", "warmup_epochs", "epsilon", "sinkhorn_iterations"} <= names


# ----------------------------------------------------------------------------- a short harness run


def test_short_grid_run_records_purity_per_noise_type(tmp_path, monkeypatch, cache_dir) -> None:
    """Grid -> train_cell -> results store on a micro shapes set (shapes-mini takes minutes on
    a loaded CPU), with an ablation variant as its own row: one warm-up epoch, one BTU epoch,
    a partition in both, and purity rows for every noise type."""
    datasets = Registry("dataset")
    datasets.add("shapes-micro", ShapesLoader("conesep test set", n_train_scenes=30, n_val_scenes=10))
    use_datasets(monkeypatch, datasets)
    spec = GridSpec(
        methods=["conesep", "conesep:no_ot"], noise_rates=[0.5], dataset="shapes-micro", epochs=2, batch_size=30,
        output=tmp_path / "results", cache_dir=cache_dir,
        overrides={"conesep": {"warmup_epochs": "1"}, "conesep:no_ot": {"warmup_epochs": "1", "ot": "false"}},
    )
    grid = Grid(spec)
    assert [c.config.ot for c in grid.cells] == [True, False]
    for cell in grid.cells:
        outcome = run_cell(grid.resources, cell, progress=lambda info: None, announce=lambda m: None)
        assert outcome.status == "completed", outcome.error

    purity = grid.store.read("purity")
    assert set(purity.method) == {"conesep", "conesep:no_ot"}
    for _, rows in purity.groupby("run_id"):
        assert sorted(rows.epoch.unique()) == [0, 1]
        assert set(rows.noise_type) == {"all", "reference", "caption", "target"}
        overall = rows[rows.noise_type == "all"]
        # 60 samples in 2 batches of 30; the release variant flags int(0.5 * 30) = 15 per batch.
        assert (overall.n_samples == 60).all() and (overall.n_selected == 60 - 2 * 15).all()
        assert overall.auroc.notna().all() and rows.noise_recall.notna().all()
    losses = grid.store.read("losses")
    assert "inter" in set(losses[losses.epoch == 0].name) and "ul" in set(losses[losses.epoch == 1].name)
    assert np.isfinite(losses.value).all()
    runs = grid.store.read("runs")
    assert (runs.seconds_per_step > 0).all()


def test_unlearning_logits_follow_eq12_as_printed(backbone_state, monkeypatch) -> None:
    """Eq. 12's logits are the similarities themselves (as printed; the release feeds
    ``[softmax(s / tau) | s_neg^T]`` instead, ``ul_loss = release``); ``ul_temperature``
    divides them by tau; ``label_softmax`` is the release's extra softmax of Y."""
    import cirbench_methods._conesep_math as module  # where the plugin's unlearning terms call it

    seen = []
    real = module.unlearning_loss
    monkeypatch.setattr(module, "unlearning_loss", lambda logits, label, t=1.0: seen.append((label, t)) or real(logits, label, t))
    batch = make_batch(TinyBackbone(seed=0))
    make_method(backbone_state).training_step(batch, 3, 0)
    make_method(backbone_state, ul_temperature=True).training_step(batch, 3, 0)
    make_method(backbone_state, label_softmax=True).training_step(batch, 3, 0)
    assert [t for _, t in seen] == [1.0, 0.07, 1.0]
    torch.testing.assert_close(seen[2][0], torch.softmax(seen[0][0], dim=1))


# ----------------------------------------------------------------------------- the release's readings (issue 75)


RELEASE_SWITCHES = {  # each switch of the release's readings: the terms it alone changes (defaults otherwise)
    "inter_loss": ("release", {"inter"}),
    "ot_cost": ("release", {"ot_cost", "ot_plan", "label", "ul"}),
    "negative_column": ("last", {"ot_blocked", "ot_plan", "label", "ul"}),
    "ul_loss": ("release", {"ul", "ul_transposed"}),
    "nbl_rows": ("all", {"inter", "intra"}),
    "query_interval": ("release", {"intra"}),
    "query_cosine": ("release", {"intra"}),
    "boundary_estimate": ("release", {"boundary", "fidelity"}),
}


def _features(seed: int = 0, size: int = 8, tokens: int = 4, dim: int = 16) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    unit = lambda *shape: torch.nn.functional.normalize(torch.randn(*shape, generator=gen, dtype=torch.float64), dim=-1)
    return {"composed": unit(size, dim), "negative": unit(size, dim), "targets": unit(size, tokens, dim),
            "boundary_composed": unit(size, dim), "boundary_targets": unit(size, tokens, dim)}


def _terms(config: ConeSepConfig, f: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every term of the objective and the partition from features, by the functions
    ``ConeSep.loss_terms`` calls (what the parity adapter compares with the release)."""
    import cirbench_methods.conesep as module

    sim = max_token_similarity(f["composed"], f["targets"])
    neg_sim = max_token_similarity(f["negative"], f["targets"])
    boundary = module.boundary_similarity(f["boundary_composed"], f["boundary_targets"], config.boundary_estimate)
    fidelity = module.sample_fidelity(sim.diagonal(), float(boundary), config)
    clean = partition(fidelity, config.omega, config.fidelity_variant)
    btu = module.unlearning_terms(sim, neg_sim, f["composed"], f["negative"], clean, config)
    return {"boundary": boundary, "fidelity": fidelity, "clean": clean, "robust": module.ranking_term(sim, config),
            "inter": module.target_term(neg_sim, clean, config), "intra": module.query_term(f["composed"], f["negative"], clean, config),
            **{k: v for k, v in btu.items() if k in ("ot_cost", "ot_blocked", "ot_plan", "label", "ul", "ul_transposed")}}


@pytest.mark.parametrize("field", sorted(RELEASE_SWITCHES))
def test_each_release_switch_changes_its_terms_and_nothing_else(field: str) -> None:
    value, expected = RELEASE_SWITCHES[field]
    f = _features()
    default, switched = _terms(ConeSepConfig(), f), _terms(ConeSepConfig(**{field: value}), f)
    changed = {k for k in switched if k not in default or not torch.equal(switched[k], default[k])}
    assert changed == expected


def test_release_switches_are_late_fields_so_the_default_run_id_is_unchanged() -> None:
    from cirbench.settings.config import LATE_FIELD, identity_dict

    late = {f.name for f in dataclasses.fields(ConeSepConfig) if f.metadata.get(LATE_FIELD)}
    assert late == set(RELEASE_SWITCHES)
    assert not late & set(identity_dict(ConeSepConfig()))
    released = build_config(ConeSepConfig, {"readings": "release"}, "conesep")
    assert {k: getattr(released, k) for k in RELEASE_SWITCHES} == {k: v for k, (v, _) in RELEASE_SWITCHES.items()}
    assert (released.label_softmax, released.nbl_gradient, released.negative_init, released.zeta) == (True, "all", "copy", 0.8)
    with pytest.raises(ValueError, match="ot_cost"):
        ConeSepConfig(ot_cost="paper")


def test_inter_loss_release_works_on_softmax_probabilities_summed_per_row() -> None:
    gen = torch.Generator().manual_seed(1)
    neg_sim = torch.rand(4, 4, generator=gen, dtype=torch.float64) * 2 - 1
    T = target_matrix("paper", 4, torch.device("cpu"))
    clean = torch.tensor([True, False, True, True])
    p = torch.softmax(neg_sim / 0.07, dim=1)
    rows = torch.nn.functional.softplus(T * p).sum(1)
    torch.testing.assert_close(target_oriented_loss(neg_sim, clean, T, 0.07, "release"), rows[clean].mean())
    printed = torch.nn.functional.softplus(T * neg_sim / 0.07).mean(1)
    torch.testing.assert_close(target_oriented_loss(neg_sim, clean, T, 0.07), printed[clean].mean())


def test_ot_cost_release_uses_probabilities_the_transposed_negative_similarities_and_its_maximum() -> None:
    sim = torch.tensor([[0.8, 0.1], [0.2, 0.7]], dtype=torch.float64)
    neg_sim = torch.tensor([[0.3, -0.2], [0.5, 0.1]], dtype=torch.float64)  # [query, target]
    composed = negative = torch.eye(2, dtype=torch.float64)
    raw = torch.cat([1 - torch.softmax(sim / 0.07, dim=1), 1 - neg_sim.T], dim=1)
    cost = unlearning_cost(sim, composed, negative, True, "release", neg_sim, 0.07)
    torch.testing.assert_close(cost, raw / raw.max())
    assert cost[0, 3] == (1 - neg_sim[1, 0]) / raw.max()  # C-[i, j] = 1 - s(F_neg^j, F_t^i)
    constant = unlearning_cost(sim, composed, negative, False, "release", neg_sim, 0.07)
    assert (constant[:, 2:] == constant[:, 2:].max()).all() and constant.max() == 1


def test_negative_column_last_is_the_releases_mask_and_label() -> None:
    clean = torch.tensor([True, False, True])
    blocked = unlearning_mask(clean, "last")
    expected = torch.zeros(3, 6, dtype=torch.bool)
    expected[1, 1] = True  # noisy: no path to its own target
    expected[0, 5] = expected[2, 5] = True  # clean: no path to the last column
    assert torch.equal(blocked, expected)
    assert hard_label(clean, "last").tolist() == [[1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1], [0, 0, 1, 0, 0, 0]]
    # no noisy row: the last column is blocked for every row and carries nothing
    label = soft_label(torch.rand(3, 6, generator=torch.Generator().manual_seed(0)), torch.ones(3, dtype=torch.bool),
                       0.7, 0.03, 100, column="last")
    torch.testing.assert_close(label.sum(1), torch.ones(3))
    assert (label[:, -1] == 0).all()


def test_ul_loss_release_adds_the_transposed_direction_on_softmax_logits() -> None:
    import cirbench_methods.conesep as module

    f = _features(3)
    sim = max_token_similarity(f["composed"], f["targets"])
    neg_sim = max_token_similarity(f["negative"], f["targets"])
    clean = torch.tensor([True, False] * 4)
    config = ConeSepConfig(ul_loss="release")
    terms = module.unlearning_terms(sim, neg_sim, f["composed"], f["negative"], clean, config)
    logits = torch.cat([torch.softmax(sim / 0.07, dim=1), neg_sim.T], dim=1)
    torch.testing.assert_close(terms["ul_forward"], unlearning_loss(logits, terms["label"]))
    torch.testing.assert_close(terms["ul_transposed"], unlearning_loss(logits.T, terms["label_t"]))
    torch.testing.assert_close(terms["ul"], (terms["ul_forward"] + terms["ul_transposed"]) / 2)
    assert torch.equal(terms["ot_cost_t"], terms["ot_cost"].T) and torch.equal(terms["ot_blocked_t"], terms["ot_blocked"].T)
    # the transposed label: the plan's rows rescaled to 1, plus (1 - gamma) L^T, whose rows hold one 1 or none
    assert terms["label_t"].shape == (16, 8)
    torch.testing.assert_close(terms["label_t"].sum(1), 0.7 + 0.3 * hard_label(clean).T.sum(1).double())
    assert "ul_transposed" not in module.unlearning_terms(sim, neg_sim, f["composed"], f["negative"], clean, ConeSepConfig())


def test_query_loss_release_interval_and_per_dimension_products() -> None:
    composed = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    negative = torch.nn.functional.normalize(torch.tensor([[0.6, 0.8], [-0.2, 0.98]], dtype=torch.float64), dim=-1)
    clean = torch.tensor([True, False])
    hinge = lambda s: (torch.relu(s + 0.002) + torch.relu(-0.007 - s)) / 0.07
    s_n = (composed * negative).sum(-1)
    torch.testing.assert_close(query_oriented_loss(composed, negative, clean, "vector", "release"), hinge(s_n)[0])
    products = composed[:, None, :] * negative[None, :, :]  # (B, B, E): the release's broadcast
    torch.testing.assert_close(query_oriented_loss(composed, negative, torch.ones(2, dtype=torch.bool), "release", "release"),
                               hinge(products).mean())
    torch.testing.assert_close(query_oriented_loss(composed, negative, clean, "release", "release"), hinge(products[0]).mean())


def test_boundary_estimate_release_draws_a_batch_and_averages_all_pairs(backbone_state, monkeypatch) -> None:
    import cirbench_methods.conesep as module

    f = _features(2)
    sim = max_token_similarity(f["composed"], f["targets"])
    torch.testing.assert_close(module.boundary_similarity(f["composed"], f["targets"]), sim.diagonal().mean())
    torch.testing.assert_close(module.boundary_similarity(f["composed"], f["targets"], "release"), sim.mean())
    method = make_method(backbone_state, K=3, boundary_estimate="release")
    seen = []
    original = method.backbone.encode_image_tokens
    monkeypatch.setattr(method.backbone, "encode_image_tokens", lambda px: seen.append(tuple(px.shape)) or original(px))
    assert -1.0 <= method.estimate_boundary(make_batch(method.backbone)) <= 1.0
    assert seen == [(B, 3, 32, 32), (B, 3, 32, 32)]  # as many as the batch, not K


def test_release_readings_train_in_both_phases(backbone_state) -> None:
    config = build_config(ConeSepConfig, {"readings": "release"}, "conesep")
    for extra in ({}, {"partition": False}):
        method = make_method(backbone_state, **{**dataclasses.asdict(config), **extra})
        for epoch in (0, 5):
            out = method.training_step(make_batch(method.backbone), epoch=epoch, step=0)
            assert torch.isfinite(out.loss)
            assert grads(method, out.loss)["negative_prompt"].abs().sum() > 0
