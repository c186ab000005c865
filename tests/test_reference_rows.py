"""Reference rows (zero_shot, text_blind, text_only), the perfect filter and the baseline's
per-sample loss: what the calibration of a benchmark setting is made of."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from cirbench.backbones.registry import BACKBONES
from cirbench.engine.cell.life import run_cell, run_reference
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.engine.planning.reference import TextBlind, TextOnly, ZeroShot
from cirbench.method.losses import per_sample_info_nce
from cirbench.method import Batch, MethodConfig, TrainingContext
from cirbench.plugins import discover
from cirbench.report import build_report
from cirbench.report.analysis.loading.load import load_results
from cirbench.report.analysis.rankings.references import bound_label, reference_stats


def _batch(backbone, n: int = 6, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    texts = [f"make the red circle {c}" for c in ("blue", "green", "yellow", "purple", "cyan", "red")][:n]
    return Batch(torch.arange(n), torch.randn(n, 16, 64, generator=g), torch.randn(n, 16, 64, generator=g),
                 backbone.tokenize(texts), texts)


def _context(flags: np.ndarray | None = None) -> TrainingContext:
    n = 6 if flags is None else len(flags)
    return TrainingContext(num_train=n, epochs=1, batch_size=n, steps_per_epoch=1, seed=0, device=torch.device("cpu"),
                           iterate=lambda shuffle: iter(()), noise_flags=flags)


def test_text_blind_ignores_the_text_and_text_only_the_image() -> None:
    backbone = BACKBONES.get("tiny")(0, Path("unused"), "random")
    batch, other = _batch(backbone), _batch(backbone, seed=1)
    blind, only, zero = (cls(backbone, MethodConfig(), None) for cls in (TextBlind, TextOnly, ZeroShot))
    shuffled = backbone.tokenize(list(reversed(batch.texts)))
    assert torch.allclose(blind.encode_queries(batch.reference, batch.text), blind.encode_queries(batch.reference, shuffled))
    assert torch.allclose(only.encode_queries(batch.reference, batch.text), only.encode_queries(other.reference, batch.text))
    assert not torch.allclose(zero.encode_queries(batch.reference, batch.text), zero.encode_queries(batch.reference, shuffled))
    with pytest.raises(TypeError, match="never trained"):
        zero.training_step(batch, 0, 0)


def test_sprc_scores_each_sample_by_its_own_loss_and_the_oracle_keeps_every_negative() -> None:
    methods = discover().methods
    backbone = BACKBONES.get("tiny")(0, Path("unused"), "random")
    batch = _batch(backbone)
    sprc = methods.get("sprc")(backbone, methods.get("sprc").Config(), _context())
    out = sprc.training_step(batch, 0, 0)
    parts = {k: v.detach() for k, v in sprc.per_sample_losses(batch).items()}
    assert torch.allclose(out.noise_score, parts["itc"].detach())
    assert math.isclose(float(out.loss.detach()), float(parts["itc"].mean() + 0.4 * parts["rtc"].mean() + 0.4 * parts["align"].mean()),
                        rel_tol=1e-5)

    flags = np.array([False, True, False, True, True, False])
    oracle = methods.get("oracle")(backbone, methods.get("oracle").Config(), _context(flags))
    oracle.load_state_dict(sprc.state_dict())
    out = oracle.training_step(batch, 0, 0)
    clean = torch.from_numpy(~flags)
    # the clean rows' losses against all six targets, not a 3x3 matrix of the clean rows alone
    expected = parts["itc"][clean].mean() + 0.4 * parts["rtc"][clean].mean() + 0.4 * parts["align"][clean].mean()
    assert math.isclose(float(out.loss.detach()), float(expected.detach()), rel_tol=1e-5)
    fused = backbone.composed_feature(batch.reference[clean], batch.text.select(clean.nonzero().squeeze(1)))
    small = per_sample_info_nce(fused @ backbone.target_features(batch.target[clean]).amax(1).T, sprc.temperature)
    assert not torch.allclose(small, parts["itc"][clean])
    assert out.selected_clean.tolist() == (~flags).tolist() and out.noise_score.tolist() == flags.astype(float).tolist()
    out.loss.backward()  # the noisy rows' targets are negatives, so the loss reaches them too


def test_grid_records_reference_rows_once_and_the_report_draws_them(tmp_path: Path, cache_dir: Path) -> None:
    spec = GridSpec(methods=["sprc"], noise_rates=[0.0], seeds=[0], dataset="shapes-mini", epochs=1, batch_size=200,
                    output=tmp_path / "results", cache_dir=cache_dir)
    grid = Grid(spec)
    cells = grid.reference_cells()
    assert sorted(c.key.method for c in cells) == ["text_blind", "text_only", "zero_shot"]
    assert all(math.isnan(c.key.noise_rate) for c in cells)
    outcomes = [run_reference(grid.resources, c, announce=lambda m: None) for c in cells]
    assert [o.status for o in outcomes] == ["completed"] * 3, [o.error for o in outcomes]
    assert all(run_reference(grid.resources, c, announce=lambda m: None).status == "skipped" for c in cells)
    run_cell(grid.resources, grid.cells[0], progress=lambda info: None, announce=lambda m: None)

    runs = pd.read_parquet(tmp_path / "results" / "runs")
    assert runs.set_index("method").is_reference.to_dict() == {"sprc": False, "text_blind": True, "text_only": True,
                                                              "zero_shot": True}
    metrics = pd.read_parquet(tmp_path / "results" / "metrics")
    ref = metrics[metrics.method == "text_blind"]
    assert set(ref.epoch) == {0} and {"recall@10", "recall_subset@1"} <= set(ref.metric)
    # the reference image alone cannot tell the siblings apart: its subset recall is near chance (1 in 6)
    sub = float(ref[(ref.metric == "recall_subset@1") & (ref.group == "all")].value.iloc[0])
    assert sub < 0.3

    setting = load_results(tmp_path / "results").settings[0]
    assert setting.methods == ["sprc"] and setting.rates == [0.0]  # reference rows are not methods
    stats = reference_stats(setting)
    assert list(stats.index) == ["zero_shot", "text_blind", "text_only", bound_label(setting)]
    assert bound_label(setting) == "sprc at 0% noise (bound)"
    assert stats.loc["text_blind", ("mean", "R_sub@1")] == pytest.approx(100 * sub)

    build_report(tmp_path / "results", tmp_path / "report")
    markdown = (tmp_path / "report" / "report.md").read_text()
    section = markdown.split("### Reference rows", 1)[1].split("###", 1)[0]
    assert all(f"| {name} |" in section for name in ("zero_shot", "text_blind", "text_only", bound_label(setting)))
    assert "never ranked" in section.lower() or "none of these is ranked" in section.lower()
    assert "**" not in section  # nothing marked best
