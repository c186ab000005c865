"""Tests for the ``hug`` method plugin (methods/hug.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from cirbench.backbones.tiny import TinyBackbone
from cirbench.settings.config import build_config
from cirbench.engine.planning.ablation import expand_ablations
from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.method import Batch, TrainingContext
from cirbench.plugins import discover
from cirbench_methods import hug as H



TEXTS = ["add a red circle", "remove the blue square", "make it green", "move the triangle left", "make it small"]


def make_method(**overrides) -> H.HUG:
    """HUG on a small seeded tiny backbone."""
    torch.manual_seed(0)
    backbone = TinyBackbone(hidden_size=32, embed_dim=16, num_query_tokens=4, seed=0)
    context = TrainingContext(
        num_train=100, epochs=1, batch_size=len(TEXTS), steps_per_epoch=1, seed=0,
        device=torch.device("cpu"), iterate=lambda shuffle=True: iter(()),
    )
    return H.HUG(backbone, replace(H.HUGConfig(), **overrides), context)


def make_batch(method: H.HUG, n: int = len(TEXTS)) -> Batch:
    """A synthetic batch of ``n`` triplets with layer-normalised random image tokens."""
    g = torch.Generator().manual_seed(1)
    tokens = torch.nn.functional.layer_norm(torch.randn(2, n, 16, 64, generator=g), (64,))
    texts = [TEXTS[i % len(TEXTS)] for i in range(n)]
    return Batch(torch.arange(n), tokens[0], tokens[1], method.backbone.tokenize(texts), texts)


def grads_of(method: H.HUG, loss: torch.Tensor) -> dict[str, bool]:
    """Which parameter groups a loss's gradient reaches (any non-zero entry)."""
    method.zero_grad(set_to_none=True)
    loss.backward(retain_graph=True)
    groups = {
        "composer": list(method.backbone.layers.parameters()),
        "vision_proj": list(method.backbone.vision_proj.parameters()),
        "visual_head": list(method.visual_head.parameters()),
        "text_head": list(method.text_head.parameters()),
        "multimodal_head": list(method.multimodal_head.parameters()),
        "ab": [method.log_a, method.b],
    }
    return {k: any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in ps) for k, ps in groups.items()}


def test_expected_distance_matches_brute_force_and_sampling() -> None:
    g = torch.Generator().manual_seed(0)
    mu_q, mu_c = torch.randn(5, 3, 4, generator=g), torch.randn(7, 3, 4, generator=g)
    var_q, var_c = torch.rand(5, 3, 4, generator=g), torch.rand(7, 3, 4, generator=g)
    brute = torch.empty(5, 7)
    for i in range(5):
        for j in range(7):
            brute[i, j] = ((mu_q[i] - mu_c[j]) ** 2).sum() + var_q[i].sum() + var_c[j].sum()
    assert torch.allclose(H.expected_distance(mu_q, var_q, mu_c, var_c), brute, atol=1e-5)
    samples = 20000
    zq = mu_q[0] + var_q[0].sqrt() * torch.randn(samples, 3, 4, generator=g)
    zc = mu_c[0] + var_c[0].sqrt() * torch.randn(samples, 3, 4, generator=g)
    assert ((zq - zc) ** 2).sum((1, 2)).mean().item() == pytest.approx(brute[0, 0].item(), rel=0.03)


def test_similarity_is_minus_expected_distance_of_the_methods_gaussians() -> None:
    method = make_method(exact_query_variance=True).eval()
    batch = make_batch(method)
    with torch.no_grad():
        queries = method.encode_queries(batch.reference, batch.text)
        targets = method.encode_targets(batch.target)
        fused = method.backbone.compose(batch.reference, batch.text).query
        states = method.backbone.compose(batch.target, None).query
        mu_q, mu_c = method.means(fused), method.means(states)
        var_q = method.variances(batch.reference, batch.text, fused)["q"] / method.embed_dim
        var_c = method.visual_head(states).square() / method.embed_dim
        scores = method.similarity(queries, targets)
    brute = ((mu_q[:, None] - mu_c[None]) ** 2).sum((2, 3)) + var_q.sum((1, 2))[:, None] + var_c.sum((1, 2))[None]
    assert scores.shape == (len(batch), len(batch))
    assert torch.allclose(scores, -brute, atol=1e-4)
    assert var_q.sum() > 0 and var_c.sum() > 0


def test_default_retrieval_drops_only_a_per_query_constant() -> None:
    method = make_method().eval()
    batch = make_batch(method)
    with torch.no_grad():
        targets = method.encode_targets(batch.target)
        fast = method.similarity(method.encode_queries(batch.reference, batch.text), targets)
        method.config.exact_query_variance = True
        exact = method.similarity(method.encode_queries(batch.reference, batch.text), targets)
    shift = fast - exact
    assert (shift > 0).all()
    assert torch.allclose(shift, shift[:, :1].expand_as(shift), atol=1e-5)
    assert torch.equal(fast.argsort(dim=1), exact.argsort(dim=1))


def test_similarity_rejects_foreign_features() -> None:
    with pytest.raises(ValueError, match="HUG similarity"):
        H.packed_distance(torch.zeros(3, 9), torch.zeros(4, 2, 8))


def test_dynamic_weights_sum_to_one_and_favour_low_variance() -> None:
    v = torch.rand(3, 4, 5, 6) * 3
    w = H.modality_weights(v, dynamic=True)
    assert torch.allclose(w.sum(0), torch.ones(4, 5, 6))
    lowest = v.argmin(0)
    assert torch.equal(w.argmax(0), lowest)
    static = H.modality_weights(v, dynamic=False)
    assert torch.allclose(static, torch.full_like(v, 1 / 3))


def test_derangement_has_no_fixed_point_and_follows_torch_seed() -> None:
    for n in (2, 3, 17):
        torch.manual_seed(n)
        perm = H.derangement(n)
        assert sorted(perm.tolist()) == list(range(n))
        assert (perm != torch.arange(n)).all()
    torch.manual_seed(5)
    first = H.derangement(9)
    torch.manual_seed(5)
    assert torch.equal(first, H.derangement(9))
    with pytest.raises(ValueError, match="at least 2"):
        H.derangement(1)


def test_mismatched_pairs_are_distinct_rows_with_foreign_texts() -> None:
    torch.manual_seed(0)
    rows, texts = H.mismatched_pairs(10, 4)
    assert len(rows) == 4 and len(set(rows.tolist())) == 4
    assert (rows != texts).all()
    rows, texts = H.mismatched_pairs(10, 0)
    assert torch.equal(rows, torch.arange(10)) and (texts != rows).all()
    assert len(H.mismatched_pairs(3, 32)[0]) == 3


def test_coordination_loss_on_a_subset_of_pairs() -> None:
    method = make_method(cord_pairs=2).train()
    parts, _ = method.losses(make_batch(method))
    assert torch.isfinite(parts["cord"])
    assert grads_of(method, parts["cord"])["multimodal_head"]


@pytest.mark.parametrize("end_to_end", [True, False])
def test_each_loss_is_finite_and_reaches_its_parameters(end_to_end: bool) -> None:
    """The default (end to end) lets the regularisers reach the composer; detached, only the heads."""
    method = make_method(heads_train_composer=end_to_end).train()
    parts, scores = method.losses(make_batch(method))
    assert set(parts) == {"hc", "fc", "cord"}
    out = method.training_step(make_batch(method), 0, 0)
    assert set(out.extra_scores) == {"overall_uncertainty"} and out.noise_score is not None
    assert not torch.equal(out.noise_score, out.extra_scores["overall_uncertainty"])
    assert all(torch.isfinite(t) for t in parts.values())
    hc = grads_of(method, parts["hc"])
    assert all(hc.values()), hc  # means (composer, projection), all heads, a and b
    fc = grads_of(method, parts["fc"])
    assert fc == {"composer": end_to_end, "vision_proj": False, "visual_head": True, "text_head": True,
                  "multimodal_head": True, "ab": False}
    cord = grads_of(method, parts["cord"])
    assert cord == {"composer": end_to_end, "vision_proj": False, "visual_head": False, "text_head": False,
                    "multimodal_head": True, "ab": False}
    assert all(score.shape == (len(TEXTS),) and (score > 0).all() for score in scores.values())


def brute_fine_grained(
    vq: torch.Tensor, vc: torch.Tensor, tau: float, component: bool, instance: bool, modality: bool, centre: bool
) -> torch.Tensor:
    """The fine-grained contrast by its definition, one anchor at a time."""
    if centre:
        vq, vc = vq - vq.mean(0), vc - vc.mean(0)
    s = torch.nn.functional.normalize(torch.stack([vq, vc]), dim=-1)
    _, n, k, _ = s.shape
    losses = []
    for m in range(2):
        for i in range(n):
            for c in range(k):
                anchor = s[m, i, c]
                candidates = [s[1 - m, i, c]]
                if component:
                    candidates += [s[side, i, l] for side in range(2) for l in range(k) if l != c]
                if instance:
                    candidates += [s[m, j, c] for j in range(n) if j != i]
                if modality:
                    candidates += [s[1 - m, j, c] for j in range(n) if j != i]
                logits = torch.stack(candidates) @ anchor / tau
                losses.append(-torch.log_softmax(logits, 0)[0])
    return torch.stack(losses).mean()


@pytest.mark.parametrize("centre", [True, False])
@pytest.mark.parametrize(
    "flags", [(True, True, True), (True, False, False), (False, True, False), (False, False, True), (True, False, True)]
)
def test_fine_grained_contrast_matches_its_definition(flags: tuple[bool, bool, bool], centre: bool) -> None:
    g = torch.Generator().manual_seed(3)
    vq, vc = torch.rand(4, 3, 8, generator=g), torch.rand(4, 3, 8, generator=g)
    expected = brute_fine_grained(vq, vc, 0.07, *flags, centre)
    got = H.fine_grained_contrast(vq, vc, 0.07, *flags, centre=centre)
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)


def test_fine_grained_negative_groups_each_change_the_loss() -> None:
    g = torch.Generator().manual_seed(4)
    vq, vc = torch.rand(4, 3, 8, generator=g), torch.rand(4, 3, 8, generator=g)
    values = {
        flags: H.fine_grained_contrast(vq, vc, 0.07, *flags).item()
        for flags in [(True, True, True), (False, True, True), (True, False, True), (True, True, False)]
    }
    assert len({round(v, 6) for v in values.values()}) == 4
    assert H.fine_grained_contrast(vq, vc, 0.07, False, False, False).item() == pytest.approx(0.0)


def test_holistic_contrast_counts_negatives_in_both_directions() -> None:
    d = torch.tensor([[1.0, 3.0, 5.0], [2.0, 0.5, 4.0], [6.0, 1.5, 2.5]])
    a, b = torch.tensor(1.0), torch.tensor(0.0)
    sig = torch.sigmoid
    pos = -torch.log(sig(-d.diagonal())).sum()
    neg = -torch.log(sig(d[~torch.eye(3, dtype=torch.bool)])).sum()
    assert H.holistic_contrast(d, a, b).item() == pytest.approx(((pos + 2 * neg) / 3).item(), rel=1e-5)


def test_point_matching_has_no_variance_and_no_noise_score() -> None:
    method = make_method(probabilistic=False).train()
    batch = make_batch(method)
    parts, scores = method.losses(batch)
    assert set(parts) == {"hc"} and scores == {}
    grads = grads_of(method, parts["hc"])
    assert grads["composer"] and not grads["visual_head"] and not grads["multimodal_head"]
    with torch.no_grad():
        packed = method.eval().encode_targets(batch.target)
    k = method.backbone.num_query_tokens
    assert torch.allclose(packed[:, -1], torch.full((len(batch),), float(k)), atol=1e-4)  # unit means, no variance


def test_heads_train_composer_lets_head_losses_reach_the_composer() -> None:
    method = make_method(heads_train_composer=True).train()
    parts, _ = method.losses(make_batch(method))
    assert grads_of(method, parts["fc"])["composer"]
    cord = grads_of(method, parts["cord"])
    assert cord["composer"] and cord["multimodal_head"] and not cord["visual_head"]


def test_heads_train_composer_reaches_the_composer_through_every_head() -> None:
    """End to end, each head trains the composer through the pass it reads, the reference's
    image-only pass and the text-only pass included; by default none of them does."""
    for on in (False, True):
        method = make_method(heads_train_composer=on).train()
        batch = make_batch(method)
        fused = method.backbone.compose(batch.reference, batch.text).query
        target = method.backbone.compose(batch.target, None).query
        v = method.variances(batch.reference, batch.text, fused if on else fused.detach(), None,
                             target if on else target.detach())
        for key in ("r", "t", "m", "c"):
            assert grads_of(method, v[key].sum())["composer"] is on, (on, key)


def test_freeze_means_trains_only_heads_and_ab() -> None:
    method = make_method(freeze_means=True).train()
    out = method.training_step(make_batch(method), 0, 0)
    grads = grads_of(method, out.loss)
    assert not grads["composer"] and not grads["vision_proj"]
    assert grads["visual_head"] and grads["text_head"] and grads["multimodal_head"] and grads["ab"]


def test_cross_modal_and_coordination_switches() -> None:
    method = make_method(cross_modal=False).train()
    batch = make_batch(method)
    parts, scores = method.losses(batch)
    assert "cord" not in parts
    grads = grads_of(method, parts["hc"] + parts["fc"])
    assert not grads["multimodal_head"] and grads["visual_head"] and grads["text_head"]
    assert torch.isfinite(scores["noise_score"]).all()
    assert torch.equal(scores["noise_score"], scores["overall_uncertainty"])  # without the coordination head they coincide

    method = make_method(coordination_loss=False).train()
    parts, scores = method.losses(make_batch(method))
    assert "cord" not in parts and set(scores) == {"noise_score", "overall_uncertainty"}
    assert grads_of(method, parts["hc"])["multimodal_head"]


def test_static_weighting_averages_the_modalities() -> None:
    for dynamic in (True, False):
        method = make_method(dynamic_weighting=dynamic).eval()
        batch = make_batch(method)
        with torch.no_grad():
            fused = method.backbone.compose(batch.reference, batch.text).query
            v = method.variances(batch.reference, batch.text, fused)
        mean = (v["r"] + v["t"] + v["m"]) / 3
        assert torch.allclose(v["q"], mean, atol=1e-6) is (not dynamic)
        if dynamic:  # the dynamic fusion leans to the least uncertain modality
            assert (v["q"] <= mean + 1e-6).all()


def test_every_table3_row_trains_a_step() -> None:
    assert list(H.TABLE3_ROWS) == [
        "point_matching", "probabilistic", "component", "instance", "modality", "cross_modal", "coordination", "full"
    ]
    assert H.TABLE3_ROWS["full"] == {k: getattr(H.HUGConfig(), k) for k in H.TABLE3_ROWS["full"]}
    names = set()
    for row, switches in H.TABLE3_ROWS.items():
        method = make_method(**switches).train()
        out = method.training_step(make_batch(method, n=3), 0, 0)
        assert torch.isfinite(out.loss), row
        out.loss.backward()
        names.add(tuple(sorted(out.components)))
    assert len(names) >= 3  # the rows log different loss terms


def test_ablate_hug_builds_each_table3_rows_config() -> None:
    """``--ablate hug``'s rows (:mod:`cirbench.engine.planning.ablation`) give each Table 3 row its switches."""
    ablation = expand_ablations(["hug"], discover().methods)
    assert ablation.labels == ["hug"] + [f"hug:{row}" for row in H.TABLE3_ROWS if row != "full"]
    for label, row in zip(ablation.labels, ["full"] + [r for r in H.TABLE3_ROWS if r != "full"]):
        config = build_config(H.HUGConfig, ablation.overrides.get(label, {}), label)
        assert {k: getattr(config, k) for k in H.TABLE3_ROWS[row]} == H.TABLE3_ROWS[row]


def test_shapes_mini_run_reports_purity_rows_with_auroc(tmp_path: Path, cache_dir: Path) -> None:
    spec = GridSpec(
        methods=["hug"], noise_rates=[0.5], dataset="shapes-mini", epochs=1, batch_size=128,
        output=tmp_path / "results", cache_dir=cache_dir,
    )
    grid = Grid(spec)
    outcome = run_cell(grid.resources, grid.cells[0], progress=lambda info: None, announce=lambda message: None)
    assert outcome.status == "completed", outcome.error
    purity = pd.read_parquet(tmp_path / "results" / "purity")
    assert set(purity["noise_type"]) == {"all", "reference", "caption", "target"}
    assert purity["n_selected"].isna().all()
    assert np.isfinite(purity["auroc"]).all() and purity["auroc"].between(0, 1).all()
    scores = pd.read_parquet(tmp_path / "results" / "scores")
    assert len(scores) == 2 * 600 and np.isfinite(scores["score"]).all()
    assert set(scores["score_name"]) == set(purity["score_name"]) == {"noise_score", "overall_uncertainty"}


def test_holistic_logits_start_on_either_side_of_the_balance_point() -> None:
    """With 2(B-1) negatives per positive, a constant prediction balances at logit
    ln 2(B-1). At initialisation a matched pair (identical means: only the variances part
    them) must start below it and a pair of unrelated means (independent unit components)
    above it; otherwise the negatives get no gradient and the loss only pulls pairs together
    (the release's b = 0 freeze). Default sizes: batch 128, tiny's 8 components of 128."""
    batch_size = 128
    backbone = TinyBackbone(seed=0)
    context = TrainingContext(num_train=batch_size, epochs=1, batch_size=batch_size, steps_per_epoch=1, seed=0,
                              device=torch.device("cpu"), iterate=lambda shuffle=True: iter(()))
    method = H.HUG(backbone, H.HUGConfig(), context)
    g = torch.Generator().manual_seed(2)
    tokens = torch.nn.functional.layer_norm(torch.randn(2, batch_size, 16, 64, generator=g), (64,))
    texts = [TEXTS[i % len(TEXTS)] for i in range(batch_size)]
    text = backbone.tokenize(texts)
    with torch.no_grad():
        fused, target = backbone.compose(tokens[0], text).query, backbone.compose(tokens[1], None).query
        v = method.variances(tokens[0], text, fused, None, target)
        offset_q = v["q"].sum((1, 2)) / backbone.embed_dim
        offset_c = v["c"].sum((1, 2)) / backbone.embed_dim
        unit = torch.nn.functional.normalize(torch.randn(2, batch_size, backbone.num_query_tokens, backbone.embed_dim, generator=g), dim=-1)
        apart = (unit[0].flatten(1) - unit[1].flatten(1)).square().sum(1)  # about 2 per component
        positive = H.holistic_logits(offset_q + offset_c, method.a, method.b)
        negative = H.holistic_logits(apart + offset_q + offset_c.roll(1), method.a, method.b)
    balance = np.log(2 * (batch_size - 1))
    assert positive.max() < balance < negative.min()
    release = H.HUG(TinyBackbone(seed=0), H.HUGConfig(init_b=0.0), context)
    assert H.holistic_logits(offset_q + offset_c, release.a, release.b).min() > balance  # the defect this guards


@pytest.mark.parametrize("negatives", ["mean", "sum"])
def test_fine_grained_sigmoid_matches_its_definition(negatives: str) -> None:
    """Eq. 16 as a sigmoid loss: brute force over anchors, partners and negative groups.
    ``mean`` (the default) is the printed ``sum_{M in {q, c}} sum_k E[.]``: per anchor the
    positive plus the mean over its negatives, averaged over samples, summed over sides and
    components; ``sum`` (hug v4) sums each anchor's negatives and averages over anchors."""
    g = torch.Generator().manual_seed(3)
    n, k = 3, 2
    sq, sc = torch.rand(n, k, 4, generator=g), torch.rand(n, k, 4, generator=g)
    a, b = torch.tensor(1.3), torch.tensor(-0.4)
    got = H.fine_grained_sigmoid(sq, sc, a, b, negatives=negatives)
    sides = [sq, sc]
    per_anchor = []
    for m in range(2):
        for i in range(n):
            for c in range(k):
                x = sides[m][i, c]
                positive = -torch.nn.functional.logsigmoid(-(a * (x - sides[1 - m][i, c]).square().sum() + b))
                others = [sides[side][i, l] for side in range(2) for l in range(k) if l != c]
                others += [side[j, c] for j in range(n) if j != i for side in (sides[m], sides[1 - m])]
                negative = torch.stack([-torch.nn.functional.logsigmoid(a * (x - y).square().sum() + b) for y in others])
                per_anchor.append(positive + (negative.mean() if negatives == "mean" else negative.sum()))
    per_anchor = torch.stack(per_anchor)
    expected = per_anchor.sum() / n if negatives == "mean" else per_anchor.mean()
    torch.testing.assert_close(got, expected)
    if negatives == "mean":  # the default is the printed form
        torch.testing.assert_close(H.fine_grained_sigmoid(sq, sc, a, b), got)


def test_fine_grained_sigmoid_does_not_grow_with_the_batch() -> None:
    """Eq. 16 takes an expectation over an anchor's negatives (Eq. 13 writes B * E where it
    sums them): with every standard deviation alike, each pair's term is the same and the
    loss is 2K (-log S(-b) - log S(b)) at any batch size. hug v4 summed the negatives
    (about 2(B-1) + 2(K-1) per anchor), so its loss and the weight of its negatives grew
    with the batch; with the heads training the composer that outweighed the holistic loss
    (docs/hug.md, hug v5)."""
    a, b, k = torch.tensor(1.0), torch.tensor(-0.5), 8
    sig = torch.nn.functional.logsigmoid
    expected = 2 * k * -(sig(-b) + sig(b))
    for n in (4, 128):  # the default
        torch.testing.assert_close(H.fine_grained_sigmoid(torch.ones(n, k, 16), torch.ones(n, k, 16), a, b), expected)
    summed = [H.fine_grained_sigmoid(torch.ones(n, k, 16), torch.ones(n, k, 16), a, b, negatives="sum") for n in (4, 128)]
    assert summed[1] > 10 * summed[0]


def test_coordination_loss_reads_the_component_mean_of_the_coordination_variances(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """L_Cord compares sigma-bar_m^2, the paper's bar being the mean over components (its
    overall uncertainty is 1/K sum_k ||sigma^k||^2): per sample, each component's summed
    variance averaged over the components, not summed over them as the release (and hug v4)."""
    seen = {}
    original = H.coordination_loss

    def spy(matched: torch.Tensor, mismatched: torch.Tensor, margin: float) -> torch.Tensor:
        seen["matched"] = matched.detach()
        return original(matched, mismatched, margin)

    monkeypatch.setattr(H, "coordination_loss", spy)
    method = make_method(cord_pairs=0).train()  # every row paired, in order
    batch = make_batch(method)
    method.losses(batch)
    with torch.no_grad():
        fused = method.backbone.compose(batch.reference, batch.text).query
        v_m = method.multimodal_head(fused).square()
    torch.testing.assert_close(seen["matched"], v_m.sum(-1).mean(-1))

    v = torch.rand(5, 4, 6)
    torch.testing.assert_close(H.coordination_uncertainty(v), v.sum(-1).mean(-1))
    torch.testing.assert_close(H.coordination_uncertainty(v, "sum"), v.sum((1, 2)))
    same = torch.rand(5, 1, 6)  # alike components: the mean does not depend on how many there are
    torch.testing.assert_close(H.coordination_uncertainty(same.expand(5, 8, 6)), H.coordination_uncertainty(same))


@pytest.mark.parametrize("field", ["fc_negatives", "cord_reduce"])
def test_regulariser_reductions_are_checked(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        H.HUGConfig(**{field: "median"})


def _start_like_means(batch_size: int, k: int, e: int, between: float, matched: float, seed: int = 4):
    """Unit component means (B, K, E) for queries and targets shaped like a pre-trained
    start's: different samples' components at cosine about ``between``, a query and its own
    target at about ``matched``."""
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(1, k, e, generator=g)
    own = torch.randn(batch_size, k, e, generator=g)
    base = torch.nn.functional.normalize(between**0.5 * shared / e**0.5 + (1 - between) ** 0.5 * own / e**0.5, dim=-1)
    mu_q = base
    noise = torch.nn.functional.normalize(torch.randn(batch_size, k, e, generator=g), dim=-1)
    mu_c = torch.nn.functional.normalize(matched**0.5 * base + (1 - matched) ** 0.5 * noise, dim=-1)
    return mu_q, mu_c


def test_point_matching_starts_where_a_pretrained_ranking_is_rewarded() -> None:
    """Table 3 row 0 at initialisation, on means shaped like the pre-trained start's
    (different samples at cosine ~0.3, a query and its target at ~0.6): the paper's InfoNCE
    is below its constant-prediction value ln B, so the start's ranking is kept, not pushed
    apart; and it is InfoNCE on the mean component cosine. The sigmoid reading with b = -10
    starts every negative below the balance point ln 2(B-1), the defect that took the
    start's R@10 from 0.398 to 0.05 in the first epoch."""
    batch_size, backbone = 128, TinyBackbone(seed=0)
    k, e = backbone.num_query_tokens, backbone.embed_dim
    context = TrainingContext(num_train=batch_size, epochs=1, batch_size=batch_size, steps_per_epoch=1, seed=0,
                              device=torch.device("cpu"), iterate=lambda shuffle=True: iter(()))
    mu_q, mu_c = _start_like_means(batch_size, k, e, between=0.3, matched=0.6)
    cosine = torch.einsum("ike,jke->ijk", mu_q, mu_c).mean(-1)
    off = ~torch.eye(batch_size, dtype=torch.bool)
    assert 0.2 < cosine[off].mean() < 0.4 and 0.5 < cosine.diagonal().mean() < 0.8  # the geometry the docstring names

    method = H.HUG(backbone, H.HUGConfig(probabilistic=False), context)
    loss = method.point_matching_loss(mu_q, mu_c)
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(cosine / 0.07, torch.arange(batch_size)))
    assert loss < np.log(batch_size)

    sigmoid = H.HUG(TinyBackbone(seed=0), H.HUGConfig(probabilistic=False, point_loss="sigmoid"), context)
    distance = (mu_q[:, None] - mu_c[None]).square().sum((2, 3))
    negatives = H.holistic_logits(distance, sigmoid.a, sigmoid.b)[off]
    assert negatives.max() < np.log(2 * (batch_size - 1))  # the defect the default avoids


# ----------------------------------------------------------------------------- the release's readings


def test_release_readings_are_the_release_and_bad_values_are_refused() -> None:
    config = build_config(H.HUGConfig, {"readings": "release"}, "hug")
    for name, value in H.HUGConfig.release_readings.items():
        assert getattr(config, name) == value
    default = H.HUGConfig()
    assert (default.gaussian_space, default.hc_form, default.learn_scale, default.weighting_eps,
            default.cord_permutation) == ("projected", "paper", True, 0.0, "derangement")
    for field, value in (("gaussian_space", "raw"), ("hc_form", "both"), ("cord_permutation", "roll"),
                         ("fc_form", "loops"), ("weighting_eps", -1.0)):
        with pytest.raises(ValueError, match=field):
            H.HUGConfig(**{field: value})


def test_holistic_contrast_release_form_counts_each_querys_row_once() -> None:
    d = torch.tensor([[1.0, 3.0, 5.0], [2.0, 0.5, 4.0], [6.0, 1.5, 2.5]], dtype=torch.float64)
    a, b = torch.tensor(0.7, dtype=torch.float64), torch.tensor(-1.0, dtype=torch.float64)
    logits = a * d + b
    pos = -torch.log(torch.sigmoid(-logits.diagonal()) + 1e-8).sum()
    neg = -torch.log(torch.sigmoid(logits[~torch.eye(3, dtype=torch.bool)]) + 1e-8).sum()
    assert H.holistic_contrast(d, a, b, "release").item() == pytest.approx(((pos + neg) / 3).item(), rel=1e-12)
    paper = H.holistic_contrast(d, a, b)
    assert paper.item() == pytest.approx(H.holistic_contrast(d, a, b, "paper").item(), rel=0)
    assert paper.item() > H.holistic_contrast(d, a, b, "release").item() + 0.5  # the column negatives
    saturated = torch.tensor([[40.0, 1.0], [1.0, 40.0]], dtype=torch.float64)
    one, zero = torch.tensor(1.0, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64)
    assert H.holistic_contrast(saturated, one, zero, "release").item() < 20  # log(S + 1e-8) caps each term at 18.4
    assert H.holistic_contrast(saturated, one, zero).item() > 39
    with pytest.raises(ValueError, match="form"):
        H.holistic_contrast(d, a, b, "both")


def brute_fine_grained_release(std_q: torch.Tensor, std_c: torch.Tensor, tau: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The release's two parts written out per anchor, as ``fine_grained_release_parts``'s
    docstring defines them."""
    n, k, _ = std_q.shape
    q, c = F.normalize(std_q, dim=-1), F.normalize(std_c, dim=-1)
    component = torch.empty(n, k, dtype=std_q.dtype)
    for i in range(n):
        for m in range(k):
            others = [l for l in range(k) if l != m]
            logits = torch.cat([(q[i, m] * c[i, m]).sum().view(1), q[i, others] @ q[i, m], c[i, others] @ q[i, m]]) / tau
            component[i, m] = -torch.log_softmax(logits, 0)[0]
    instance = torch.stack([
        torch.stack([-torch.log_softmax(c[:, m] @ q[i, m] / tau, 0)[i] for i in range(n)]).mean() for m in range(k)
    ])
    return component, instance


def test_fine_grained_release_matches_its_definition() -> None:
    g = torch.Generator().manual_seed(2)
    std_q = F.softplus(torch.randn(5, 3, 4, generator=g, dtype=torch.float64))
    std_c = F.softplus(torch.randn(5, 3, 4, generator=g, dtype=torch.float64))
    component, instance = H.fine_grained_release_parts(std_q, std_c, 0.07)
    expected_c, expected_i = brute_fine_grained_release(std_q, std_c, 0.07)
    assert torch.allclose(component, expected_c, rtol=1e-10) and torch.allclose(instance, expected_i, rtol=1e-10)
    total = H.fine_grained_release(std_q, std_c, 0.07)
    assert total.item() == pytest.approx(((component.sum() + instance.sum()) / (5 * 3 + 3)).item(), rel=1e-12)
    assert H.fine_grained_release(std_q, std_c, 0.07, instance=False).item() == pytest.approx(component.mean().item())
    with pytest.raises(ValueError, match="neither"):
        H.fine_grained_release(std_q, std_c, 0.07, component=False, instance=False)


def test_fc_form_release_reads_the_standard_deviations() -> None:
    method = make_method(fc_form="release").train()
    batch = make_batch(method)
    torch.manual_seed(0)
    parts, _ = method.losses(batch)
    with torch.no_grad():
        fused = method.backbone.compose(batch.reference, batch.text).query
        target = method.backbone.compose(batch.target, None).query
        v = method.variances(batch.reference, batch.text, fused, None, target)
    expected = H.fine_grained_release(v["q"].sqrt(), v["c"].sqrt(), 0.07)
    assert parts["fc"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert grads_of(method, parts["fc"])["visual_head"]


def test_weighting_eps_is_the_releases_guard_and_zero_changes_nothing() -> None:
    v = torch.rand(3, 4, 5, 6, dtype=torch.float64) * 3
    assert torch.equal(H.modality_weights(v, True, 0.0), H.modality_weights(v, True))
    e = torch.exp(-v)
    assert torch.allclose(H.modality_weights(v, True, 1e-6), e / (e.sum(0) + 1e-6), rtol=1e-12)
    batch_method = make_method(weighting_eps=1e-3).eval()
    plain = make_method().eval()
    batch = make_batch(plain)
    with torch.no_grad():
        fused = plain.backbone.compose(batch.reference, batch.text).query
        with_eps = batch_method.variances(batch.reference, batch.text, fused)
        without = plain.variances(batch.reference, batch.text, fused)
        stacked = torch.stack([without["r"], without["t"], without["m"]])
        weights = H.modality_weights(stacked, True, 1e-3)
    assert torch.allclose(with_eps["q"], (weights * stacked).sum(0) + 1e-3, rtol=1e-6)


def test_cord_permutation_randperm_is_torchs_draw_with_fixed_points_allowed() -> None:
    torch.manual_seed(7)
    rows, texts = H.mismatched_pairs(6, 0, permutation="randperm")
    torch.manual_seed(7)
    assert torch.equal(texts, torch.randperm(6)) and torch.equal(rows, torch.arange(6))
    fixed = 0
    for seed in range(20):
        torch.manual_seed(seed)
        rows, texts = H.mismatched_pairs(4, 0, permutation="randperm")
        fixed += int((rows == texts).sum())
    assert fixed > 0  # the release's permutation gives some samples their own text
    with pytest.raises(ValueError, match="permutation"):
        H.mismatched_pairs(4, 0, permutation="roll")


def test_gaussian_space_states_uses_the_raw_states_and_unscaled_variances() -> None:
    method = make_method(gaussian_space="states", exact_query_variance=True).eval()
    batch = make_batch(method)
    hidden = method.backbone.hidden_size
    assert method.gaussian_dim == hidden != method.embed_dim and method.variance_scale == 1.0
    with torch.no_grad():
        fused = method.backbone.compose(batch.reference, batch.text).query
        target = method.backbone.compose(batch.target, None).query
        assert torch.equal(method.means(fused), fused)
        v = method.variances(batch.reference, batch.text, fused, None, target)
        expected = H.expected_distance(fused, v["q"], target, v["c"])
        got = -method.similarity(method.encode_queries(batch.reference, batch.text), method.encode_targets(batch.target))
    assert v["q"].shape[-1] == hidden
    assert torch.allclose(got, expected, rtol=1e-5)
    default = make_method().eval()
    assert default.gaussian_dim == default.embed_dim and default.variance_scale == 1.0 / default.embed_dim


def test_release_readings_train_only_the_heads() -> None:
    """The release's defect, reproduced only under its readings: every state without gradient,
    ``a`` and ``b`` outside the optimiser, so only the three heads learn."""
    method = make_method(**H.HUGConfig.release_readings).train()
    assert not method.log_a.requires_grad and not method.b.requires_grad
    assert float(method.a) == 1.0 and float(method.b) == 0.0
    out = method.training_step(make_batch(method), 0, 0)
    assert torch.isfinite(out.loss) and set(out.components) >= {"hc", "fc", "cord"}
    grads = grads_of(method, out.loss)
    assert not grads["composer"] and not grads["vision_proj"] and not grads["ab"]
    assert grads["visual_head"] and grads["text_head"] and grads["multimodal_head"]
    assert make_method().log_a.requires_grad
