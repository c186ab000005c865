"""The training loop's events (:mod:`cirbench.engine.cell.hooks`): the engine calls them in the
loop's order, and a profiler that keeps an epoch's first batches trains on those alone."""

from __future__ import annotations

import numpy as np

from cirbench.data.datasets.registry import ShapesLoader
from cirbench.engine.cell.life import run_cell
from cirbench.engine.running.grid import Grid, GridSpec
from cirbench.engine.cell.hooks import HELD_OUT, VALIDATION, TrainingHooks
from cirbench.registry import Registry

from fixtures import use_datasets


class Recorder(TrainingHooks):
    """Every event in order; each epoch cut to its first two batches."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def epoch_batches(self, epoch: int, batches: list[np.ndarray]) -> list[np.ndarray]:
        self.events.append(("batches", epoch, len(batches)))
        return batches[:2]

    def epoch_pass_start(self, epoch: int) -> None:
        self.events.append(("pass", epoch))

    def epoch_pass_end(self, epoch: int) -> None:
        self.events.append(("pass end", epoch))

    def batch_start(self, epoch: int, step: int) -> None:
        self.events.append(("batch", epoch, step))

    def batch_end(self, epoch: int, step: int) -> None:
        self.events.append(("batch end", epoch, step))

    def step_start(self, epoch: int, step: int) -> None:
        self.events.append(("step", epoch, step))

    def step_end(self, epoch: int, step: int, out) -> None:
        self.events.append(("step end", epoch, step, bool(np.isfinite(out.loss.item()))))

    def evaluation_start(self, epoch: int, split: str) -> None:
        self.events.append(("evaluation", epoch, split))

    def evaluation_end(self, epoch: int, split: str, evaluation) -> None:
        self.events.append(("evaluation end", epoch, split, bool(evaluation.results)))


def test_the_loop_calls_every_event_in_order_and_keeps_the_batches_a_hook_keeps(tmp_path, monkeypatch, cache_dir) -> None:
    datasets = Registry("dataset")
    datasets.add("shapes-micro", ShapesLoader("hooks test set", n_train_scenes=30, n_val_scenes=10))
    use_datasets(monkeypatch, datasets)
    grid = Grid(GridSpec(methods=["sprc"], noise_rates=[0.5], dataset="shapes-micro", epochs=2, batch_size=16,
                         holdout=0.2, output=tmp_path / "results", cache_dir=cache_dir))
    grid.resources.hooks = recorder = Recorder()
    outcome = run_cell(grid.resources, grid.cells[0], progress=lambda info: None, announce=lambda m: None)
    assert outcome.status == "completed", outcome.error
    assert outcome.result.steps == 4  # two epochs of the two batches the hook kept

    n = recorder.events[2][2]  # the epoch's batches before the cut

    def epoch(e: int, first: int) -> list[tuple]:
        steps = [event for s in (first, first + 1) for event in
                 (("batch", e, s), ("batch end", e, s), ("step", e, s), ("step end", e, s, True))]
        evaluations = [event for split in (HELD_OUT, VALIDATION) for event in
                       (("evaluation", e, split), ("evaluation end", e, split, True))]
        return [("pass", e), ("pass end", e), ("batches", e, n)] + steps + evaluations

    assert n > 2 and recorder.events == epoch(0, 0) + epoch(1, 2)
