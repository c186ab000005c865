"""Shared fixtures: one data/feature cache for the whole session (shapes-mini is tiny), with
the ``tiny`` backbone's default start pre-trained once, at a test's size."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

QUICK_STAGE1 = dict(steps=6, batch_size=16, pool=64)
QUICK_CIR = dict(steps=6, batch_size=16, n_scenes=40, mods=2)


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
    """In this process, ``tiny``'s pre-trainings run at a test's size wherever a test's cache
    directory has none yet (the default start would otherwise cost minutes per directory).
    Subprocesses (torchrun, submitit) run the real ones: give them the shared ``cache_dir``."""
    from cirbench.backbones import tiny_pretrain

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tiny_pretrain, "pretrain_stage1", partial(tiny_pretrain.pretrain_stage1, **QUICK_STAGE1))
        patch.setattr(tiny_pretrain, "pretrain_composed_retrieval", partial(tiny_pretrain.pretrain_composed_retrieval, **QUICK_CIR))
        yield


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory, _quick_tiny_start) -> Path:
    """A data root shared by the tests, so shapes-mini is generated and encoded once, with the
    default ``tiny`` start (quickly) pre-trained into it."""
    from cirbench.backbones import tiny_pretrain
    from cirbench.backbones.tiny import TinyBackbone

    root = tmp_path_factory.mktemp("datasets")
    tiny_pretrain.pretrained_composer_state("cir", root, lambda: TinyBackbone(seed=0))
    return root


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)
