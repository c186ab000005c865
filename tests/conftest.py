"""Shared fixtures: one data/feature cache for the whole session (shapes-mini is tiny)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root shared by the tests, so shapes-mini is generated and encoded once."""
    return tmp_path_factory.mktemp("datasets")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)
