"""The evaluation cuts of issue 35 are exact: a cell trained with a cut gives bit for bit the
tables (metrics, ranks, losses, partitions, scores) and weights of the same cell without it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from cirbench.backbones.tiny import TinyBackbone
from cirbench.data.noise.holdout import hold_out
from cirbench.data.noise.injection import inject_noise
from cirbench.data.datasets.registry import ShapesLoader
from cirbench.engine.cell.features import image_tokens
from cirbench.data.base import TripletSplit
from cirbench.engine.cell.evaluate import EvaluatedTargets, keeps_exactly
from cirbench.engine.cell.train import TrainResult, train_cell
from cirbench.plugins import discover

TIMINGS = {"partition_seconds"}
"""Loss components that are wall times, which no two runs share."""


def train_micro_cell(method: str, cache_dir: Path, epochs: int = 2) -> TrainResult:
    """``method`` trained for ``epochs`` on a micro shapes set at 50% noise, a fifth held out."""
    dataset = ShapesLoader("cuts test set", n_train_scenes=30, n_val_scenes=10)(cache_dir, None)
    backbone = TinyBackbone(seed=0)
    tokens = image_tokens(dataset, backbone, cache_dir)
    noisy, manifest = inject_noise(dataset, "thirds", 0.5, 0,
                                   image_features=lambda: np.asarray(tokens, dtype=np.float32).mean(axis=1))
    held = hold_out(noisy, manifest, 0.2, 0)
    method_cls = discover().methods.get(method)
    return train_cell(method_cls, method_cls.Config(), backbone, dataset, held.train, held.train_manifest, tokens,
                      epochs, 16, 0, holdout=held)


def assert_same_cell(cut: TrainResult, uncut: TrainResult) -> None:
    """Every table and every weight of the two cells equal, exactly (timings aside)."""
    for name, table in uncut.tables.items():
        other = cut.tables[name]
        if name == "losses":
            table, other = (t[~t.name.isin(TIMINGS)].reset_index(drop=True) for t in (table, other))
        assert isinstance(table, pd.DataFrame) and table.equals(other), name
    assert cut.final == uncut.final
    uncut_state = uncut.method.state_dict()
    assert all(torch.equal(value, uncut_state[key]) for key, value in cut.method.state_dict().items())


def test_tme_pass_reads_the_held_out_evaluations_targets_exactly(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TME's partition pass reads its targets' features from the held-out evaluation that
    ended the epoch before (cut (c)) and partitions, trains and ranks exactly as when it
    encodes them itself."""
    lookup = EvaluatedTargets.__call__
    served: list[int] = []

    def counted(self, index: torch.Tensor) -> torch.Tensor | None:
        found = lookup(self, index)
        served.append(0 if found is None else len(index))
        return found

    monkeypatch.setattr(EvaluatedTargets, "__call__", counted)
    cut = train_micro_cell("tme", cache_dir)
    assert sum(served) == len(cut.tables["scores"].sample_id.unique()) > 0  # every sample of the one pass (epoch 1)
    assert set(cut.tables["purity"].epoch) == {1}

    monkeypatch.setattr(EvaluatedTargets, "__call__", lambda self, index: None)
    assert_same_cell(cut, train_micro_cell("tme", cache_dir))


def test_kept_targets_are_served_only_whole_and_until_cleared() -> None:
    """The lookup gives each sample's target row, in the batch's order, across groups; None
    when a target or a group was not kept, and after ``clear``; kept only on the CPU."""
    split = TripletSplit(sample_ids=list("abcd"), reference=np.array([0, 1, 2, 3]), texts=list("abcd"),
                         target=np.array([5, 4, 7, 9]), group=["x", "x", "y", "y"])
    kept = EvaluatedTargets(split)
    kept.keep("x", np.array([5, 4]), torch.tensor([[50.0], [40.0]]))
    assert kept(torch.tensor([1, 0])).tolist() == [[40.0], [50.0]]
    assert kept(torch.tensor([2])) is None  # group y not kept
    kept.keep("y", np.array([9, 7, 8]), torch.tensor([[90.0], [70.0], [80.0]]))
    assert kept(torch.tensor([3, 0, 2])).tolist() == [[90.0], [50.0], [70.0]]
    kept.keep("y", np.array([9]), torch.tensor([[90.0]]))
    assert kept(torch.tensor([2])) is None  # target 7 not in the gallery kept
    kept.clear()
    assert kept(torch.tensor([0])) is None
    assert keeps_exactly(torch.device("cpu")) and not keeps_exactly(torch.device("cuda"))
