"""Workers sharing one GPU: each is capped at its share of the device's memory."""

from __future__ import annotations

import pytest
import torch

from cirbench.engine.running import worker
@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, int]]:
    """A CUDA build's calls recorded instead of made (no GPU on the test machines)."""
    calls: list[tuple[float, int]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda fraction, device: calls.append((fraction, device)))
    threads = torch.get_num_threads()
    yield calls
    torch.set_num_threads(threads)


def test_each_gpu_worker_gets_its_share_of_the_memory(fake_cuda: list[tuple[float, int]]) -> None:
    worker._init_worker("cuda", 4)
    worker._init_worker("cuda:1", 2)
    assert fake_cuda == [(0.25, 0), (0.5, 1)]
    assert torch.get_num_threads() == 1


def test_cpu_workers_leave_the_gpu_alone(fake_cuda: list[tuple[float, int]]) -> None:
    worker._init_worker("cpu", 2)
    assert fake_cuda == [] and worker.memory_fraction(0) == 1.0
