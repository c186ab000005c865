"""Shared fixtures: one data/feature cache for the whole session (shapes-mini is tiny). The
``tiny`` backbone's default start is the released file (never pre-trained here); its other
pre-trainings (``stage1``, ``pretrained``) run at a test's size."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import pytest

import cirbench  # noqa: F401  (first: its kernel pins act before torch and numpy load; cirbench/settings/kernels.py)
import torch

# One cell at a time, in this process, unless a test asks for more: the in-process
# monkeypatches (quick pre-training, test datasets) do not reach worker processes.
os.environ["CIRBENCH_JOBS"] = "1"

QUICK_STAGE1 = dict(steps=6, batch_size=16, pool=64)
QUICK_CIR = dict(steps=6, batch_size=16, n_scenes=40, mods=2)
QUICK_TOWER = dict(steps=3, batch_size=16, pool=64)


@pytest.fixture
def quick_pretraining(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The real pre-trainings of ``tiny`` at a test's size (a few steps on a small pool);
    the list records which ran."""
    from cirbench.backbones import tiny_pretrain

    calls: list[str] = []

    def counted(fn, name, sizes):
        def run(backbone, **kwargs):
            calls.append(name)
            return fn(backbone, **{**sizes, **kwargs})
        return run

    monkeypatch.setattr(tiny_pretrain, "pretrain_stage1", counted(tiny_pretrain.pretrain_stage1, "stage1", QUICK_STAGE1))
    monkeypatch.setattr(tiny_pretrain, "pretrain_composed_retrieval",
                        counted(tiny_pretrain.pretrain_composed_retrieval, "cir", QUICK_CIR))
    return calls


@pytest.fixture(scope="session", autouse=True)
def _quick_tiny_start():
    """In this process, ``tiny``'s pre-trainings (the tower, ``stage1``, and ``cir`` where a
    test rebuilds it) run at a test's size wherever a test's cache directory has none yet; the
    default start is the released file and is never pre-trained."""
    from cirbench.backbones import tiny_pretrain

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tiny_pretrain, "pretrain_stage1", partial(tiny_pretrain.pretrain_stage1, **QUICK_STAGE1))
        patch.setattr(tiny_pretrain, "pretrain_composed_retrieval", partial(tiny_pretrain.pretrain_composed_retrieval, **QUICK_CIR))
        patch.setattr(tiny_pretrain, "pretrain_tiny_tower", partial(tiny_pretrain.pretrain_tiny_tower, **QUICK_TOWER))
        yield


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root shared by the tests, so shapes-mini is generated and encoded once
    (subprocesses such as torchrun and submitit jobs are given it too)."""
    return tmp_path_factory.mktemp("datasets")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def study_with_kept_cells(tmp_path_factory: pytest.TempPathFactory):
    """The leaderboard tests' study (``test_leaderboard.write_study``) with the kept-set cells
    of ``test_kept_worth.write_kept_cells``, loaded: one setting the figure and first-screen
    tests read and never change."""
    from cirbench.report import load_results
    from test_kept_worth import write_kept_cells
    from test_leaderboard import write_study
    root = tmp_path_factory.mktemp("study_with_kept_cells") / "results"
    write_study(root)
    write_kept_cells(root)
    return load_results(root).settings[0]
